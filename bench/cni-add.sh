#!/usr/bin/env bash
# Benchmark against the peer, same run: the CNI ADD of an injected pod by our `istio-cni` and
# by Istio's own (`cni/cmd/istio-cni`, built by scripts/istio-peers.sh from the pinned istio.io/istio
# module), with the iptables backend and with `native_nftables`. Each ADD is the plugin run as the
# runtime runs it: the network configuration with a bridge `prevResult` on stdin, `CNI_*` in the
# environment, the pod read from a real kube-apiserver (scripts/cluster.sh) with the run dir's
# kubeconfig, the rules applied in a fresh network namespace that has the pod's address. Rounds are
# interleaved (the order rotates); medians, ratios and peak RSS. Needs root.
#
#   bench/cni-add.sh                          # 31 rounds, our release build (built if missing)
#   ROUNDS=61 BIN=path/to/istio-cni bench/cni-add.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
ROUNDS=${ROUNDS:-31}
bench_setup bench/cni-add.sh bench-cni
command -v nft >/dev/null || { echo "needs nft (Debian package 'nftables'): Istio's nftables path runs it" >&2; exit 1; }
ours=${BIN:-target/release/istio-cni}
[ -x "$ours" ] || [ -n "${BIN:-}" ] || cargo build --release --locked -p istio-cni >&2
ours=$(realpath "$ours")
theirs=$(bash scripts/istio-peers.sh build | awk -F= '$1 == "istio-cni" {print $2}')
[ -x "$theirs" ] || { echo "Istio's istio-cni was not built" >&2; exit 1; }
injector=target/release/injector
[ -x "$injector" ] || cargo build --release --locked -p injector >&2

# The control plane, stopped on exit with the namespaces.
scratch_dir=$(mktemp -d)
cleanup_all() { bash scripts/cluster.sh down "$scratch_dir/cp" >/dev/null 2>&1 || true; bench_cleanup; rm -rf "$scratch_dir"; }
trap cleanup_all EXIT
bash scripts/cluster.sh up "$scratch_dir/cp" >/dev/null
. "$scratch_dir/cp/env"
mkdir -p "$scratch_dir/run"
cp "$KUBECONFIG" "$scratch_dir/run/istio-cni-kubeconfig"

# The pod: an application on 8080, injected in CNI mode by our injector, stored in the apiserver.
cat > "$scratch_dir/pod.json" <<'EOF'
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
 "spec": {"serviceAccountName": "default",
          "containers": [{"name": "app", "image": "example/app:1", "ports": [{"containerPort": 8080}]}]}}
EOF
echo '{"pilot": {"cni": {"enabled": true}}}' > "$scratch_dir/values.json"
"$injector" kube-inject -f "$scratch_dir/pod.json" --values "$scratch_dir/values.json" > "$scratch_dir/injected.yaml"
"$KUBECTL" --kubeconfig "$KUBECONFIG" create -n default -f "$scratch_dir/injected.yaml" >/dev/null

conf() { # $1: native_nftables (true|false)
  cat <<EOF
{"cniVersion": "1.0.0", "name": "bench", "type": "istio-cni", "cni_agent_run_dir": "$scratch_dir/run",
 "plugin_log_level": "info", "native_nftables": $1,
 "prevResult": {"cniVersion": "1.0.0",
   "interfaces": [{"name": "eth0", "mac": "2e:13:c3:5c:12:45", "sandbox": "/run/netns/x"}],
   "ips": [{"address": "10.20.0.5/24", "gateway": "10.20.0.1", "interface": 0}],
   "routes": [{"dst": "0.0.0.0/0"}], "dns": {}}}
EOF
}
conf false > "$scratch_dir/ipt.json"
conf true > "$scratch_dir/nft.json"

# A fresh namespace with eth0 (one end of a veth pair, both ends inside) on the pod's address.
pod_ns() {
  fresh "$1"
  ip netns exec "$1" ip link add eth0 type veth peer name peer0
  ip netns exec "$1" ip addr add 10.20.0.5/24 dev eth0
  ip netns exec "$1" ip link set eth0 up
}

# One ADD, timed with bash's clock around the plugin alone; prints microseconds.
add() { # $1: plugin, $2: conf file, $3: namespace
  local t0 t1 rc
  t0=${EPOCHREALTIME/./}
  CNI_COMMAND=ADD CNI_CONTAINERID="$3" CNI_NETNS="/run/netns/$3" CNI_IFNAME=eth0 CNI_PATH=/nonexistent \
    CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=web" "$1" <"$2" >/dev/null 2>&1 && rc=0 || rc=$?
  t1=${EPOCHREALTIME/./}
  [ "$rc" -eq 0 ] || { echo "ADD failed: $1 $2 (rc $rc)" >&2; exit 1; }
  echo $((t1 - t0))
}

ours_ipt=(); istio_ipt=(); ours_nft=(); istio_nft=()
run_one() { # $1: which, $2: round
  local ns="$ns_prefix-$1$2"
  pod_ns "$ns"
  case $1 in
    oi) ours_ipt+=("$(add "$ours" "$scratch_dir/ipt.json" "$ns")") ;;
    ii) istio_ipt+=("$(add "$theirs" "$scratch_dir/ipt.json" "$ns")") ;;
    on) ours_nft+=("$(add "$ours" "$scratch_dir/nft.json" "$ns")") ;;
    in) istio_nft+=("$(add "$theirs" "$scratch_dir/nft.json" "$ns")") ;;
  esac
}
for i in $(seq 1 "$rounds"); do
  case $((i % 4)) in
    0) order="oi ii on in" ;; 1) order="ii on in oi" ;; 2) order="on in oi ii" ;; *) order="in oi ii on" ;;
  esac
  for w in $order; do run_one "$w" "$i"; done
  # Sanity: both plugins programmed the pod (the e2e differential compares the states in detail).
  for w in oi ii; do
    ip netns exec "$ns_prefix-$w$i" iptables-save | grep -q ISTIO_REDIRECT \
      || { echo "round $i: $w left no iptables rules" >&2; exit 1; }
  done
  for w in on in; do
    ip netns exec "$ns_prefix-$w$i" nft list tables | grep -q istio \
      || { echo "round $i: $w left no nftables tables" >&2; exit 1; }
  done
  for w in oi ii on in; do ip netns del "$ns_prefix-$w$i"; done
done

rss() { # $1: plugin, $2: conf; the max over 5 runs
  local r=() ns
  for j in $(seq 1 5); do
    ns="$ns_prefix-rss$j"
    pod_ns "$ns"
    r+=("$(CNI_COMMAND=ADD CNI_CONTAINERID="$ns" CNI_NETNS="/run/netns/$ns" CNI_IFNAME=eth0 CNI_PATH=/nonexistent \
      CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=web" /usr/bin/time -v "$1" <"$2" 2>&1 >/dev/null \
      | awk -F': ' '/Maximum resident set size/ {print $2}')")
    ip netns del "$ns"
  done
  printf '%s\n' "${r[@]}" | sort -n | tail -1
}
r_oi=$(rss "$ours" "$scratch_dir/ipt.json"); r_ii=$(rss "$theirs" "$scratch_dir/ipt.json")
r_on=$(rss "$ours" "$scratch_dir/nft.json"); r_in=$(rss "$theirs" "$scratch_dir/nft.json")

m_oi=$(median "${ours_ipt[@]}"); m_ii=$(median "${istio_ipt[@]}")
m_on=$(median "${ours_nft[@]}"); m_in=$(median "${istio_nft[@]}")
echo "rounds:                              $rounds"
echo "Istio istio-cni ADD (iptables):      median ${m_ii} us   peak RSS ${r_ii} KiB"
echo "our istio-cni ADD (iptables):        median ${m_oi} us   peak RSS ${r_oi} KiB"
awk -v a="$m_ii" -v b="$m_oi" 'BEGIN { printf "iptables backend, Istio/ours:        %.1fx\n", a / b }'
echo "Istio istio-cni ADD (nftables):      median ${m_in} us   peak RSS ${r_in} KiB"
echo "our istio-cni ADD (nftables):        median ${m_on} us   peak RSS ${r_on} KiB"
awk -v a="$m_in" -v b="$m_on" 'BEGIN { printf "nftables backend, Istio/ours:        %.1fx\n", a / b }'
