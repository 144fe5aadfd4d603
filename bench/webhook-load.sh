#!/usr/bin/env bash
# Load benchmark of `injector serve` on loopback HTTPS (keep-alive HTTP/1.1, certificate verified):
#   1. closed loop, max rate: injections/s for the hello pod and the skip path (a hostNetwork pod),
#      alternating in short runs for ROUNDS rounds (default 15 x 2 s each); the inject/skip ratio is the
#      median of the rounds' ratios (this VM's speed drifts by 10-25% within seconds: with 3 rounds of 10 s
#      the round ratios of one run spread from 0.42 to 0.59; short paired runs keep both paths of a round
#      in the same stretch);
#   2. open loop at a fixed 1,000 req/s: p50/p99 of the injection path (latency from each request's due time);
#   3. the server's RSS (current and peak) after the runs.
# The generator (e2e/src/bin/webhook-load.rs) runs on the same machine: on 2 cores it takes a share of the
# CPU, which the figures include. Figures go in closing notes, never in tests.
#
# Usage: bench/webhook-load.sh [duration-seconds per max-rate run (default 2)] [connections (default 8)]
# Env: ROUNDS (max-rate rounds, default 15), FIXED_SECONDS (the 1,000 req/s run, default 10),
#      SERVE_EXTRA="--max-concurrent-injections 8" (extra server flags),
#      INJECTOR_BIN=path (the server binary to measure, e.g. an older build for an A/B; default the release build),
#      RUST_LOG (server log level, default info),
#      BENCH_NO_BUILD=1 (use the release binaries as built).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-2}
CONNS=${2:-8}
ROUNDS=${ROUNDS:-15}
FIXED_SECONDS=${FIXED_SECONDS:-10}

# Istio's injection test data, found from this script's own place in the repository (the `cd` above).
corpus="$(pwd)/testdata/istio/inject"
[ -f "$corpus/base-values.json" ] || { echo "$corpus/base-values.json not found" >&2; exit 1; }

# BENCH_NO_BUILD=1 uses the release binaries already built.
[ -n "${BENCH_NO_BUILD:-}" ] || cargo build --release --locked -q -p injector --bin injector -p e2e --bin webhook-load
bin=target/release

work=$(mktemp -d)
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

"$bin/injector" certs --out-dir "$work/certs" --san localhost --san 127.0.0.1 2>/dev/null
cp "$corpus/base-values.json" "$work/values.json"
cp "$corpus/base-mesh.yaml" "$work/mesh.yaml"
cp "$corpus/base-injector-config.yaml" "$work/config.yaml"

# Request logs at info cost a formatted line per request; production runs at info, so the bench does too,
# writing to a file.
RUST_LOG=${RUST_LOG:-info} "${INJECTOR_BIN:-$bin/injector}" serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --port-file "$work/ports" --tls-cert "$work/certs/tls.crt" --tls-key "$work/certs/tls.key" \
  --values "$work/values.json" --mesh-config "$work/mesh.yaml" --injector-config "$work/config.yaml" \
  --native-sidecars true --log-format json ${SERVE_EXTRA:-} 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do [ -s "$work/ports" ] && break; sleep 0.05; done
addr=$(sed -n 's/^https=//p' "$work/ports")
metrics=$(sed -n 's/^metrics=//p' "$work/ports")
[ -n "$addr" ] || { echo "server did not start:"; cat "$work/server.log"; exit 1; }

load() { "$bin/webhook-load" --addr "$addr" --ca "$work/certs/ca.crt" "$@"; }
rss() { awk '/^(VmRSS|VmHWM)/ {printf "%s %.1f MiB  ", $1, $2/1024}' "/proc/$server_pid/status"; echo; }

echo "server $addr (pid $server_pid), ${DURATION}s per max-rate run, $CONNS connections, $(nproc) CPUs, $ROUNDS rounds"
echo "RSS idle:            $(rss)"
rps() { sed 's/.*"rps":\([0-9.]*\).*/\1/' <<<"$1"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
# Max-rate runs alternate between the injection and the skip path, so that a stretch of background
# load on this shared machine hits both about equally; the ratio is taken per round, then the median.
inj_rates=(); skip_rates=(); ratios=()
for r in $(seq 1 "$ROUNDS"); do
  inject=$(load --pod "$corpus/hello.yaml" --duration "$DURATION" --connections "$CONNS")
  skip=$(load --pod "$corpus/hello-host-network.yaml" --duration "$DURATION" --connections "$CONNS")
  ri=$(rps "$inject"); rs=$(rps "$skip")
  inj_rates+=("$ri"); skip_rates+=("$rs")
  ratios+=("$(awk -v a="$ri" -v b="$rs" 'BEGIN{printf "%.3f", a/b}')")
  printf 'round %2d inject/skip: %s / %s = %s  (p99 %s / %s ms)\n' "$r" "$ri" "$rs" "${ratios[-1]}" \
    "$(sed 's/.*"p99_ms":\([0-9.]*\).*/\1/' <<<"$inject")" "$(sed 's/.*"p99_ms":\([0-9.]*\).*/\1/' <<<"$skip")"
done
echo "RSS after max rate:  $(rss)"
fixed=$(load --pod "$corpus/hello.yaml" --duration "$FIXED_SECONDS" --connections "$CONNS" --rate 1000)
echo "inject @1000 req/s:  $fixed"
echo "RSS after all:       $(rss)"
echo "inject max rate:     median $(median "${inj_rates[@]}")/s  (rounds: ${inj_rates[*]})"
echo "skip max rate:       median $(median "${skip_rates[@]}")/s  (rounds: ${skip_rates[*]})"
echo "inject/skip ratio:   median $(median "${ratios[@]}")  (rounds: ${ratios[*]}; target >= 0.5)"
echo "server metrics:      $(curl -s "http://$metrics/metrics" | grep -E '^sidecar_injection_(requests|success|skip|render_memo_hits|render_memo_misses)_total' | tr '\n' ' ')"
