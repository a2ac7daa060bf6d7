#!/usr/bin/env bash
# fsx (the `fsx` crate: reads, writes, truncates, mapped reads and writes,
# each checked against its own copy of the file) for 100,000 operations on a
# mapfs file under `mapfs run`, in sync and in strict mode; then fsck.
# Usage: fsx_test.sh PATH/TO/mapfs [OPS]
set -euo pipefail
mapfs=$1 ops=${2:-100000}
fsx=$(command -v fsx || true)
[ -n "$fsx" ] || for d in "${CARGO_HOME:-$HOME/.cargo}/bin" /root/.cargo/bin; do
  [ -x "$d/fsx" ] && fsx=$d/fsx && break
done
[ -n "$fsx" ] || { echo "FAIL: fsx is not installed (cargo install fsx; .ci/run does it)" >&2; exit 1; }
work=$(mktemp -d /dev/shm/mapfs-fsx-XXXXXX)
trap 'rm -rf "$work"' EXIT
for mode in sync strict; do
  pool=$work/$mode.pool
  "$mapfs" mkfs "$pool" --size 512M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
  if ! "$mapfs" run --pool "$pool" --mode "$mode" -- "$fsx" -N "$ops" -S 42 -P "$work" /mapfs/fsx.dat >"$work/log" 2>&1; then
    tail -40 "$work/log" >&2
    echo "FAIL: fsx in $mode mode" >&2
    exit 1
  fi
  grep -q "All operations completed A-OK" "$work/log" || { tail -20 "$work/log" >&2; echo "FAIL: fsx did not finish" >&2; exit 1; }
  "$mapfs" fsck "$pool"
  echo "fsx $ops operations, $mode mode: ok"
done
