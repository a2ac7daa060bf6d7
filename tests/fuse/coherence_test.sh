#!/usr/bin/env bash
# The mount caches names, attributes and pages in the kernel; changes made
# behind its back (the shim, the CLI, which drives the core as the C API
# does) must show through it without waiting for a cache to expire. Each
# check first warms the kernel's caches through the mount (stat, read,
# list), then changes the pool from outside, then polls the mount for at
# most 1 s (the daemon's propagation; the kernel's entry and attribute
# timeouts are 5 s, and cached pages stay until invalidated, so only the
# daemon's notices make these checks pass). Then all of it again while
# other processes keep the pool and the ring busy.
# Usage: coherence_test.sh PATH/TO/mapfs
source "$(dirname "$0")/common.sh" "$@"
P=$WORK/pool M=$WORK/mnt
"$MAPFS" mkfs "$P" --size 256M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
mount_pool "$P" "$M"
shim() { "$MAPFS" run --pool "$P" -- "$@"; }

# eventually WHAT CMD...: CMD succeeds within 1 s (within_ms sets the limit).
within_ms=1000
eventually() {
  local what=$1 end=$(($(date +%s%3N) + within_ms))
  shift
  while [ "$(date +%s%3N)" -lt $end ]; do "$@" && return 0; sleep 0.01; done
  "$@" || fail "$what: not seen through the mount within $within_ms ms"
}
size_is() { [ "$(stat -c %s "$1" 2>/dev/null)" = "$2" ]; }
content_is() { [ "$(cat "$1" 2>/dev/null)" = "$2" ]; }
mode_is() { [ "$(stat -c %a "$1" 2>/dev/null)" = "$2" ]; }
held_reads() { [ "$(dd if=/proc/self/fd/3 bs=64 count=1 2>/dev/null)" = "$1" ]; }
absent() { [ ! -e "$1" ] && ! ls "$(dirname "$1")" | grep -qx "$(basename "$1")"; }
present() { [ -e "$1" ] && ls "$(dirname "$1")" | grep -qx "$(basename "$1")"; }

round() {
  local r=$1 d=$M/r$1 D=/mapfs/r$1
  mkdir "$d" && echo first >"$d/f" && echo a >"$d/a" && mkdir "$d/sub"
  # Warm: names, attributes and pages in the kernel.
  stat "$d/f" "$d/a" "$d/sub" >/dev/null && cat "$d/f" "$d/a" >/dev/null && ls -l "$d" >/dev/null

  # A name made, and one removed, by the shim; the kernel was told first
  # that the new names are absent (it caches that for 1 s: without the
  # daemon's notice the names would show only after that, so in the
  # unloaded round they must show within half of it).
  [ ! -e "$d/new" ] && [ ! -e "$d/newdir" ] || fail "round $r: new names exist before they were made"
  shim sh -c "echo new > $D/new && mkdir $D/newdir && rm $D/a" || fail "round $r: shim create/remove"
  [ "$r" = 1 ] && within_ms=500
  eventually "round $r: a name the shim made" content_is "$d/new" new
  eventually "round $r: a directory the shim made" present "$d/newdir"
  within_ms=1000
  eventually "round $r: a name the shim removed" absent "$d/a"
  # Renamed by the CLI (over a name the mount has cached), and a directory moved.
  stat "$d/new" >/dev/null
  "$MAPFS" mv "$P" "/r$r/f" "/r$r/new" || fail "round $r: CLI rename"
  eventually "round $r: the old name of a rename" absent "$d/f"
  eventually "round $r: the new name of a rename" content_is "$d/new" first
  "$MAPFS" mv "$P" "/r$r/sub" "/r$r/moved" || fail "round $r: CLI directory rename"
  eventually "round $r: a renamed directory" present "$d/moved"
  eventually "round $r: a renamed directory's old name" absent "$d/sub"

  # Size and bytes changed while the mount holds the file open and cached.
  printf 'abcdefgh' >"$d/g"
  exec 3<"$d/g"
  held_reads abcdefgh || fail "round $r: read through the mount"
  stat "$d/g" >/dev/null
  shim sh -c "printf 'ABCD' | dd of=$D/g bs=1 seek=2 conv=notrunc 2>/dev/null" || fail "round $r: shim overwrite"
  eventually "round $r: bytes the shim overwrote (file held open)" held_reads abABCDgh
  eventually "round $r: bytes the shim overwrote (opened again)" content_is "$d/g" abABCDgh
  shim sh -c "printf 'more' >> $D/g" || fail "round $r: shim append"
  eventually "round $r: a size the shim grew" size_is "$d/g" 12
  eventually "round $r: bytes the shim appended" held_reads abABCDghmore
  shim truncate -s 3 "$D/g" || fail "round $r: shim truncate"
  eventually "round $r: a size the shim shrank" size_is "$d/g" 3
  eventually "round $r: bytes after the shim shrank the file" held_reads abA
  printf 'from the cli' | "$MAPFS" put "$P" - "/r$r/g" || fail "round $r: CLI put"
  eventually "round $r: a file the CLI replaced" content_is "$d/g" "from the cli"
  exec 3<&-
  # Attributes.
  shim chmod 600 "$D/g" || fail "round $r: shim chmod"
  eventually "round $r: a mode the shim changed" mode_is "$d/g" 600
  rm -r "$d"
}

round 1
# Under load: writers through the shim and through the mount on other files
# (the ring keeps turning, the daemon keeps serving) while the checks run.
mkdir "$M/load"
shim sh -c 'i=0; while [ ! -e /mapfs/load/stop ]; do echo $i > /mapfs/load/s$((i % 50)); i=$((i + 1)); done' &
l1=$!
(i=0; while [ ! -e "$M/load/stop" ]; do echo $i >"$M/load/m$((i % 50))"; cat "$M/load/m$((i % 50))" >/dev/null; i=$((i + 1)); done) &
l2=$!
for r in 2 3 4; do round $r; done
touch "$M/load/stop"
wait $l1 $l2 || fail "a load writer failed"
unmount "$M"
"$MAPFS" fsck "$P" >/dev/null || fail "fsck"
echo "changes behind the mount's back are seen through it: ok"
