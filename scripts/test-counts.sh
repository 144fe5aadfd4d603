# Sourced by scripts/test.sh: the counts of every `cargo test` run, summed into the log's closing line.
#   run_tests cargo test ...   runs the command; its output is shown as before, the `test result:` lines
#                              of its stdout are added up, and a failure does not stop the caller
#   tests_summary              prints `N passed, N failed` and returns 1 when a test or a run failed
tests_passed=0
tests_failed=0
runs_failed=0

run_tests() {
  local out status=0 p f run_failed=0
  out=$(mktemp)
  "$@" | tee "$out" || status=$?
  while read -r p f; do
    tests_passed=$((tests_passed + p))
    run_failed=$((run_failed + f))
  done < <(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed;.*/\1 \2/p' "$out")
  rm -f "$out"
  tests_failed=$((tests_failed + run_failed))
  if [ "$status" -ne 0 ]; then
    runs_failed=$((runs_failed + 1))
    if [ "$run_failed" -eq 0 ]; then
      echo "run_tests: '$*' failed (exit $status) without a failing test: a build error or a crashed test binary, see above" >&2
    fi
  fi
}

tests_summary() {
  echo "$tests_passed passed, $tests_failed failed"
  [ "$tests_failed" -eq 0 ] && [ "$runs_failed" -eq 0 ]
}
