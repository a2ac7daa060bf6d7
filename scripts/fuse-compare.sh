#!/usr/bin/env bash
# 4 KiB read, 4 KiB overwrite and create+close per call: tmpfs vs mapfs
# through the LD_PRELOAD shim vs mapfs through the FUSE mount, measured in
# one process, interleaved (bench/fuse_compare.cc). Both mapfs pools are
# fresh, 4 KiB pages, sync mode (every call durable on return).
# The table in README.md ("The FUSE mount") comes from this script.
# Usage: scripts/fuse-compare.sh [BUILD_DIR] [--ops N] [--rounds R]
# (root, or a user who may use /dev/fuse; BUILD_DIR defaults to build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
mapfs=$(realpath -e "$build/bin/mapfs")
work=$(mktemp -d /dev/shm/mapfs-fuse-compare-XXXXXX)
cleanup() {
  grep -q " $work/mnt fuse" /proc/self/mounts && "$mapfs" umount "$work/mnt" || true
  rm -rf "$work"
}
trap cleanup EXIT
c++ -O2 -std=c++20 -Wall -Wextra -Werror -o "$work/fuse_compare" "$root/bench/fuse_compare.cc"
"$mapfs" mkfs "$work/shim.pool" --size 2G --mode sync >/dev/null
"$mapfs" mkfs "$work/fuse.pool" --size 2G --mode sync >/dev/null
mkdir -p "$work/tmpfs" "$work/mnt"
"$mapfs" mount "$work/fuse.pool" "$work/mnt" --mode sync
echo "$(date -u +%F), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
"$mapfs" run --pool "$work/shim.pool" --mount /mapfs-compare --mode sync -- \
  "$work/fuse_compare" "$@" tmpfs="$work/tmpfs" mapfs-shim=/mapfs-compare mapfs-fuse="$work/mnt"
"$mapfs" umount "$work/mnt"
"$mapfs" fsck "$work/fuse.pool" >/dev/null
