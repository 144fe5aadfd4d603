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

# 61 rounds: this VM's speed drifts by 10-25% from one second to the next; with 21 rounds the ratio of
# the medians varied from 1.11 to 1.43 between back-to-back runs of the same binaries, with 61 by ~0.01.
rounds=${ROUNDS:-61}
# The binary the image ships: static, so no dynamic loader at start-up (scripts/check-static-init.sh).
bin=${BIN:-target/x86_64-unknown-linux-musl/release/iptables-init}
if [ "$(id -u)" -ne 0 ]; then echo "bench/iptables-apply.sh: needs root (network namespaces)" >&2; exit 1; fi
if [ ! -x "$bin" ] && [ -z "${BIN:-}" ]; then scripts/check-static-init.sh; fi
bin=$(realpath "$bin")
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time, Debian package 'time')" >&2; exit 1; }

args=(istio-iptables -p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -x "" -b '*' -d 15090,15021,15020 --ipv6 false)
input=$(mktemp)
trap 'rm -f "$input"; for n in $(ip netns list | awk "/^bench-ipt-$$-/ {print \$1}"); do ip netns del "$n"; done' EXIT
restore=$(command -v iptables-restore)

fresh() { ip netns add "$1"; ip netns exec "$1" ip link set lo up; }

# The input of the bare restore. Generated inside a throwaway namespace too: a BIN under test that
# ignored --dry-run would otherwise apply its rules to this machine's own network namespace.
fresh "bench-ipt-$$-dry"
ip netns exec "bench-ipt-$$-dry" "$bin" "${args[@]}" --dry-run >"$input"
ip netns del "bench-ipt-$$-dry"

# Times one command inside a namespace with bash's clock (no extra process around the measured one);
# prints microseconds.
timed() {
  local ns=$1; shift
  ip netns exec "$ns" bash -c '
    t0=${EPOCHREALTIME/./}; "$@" >/dev/null 2>&1 <"$STDIN_FILE"; rc=$?; t1=${EPOCHREALTIME/./}
    [ $rc -eq 0 ] || { echo "failed: $* (rc $rc)" >&2; exit 1; }
    echo $((t1 - t0))' _ "$@"
}

init_us=(); bare_us=()
for i in $(seq 1 "$rounds"); do
  a="bench-ipt-$$-a$i"; b="bench-ipt-$$-b$i"
  fresh "$a"; fresh "$b"
  if [ $((i % 2)) -eq 0 ]; then
    init_us+=("$(STDIN_FILE=/dev/null timed "$a" "$bin" "${args[@]}")")
    bare_us+=("$(STDIN_FILE=$input timed "$b" "$restore" --noflush)")
  else
    bare_us+=("$(STDIN_FILE=$input timed "$b" "$restore" --noflush)")
    init_us+=("$(STDIN_FILE=/dev/null timed "$a" "$bin" "${args[@]}")")
  fi
  # Sanity: both namespaces hold the same rules.
  if ! diff <(ip netns exec "$a" iptables-save | grep -v '^#') <(ip netns exec "$b" iptables-save | grep -v '^#') >/dev/null; then
    echo "round $i: iptables-init and the bare restore produced different rules" >&2; exit 1
  fi
  ip netns del "$a"; ip netns del "$b"
done

median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : int((v[NR/2]+v[NR/2+1])/2)}'; }
mi=$(median "${init_us[@]}"); mb=$(median "${bare_us[@]}")
minimum() { printf '%s\n' "$@" | sort -n | head -1; }
ni=$(minimum "${init_us[@]}"); nb=$(minimum "${bare_us[@]}")

# Peak RSS (max over 7 runs, GNU time -v) of both, each run in a fresh namespace. When `perf` is
# installed, also their CPU time (task-clock, children included, median): unlike wall time it hardly
# depends on how busy the machine is.
measure() { # $1: label; rest: command (stdin from $STDIN_FILE); prints "<max rss KiB> <median cpu us|->"
  local label=$1; shift; local rss=() cpu=()
  for j in $(seq 1 7); do
    local ns="bench-ipt-$$-m$label$j"; fresh "$ns"
    rss+=("$(ip netns exec "$ns" /usr/bin/time -v "$@" 2>&1 >/dev/null <"$STDIN_FILE" |
      awk -F': ' '/Maximum resident set size/ {print $2}')")
    ip netns del "$ns"
    if command -v perf >/dev/null; then
      fresh "$ns"
      cpu+=("$(ip netns exec "$ns" perf stat -x, -e task-clock -- "$@" 2>&1 >/dev/null <"$STDIN_FILE" |
        awk -F, '/task-clock/ {printf "%d", $1 * 1000}')")
      ip netns del "$ns"
    fi
  done
  local c=-; [ ${#cpu[@]} -gt 0 ] && c=$(median "${cpu[@]}")
  echo "$(printf '%s\n' "${rss[@]}" | sort -n | tail -1) $c"
}
read -r ri ci < <(STDIN_FILE=/dev/null measure i "$bin" "${args[@]}")
read -r rb cb < <(STDIN_FILE=$input measure b "$restore" --noflush)

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
