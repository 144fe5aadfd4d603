#!/usr/bin/env bash
# Istio's own binaries, built from the istio.io/istio Go module pinned in tools/istio (go.mod + go.sum), as
# the peers of the differential tests and benchmarks. No Istio code is in the repository: the Go
# command fetches the module from the Go module proxy and builds it. `istio-cni` is Istio's CNI plugin, the
# peer of our own (run through the CNI project's tools, scripts/cni-tools.sh); no package of ours imports it,
# so tools/istio/go.mod names it in its tool block, which keeps go.sum covering its build.
#
#   scripts/istio-peers.sh build   build what is missing, print NAME=PATH for each peer
#   scripts/istio-peers.sh path    print NAME=PATH without building (fails if one is missing)
#
# The binaries are cached outside the clone, keyed by a hash of tools/istio/go.mod and go.sum, so only a
# machine's first run pays for the build (see docs/peers.md). ISTIO_PEERS_CACHE overrides the folder.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mod="$root/tools/istio"

# Name and Go package of each peer, in the order they are printed.
peers=(
  "istioctl istio.io/istio/istioctl/cmd/istioctl"
  "pilot-agent istio.io/istio/pilot/cmd/pilot-agent"
  "inject-batch ./cmd/inject-batch"
  "inject-webhook ./cmd/inject-webhook"
  "istio-cni istio.io/istio/cni/cmd/istio-cni"
)
# A peer of ours (a package under tools/istio/cmd) is cached under a name keyed by its sources too.
binary_of() {
  local name="$1" pkg="$2"
  case "$pkg" in
    ./*) echo "$bin/$name-$(cat "$mod/${pkg#./}"/*.go | sha256sum | cut -c1-12)" ;;
    *) echo "$bin/$name" ;;
  esac
}

key="$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)"
cache="${ISTIO_PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecar-inject/istio}/$key"
bin="$cache/bin"

print_paths() {
  local missing=0 entry name path
  for entry in "${peers[@]}"; do
    name="${entry%% *}"
    path="$(binary_of "$name" "${entry#* }")"
    if [ -x "$path" ]; then
      echo "$name=$path"
    else
      echo "istio-peers: $name is not built ($path); run scripts/istio-peers.sh build" >&2
      missing=1
    fi
  done
  return "$missing"
}

build() {
  # The Go toolchain of the machine image lives in /usr/local/go; a non-login shell may not have it on PATH.
  [ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"
  command -v go >/dev/null || { echo "istio-peers: the Go toolchain (go) is not on PATH" >&2; exit 1; }
  mkdir -p "$bin"
  local entry name pkg start path
  # One build at a time into this cache: a second run waits here and then finds the binaries built (two
  # runs building at once raced on one temporary name, and one failed with `mv: cannot stat ….tmp`). The
  # temporary name is the run's own anyway, and the rename puts a whole binary in place at once.
  exec 9>"$cache/build.lock"
  flock 9
  for entry in "${peers[@]}"; do
    name="${entry%% *}"
    pkg="${entry#* }"
    path="$(binary_of "$name" "$pkg")"
    [ -x "$path" ] && continue
    start=$(date +%s)
    echo "istio-peers: building $name ($pkg) into $bin ..." >&2
    # -mod=readonly: the pinned go.sum must already cover the build; -trimpath keeps the clone's path out.
    (cd "$mod" && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "$path.tmp.$$" "$pkg") || {
      rm -f "$path.tmp.$$"
      exit 1
    }
    mv "$path.tmp.$$" "$path"
    echo "istio-peers: built $name in $(( $(date +%s) - start )) s" >&2
  done
  exec 9>&-
  print_paths
}

case "${1:-}" in
  build) build ;;
  path) print_paths ;;
  *) echo "usage: scripts/istio-peers.sh build|path" >&2; exit 2 ;;
esac
