#!/usr/bin/env bash
# Runs TEST — mmap_grow (shared maps of a file that grows past its
# partition, in one process and across two) or mmap_many (many maps of a
# fragmented file) — under `mapfs run` on a fresh pool in each consistency
# mode, then fsck.
set -euo pipefail
mapfs=$1 test=$2
pool=/dev/shm/mapfs-mmap-test-$$.pool
trap 'rm -f "$pool"' EXIT
for mode in posix sync strict; do
  echo "== $mode"
  rm -f "$pool"
  "$mapfs" mkfs "$pool" --size 256M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
  MAPFS_MODE=$mode "$mapfs" run --pool "$pool" -- "$test" /mapfs
  "$mapfs" fsck "$pool"
done
