#!/usr/bin/env bash
# Deep trees: `mkdir x; cd x` 2,500 times on the mount and on tmpfs in the
# same run. The mount resolves each request's one component by inode (the
# old path API resolved the whole path again for each call, so the cost
# per level grew with the depth and 2,500 levels took more than 400 s).
# Checked two ways: the last 10 % of the levels cost at most 4x the first
# 10 % on the mount (+ 0.5 s), whatever the machine's load (a cost growing
# with the depth fails this by far); and the whole loop costs at most 10x
# tmpfs's + 10 s (a FUSE round trip suffers far more from a loaded machine
# than tmpfs does: 2.4 ms against 35 us per level at load 17). Then the
# trees are removed, and fsck.
source "$(dirname "$0")/common.sh" "$@"
depth=${2:-2500}
P=$WORK/pool M=$WORK/mnt T=$WORK/tmpfs
mkdir -p "$T"
"$MAPFS" mkfs "$P" --size 512M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
mount_pool "$P" "$M"

# Prints "TOTAL FIRST LAST" (milliseconds: the whole loop, its first and
# its last tenth) for the loop in $1; fails if it did not reach the depth.
# Python, not bash: bash's cd canonicalises the logical path with a stat of
# every prefix, so a bash loop is quadratic on tmpfs too (2,500 levels:
# minutes).
deep() {
  python3 - "$1" "$depth" <<'PY' || fail "making and entering $depth directories under $1"
import os, sys, time
os.chdir(sys.argv[1])
n = int(sys.argv[2])
tenth = max(1, n // 10)
t0 = time.monotonic()
marks = []
for i in range(n):
    if i == tenth or i == n - tenth:
        marks.append(time.monotonic())
    os.mkdir("x")
    os.chdir("x")
    os.stat(".")
t1 = time.monotonic()
open("leaf", "w").close()
ms = lambda s: int(s * 1000)
print(ms(t1 - t0), ms(marks[0] - t0), ms(t1 - marks[1]))
PY
}
read -r tt _ _ < <(deep "$T")
read -r tm first last < <(deep "$M")
echo "depth $depth: tmpfs ${tt} ms; mount ${tm} ms (first tenth ${first} ms, last tenth ${last} ms)"
[ "$last" -le $((4 * first + 500)) ] ||
  fail "the mount's cost per level grows with the depth: last tenth ${last} ms, first tenth ${first} ms"
[ "$tm" -le $((10 * tt + 10000)) ] || fail "the mount took ${tm} ms, more than 10x tmpfs (${tt} ms) + 10 s"
# The leaf is there, reached through the pool too.
n=$(find "$M" -name leaf | wc -l)
[ "$n" = 1 ] || fail "the leaf at depth $depth is not found on the mount"
rm -rf "$M/x" "$T/x" || fail "removing the deep trees"
[ -z "$(ls "$M")" ] || fail "the mount is not empty after rm -rf"
unmount "$M"
"$MAPFS" fsck "$P" >/dev/null || fail "fsck after the deep tree"
echo "deep paths: ok"
