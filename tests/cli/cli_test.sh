#!/usr/bin/env bash
# End-to-end checks of the mapfs CLI: formatting, info, fsck, and clear
# refusals of things that are not pools.
set -u
MAPFS=$1
dir=$(mktemp -d /dev/shm/mapfs-cli-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$MAPFS" mkfs "$dir/p" --size 64M --page 2m --mode strict >/dev/null || fail "mkfs"
out=$("$MAPFS" info "$dir/p") || fail "info"
grep -q "size            64.0 MiB" <<<"$out" || fail "info size: $out"
grep -q "page size       2 MiB" <<<"$out" || fail "info page: $out"
grep -q "default mode    strict" <<<"$out" || fail "info mode: $out"
"$MAPFS" fsck "$dir/p" | grep -q clean || fail "fsck of a fresh pool"

# Resident medium: mkfs says what the pool costs; --reserve takes it all now;
# deleting keeps the pages, trim gives the free ones back and keeps files.
out=$("$MAPFS" mkfs "$dir/r" --size 64M --reserve) || fail "mkfs --reserve"
grep -q "^memory: 64.0 MiB, all taken now" <<<"$out" || fail "mkfs memory line: $out"
grep -q "^pages: 4 KiB" <<<"$out" || fail "mkfs pages line: $out"
blocks() { echo $(( $(stat -c %b "$1") * 512 )); }
[ "$(blocks "$dir/r")" -ge $((64 << 20)) ] || fail "--reserve did not allocate the pool"
head -c 3000000 /dev/urandom >"$dir/data"
"$MAPFS" put "$dir/r" "$dir/data" /keep && "$MAPFS" put "$dir/r" "$dir/data" /gone && "$MAPFS" rm "$dir/r" /gone || fail "put/rm"
"$MAPFS" trim "$dir/r" | grep -q "^trimmed" || fail "trim"
[ "$(blocks "$dir/r")" -lt $((32 << 20)) ] || fail "trim gave nothing back: $(blocks "$dir/r")"
"$MAPFS" get "$dir/r" /keep "$dir/back" && cmp -s "$dir/data" "$dir/back" || fail "a file changed across trim"
"$MAPFS" fsck "$dir/r" | grep -q clean || fail "fsck after trim"

# Refusals: exit status 1 or 2 and a message naming the problem.
"$MAPFS" mkfs "$dir/q" --size 1M 2>"$dir/err" && fail "tiny pool accepted"
grep -q "at least" "$dir/err" || fail "tiny pool message: $(cat "$dir/err")"
"$MAPFS" mkfs "$dir/q" --size 64Q 2>/dev/null && fail "bad size accepted"
"$MAPFS" mkfs "$dir/q" --size 64M --page 1m 2>/dev/null && fail "bad page accepted"
# mkfs --layout-score: info names the score, fsck is clean, hashfs refused.
"$MAPFS" mkfs "$dir/aged" --size 64M --files extent --layout-score 0.7 >/dev/null || fail "mkfs --layout-score"
"$MAPFS" info "$dir/aged" | grep -q "aged at mkfs for layout score 0.70" || fail "info layout: $("$MAPFS" info "$dir/aged")"
"$MAPFS" fsck "$dir/aged" >/dev/null || fail "fsck of an aged pool"
"$MAPFS" mkfs "$dir/aged" --size 64M --files hashfs --layout-score 0.7 2>/dev/null && fail "hashfs --layout-score accepted"
rm -f "$dir/aged"
head -c 1048576 /dev/urandom >"$dir/junk"
"$MAPFS" info "$dir/junk" 2>"$dir/err" && fail "junk accepted"
grep -q "not a mapfs pool" "$dir/err" || fail "junk message: $(cat "$dir/err")"
"$MAPFS" info "$dir/missing" 2>"$dir/err" && fail "missing file accepted"
grep -q "No such file" "$dir/err" || fail "missing message: $(cat "$dir/err")"
cp "$dir/p" "$dir/damaged"
printf '\x01' | dd of="$dir/damaged" bs=1 seek=40 conv=notrunc 2>/dev/null
"$MAPFS" fsck "$dir/damaged" 2>"$dir/err" && fail "damaged header accepted"
grep -q "checksum" "$dir/err" || fail "damaged message: $(cat "$dir/err")"
"$MAPFS" frobnicate 2>/dev/null; [ $? -eq 2 ] || fail "unknown verb exit code"

# mapfs run refuses what would route nothing (or everything), once, clearly.
run_refused() {  # run_refused EXIT_CODE MESSAGE ARGS...
  local code=$1 msg=$2; shift 2
  "$MAPFS" run "$@" -- true 2>"$dir/err"
  [ $? -eq "$code" ] || fail "run $* exit code"
  grep -q -- "$msg" "$dir/err" || fail "run $* message: $(cat "$dir/err")"
}
run_refused 2 "cannot be /" --pool "$dir/p" --mount /
run_refused 2 "must be an absolute path" --pool "$dir/p" --mount rel
run_refused 2 "must be a normal path" --pool "$dir/p" --mount /a/../b
run_refused 2 "must not end with /" --pool "$dir/p" --mount /m/
run_refused 2 "needs a value" --pool "$dir/p" --mount
run_refused 2 "must be an absolute path" --pool "$dir/p" --mount ""
MAPFS_MOUNT=/ run_refused 2 "MAPFS_MOUNT '/': cannot be /" --pool "$dir/p"
MAPFS_MOUNT=rel run_refused 2 "MAPFS_MOUNT 'rel': must be an absolute path" --pool "$dir/p"
run_refused 1 "not a mapfs pool" --pool "$dir/junk"
ln -s "$dir/p" "$dir/link"
run_refused 1 "symbolic link" --pool "$dir/link"
# With a good prefix the program runs under the shim (which sanitized
# builds do not build: there the refusals above are all this can check).
if [ -e "$(dirname "$MAPFS")/../lib/libmapfs-preload.so" ]; then
  "$MAPFS" run --pool "$dir/p" --mount /m -- sh -c 'echo x > /m/f' || fail "run with a good prefix"
  [ "$("$MAPFS" cat "$dir/p" /f)" = x ] || fail "run wrote nothing through /m"
  # The shim preloaded by hand on a file that is no pool: one line on
  # stderr saying why, however many calls fail.
  MAPFS_POOL="$dir/junk" LD_PRELOAD="$(dirname "$MAPFS")/../lib/libmapfs-preload.so" \
    ls /mapfs/a /mapfs/b >/dev/null 2>"$dir/err" && fail "ls on an unusable pool succeeded"
  [ "$(grep -c '^mapfs: /mapfs is unusable: .*not a mapfs pool' "$dir/err")" = 1 ] ||
    fail "bare shim on a non-pool: want one line saying why: $(cat "$dir/err")"
fi
# A pool on a tmpfs smaller than the pool (made without --reserve): when
# the tmpfs is full, writes fail with ENOSPC and a clear message (never
# SIGBUS), and the pool stays consistent. Needs root to mount the tmpfs.
# The same for contiguous files and for a block-mapped pool (issue 14),
# whose blocks live in the mapping area.
head -c $((30 * 1024 * 1024)) /dev/zero | tr '\0' 'z' >"$dir/big"
for files in contiguous hashfs; do
  if [ "$(id -u)" = 0 ] && mkdir -p "$dir/tiny" && mount -t tmpfs -o size=12M tmpfs "$dir/tiny" 2>/dev/null; then
    "$MAPFS" mkfs "$dir/tiny/p" --size 64M --files $files >/dev/null || { umount "$dir/tiny"; fail "mkfs on the small tmpfs"; }
    "$MAPFS" put "$dir/tiny/p" "$dir/big" /big 2>"$dir/err"
    rc=$?
    "$MAPFS" fsck "$dir/tiny/p" >/dev/null 2>&1
    fsck_rc=$?
    umount "$dir/tiny"
    [ $rc -eq 1 ] || fail "$files: put on a full backing tmpfs: exit $rc (want 1; 135 is SIGBUS)"
    grep -q "backing file system is full" "$dir/err" || fail "$files: full backing tmpfs message: $(cat "$dir/err")"
    [ $fsck_rc -eq 0 ] || fail "$files: fsck after a full backing tmpfs"
  fi
done
echo "cli ok"
