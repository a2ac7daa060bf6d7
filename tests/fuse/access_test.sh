#!/usr/bin/env bash
# The FUSE front follows the pool rules of every other front
# (docs/SECURITY.md, "Safe defaults"): `mapfs mount` refuses a symbolic link
# in place of a pool (it used to resolve the path first and mount the
# link's target), and a lock file for the mount directory that someone else
# created in /dev/shm is refused with a clear message, not used.
# Usage: access_test.sh PATH/TO/mapfs
source "$(dirname "$0")/common.sh" "$@"
pool=$WORK/p.pool
"$MAPFS" mkfs "$pool" --size 64M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
ln -s "$pool" "$WORK/link.pool"
mkdir -p "$WORK/m"
if out=$("$MAPFS" mount "$WORK/link.pool" "$WORK/m" 2>&1); then
  FUSE_MOUNTED+=("$WORK/m")
  fail "mount of a symbolic link to a pool succeeded"
fi
grep -q "is a symbolic link" <<<"$out" || fail "mount of a link: message does not say so: $out"
! is_mounted "$WORK/m" || fail "$WORK/m is mounted after a refused mount"
# The real pool mounts and unmounts.
mount_pool "$pool" "$WORK/m"
echo hi >"$WORK/m/f"
unmount "$WORK/m"
[ "$("$MAPFS" cat "$pool" /f)" = hi ] || fail "the mount wrote nothing"
if [ "$(id -u)" = 0 ]; then
  # The daemon's lock file (/dev/shm/mapfs-mount-HASH.lock, named after the
  # directory) planted by another user before the mount: refused.
  # (FNV-1a of the directory's absolute path, as src/fuse/daemon.cc names it).
  lock=$(python3 -c '
import os, sys
h = 1469598103934665603
for c in os.path.realpath(sys.argv[1]).encode():
    h = ((h ^ c) * 1099511628211) % 2**64
print("/dev/shm/mapfs-mount-%016x.lock" % h)' "$WORK/m")
  mount_pool "$pool" "$WORK/m"
  [ -f "$lock" ] || fail "the mount's lock file is not $lock"
  unmount "$WORK/m"
  [ ! -e "$lock" ] || fail "the lock file $lock outlived the mount"
  install -m 0666 -o nobody /dev/null "$lock"
  if out=$("$MAPFS" mount "$pool" "$WORK/m" 2>&1); then
    FUSE_MOUNTED+=("$WORK/m")
    rm -f "$lock"
    fail "mount with a lock file planted by nobody succeeded"
  fi
  rm -f "$lock"
  grep -q "refusing lock file" <<<"$out" || fail "planted lock file: message: $out"
  mount_pool "$pool" "$WORK/m"
  unmount "$WORK/m"
else
  echo "skipped: a lock file planted by another user needs root"
fi
echo "fuse access: ok"
