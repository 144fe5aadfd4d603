#!/usr/bin/env bash
# The latency a pod CREATE gains from the webhook, and from the MutatingAdmissionPolicy instead, through a
# real kube-apiserver:
# e2e/src/bin/pod-create-bench.rs starts etcd + kube-apiserver (scripts/cluster.sh), `injector serve`
# registered with the generated configurations (url mode), then, over one keep-alive HTTPS connection
# to the apiserver, alternates CREATEs in a namespace the webhook is called for (it injects) and one it
# is not (same configuration registered, namespaceSelector unmatched): p50/p99 of each and the
# difference; the policy arm creates the same pods injected by `injector policy`'s MutatingAdmissionPolicy
# (a pod label routes a pod to the webhook or the policy); then pods/s at saturation with CLIENTS
# connections, rounds alternating between the arms; last the API server's memory before and after the
# policy is loaded.
# The apiserver, etcd, the injector and the client share the machine's cores: the figures include that.
#
# Usage: bench/pod-create.sh [--creates N (500)] [--clients C (8)] [--seconds S (3)] [--rounds R (3)]
#        [--distinct 1 (every pod different: no patch-cache hit; default: replicas of one pod)]
# Env: PROFILE=release|debug (the injector binary measured; default release), BENCH_NO_BUILD=1 (use what
#      is built).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${PROFILE:-release}
bash scripts/cluster.sh build >/dev/null
if [ -z "${BENCH_NO_BUILD:-}" ]; then
  if [ "$PROFILE" = release ]; then
    cargo build --release --locked -q -p injector --bin injector
  else
    cargo build --locked -q -p injector --bin injector
  fi
  # The client only waits on the apiserver: a debug build is enough.
  cargo build --locked -q -p e2e --bin pod-create-bench
fi
CLUSTER_NO_BUILD=1 E2E_PROFILE=$PROFILE exec target/debug/pod-create-bench "$@"
