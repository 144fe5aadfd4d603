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
# `kubectl kustomize` renders deploy/ in the webhook tests (the Rust machine image ships kubectl).
command -v kubectl >/dev/null || need+=(kubernetes-client)
# The README's explain walk-through (replayed by the e2e readme test) pipes into jq.
command -v jq >/dev/null || need+=(jq)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

cargo fmt --all -- --check
cargo build --workspace --bins --locked
cargo clippy --workspace --all-targets --locked -- -D warnings
# The init container ships a static binary of at most 3 MiB.
bash scripts/check-static-init.sh
cargo test --workspace --locked
# The netfilter end-to-end tests once more, against the binary the image ships (static musl release).
E2E_IPTABLES_INIT="$(pwd)/target/x86_64-unknown-linux-musl/release/iptables-init" \
  cargo test --locked -p e2e --test e2e -- iptables:: iptables_parity:: nftables:: explain_kernel::
