#!/usr/bin/env bash
# Benchmark: a real `iptables-init --native-nftables` apply of the default injected arguments against
# `nft -f` of the same ruleset (its `--dry-run` text, which is Istio's transaction) and against a bare
# `iptables-restore --noflush` of the iptables backend's rules, each in a fresh network namespace, in the
# same run, interleaved rounds (the order rotates); medians and ratios, plus peak RSS (GNU time).
# Targets: native <= 0.5x nft -f and <= 0.5x the bare restore; native peak RSS <= 5 MiB. Needs root.
#
#   bench/nftables-apply.sh                  # 61 rounds, the static release binary (built if missing)
#   ROUNDS=101 BIN=path/to/iptables-init bench/nftables-apply.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
bench_setup bench/nftables-apply.sh bench-nft
nft=$(command -v nft) || { echo "needs nft (Debian package 'nftables')" >&2; exit 1; }

# The inputs: the native backend's transaction for nft -f, the iptables backend's rules for the restore.
scratch nft_input; scratch ipt_input
throwaway "$bin" "${args[@]}" --native-nftables --dry-run >"$nft_input"
throwaway "$bin" "${args[@]}" --dry-run >"$ipt_input"

native_us=(); nft_us=(); bare_us=(); floor_us=()
run_one() { # $1: which, $2: round
  local ns="$ns_prefix-$1$2"
  fresh "$ns"
  case $1 in
    n) native_us+=("$(timed "$ns" /dev/null "$bin" "${args[@]}" --native-nftables)") ;;
    f) nft_us+=("$(timed "$ns" /dev/null "$nft" -f "$nft_input")") ;;
    b) bare_us+=("$(timed "$ns" "$ipt_input" "$restore" --noflush)") ;;
    t) floor_us+=("$(timed "$ns" /dev/null /bin/true)") ;;
  esac
}
for i in $(seq 1 "$rounds"); do
  case $((i % 3)) in
    0) order="n f b" ;; 1) order="f b n" ;; *) order="b n f" ;;
  esac
  for w in $order t; do run_one "$w" "$i"; done
  # Sanity: the native run and nft -f of the same text leave the same ruleset.
  if ! diff <(ip netns exec "$ns_prefix-n$i" "$nft" -s list ruleset) \
            <(ip netns exec "$ns_prefix-f$i" "$nft" -s list ruleset) >/dev/null; then
    echo "round $i: the native apply and nft -f produced different rulesets" >&2; exit 1
  fi
  for w in n f b t; do ip netns del "$ns_prefix-$w$i"; done
done

mn=$(median "${native_us[@]}"); mf=$(median "${nft_us[@]}"); mb=$(median "${bare_us[@]}")
mt=$(median "${floor_us[@]}")

# Peak RSS: the maximum over 7 runs (GNU time -v), each in a fresh namespace.
peak_rss() { # $1: label, $2: stdin, rest: command; prints KiB
  local label=$1 stdin=$2; shift 2; local rss=()
  for j in $(seq 1 7); do
    rss+=("$(rss_once "$ns_prefix-m$label$j" "$stdin" "$@")")
  done
  printf '%s\n' "${rss[@]}" | sort -n | tail -1
}
rn=$(peak_rss n /dev/null "$bin" "${args[@]}" --native-nftables)
rf=$(peak_rss f /dev/null "$nft" -f "$nft_input")
rb=$(peak_rss b "$ipt_input" "$restore" --noflush)

echo "rounds:                          $rounds"
echo "iptables-init --native-nftables: median ${mn} us"
echo "nft -f (same ruleset):           median ${mf} us"
echo "bare iptables-restore --noflush: median ${mb} us"
echo "floor: /bin/true the same way:   median ${mt} us (process start and exit, in every figure above)"
awk -v a="$mn" -v b="$mf" 'BEGIN { printf "ratio native/nft -f:             %.2f (target <= 0.50)\n", a / b }'
awk -v a="$mn" -v b="$mb" 'BEGIN { printf "ratio native/bare restore:       %.2f (target <= 0.50)\n", a / b }'
echo "peak RSS native:                 ${rn} KiB (target <= 5120 KiB)"
echo "peak RSS nft -f:                 ${rf} KiB"
echo "peak RSS iptables-restore:       ${rb} KiB"
