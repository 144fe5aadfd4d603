#!/usr/bin/env bash
# The CNI project's own tools, to run our istio-cni plugin the way a container runtime does: `cnitool`
# (libcni's reference driver: reads a conflist from NETCONFPATH, runs the chain from CNI_PATH against a
# network namespace) and the reference plugins `bridge`, `ptp`, `loopback` and `host-local` (IPAM) that
# come before a chained plugin like istio-cni. They are built from the Go module tools/cni, which pins
# github.com/containernetworking/cni and .../plugins (go.mod's tool block + go.sum); no CNI code is in the
# repository: the Go command fetches the modules from the Go module proxy and builds them.
#
#   scripts/cni-tools.sh build   build what is missing, print NAME=PATH for each tool
#   scripts/cni-tools.sh path    print NAME=PATH without building (fails if one is missing)
#
# All five land in one folder, which can serve as CNI_PATH. The binaries are cached outside the clone,
# keyed by a hash of tools/cni/go.mod and go.sum, so only a machine's first run pays for the build (see
# docs/peers.md). CNI_TOOLS_CACHE overrides the folder.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mod="$root/tools/cni"

# Name and Go package of each tool, in the order they are printed. Go names a binary for the last element
# of its package path, which is the name here.
tools=(
  "cnitool github.com/containernetworking/cni/cnitool"
  "bridge github.com/containernetworking/plugins/plugins/main/bridge"
  "ptp github.com/containernetworking/plugins/plugins/main/ptp"
  "loopback github.com/containernetworking/plugins/plugins/main/loopback"
  "host-local github.com/containernetworking/plugins/plugins/ipam/host-local"
)

key="$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)"
cache="${CNI_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecar-inject/cni}/$key"
bin="$cache/bin"

print_paths() {
  local missing=0 entry name
  for entry in "${tools[@]}"; do
    name="${entry%% *}"
    if [ -x "$bin/$name" ]; then
      echo "$name=$bin/$name"
    else
      echo "cni-tools: $name is not built ($bin/$name); run scripts/cni-tools.sh build" >&2
      missing=1
    fi
  done
  return "$missing"
}

build() {
  # The Go toolchain of the machine image lives in /usr/local/go; a non-login shell may not have it on PATH.
  [ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"
  command -v go >/dev/null || { echo "cni-tools: the Go toolchain (go) is not on PATH" >&2; exit 1; }
  local entry pkgs=() start tmp
  mkdir -p "$cache"
  # One build at a time into this cache: a second run waits here, then finds the tools built instead of
  # building them again.
  exec 9>"$cache/build.lock"
  flock 9
  for entry in "${tools[@]}"; do
    [ -x "$bin/${entry%% *}" ] || pkgs+=("${entry#* }")
  done
  if [ "${#pkgs[@]}" -gt 0 ]; then
    mkdir -p "$bin"
    tmp="$(mktemp -d "$cache/build.XXXXXX")"
    # shellcheck disable=SC2064 # the folder's name now: $tmp is local to this function
    trap "rm -rf '$tmp'" EXIT
    start=$(date +%s)
    echo "cni-tools: building ${pkgs[*]##*/} into $bin ..." >&2
    # One go invocation: the plugins share most of their packages, which then compile once. -mod=readonly:
    # the pinned go.sum must already cover the build; -trimpath keeps the clone's path out.
    (cd "$mod" && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "$tmp/" "${pkgs[@]}")
    mv "$tmp"/* "$bin/"
    echo "cni-tools: built in $(( $(date +%s) - start )) s" >&2
  fi
  exec 9>&-
  print_paths
}

case "${1:-}" in
  build) build ;;
  path) print_paths ;;
  *) echo "usage: scripts/cni-tools.sh build|path" >&2; exit 2 ;;
esac
