#!/usr/bin/env bash
# Builds the static istio-cni release binary (musl), as Dockerfile.cni does, and checks that `file` calls it
# statically linked: the node agent copies this executable into the node's CNI bin dir, where the container
# runtime runs it on the node's own userland, so it may not need the node's libc (a glibc-linked build
# would refuse to start on a node with an older glibc, and every pod on it would fail to start).
# Prints the path and the size.
#   scripts/check-static-cni.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-musl

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  echo "adding the Rust target $target (rustup)"
  rustup target add "$target"
fi
# ring compiles C; Debian's musl-tools gives musl-gcc, which cc-rs does not find under the triple's name.
command -v musl-gcc >/dev/null || { echo "FAIL: musl-gcc missing (Debian package musl-tools; scripts/test.sh installs it)" >&2; exit 1; }
CC_x86_64_unknown_linux_musl=musl-gcc \
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static -C relocation-model=static" \
  cargo build --locked --release --target "$target" -p istio-cni --bin istio-cni

bin="${CARGO_TARGET_DIR:-target}/$target/release/istio-cni"
desc=$(file -L "$bin")
size=$(stat -c %s "$bin")
echo "$desc"
awk -v s="$size" 'BEGIN { printf "size: %d bytes (%.2f MiB)\n", s, s / 1048576 }'
case "$desc" in
  *"statically linked"*) ;;
  *) echo "FAIL: $bin is not statically linked" >&2; exit 1 ;;
esac
"$bin" install --help >/dev/null
echo "OK: static, $size bytes"
