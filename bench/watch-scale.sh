#!/usr/bin/env bash
# How the cluster watches of `injector serve --kubeconfig` scale, against a baseline
# build in the same run: e2e/src/bin/watch-scale-bench.rs starts etcd + kube-apiserver
# (scripts/cluster.sh) per build, creates 10,000 Namespaces (OpenShift's annotations) and 5,000 Nodes (a
# kubelet's status), starts the injector with `--platform openshift` and native sidecars `auto` (all three
# kinds watched) and the chart's allocator settings, then creates ProxyConfigs up to 1,000, 5,000 and
# 20,000 while reviews of distinct pods keep coming. At each level: review latency during the creates,
# change-to-review latency right after them and at rest, RSS at rest and peak, engine rebuilds, and a
# fresh injector's start. A build that does not catch up within the deadline (or passes the RSS cap) is
# stopped at that level. The apiserver, etcd, the injector and the client share the machine's cores.
#
# Usage: bench/watch-scale.sh [watch-scale-bench flags: --levels 1000,5000,20000 --namespaces 10000
#        --nodes 5000 --connections 8 --deadline 300 --rss-cap 3072]
# Env: BASE=<commit> (the baseline, default 9154c7e, the commit before the watches kept only what injection reads; built release in a
#      temporary git worktree with its own target dir, target/watch-scale-base, which is kept as a cache),
#      OLD_INJECTOR=path (a baseline binary already built: skips that build),
#      BENCH_NO_BUILD=1 (use what is built).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-9154c7e}
bash scripts/cluster.sh build >/dev/null
if [ -z "${BENCH_NO_BUILD:-}" ]; then
  cargo build --release --locked -q -p injector --bin injector
  # The client only waits on the apiserver and the injector: a debug build is enough.
  cargo build --locked -q -p e2e --bin watch-scale-bench
fi
old="${OLD_INJECTOR:-}"
if [ -z "$old" ]; then
  tree="$(mktemp -d)/base"
  git worktree add --detach -q "$tree" "$BASE"
  trap 'git worktree remove --force "$tree"' EXIT
  cargo build --release --locked -q -p injector --bin injector --manifest-path "$tree/Cargo.toml" \
    --target-dir "$(pwd)/target/watch-scale-base"
  old="$(pwd)/target/watch-scale-base/release/injector"
fi
echo "baseline $BASE: $old; new: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (uncommitted changes)'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
CLUSTER_NO_BUILD=1 E2E_PROFILE=release target/debug/watch-scale-bench \
  --build "old=$old" --build "new=$(pwd)/target/release/injector" "$@"
