#!/usr/bin/env bash
# fsx (the `fsx` crate: reads, writes, truncates, mapped reads and writes
# through the kernel's page cache, each checked against its own copy) for
# 100,000 operations on a file in a FUSE mount; then unmount and fsck.
# The operations run as rounds of at most 10,000 (seeds 42, 43, ...), one
# after another on the same file of the same mount: fsx 0.3.2 never unmaps
# its mapped reads, so in one long run every truncate makes the kernel walk
# all the mappings it left (vma_interval_tree_* and unmap_page_range were
# ~40 % of a perf profile, all of it kernel time in fsx, the daemon idle):
# 100,000 operations took 293 s in CI, 10 rounds of 10,000 take ~40 s.
# The daemon sees the same 100,000 checked operations on one pool; what a
# round does not carry over is fsx's leaked kernel mappings, which test the
# kernel, not mapfs (the shim's fsx, tests/preload, keeps its single long
# run: there the leaked mappings are mapfs's to serve).
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
round=10000 done_ops=0 seed=42
while [ "$done_ops" -lt "$ops" ]; do
  n=$(( ops - done_ops < round ? ops - done_ops : round ))
  if ! "$fsx" -N "$n" -S "$seed" -P "$WORK" "$M/fsx.dat" >"$WORK/log" 2>&1; then
    tail -40 "$WORK/log" >&2
    fail "fsx on the mount (seed $seed, $n operations, after $done_ops)"
  fi
  grep -q "All operations completed A-OK" "$WORK/log" ||
    { tail -20 "$WORK/log" >&2; fail "fsx did not finish (seed $seed)"; }
  done_ops=$(( done_ops + n )) seed=$(( seed + 1 ))
done
unmount "$M"
"$MAPFS" fsck "$P" || fail "fsck after fsx"
echo "fsx $ops operations on the mount: ok"
