#!/usr/bin/env bash
# Runs paths_test (GoogleTest) under `mapfs run` on a fresh pool, then fsck.
# The pool is large enough for a 10,000-level directory walk.
set -euo pipefail
mapfs=$1 test=$2
export PATHS_TEST_CWD_REPORT=$(realpath "$3")  # run from a deep cwd
pool=/dev/shm/mapfs-paths-test-$$.pool
trap 'rm -f "$pool"; rm -rf /dev/shm/mapfs-paths-test-[0-9]*' EXIT
"$mapfs" mkfs "$pool" --size 2G ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
"$mapfs" run --pool "$pool" -- "$test"
"$mapfs" fsck "$pool"
