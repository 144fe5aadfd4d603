#!/usr/bin/env bash
# The differential tests against Istio's own binaries, by hand. Every difference not in the
# kind's allow-list is printed with the two command lines that reproduce it.
#
#   scripts/differential.sh [--kind rules|inject|template|policy] [--seed N] [--cases N] [--minutes M] [--start N]
#                           [--jobs J] [--apply-every K (rules)] [--istioctl-every K] [--keep DIR (inject, template)]
#                           [--release pinned|pinned-next|1.29.6|1.30.3|1.31.0-rc.0 (inject, template)]
#
# rules (the default): generated istio-iptables configurations through `pilot-agent istio-iptables` and
#   `iptables-init istio-iptables` (e2e/rules-differential-allow.tsv); defaults: seed 1, 1000 cases, every
#   20th iptables case also applied for real, 2 jobs. Needs root (network namespaces).
# inject, template: generated workloads and configurations (inject), or user templates (template), through
#   Istio's kube-inject code (tools/istio/cmd/inject-batch, every 50th case also through the real istioctl)
#   and `injector kube-inject` (e2e/inject-differential-allow.tsv); the files of a differing case are kept
#   under --keep (default $TMPDIR/inject-differential). --release picks the texts both sides run: a
#   release tag's (testdata/istio/releases/<tag>, with that chart's values defaults; 1.29.6 and 1.30.3 run
#   on tools/istio's peers, 1.31.0-rc.0 on tools/istio-next's) or a pinned module's own chart (`pinned`,
#   the default, or `pinned-next`).
# policy: generated pods and the corpus' cases through a real kube-apiserver (scripts/cluster.sh) with the
#   MutatingAdmissionPolicy of `injector policy` and no webhook, with the webhook and no policy, and with both
#   (e2e::policy_differential); flags --seed, --cases, --start, --per-config K (pods per configuration,
#   default 100), --jobs J, --corpus 0|1, --corpus-match TEXT (the corpus cases whose name holds TEXT). No
#   allow-list: every difference is unexplained (docs/policy-differential.md).
# CI runs a fixed seed's few hundred cases of each kind in the e2e tests `rules_differential`,
# `inject_differential` and `policy`.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=rules
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kind) kind="${2:?--kind needs a value}"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$kind" in
  inject|template)
    bash scripts/istio-peers.sh build >/dev/null
    cargo build -q --locked -p injector -p e2e --bins
    exec target/debug/inject-differential --kind "$kind" "${args[@]}"
    ;;
  policy)
    bash scripts/cluster.sh build >/dev/null
    cargo build -q --locked -p injector -p e2e --bins
    exec target/debug/policy-differential "${args[@]}"
    ;;
  rules) ;;
  *) echo "scripts/differential.sh: --kind $kind: expected rules, inject, template or policy" >&2; exit 2 ;;
esac
set -- "${args[@]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/differential.sh: needs root (network namespaces)" >&2
  exit 1
fi
bash scripts/istio-peers.sh build >/dev/null
cargo build -q --locked -p iptables-init -p e2e --bins
exec target/debug/rules-differential "$@"
