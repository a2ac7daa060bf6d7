#!/usr/bin/env bash
# The permission matrix (tests/api/perm_matrix.h, run by perm_dir_test
# through libc) on FUSE mounts of a pool, compared with tmpfs: with the
# kernel's default_permissions in front of the core's checks, and without
# (--no-default-permissions: the daemon's checks, as each request's
# caller, are the only ones). As root: every user of the matrix (forked
# children switch ids) on a mount with allow_other, then the same binary
# as `nobody` (setpriv), whose own rows run. Not root: the caller's rows.
# fsck after each mount.
# Usage: perm_test.sh PATH/TO/mapfs   (PERM_DIR_TEST: the perm_dir_test binary)
source "$(dirname "$0")/common.sh" "$@"
test=${PERM_DIR_TEST:-$(dirname "$MAPFS")/perm_dir_test}
[ -x "$test" ] || fail "perm_dir_test not found (PERM_DIR_TEST=$test)"
chmod 0755 "$WORK"  # the test users reach the mount through it
umask 0
for setting in default no-default; do
  pool=$WORK/$setting.pool M=$WORK/$setting
  "$MAPFS" mkfs "$pool" --size 512M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
  args=()
  export PERM_ACCEPT=
  if [ $setting = no-default ]; then
    args=(--no-default-permissions)
    # open(O_NOATIME) of a file the caller neither owns nor may read: the
    # kernel's may_open refuses O_NOATIME (EPERM) on its own before it asks
    # the daemon, whose read check (EACCES, first on tmpfs) never runs.
    # Both refuse; docs/SECURITY.md lists the difference.
    export PERM_ACCEPT="open_noatime=EACCES>EPERM"
  fi
  mount_pool "$pool" "$M" "${args[@]}"
  if [ $setting = default ]; then
    grep " $M fuse" /proc/self/mounts | grep -q default_permissions || fail "$M: no default_permissions"
  else
    ! grep " $M fuse" /proc/self/mounts | grep -q default_permissions || fail "$M: default_permissions still on"
  fi
  mkdir "$M/self"
  echo "== $setting permissions, as $(id -un)"
  PERM_DIR=$M/self "$test" || fail "permission matrix on the mount ($setting permissions) as $(id -un)"
  if [ "$(id -u)" = 0 ]; then
    mkdir "$M/nobody"
    chown nobody "$M/nobody"
    echo "== $setting permissions, as nobody"
    PERM_DIR=$M/nobody setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$test" ||
      fail "permission matrix on the mount ($setting permissions) as nobody"
  else
    echo "skipped: the matrix as another user needs root"
  fi
  unmount "$M"
  "$MAPFS" fsck "$pool" >"$WORK/fsck" || { cat "$WORK/fsck" >&2; fail "fsck after the matrix ($setting)"; }
done
echo "fuse perm: the mount answers as tmpfs with and without default_permissions"
