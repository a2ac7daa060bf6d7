#!/usr/bin/env bash
# fsx (the `fsx` crate: reads, writes, truncates, mapped reads and writes
# through the kernel's page cache, each checked against its own copy) for
# 100,000 operations on a file in a FUSE mount; then unmount and fsck.
# Usage: fsx_test.sh PATH/TO/mapfs [OPS]
source "$(dirname "$0")/common.sh" "$@"
ops=${2:-100000}
fsx=$(command -v fsx || true)
[ -n "$fsx" ] || for d in "${CARGO_HOME:-$HOME/.cargo}/bin" /root/.cargo/bin; do
  [ -x "$d/fsx" ] && fsx=$d/fsx && break
done
[ -n "$fsx" ] || fail "fsx is not installed (cargo install fsx; scripts/install-deps.sh does it)"
P=$WORK/pool M=$WORK/mnt
"$MAPFS" mkfs "$P" --size 512M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
mount_pool "$P" "$M"
if ! "$fsx" -N "$ops" -S 42 -P "$WORK" "$M/fsx.dat" >"$WORK/log" 2>&1; then
  tail -40 "$WORK/log" >&2
  fail "fsx on the mount"
fi
grep -q "All operations completed A-OK" "$WORK/log" || { tail -20 "$WORK/log" >&2; fail "fsx did not finish"; }
unmount "$M"
"$MAPFS" fsck "$P" || fail "fsck after fsx"
echo "fsx $ops operations on the mount: ok"
