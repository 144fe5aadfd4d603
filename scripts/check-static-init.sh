#!/usr/bin/env bash
# Builds the static iptables-init release binary (musl) and checks that `file` calls it statically linked
# and that it is at most 3 MiB. Prints the path and the size.
#   scripts/check-static-init.sh            # build and check (adds the musl target with rustup if missing)
#   PROFILE=release-small scripts/check-static-init.sh
#   TARGET=x86_64-unknown-linux-gnu scripts/check-static-init.sh   # glibc +crt-static instead
set -euo pipefail
cd "$(dirname "$0")/.."

# musl, not glibc: the binary runs for about a millisecond per pod start, and static glibc spends a
# good part of that before main (its CPU cache probing executes CPUID instructions, each a VM exit in a
# virtualised node; plus its tunables and /proc/self/exe lookup). musl starts at once (bench/README.md).
target=${TARGET:-x86_64-unknown-linux-musl}
profile=${PROFILE:-release}
max=$((3 * 1024 * 1024))

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  echo "adding the Rust target $target (rustup)"
  rustup target add "$target" || {
    echo "FAIL: cannot add the Rust target $target; TARGET=x86_64-unknown-linux-gnu builds the glibc static binary" >&2
    exit 1
  }
fi

# --target keeps these flags away from build scripts and proc macros (which must stay dynamic).
# relocation-model=static: a classic static executable (`file`: "statically linked") rather than a
# static PIE; the binary runs for milliseconds in an init container, so ASLR of its own image buys little.
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static -C relocation-model=static" \
  cargo build --locked --profile "$profile" --target "$target" -p iptables-init --bin iptables-init

bin="${CARGO_TARGET_DIR:-target}/$target/$profile/iptables-init"
desc=$(file -L "$bin")
size=$(stat -c %s "$bin")
echo "$desc"
awk -v s="$size" 'BEGIN { printf "size: %d bytes (%.2f MiB, limit 3 MiB)\n", s, s / 1048576 }'

case "$desc" in
  *"statically linked"*) ;;
  *) echo "FAIL: $bin is not statically linked" >&2; exit 1 ;;
esac
if [ "$size" -gt "$max" ]; then
  echo "FAIL: $bin is larger than 3 MiB" >&2
  exit 1
fi
echo "OK: static, $size bytes"
