#!/usr/bin/env bash
# Istio's own binaries, built from the istio.io/istio Go modules pinned in tools/istio and tools/istio-next
# (go.mod + go.sum each), as the peers of the differential tests and benchmarks. No Istio code is in the
# repository: the Go command fetches the module from the Go module proxy and builds it. `istio-cni` is
# Istio's CNI plugin, the peer of our own (run through the CNI project's tools, scripts/cni-tools.sh); no
# package of ours imports it, so tools/istio/go.mod names it in its tool block, which keeps go.sum covering
# its build.
#
# tools/istio pins the release-1.30 branch: the peers of Istio 1.29 and 1.30. tools/istio-next pins a later
# master commit whose chart texts are 1.31.0-rc.0's byte for byte and whose injector knows the fields those
# texts use (`.ProxyInitImage`); its peers are named `<name>-next`. Both build the same inject-batch
# source (tools/istio-next/cmd/inject-batch/main.go is a link to tools/istio's).
#
#   scripts/istio-peers.sh build   build what is missing, print NAME=PATH for each peer
#   scripts/istio-peers.sh path    print NAME=PATH without building (fails if one is missing)
#
# Every istioctl is printed under a name starting with `istioctl`. The binaries are cached outside the
# clone, one folder per module keyed by a hash of its go.mod and go.sum, so only a machine's first run pays
# for the build (see docs/peers.md). ISTIO_PEERS_CACHE overrides the folder holding the keyed folders.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache_root="${ISTIO_PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecar-inject/istio}"

# Module (a folder under tools/), name and Go package of each peer, in the order they are printed.
peers=(
  "istio istioctl istio.io/istio/istioctl/cmd/istioctl"
  "istio pilot-agent istio.io/istio/pilot/cmd/pilot-agent"
  "istio inject-batch ./cmd/inject-batch"
  "istio inject-webhook ./cmd/inject-webhook"
  "istio istio-cni istio.io/istio/cni/cmd/istio-cni"
  "istio-next istioctl-next istio.io/istio/istioctl/cmd/istioctl"
  "istio-next inject-batch-next ./cmd/inject-batch"
)
modules=(istio istio-next)

# The cache folder of a module's binaries: keyed by its go.mod and go.sum.
bin_of() {
  local mod="$root/tools/$1"
  echo "$cache_root/$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)/bin"
}
# A peer of ours (a package under tools/<module>/cmd) is cached under a name keyed by its sources too.
binary_of() {
  local module="$1" name="$2" pkg="$3"
  case "$pkg" in
    ./*) echo "$(bin_of "$module")/$name-$(cat "$root/tools/$module/${pkg#./}"/*.go | sha256sum | cut -c1-12)" ;;
    *) echo "$(bin_of "$module")/$name" ;;
  esac
}

print_paths() {
  local missing=0 entry module name pkg path
  for entry in "${peers[@]}"; do
    read -r module name pkg <<<"$entry"
    path="$(binary_of "$module" "$name" "$pkg")"
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
  local module bin entry m name pkg start path
  for module in "${modules[@]}"; do
    bin="$(bin_of "$module")"
    mkdir -p "$bin"
    # One build at a time into a module's cache: a second run waits here and then finds the binaries built
    # (two runs building at once raced on one temporary name, and one failed with `mv: cannot stat ….tmp`).
    # The temporary name is the run's own anyway, and the rename puts a whole binary in place at once.
    exec 9>"${bin%/bin}/build.lock"
    flock 9
    for entry in "${peers[@]}"; do
      read -r m name pkg <<<"$entry"
      [ "$m" = "$module" ] || continue
      path="$(binary_of "$module" "$name" "$pkg")"
      [ -x "$path" ] && continue
      start=$(date +%s)
      echo "istio-peers: building $name ($pkg in tools/$module) into $bin ..." >&2
      # -mod=readonly: the pinned go.sum must already cover the build; -trimpath keeps the clone's path out.
      (cd "$root/tools/$module" && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "$path.tmp.$$" "$pkg") || {
        rm -f "$path.tmp.$$"
        exit 1
      }
      mv "$path.tmp.$$" "$path"
      echo "istio-peers: built $name in $(( $(date +%s) - start )) s" >&2
    done
    exec 9>&-
  done
  print_paths
}

case "${1:-}" in
  build) build ;;
  path) print_paths ;;
  *) echo "usage: scripts/istio-peers.sh build|path" >&2; exit 2 ;;
esac
