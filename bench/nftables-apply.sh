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

rounds=${ROUNDS:-61}
bin=${BIN:-target/x86_64-unknown-linux-musl/release/iptables-init}
if [ "$(id -u)" -ne 0 ]; then echo "bench/nftables-apply.sh: needs root (network namespaces)" >&2; exit 1; fi
if [ ! -x "$bin" ] && [ -z "${BIN:-}" ]; then scripts/check-static-init.sh; fi
bin=$(realpath "$bin")
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time, Debian package 'time')" >&2; exit 1; }
nft=$(command -v nft) || { echo "needs nft (Debian package 'nftables')" >&2; exit 1; }
restore=$(command -v iptables-restore)

args=(istio-iptables -p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -x "" -b '*' -d 15090,15021,15020 --ipv6 false)
nft_input=$(mktemp); ipt_input=$(mktemp)
trap 'rm -f "$nft_input" "$ipt_input"; for n in $(ip netns list | awk "/^bench-nft-$$-/ {print \$1}"); do ip netns del "$n"; done' EXIT

fresh() { ip netns add "$1"; ip netns exec "$1" ip link set lo up; }

# The inputs, generated inside a throwaway namespace (a BIN that ignored --dry-run would otherwise
# change this machine's own rules).
fresh "bench-nft-$$-dry"
ip netns exec "bench-nft-$$-dry" "$bin" "${args[@]}" --native-nftables --dry-run >"$nft_input"
ip netns exec "bench-nft-$$-dry" "$bin" "${args[@]}" --dry-run >"$ipt_input"
ip netns del "bench-nft-$$-dry"

# Times one command inside a namespace with bash's clock: the command is started directly by a shell
# that already runs in the namespace, so `ip netns exec` is outside the timed part. Prints microseconds.
timed() {
  local ns=$1 stdin=$2; shift 2
  ip netns exec "$ns" bash -c '
    stdin=$1; shift
    t0=${EPOCHREALTIME/./}; "$@" >/dev/null 2>&1 <"$stdin"; rc=$?; t1=${EPOCHREALTIME/./}
    [ $rc -eq 0 ] || { echo "failed: $* (rc $rc)" >&2; exit 1; }
    echo $((t1 - t0))' _ "$stdin" "$@"
}

native_us=(); nft_us=(); bare_us=(); floor_us=()
run_one() { # $1: which, $2: round
  local ns="bench-nft-$$-$1$2"
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
  if ! diff <(ip netns exec "bench-nft-$$-n$i" "$nft" -s list ruleset) \
            <(ip netns exec "bench-nft-$$-f$i" "$nft" -s list ruleset) >/dev/null; then
    echo "round $i: the native apply and nft -f produced different rulesets" >&2; exit 1
  fi
  for w in n f b t; do ip netns del "bench-nft-$$-$w$i"; done
done

median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : int((v[NR/2]+v[NR/2+1])/2)}'; }
mn=$(median "${native_us[@]}"); mf=$(median "${nft_us[@]}"); mb=$(median "${bare_us[@]}")
mt=$(median "${floor_us[@]}")

# Peak RSS: the maximum over 7 runs (GNU time -v), each in a fresh namespace.
peak_rss() { # $1: label, $2: stdin, rest: command; prints KiB
  local label=$1 stdin=$2; shift 2; local rss=()
  for j in $(seq 1 7); do
    local ns="bench-nft-$$-m$label$j"; fresh "$ns"
    rss+=("$(ip netns exec "$ns" /usr/bin/time -v "$@" 2>&1 >/dev/null <"$stdin" |
      awk -F': ' '/Maximum resident set size/ {print $2}')")
    ip netns del "$ns"
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
