#!/usr/bin/env bash
# Runs perm_dir_test (the permission matrix, tests/api) under `mapfs run` on a fresh
# pool, then fsck. As root it switches to test users in forked children.
set -euo pipefail
mapfs=$1 test=$2
pool=/dev/shm/mapfs-permshim-test-$$.pool
trap 'rm -f "$pool"' EXIT
"$mapfs" mkfs "$pool" --size 512M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
PERM_DIR=/mapfs MAPFS_MOUNT=/mapfs "$mapfs" run --pool "$pool" --mount /mapfs -- "$test"
"$mapfs" fsck "$pool"
