#!/usr/bin/env bash
# Deep trees: `mkdir x; cd x` 2,500 times on the mount and on tmpfs in the
# same run. The mount resolves each request's one component by inode (the
# old path API resolved the whole path again for each call), so the loop
# must cost about what it costs on tmpfs: a generous bound of 10x tmpfs's time (plus 2 s for
# a busy machine). Then the trees are removed, and fsck.
# Usage: deep_test.sh PATH/TO/mapfs [DEPTH]
source "$(dirname "$0")/common.sh" "$@"
depth=${2:-2500}
P=$WORK/pool M=$WORK/mnt T=$WORK/tmpfs
mkdir -p "$T"
"$MAPFS" mkfs "$P" --size 512M >/dev/null
mount_pool "$P" "$M"

# Prints the milliseconds the loop took in $1; fails if it did not reach
# the depth. Python, not bash: bash's cd canonicalises the logical path
# with a stat of every prefix, so a bash loop is quadratic on tmpfs too
# (2,500 levels: minutes).
deep() {
  python3 - "$1" "$depth" <<'PY' || fail "making and entering $depth directories under $1"
import os, sys, time
os.chdir(sys.argv[1])
t0 = time.monotonic()
for _ in range(int(sys.argv[2])):
    os.mkdir("x")
    os.chdir("x")
    os.stat(".")
open("leaf", "w").close()
print(int((time.monotonic() - t0) * 1000))
PY
}
tt=$(deep "$T")
tm=$(deep "$M")
echo "depth $depth: tmpfs ${tt} ms, mount ${tm} ms"
[ "$tm" -le $((10 * tt + 2000)) ] || fail "the mount took ${tm} ms, more than 10x tmpfs (${tt} ms) + 2 s"
# The leaf is there, reached through the pool too.
n=$(find "$M" -name leaf | wc -l)
[ "$n" = 1 ] || fail "the leaf at depth $depth is not found on the mount"
rm -rf "$M/x" "$T/x" || fail "removing the deep trees"
[ -z "$(ls "$M")" ] || fail "the mount is not empty after rm -rf"
unmount "$M"
"$MAPFS" fsck "$P" >/dev/null || fail "fsck after the deep tree"
echo "deep paths: ok"
