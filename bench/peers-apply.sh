#!/usr/bin/env bash
# Benchmark against the peer, same run: a real apply of the default injected
# arguments by Istio's own `pilot-agent istio-iptables` (built by scripts/istio-peers.sh from the pinned
# istio.io/istio module) and by `iptables-init istio-iptables`, with the iptables backend and with
# `--native-nftables`, each run in a fresh network namespace that has an IPv4 address (Istio's IPv6
# detection needs one), interleaved rounds (the order rotates); medians and ratios, plus peak RSS.
# Target: iptables-init >= 5x faster than pilot-agent on both backends. Needs root.
#
#   bench/peers-apply.sh                     # 31 rounds, the static release binary (built if missing)
#   ROUNDS=61 BIN=path/to/iptables-init bench/peers-apply.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
ROUNDS=${ROUNDS:-31}
bench_setup bench/peers-apply.sh bench-peer
command -v nft >/dev/null || { echo "needs nft (Debian package 'nftables'): Istio's nftables path runs it" >&2; exit 1; }
agent=$(bash scripts/istio-peers.sh build | awk -F= '$1 == "pilot-agent" {print $2}')
[ -x "$agent" ] || { echo "pilot-agent was not built" >&2; exit 1; }
# The same command line for both: Istio's injected arguments, IPv6 detected from the namespace.
args=(istio-iptables -p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -x "" -b '*' -d 15090,15021,15020)

# A fresh namespace with eth0 (one end of a veth pair, both ends inside) on 10.20.0.5/24.
pod_ns() {
  fresh "$1"
  ip netns exec "$1" ip link add eth0 type veth peer name peer0
  ip netns exec "$1" ip addr add 10.20.0.5/24 dev eth0
  ip netns exec "$1" ip link set eth0 up
}

ours_ipt=(); istio_ipt=(); ours_nft=(); istio_nft=()
run_one() { # $1: which, $2: round
  local ns="$ns_prefix-$1$2"
  pod_ns "$ns"
  case $1 in
    oi) ours_ipt+=("$(timed "$ns" /dev/null "$bin" "${args[@]}")") ;;
    ii) istio_ipt+=("$(timed "$ns" /dev/null "$agent" "${args[@]}")") ;;
    on) ours_nft+=("$(timed "$ns" /dev/null "$bin" "${args[@]}" --native-nftables)") ;;
    in) istio_nft+=("$(timed "$ns" /dev/null "$agent" "${args[@]}" --native-nftables)") ;;
  esac
}
for i in $(seq 1 "$rounds"); do
  case $((i % 4)) in
    0) order="oi ii on in" ;; 1) order="ii on in oi" ;; 2) order="on in oi ii" ;; *) order="in oi ii on" ;;
  esac
  for w in $order; do run_one "$w" "$i"; done
  # Sanity: both programs left the same rules (the differential test compares them in detail).
  if ! diff <(ip netns exec "$ns_prefix-oi$i" iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//') \
            <(ip netns exec "$ns_prefix-ii$i" iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//') >/dev/null; then
    echo "round $i: iptables-init and pilot-agent left different iptables rules" >&2; exit 1
  fi
  for w in oi ii on in; do ip netns del "$ns_prefix-$w$i"; done
done

rss() { # $1: label, rest: command; the max over 5 runs
  local label=$1; shift; local r=()
  for j in $(seq 1 5); do
    local ns="$ns_prefix-r$label$j"
    pod_ns "$ns"
    r+=("$(ip netns exec "$ns" /usr/bin/time -v "$@" 2>&1 >/dev/null </dev/null | awk -F': ' '/Maximum resident set size/ {print $2}')")
    ip netns del "$ns"
  done
  printf '%s\n' "${r[@]}" | sort -n | tail -1
}
r_oi=$(rss oi "$bin" "${args[@]}"); r_ii=$(rss ii "$agent" "${args[@]}")
r_on=$(rss on "$bin" "${args[@]}" --native-nftables); r_in=$(rss in "$agent" "${args[@]}" --native-nftables)

m_oi=$(median "${ours_ipt[@]}"); m_ii=$(median "${istio_ipt[@]}")
m_on=$(median "${ours_nft[@]}"); m_in=$(median "${istio_nft[@]}")
echo "rounds:                              $rounds"
echo "pilot-agent istio-iptables:          median ${m_ii} us   peak RSS ${r_ii} KiB"
echo "iptables-init:                       median ${m_oi} us   peak RSS ${r_oi} KiB"
awk -v a="$m_ii" -v b="$m_oi" 'BEGIN { printf "iptables backend, pilot-agent/ours: %.1fx (target >= 5)\n", a / b }'
echo "pilot-agent --native-nftables:       median ${m_in} us   peak RSS ${r_in} KiB"
echo "iptables-init --native-nftables:     median ${m_on} us   peak RSS ${r_on} KiB"
awk -v a="$m_in" -v b="$m_on" 'BEGIN { printf "nftables backend, pilot-agent/ours: %.1fx (target >= 5)\n", a / b }'
