#!/usr/bin/env bash
# syscall() by number (issue 18, item 4): syscall_app makes every file
# system call a glibc program may make through syscall(), with relative
# paths from a cwd in the directory under test; its output and the tree it
# leaves must be the same on the pool as on tmpfs, byte for byte. Then the
# numbers the shim refuses on pool files: ENOSYS, one stderr line per number.
# Usage: syscalls_test.sh PATH/TO/mapfs PATH/TO/syscall_app
APP=$(realpath -e -- "$2")
source "$(dirname "$0")/lib.sh" "$1"

on_both "every forwarded number" "\"$APP\" \"\$R\""

if [ "$PRELOAD_DRY" != 1 ]; then
  pool=$WORK/refused.pool
  "$MAPFS" mkfs "$pool" --size 64M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
  uuid=$(od -An -tx1 -j16 -N16 "$pool" | tr -d ' \n')
  PRELOAD_SHM+=("/dev/shm/mapfs-$uuid")
  run_mapfs "$pool" "refused numbers" "$APP" --refused "$MOUNT" >"$WORK/refused.out" 2>"$WORK/refused.err"
  [ "$rc" = 0 ] || fail "syscall_app --refused exited with $rc: $(cat "$WORK/refused.err")"
  expected='name_to_handle_at = -1 ENOSYS
name_to_handle_at again = -1 ENOSYS
ioctl FIONREAD = -1 ENOSYS
ioctl FIOCLEX = 0
fcntl F_GETFD after FIOCLEX = 1
openat2 RESOLVE_BENEATH = -1 ENOSYS
inotify_add_watch = -1 ENOSYS
execveat = -1 ENOSYS
chroot = -1 ENOSYS
name_to_handle_at on a kernel path: kernel'
  [ "$(cat "$WORK/refused.out")" = "$expected" ] ||
    fail "refused numbers:"$'\n'"$(diff <(echo "$expected") "$WORK/refused.out")"
  # One line per refused number, naming the call, however often it is made.
  for call in name_to_handle_at ioctl openat2 inotify_add_watch execveat chroot; do
    n=$(grep -c "^mapfs: syscall(SYS_$call) on a mapfs file or path is not supported by the shim: ENOSYS$" "$WORK/refused.err" || true)
    [ "$n" = 1 ] || fail "stderr has $n lines for SYS_$call (want 1):"$'\n'"$(cat "$WORK/refused.err")"
  done
  echo "ok refused numbers: ENOSYS, one stderr line each"
fi
finish
