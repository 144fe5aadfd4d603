#!/usr/bin/env bash
# Benchmark: a real `iptables-init` apply of the default injected rules vs a bare
# `iptables-restore --noflush` of the same `--dry-run` output, each in a fresh network namespace, in the
# same run, several rounds (alternating which goes first); medians and the ratio, plus peak RSS of both
# (GNU time). Targets: ratio <= 1.3, iptables-init peak RSS <= 5 MiB. Needs root.
#
#   bench/iptables-apply.sh                  # 61 rounds, the static release binary (built if missing)
#   ROUNDS=101 BIN=path/to/iptables-init bench/iptables-apply.sh
#   chrt -f 10 bench/iptables-apply.sh       # on a busy machine: keeps other jobs' scheduling noise out;
#                                            # iptables-init runs two processes, so it suffers twice
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
bench_setup bench/iptables-apply.sh bench-ipt

# The input of the bare restore.
scratch input
throwaway "$bin" "${args[@]}" --dry-run >"$input"

init_us=(); bare_us=()
for i in $(seq 1 "$rounds"); do
  a="$ns_prefix-a$i"; b="$ns_prefix-b$i"
  fresh "$a"; fresh "$b"
  if [ $((i % 2)) -eq 0 ]; then
    init_us+=("$(timed "$a" /dev/null "$bin" "${args[@]}")")
    bare_us+=("$(timed "$b" "$input" "$restore" --noflush)")
  else
    bare_us+=("$(timed "$b" "$input" "$restore" --noflush)")
    init_us+=("$(timed "$a" /dev/null "$bin" "${args[@]}")")
  fi
  # Sanity: both namespaces hold the same rules.
  if ! diff <(ip netns exec "$a" iptables-save | grep -v '^#') <(ip netns exec "$b" iptables-save | grep -v '^#') >/dev/null; then
    echo "round $i: iptables-init and the bare restore produced different rules" >&2; exit 1
  fi
  ip netns del "$a"; ip netns del "$b"
done

mi=$(median "${init_us[@]}"); mb=$(median "${bare_us[@]}")
minimum() { printf '%s\n' "$@" | sort -n | head -1; }
ni=$(minimum "${init_us[@]}"); nb=$(minimum "${bare_us[@]}")

# Peak RSS (max over 7 runs, GNU time -v) of both, each run in a fresh namespace. When `perf` is
# installed, also their CPU time (task-clock, children included, median): unlike wall time it hardly
# depends on how busy the machine is.
measure() { # $1: label, $2: stdin, rest: command; prints "<max rss KiB> <median cpu us|->"
  local label=$1 stdin=$2; shift 2; local rss=() cpu=()
  for j in $(seq 1 7); do
    local ns="$ns_prefix-m$label$j"
    rss+=("$(rss_once "$ns" "$stdin" "$@")")
    if command -v perf >/dev/null; then
      fresh "$ns"
      cpu+=("$(ip netns exec "$ns" perf stat -x, -e task-clock -- "$@" 2>&1 >/dev/null <"$stdin" |
        awk -F, '/task-clock/ {printf "%d", $1 * 1000}')")
      ip netns del "$ns"
    fi
  done
  local c=-; [ ${#cpu[@]} -gt 0 ] && c=$(median "${cpu[@]}")
  echo "$(printf '%s\n' "${rss[@]}" | sort -n | tail -1) $c"
}
read -r ri ci < <(measure i /dev/null "$bin" "${args[@]}")
read -r rb cb < <(measure b "$input" "$restore" --noflush)

echo "rounds:                    $rounds"
echo "iptables-init apply:       median ${mi} us   (all: ${init_us[*]})"
echo "bare iptables-restore:     median ${mb} us   (all: ${bare_us[*]})"
awk -v a="$mi" -v b="$mb" 'BEGIN { printf "ratio init/bare:           %.2f (target <= 1.30)\n", a / b }'
awk -v a="$ni" -v b="$nb" 'BEGIN { printf "fastest runs:              %d us vs %d us (ratio %.2f)\n", a, b, a / b }'
# Each round's two runs are back to back, so their ratio hardly feels the drift: a second estimate.
paired=()
for i in "${!init_us[@]}"; do paired+=("$(awk -v a="${init_us[$i]}" -v b="${bare_us[$i]}" 'BEGIN { printf "%.4f", a / b }')"); done
echo "median of round ratios:    $(printf '%s\n' "${paired[@]}" | sort -g | awk '{v[NR]=$1} END {printf "%.2f", (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}') (each round: init/bare, back to back)"
echo "peak RSS iptables-init:    ${ri} KiB (target <= 5120 KiB; GNU time counts the restore child too)"
echo "peak RSS iptables-restore: ${rb} KiB"
if [ "$ci" != - ]; then
  echo "CPU (task-clock, median):  iptables-init ${ci} us (its restore included), bare restore ${cb} us"
  awk -v a="$ci" -v b="$cb" 'BEGIN { printf "CPU ratio init/bare:       %.2f\n", a / b }'
fi
