# Helpers for the FUSE mount tests, sourced as `source common.sh "$@"`
# ($1 = the mapfs binary). Gives WORK (a fresh dir in /dev/shm, removed at
# exit), fail MSG, mount_pool POOL DIR [ARGS] (daemonised mount, checked),
# unmount DIR, is_mounted DIR. Every dir mounted here is unmounted at exit
# (KEEP_WORK=1 keeps WORK, with its logs, for a look after a failure).
# A machine without a usable /dev/fuse FAILS the test with a clear message.
set -euo pipefail
export LC_ALL=C TZ=UTC
umask 022
[ $# -ge 1 ] || { echo "usage: $0 PATH/TO/mapfs" >&2; exit 2; }
MAPFS=$(realpath -e -- "$1") || { echo "FAIL: mapfs binary $1 not found" >&2; exit 1; }
WORK=$(mktemp -d /dev/shm/mapfs-fuse-XXXXXX)
FUSE_MOUNTED=()

fail() { echo "FAIL: $*" >&2; exit 1; }

is_mounted() { grep -q " $(realpath -m -- "$1") fuse" /proc/self/mounts; }

fuse_cleanup() {
  local d
  for d in "${FUSE_MOUNTED[@]}"; do
    if is_mounted "$d"; then "$MAPFS" umount "$d" 2>/dev/null || umount -l "$d" 2>/dev/null || true; fi
  done
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}
trap fuse_cleanup EXIT

[ -c /dev/fuse ] || fail "/dev/fuse is missing: the FUSE mount cannot be tested on this machine"
[ -r /dev/fuse ] && [ -w /dev/fuse ] || fail "/dev/fuse is not usable by $(id -un)"

# Waits (10 s at most) until DIR is a fuse mount.
wait_mounted() {
  local i
  for i in $(seq 1 200); do is_mounted "$1" && return 0; sleep 0.05; done
  fail "$1 did not become a mount within 10 s"
}

mount_pool() {
  local pool=$1 dir=$2
  shift 2
  mkdir -p "$dir"
  "$MAPFS" mount "$pool" "$dir" "$@" || fail "mapfs mount $pool $dir was refused (see above)"
  is_mounted "$dir" || fail "mapfs mount returned 0 but $dir is not mounted"
  FUSE_MOUNTED+=("$dir")
}

unmount() {
  "$MAPFS" umount "$1" || fail "mapfs umount $1"
  ! is_mounted "$1" || fail "$1 is still mounted after mapfs umount"
}
