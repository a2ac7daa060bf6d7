#!/usr/bin/env bash
# Builds mapfs (warnings are errors) and runs the whole test suite.
# With SANITIZE=address,undefined (or thread) it builds into build-SANITIZE.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
dir=build
args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DMAPFS_WERROR=ON)
# MAPFS_LONG_TESTS=1: also the long rows (every block-mapping design of the
# slow suites; README.md "Tests").
if [ "${MAPFS_LONG_TESTS:-}" = 1 ]; then args+=(-DMAPFS_LONG_TESTS=ON); else args+=(-DMAPFS_LONG_TESTS=OFF); fi
if [ -n "${SANITIZE:-}" ]; then
  dir="build-${SANITIZE//,/-}"
  args+=(-DMAPFS_SANITIZE="$SANITIZE")
fi
cmake -S . -B "$dir" -G Ninja "${args[@]}" >/dev/null
cmake --build "$dir"
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" ${CTEST_ARGS:-}
