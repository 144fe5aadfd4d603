#!/usr/bin/env bash
# Benchmark against the peer, same run: Istio's own injection webhook handler against
# `injector serve`, both on loopback HTTPS with the same certificate, the same configuration (Istio's
# test configuration testdata/istio/inject/base-* plus the chart's pod templates, native sidecars off)
# and the same load generator (e2e/src/bin/webhook-load.rs, as bench/webhook-load.sh) sending the same
# AdmissionReview (the hello pod):
#   1. closed loop at max rate, ROUNDS rounds alternating the two servers (the order alternates):
#      injections/s and the p50/p99 latency at that rate; medians over the rounds;
#   2. open loop at the same fixed rate for both (default: half Istio's median max rate): p50/p99 from
#      each request's due time;
#   3. both servers' RSS (current and peak).
# Istio's side is tools/istio/cmd/inject-webhook (built by scripts/istio-peers.sh): the webhook istiod
# serves on its port 15017 (inject.NewWebhook with inject.NewFileWatcher, as istiod's
# initSidecarInjector sets it up when the injection files exist), without the rest of istiod, because
# pilot-discovery itself cannot be built from the Go module proxy (see that program's comment).
# Target: injector >= 5x Istio's throughput at an equal or lower p99.
#
#   bench/istio-webhook.sh                    # 9 rounds of 3 s, 8 connections
#   ROUNDS=15 DURATION=5 CONNS=8 RATE=100 FIXED_SECONDS=10 bench/istio-webhook.sh
# Env: BENCH_NO_BUILD=1 (use the release binaries as built), INJECTOR_BIN=path, DISTINCT=1 (every request
# a different pod, so injector's patch cache never answers: the full injection each time; without it the
# same pod again and again, as a workload's replicas arrive, which the cache answers from its third sighting).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-9}
DURATION=${DURATION:-3}
CONNS=${CONNS:-8}
FIXED_SECONDS=${FIXED_SECONDS:-10}
corpus="$(pwd)/testdata/istio/inject"
[ -n "${BENCH_NO_BUILD:-}" ] || cargo build --release --locked -q -p injector --bin injector -p e2e --bin webhook-load
bin=target/release
ours=$(realpath "${INJECTOR_BIN:-$bin/injector}")
peers=$(bash scripts/istio-peers.sh build)
istio=$(awk -F= '$1 == "inject-webhook" {print $2}' <<<"$peers")
batch=$(awk -F= '$1 == "inject-batch" {print $2}' <<<"$peers")

work=$(mktemp -d)
istio_pid=""; ours_pid=""
cleanup() {
  [ -n "$istio_pid" ] && kill "$istio_pid" 2>/dev/null
  [ -n "$ours_pid" ] && kill "$ours_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

"$ours" certs --out-dir "$work/certs" --san localhost --san 127.0.0.1 2>/dev/null
# The injector config with the pinned module's chart texts, as in the injection differential: both
# servers render those texts. They are not the texts injector's compiled templates were built from
# (Istio 1.31.0-rc.0's), so injector runs them through its evaluator: this compares the evaluated path
# with Istio's handler.
python3 -c 'import json, sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
cfg["templates"] = json.loads(sys.stdin.read())
print(json.dumps(cfg, indent=1))' "$corpus/base-injector-config.yaml" < <("$batch" chart-templates) >"$work/config"
cp "$corpus/base-values.json" "$work/values"
cp "$corpus/base-mesh.yaml" "$work/mesh"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$istio" --config "$work/config" --values "$work/values" --mesh "$work/mesh" \
  --cert "$work/certs/tls.crt" --key "$work/certs/tls.key" --addr "127.0.0.1:$port" >"$work/istio.log" 2>&1 &
istio_pid=$!
RUST_LOG=${RUST_LOG:-info} "$ours" serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --port-file "$work/ports" --tls-cert "$work/certs/tls.crt" --tls-key "$work/certs/tls.key" \
  --values "$work/values" --mesh-config "$work/mesh" --injector-config "$work/config" \
  --native-sidecars false --log-format json 2>"$work/ours.log" &
ours_pid=$!
for _ in $(seq 200); do [ -s "$work/ports" ] && grep -q serving "$work/istio.log" && break; sleep 0.05; done
istio_addr="127.0.0.1:$port"
ours_addr=$(sed -n 's/^https=//p' "$work/ports")
[ -n "$ours_addr" ] || { echo "injector serve did not start:"; cat "$work/ours.log"; exit 1; }
grep -q serving "$work/istio.log" || { echo "inject-webhook did not start:"; cat "$work/istio.log"; exit 1; }

# Sanity: both answer the pod with a patch that adds istio-proxy.
python3 - "$corpus/hello.yaml" >"$work/review.json" <<'PY'
import json, sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": d["spec"]["template"]["metadata"], "spec": d["spec"]["template"]["spec"]}
print(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "default",
    "operation": "CREATE", "object": pod}}))
PY
for a in "$istio_addr" "$ours_addr"; do
  curl -s --cacert "$work/certs/ca.crt" --resolve "sidecar-injector.sidecar-injector.svc:${a#*:}:127.0.0.1" \
    -H 'Content-Type: application/json' --data-binary @"$work/review.json" \
    "https://sidecar-injector.sidecar-injector.svc:${a#*:}/inject" >"$work/answer.json"
  python3 -c 'import base64, json, sys
r = json.load(open(sys.argv[1]))["response"]
assert r["allowed"] and "istio-proxy" in base64.b64decode(r["patch"]).decode(), r' "$work/answer.json" \
    || { echo "$a: no injection patch" >&2; exit 1; }
done

load() { "$bin/webhook-load" --ca "$work/certs/ca.crt" --pod "$corpus/hello.yaml" --connections "$CONNS" ${DISTINCT:+--distinct} "$@"; }
field() { sed "s/.*\"$1\":\\([0-9.]*\\).*/\\1/" <<<"$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
rss() { awk '/^(VmRSS|VmHWM)/ {printf "%s %.1f MiB  ", $1, $2/1024}' "/proc/$1/status"; }

echo "Istio: $istio ($istio_addr)   injector: $ours ($ours_addr)"
echo "$(nproc) CPUs, $ROUNDS rounds of ${DURATION}s at max rate, $CONNS connections, $([ -n "${DISTINCT:-}" ] && echo "a distinct pod per request" || echo "the same pod")"
declare -A rps p50 p99
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 0 ]; then order="istio ours"; else order="ours istio"; fi
  for w in $order; do
    if [ "$w" = istio ]; then a=$istio_addr; else a=$ours_addr; fi
    out=$(load --addr "$a" --duration "$DURATION")
    [ "$(field errors "$out")" = 0 ] || { echo "$w: errors: $out" >&2; exit 1; }
    rps[$w]+=" $(field rps "$out")"; p50[$w]+=" $(field p50_ms "$out")"; p99[$w]+=" $(field p99_ms "$out")"
  done
  printf 'round %2d  Istio %8s/s p99 %8s ms   injector %8s/s p99 %8s ms\n' "$r" \
    "$(awk '{print $NF}' <<<"${rps[istio]}")" "$(awk '{print $NF}' <<<"${p99[istio]}")" \
    "$(awk '{print $NF}' <<<"${rps[ours]}")" "$(awk '{print $NF}' <<<"${p99[ours]}")"
done
# shellcheck disable=SC2086
{ ir=$(median ${rps[istio]}); or=$(median ${rps[ours]}); }
# shellcheck disable=SC2086
printf 'max rate (medians):  Istio %s/s (p50 %s, p99 %s ms)   injector %s/s (p50 %s, p99 %s ms)   throughput ratio %.1fx\n' \
  "$ir" "$(median ${p50[istio]})" "$(median ${p99[istio]})" "$or" "$(median ${p50[ours]})" "$(median ${p99[ours]})" \
  "$(awk -v a="$or" -v b="$ir" 'BEGIN{print a/b}')"
rate=${RATE:-$(awk -v r="$ir" 'BEGIN{printf "%d", r / 2 < 1 ? 1 : r / 2}')}
fi_=$(load --addr "$istio_addr" --duration "$FIXED_SECONDS" --rate "$rate")
fo=$(load --addr "$ours_addr" --duration "$FIXED_SECONDS" --rate "$rate")
echo "fixed $rate req/s, Istio:    $fi_"
echo "fixed $rate req/s, injector: $fo"
echo "RSS Istio:    $(rss "$istio_pid")"
echo "RSS injector: $(rss "$ours_pid")"
