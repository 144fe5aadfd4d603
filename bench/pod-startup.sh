#!/usr/bin/env bash
# Pod start-up on a real node: the time from a pod's CREATE to its Ready condition for a
# bare pod, an injected pod in init-container mode (our iptables-init), one in CNI mode (istio-cni), and one
# whose init container is Istio's own `pilot-agent istio-iptables` (an image built from the Go-built peer of
# scripts/istio-peers.sh), all four in the same run on one cluster, interleaved one pod per arm per round
# in a rotating order: medians and p99 (e2e/src/bin/pod-startup-bench.rs says how each is timed).
# The cluster (scripts/cluster.sh up --nodes 1), the images (scripts/images.sh) and both charts (helm
# install) are the e2e node scenarios' (e2e::product); istio-proxy is testproxy, the stand-in for Envoy.
#
# Usage: bench/pod-startup.sh [--rounds N (30)]     (root)
# Env: BENCH_NO_BUILD=1 (use what is built).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then echo "pod-startup.sh: needs root (the cluster's node)" >&2; exit 1; fi
if [ -z "${BENCH_NO_BUILD:-}" ]; then
  bash scripts/cluster.sh build >/dev/null
  bash scripts/istio-peers.sh build >/dev/null
  bash scripts/cni-tools.sh build >/dev/null
  bash scripts/images.sh build injector iptables-init istio-cni testproxy istio-pilot-agent >/dev/null
  # `injector certs` for the releases' serving pairs; the client only waits on the apiserver.
  cargo build --locked -q -p injector --bin injector
  cargo build --locked -q -p e2e --bin pod-startup-bench
fi
CLUSTER_NO_BUILD=1 exec target/debug/pod-startup-bench "$@"
