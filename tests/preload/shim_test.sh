#!/usr/bin/env bash
# Runs shim_test (GoogleTest) under `mapfs run` on a fresh pool, then fsck.
set -euo pipefail
mapfs=$1 test=$2
pool=/dev/shm/mapfs-shim-test-$$.pool
trap 'rm -f "$pool" /dev/shm/mapfs-shim-test-x' EXIT
"$mapfs" mkfs "$pool" --size 256M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
"$mapfs" run --pool "$pool" -- "$test"
"$mapfs" fsck "$pool"
