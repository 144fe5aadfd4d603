#!/usr/bin/env bash
# Builds the static iptables-init release binary (glibc, +crt-static) and checks that `file` calls it
# statically linked and that it is at most 3 MiB. Prints the path and the size.
#   scripts/check-static-init.sh            # build and check
#   PROFILE=release-small scripts/check-static-init.sh
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
profile=${PROFILE:-release}
max=$((3 * 1024 * 1024))

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
