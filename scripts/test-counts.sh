# Sourced by scripts/test.sh: every step and every `cargo test` run is recorded, none of them stops the
# ones after it, and the log closes with one line that tells the whole truth (before it did, one flaky test
# binary used to stop `cargo test --workspace` and hide 547 tests behind "227 passed, 1 failed").
#
#   step CMD...        runs a step that is not a test run (fmt, a build, clippy); a failure is shown as it
#                      happens and named again in the closing line
#   run_tests cargo test ARGS [-- FILTERS]
#                      builds the run's test binaries first (`--no-run`, which lists them), then runs
#                      every one of them (`--no-fail-fast`), its output shown as it comes; a binary that
#                      does not compile, does not finish (crashed, killed) or never starts is named
#   tests_summary      prints the closing line and returns 1 when anything failed:
#                        N passed, N failed, N ignored in R cargo test runs[; what went wrong; ...]
#                      where what went wrong is each failed test by name, each binary that did not
#                      compile, finish or run, and each failed step
tests_passed=0
tests_failed=0
tests_ignored=0
tests_runs=0
tests_problems=()

step() {
  local status=0
  "$@" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "step failed (exit $status): $*" >&2
    tests_problems+=("step failed: $* (exit $status)")
  fi
}

# The records of one run's log (cargo's stderr and the binaries' stdout, in the order written) for
# run_tests: `C passed failed ignored`, `T binary<TAB>test` (a failed test), `U binary<TAB>why` (a binary
# that started and printed no `test result:`), `R path` (a binary that started). A binary's section
# starts at cargo's `Running` or `Doc-tests` line; libtest prints each test's result line before its
# `failures:` report, which holds the failed tests' captured output, so inside that report only the last
# `test result:` line counts (captured output may print anything, test result lines included).
tests_parse_run() {
  awk '
    function close_section() {
      if (label == "") return
      if (done) {
        printf "C %d %d %d\n", res_p, res_f, res_i
      } else {
        printf "C %d %d %d\n", ok, nfailed, ign
      }
      for (i = 1; i <= nfailed; i++) printf "T %s\t%s\n", label, failed[i]
      if (!done) {
        b = path; sub(/^.*\//, "", b)
        printf "U %s\t%s\n", label, (b != "" && b in reason) ? reason[b] : "no test result"
      }
      label = ""
    }
    function start(l, p) {
      close_section()
      label = l; path = p; done = 0; report = 0; ok = 0; ign = 0; nfailed = 0
      if (p != "") printf "R %s\n", p
    }
    # A header inside a failure report is captured output, until that report has its result line.
    report && !done { header_ok = 0 }
    !(report && !done) { header_ok = 1 }
    header_ok && /^ *Running .* \([^()]*\)$/ {
      src = $0; sub(/^ *Running /, "", src); sub(/ \([^()]*\)$/, "", src)
      p = $0; sub(/^.* \(/, "", p); sub(/\)$/, "", p)
      b = p; sub(/^.*\//, "", b); sub(/-[0-9a-f]+$/, "", b)
      start(b " " src, p)
      next
    }
    header_ok && /^ *Doc-tests / { d = $0; sub(/^ *Doc-tests /, "", d); start("doc-tests " d, ""); next }
    /process didn.t exit successfully: `/ {
      p = $0; sub(/^[^`]*`/, "", p); why = p; sub(/`.*$/, "", p); sub(/^.*\//, "", p)
      sub(/^[^`]*` \(/, "", why); sub(/\)$/, "", why)
      reason[p] = why
      next
    }
    label == "" { next }
    /^test result: / {
      done = 1
      res_p = $0; sub(/^[^.]*\. /, "", res_p); sub(/ passed.*$/, "", res_p)
      res_f = $0; sub(/^.* passed; /, "", res_f); sub(/ failed.*$/, "", res_f)
      res_i = $0; sub(/^.* failed; /, "", res_i); sub(/ ignored.*$/, "", res_i)
      next
    }
    report { next }
    /^failures:$/ { report = 1; next }
    /^test .* \.\.\. ok$/ { ok++; next }
    /^test .* \.\.\. ignored(, .*)?$/ { ign++; next }
    /^test .* \.\.\. FAILED$/ {
      t = $0; sub(/^test /, "", t); sub(/ \.\.\. FAILED$/, "", t)
      failed[++nfailed] = t
      next
    }
    END { close_section() }
  ' "$1"
}

run_tests() {
  if [ "${1:-}" != cargo ] || [ "${2:-}" != test ]; then
    echo "run_tests: expected 'cargo test ...', got '$*'" >&2
    tests_problems+=("not a cargo test run: $*")
    return
  fi
  shift 2
  local build=() filters=() seen_dashes=0 a
  for a in "$@"; do
    if [ "$seen_dashes" -eq 0 ] && [ "$a" = -- ]; then
      seen_dashes=1
    elif [ "$seen_dashes" -eq 0 ]; then
      build+=("$a")
    else
      filters+=("$a")
    fi
  done
  tests_runs=$((tests_runs + 1))
  local run="run $tests_runs" log status=0 kind rest binary what p f i
  log="$(mktemp)"
  echo "== $run: cargo test $*"
  # The binaries this run is to start: `Executable <source> (<path>)` for each.
  cargo test "${build[@]}" --no-run 2>&1 | tee "$log" || status=$?
  if [ "$status" -ne 0 ]; then
    local broken
    broken="$(sed -n 's/^error: could not compile \(.*\) due to .*/\1/p' "$log" | paste -sd, - | sed 's/,/, /g')"
    tests_problems+=("did not compile: ${broken:-cargo test --no-run exited $status} ($run: none of its tests ran)")
    rm -f "$log"
    return
  fi
  local expected
  expected="$(sed -n 's/^ *Executable \(.*\) (\([^()]*\))$/\2\t\1/p' "$log")"
  status=0
  cargo test "${build[@]}" --no-fail-fast -- "${filters[@]}" 2>&1 | tee "$log" || status=$?
  local ran="" problems_before=${#tests_problems[@]} failed_before=$tests_failed
  while IFS=' ' read -r kind rest; do
    case "$kind" in
      C)
        read -r p f i <<<"$rest"
        tests_passed=$((tests_passed + p))
        tests_failed=$((tests_failed + f))
        tests_ignored=$((tests_ignored + i))
        ;;
      T)
        binary="${rest%%$'\t'*}"
        what="${rest#*$'\t'}"
        tests_problems+=("test failed: $what in $binary ($run)")
        ;;
      U)
        binary="${rest%%$'\t'*}"
        what="${rest#*$'\t'}"
        tests_problems+=("did not finish: $binary ($run: $what)")
        ;;
      R) ran+="$rest"$'\n' ;;
    esac
  done < <(tests_parse_run "$log")
  while IFS=$'\t' read -r p what; do
    [ -n "$p" ] || continue
    if ! grep -qxF "$p" <<<"$ran"; then
      binary="${p##*/}"
      tests_problems+=("did not run: ${binary%-*} $what ($run)")
    fi
  done <<<"$expected"
  # cargo itself killed (its doc tests, which --no-run does not list, never ran either), or failed and
  # nothing above says why: the run itself is named.
  if [ "$status" -gt 128 ]; then
    tests_problems+=("cargo test was killed by signal $((status - 128)) ($run: its doc tests, if any, did not run)")
  elif [ "$status" -ne 0 ] && [ "${#tests_problems[@]}" -eq "$problems_before" ] &&
    [ "$tests_failed" -eq "$failed_before" ]; then
    tests_problems+=("cargo test exited $status without a failing test ($run), see above")
  fi
  rm -f "$log"
}

tests_summary() {
  local runs="$tests_runs cargo test runs"
  [ "$tests_runs" -ne 1 ] || runs="1 cargo test run"
  local line="$tests_passed passed, $tests_failed failed, $tests_ignored ignored in $runs"
  local p
  for p in "${tests_problems[@]}"; do
    line+="; $p"
  done
  echo "$line"
  [ "$tests_failed" -eq 0 ] && [ "${#tests_problems[@]}" -eq 0 ]
}
