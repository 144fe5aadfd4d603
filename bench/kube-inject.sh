#!/usr/bin/env bash
# Benchmark against the peer, same run: `istioctl kube-inject` (built by
# scripts/istio-peers.sh from the pinned istio.io/istio module) against `injector kube-inject`, with the
# same three files (Istio's test configuration: testdata/istio/inject/base-*), per pod:
#   1. one pod per process (hello.yaml), as a CI step or a user runs it: start-up included;
#   2. a stream of N copies of a Deployment (hello.yaml as a List-free multi-document file), per pod.
# Rounds interleave the two programs (the order alternates); medians of wall and CPU time (user +
# system: on a busy machine the wall time includes waiting for a core), ratios, peak RSS. Both outputs
# are checked to inject the proxy. No root needed (on a busy machine, `chrt -f 10` as root steadies it).
#
#   bench/kube-inject.sh        # 15 rounds (one-pod samples of 10 processes), a 200-document stream
#   ROUNDS=31 REPS=20 STREAM=500 INJECTOR_BIN=path bench/kube-inject.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-15}
STREAM=${STREAM:-200}
REPS=${REPS:-10}
corpus="$(pwd)/testdata/istio/inject"
[ -n "${INJECTOR_BIN:-}" ] || cargo build --release --locked -q -p injector --bin injector
ours=$(realpath "${INJECTOR_BIN:-target/release/injector}")
istioctl=$(bash scripts/istio-peers.sh build | awk -F= '$1 == "istioctl" {print $2}')
[ -x "$istioctl" ] || { echo "istioctl was not built" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time, Debian package 'time')" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Istio needs the chart's pod templates in the injector config (the test corpus omits them); both
# programs get the same file, as in the injection differential.
batch=$(bash scripts/istio-peers.sh path | awk -F= '$1 == "inject-batch" {print $2}')
python3 -c 'import json, sys
import yaml
cfg = yaml.safe_load(open(sys.argv[1]))
cfg["templates"] = json.loads(sys.stdin.read())
print(json.dumps(cfg, indent=1))' "$corpus/base-injector-config.yaml" < <("$batch" chart-templates) >"$work/config.json"
config="$work/config.json"
pod="$corpus/hello.yaml"
for _ in $(seq 1 "$STREAM"); do cat "$pod"; echo "---"; done >"$work/stream.yaml"

# The same files for both; native sidecars off in both (istioctl reads ENABLE_NATIVE_SIDECARS).
istio_cmd() { # $1: input
  ENABLE_NATIVE_SIDECARS=false "$istioctl" kube-inject --revision default -f "$1" \
    --injectConfigFile "$config" --meshConfigFile "$corpus/base-mesh.yaml" \
    --valuesFile "$corpus/base-values.json"
}
ours_cmd() { # $1: input
  "$ours" kube-inject -f "$1" --injector-config "$config" \
    --mesh-config "$corpus/base-mesh.yaml" --values "$corpus/base-values.json" --native-sidecars false
}
# "wall CPU" microseconds of one run (CPU: user + system, all threads); fails when the program fails or
# injects nothing. On a busy machine the wall time waits for the CPU; the CPU time does not.
# GNU time counts in 10 ms steps, so the one-pod case runs $REPS processes one after the other per sample.
timed() { # $1: istio|ours, $2: input, $3: runs per sample
  local t
  t=$( { /usr/bin/time -f 'TIME %e %U %S' bash -c "$(declare -f "${1}_cmd"); $(declare -p istioctl ours corpus config); for _ in \$(seq $3); do ${1}_cmd '$2'; done" >"$work/out" 2>"$work/err"; } 2>&1 ) \
    || { echo "$1 failed:" >&2; cat "$work/err" >&2; exit 1; }
  grep -q 'name: istio-proxy' "$work/out" || { echo "$1 injected no proxy" >&2; exit 1; }
  t=$(grep '^TIME' "$work/err" || true)
  awk -v n="$3" '{printf "%d %d\n", $2 * 1e6 / n, ($3 + $4) * 1e6 / n}' <<<"$t"
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# Sanity: the same number of injected proxies in the stream's outputs.
istio_cmd "$work/stream.yaml" | grep -c 'name: istio-proxy$' >"$work/n1"
ours_cmd "$work/stream.yaml" | grep -c 'name: istio-proxy$' >"$work/n2"
cmp -s "$work/n1" "$work/n2" || { echo "the two outputs inject a different number of proxies" >&2; exit 1; }

declare -A wall cpu
add() { # $1: key, $2: "wall cpu"
  wall[$1]+=" ${2% *}"; cpu[$1]+=" ${2#* }"
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 0 ]; then order="istio ours"; else order="ours istio"; fi
  for p in $order; do add "$p-1" "$(timed "$p" "$pod" "$REPS")"; done
  for p in $order; do add "$p-s" "$(timed "$p" "$work/stream.yaml" 1)"; done
done
peak() { # the max RSS (KiB) over 5 runs of $1_cmd $2
  local r=() j
  for j in 1 2 3 4 5; do
    r+=("$( { /usr/bin/time -v bash -c "$(declare -f "${1}_cmd"); $(declare -p istioctl ours corpus config); ${1}_cmd '$2'" >/dev/null; } 2>&1 | awk -F': ' '/Maximum resident set size/ {print $2}')")
  done
  printf '%s\n' "${r[@]}" | sort -g | tail -1
}
echo "istioctl $istioctl"
echo "injector $ours"
echo "$(nproc) CPUs, $ROUNDS rounds ($REPS processes per one-pod sample), stream of $STREAM pods; medians in µs (wall / CPU)"
report() { # $1: label, $2: 1|s, $3: divisor (pods)
  local iw ic ow oc
  # shellcheck disable=SC2086
  iw=$(median ${wall[istio-$2]}); ic=$(median ${cpu[istio-$2]}); ow=$(median ${wall[ours-$2]}); oc=$(median ${cpu[ours-$2]})
  awk -v l="$1" -v iw="$iw" -v ic="$ic" -v ow="$ow" -v oc="$oc" -v n="$3" 'BEGIN {
    printf "%-22s istioctl %9.0f / %9.0f   injector %8.0f / %8.0f   ratio wall %5.1fx, CPU %5.1fx\n",
      l, iw / n, ic / n, ow / n, oc / n, iw / ow, (oc > 0 ? ic / oc : 0) }'
}
report "one pod per process:" 1 1
report "stream, per pod:" s "$STREAM"
echo "peak RSS one pod:     istioctl $(peak istio "$pod") KiB   injector $(peak ours "$pod") KiB"
echo "peak RSS stream:      istioctl $(peak istio "$work/stream.yaml") KiB   injector $(peak ours "$work/stream.yaml") KiB"
