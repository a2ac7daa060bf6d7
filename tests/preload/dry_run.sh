#!/usr/bin/env bash
# Checks the preload test scripts themselves: runs every group with the
# mapfs side replaced by a second tmpfs directory (MAPFS_PRELOAD_DRY=1).
# Everything must pass. Usage: dry_run.sh [PATH/TO/leveldb_roundtrip]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
failed=0
for t in coreutils tar redirects exec python sqlite git rsync; do
  MAPFS_PRELOAD_DRY=1 bash "$here/${t}_test.sh" - || failed=$((failed + 1))
done
if [ $# -ge 1 ]; then
  MAPFS_PRELOAD_DRY=1 bash "$here/leveldb_test.sh" - "$1" || failed=$((failed + 1))
else
  echo "leveldb: skipped in the dry run (pass the leveldb_roundtrip binary to include it)"
fi
[ $failed = 0 ] && echo "dry run: all passed" || { echo "dry run: $failed failed"; exit 1; }
