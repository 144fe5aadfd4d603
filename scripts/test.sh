#!/usr/bin/env bash
# The project's test command (README, .ci/run). Runs on a fresh Debian machine as root:
# installs what the tests need, builds the binaries the end-to-end tests drive, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/test.sh: the netfilter end-to-end tests need root (network namespaces); run as root" >&2
  exit 1
fi

need=()
command -v iptables-restore >/dev/null || need+=(iptables)
command -v ip >/dev/null || need+=(iproute2)
command -v nft >/dev/null || need+=(nftables)
command -v file >/dev/null || need+=(file)
[ -x /usr/bin/time ] || need+=(time)
command -v setpriv >/dev/null || need+=(util-linux)
# The static istio-cni (scripts/check-static-cni.sh): ring's C code is compiled with musl-gcc.
command -v musl-gcc >/dev/null || need+=(musl-tools)
# `kubectl kustomize` renders deploy/ in the webhook tests (the Rust machine image ships kubectl).
command -v kubectl >/dev/null || need+=(kubernetes-client)
# The README's explain walk-through (replayed by the e2e readme test) pipes into jq.
command -v jq >/dev/null || need+=(jq)
# scripts/cluster.sh (the kube-apiserver tests): certificates, and its readiness probe with curl.
command -v openssl >/dev/null || need+=(openssl)
# The README's "Run it locally" block (replayed by the e2e readme test) talks to serve with curl.
command -v curl >/dev/null || need+=(curl)
# scripts/cluster.sh's nodes (`up DIR --nodes N`): a containerd and runc per node (Debian's, started by the
# script: no systemd), and the pause image, compiled with gcc -static (libc6-dev's libc.a).
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
command -v gcc >/dev/null || need+=(gcc)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/aarch64-linux-gnu/libc.a ] || need+=(libc6-dev)
# scripts/images.sh (the images the node scenarios run): the Debian base of the iptables-init and
# istio-pilot-agent images with debootstrap, and the script itself in Python.
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Every step goes through `step` and every `cargo test` through run_tests (scripts/test-counts.sh): a
# failure is shown where it happens and does not stop the steps and runs after it, and the log closes
# with one line (tests_summary) that counts every test that ran and names every failed test, every test
# binary that did not compile, finish or run, and every failed step; the script then exits 1.
source scripts/test-counts.sh

# etcd, kube-apiserver and kubectl for the kube-apiserver e2e tests, built from tools/k8s, helm for the
# chart's (tools/helm), and the nodes' kubelet, kube-proxy, kube-scheduler, kube-controller-manager and
# pause image (tools/k8s too) for the cluster tests, with Go and cached outside the clone: the first run on
# a machine pays for the builds (see the README), later runs reuse them.
build_cluster() {
  command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || {
    echo "scripts/test.sh: the kube-apiserver tests need Go to build the control plane" >&2
    return 1
  }
  local start bin log=/tmp/cluster-build.$$.log
  start=$(date +%s)
  bin="$(bash scripts/cluster.sh build 2>"$log")" || {
    tail -40 "$log" >&2
    rm -f "$log"
    return 1
  }
  echo "control plane, helm and nodes: ${bin//$'\n'/ } ($(($(date +%s) - start)) s; $(grep -c . "$log") lines of build output)"
  rm -f "$log"
}

# Istio's own binaries, the peers of the differential tests: built from tools/istio's pinned
# istio.io/istio module on a machine's first run (many minutes), then taken from the cache.
build_istio_peers() {
  local start
  start=$(date +%s)
  bash scripts/istio-peers.sh build > target/istio-peers.txt 2> target/istio-peers.log || {
    cat target/istio-peers.log >&2
    echo "scripts/test.sh: building Istio's peers failed; the differential tests cannot run" >&2
    return 1
  }
  echo "istio peers ($(( $(date +%s) - start )) s): $(tr '\n' ' ' < target/istio-peers.txt)"
}

# The CNI project's cnitool and reference plugins (bridge, ptp, loopback, host-local), which run our
# istio-cni plugin and Istio's the way a container runtime does: built from tools/cni's pinned modules on a
# machine's first run (about half a minute), then taken from the cache.
build_cni_tools() {
  local start
  start=$(date +%s)
  bash scripts/cni-tools.sh build > target/cni-tools.txt 2> target/cni-tools.log || {
    cat target/cni-tools.log >&2
    echo "scripts/test.sh: building the CNI tools failed; the CNI plugin tests cannot run" >&2
    return 1
  }
  echo "cni tools ($(( $(date +%s) - start )) s): $(tr '\n' ' ' < target/cni-tools.txt)"
}

# The container images, from the repository's Dockerfiles with no container engine or registry:
# the builder stages' cargo commands run here, the Debian base is debootstrapped on a machine's first run
# (cached under ~/.cache/sidecar-inject), and an archive is rewritten only when its inputs changed. The e2e
# tests images:: check them against the Dockerfiles, and the node scenarios (e2e node::) run them.
build_images() {
  local start
  start=$(date +%s)
  bash scripts/images.sh build > target/images.txt 2> target/images.log || {
    tail -40 target/images.log >&2
    echo "scripts/test.sh: building the images failed; the node scenarios cannot run" >&2
    return 1
  }
  echo "images ($(( $(date +%s) - start )) s): $(grep -v _ARCHIVE= target/images.txt | tr '\n' ' ')"
}

# The free disk, before the builds and before the tests: the tests' nodes share it with the builds (a
# full disk shows in the log, not only as a test's failure).
disk_free() {
  echo "disk $1: $(df -h --output=avail . | tail -1 | tr -d ' ') free of $(df -h --output=size . | tail -1 | tr -d ' ')"
}

step disk_free "before the builds"
step cargo fmt --all -- --check
step cargo build --workspace --bins --locked
step build_cluster
step cargo clippy --workspace --all-targets --locked -- -D warnings
# The init container ships a static binary of at most 3 MiB.
step bash scripts/check-static-init.sh
# The CNI plugin runs on the node's userland: a static binary, as the image ships it.
step bash scripts/check-static-cni.sh
step build_istio_peers
step build_cni_tools
step build_images
step disk_free "before the tests"
run_tests cargo test --workspace --locked
# The netfilter end-to-end tests once more, against the binary the image ships (static musl release).
E2E_IPTABLES_INIT="$(pwd)/target/x86_64-unknown-linux-musl/release/iptables-init" \
  run_tests cargo test --locked -p e2e --test e2e -- iptables:: iptables_parity:: nftables:: explain_kernel::
# The CNI tests once more, against the static binary the image ships (the agent copies itself, so the
# plugin the runtime runs there is that binary too).
E2E_ISTIO_CNI="$(pwd)/target/x86_64-unknown-linux-musl/release/istio-cni" \
  run_tests cargo test --locked -p e2e --test e2e -- cni_plugin:: cni_agent::

tests_summary
