#!/usr/bin/env bash
# Builds mapfs (warnings are errors) and runs the whole test suite.
# With SANITIZE=address,undefined (or thread) it builds into build-SANITIZE.
# BUILD_TARGETS="t..." builds only those targets (default: everything), e.g.
# threads_tests for .ci/run's TSan step with CTEST_ARGS="-L threads": a test
# whose binary was not built then fails (TARGET_NOT_BUILT), never passes.
# BUILD_ONLY=1 configures and builds, and runs no test (.ci/run builds the
# next step's tree while this step's tests run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
dir=build
args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DMAPFS_WERROR=ON)
# MAPFS_LONG_TESTS=1: also the long rows (every block-mapping design of the
# slow suites; README.md "Tests").
if [ "${MAPFS_LONG_TESTS:-}" = 1 ]; then args+=(-DMAPFS_LONG_TESTS=ON); else args+=(-DMAPFS_LONG_TESTS=OFF); fi
# In CI (CI=true: .ci/run) the core is compiled with line tables only
# (-g1): a failure's backtrace keeps function and file:line, and the
# compile is ~30 % shorter (src/fs/namespace.cc at -O2: 7.9 s with -g, 5.5 s
# with -g1; the machine code is the same). Locally, full -g for a debugger.
# And the test binaries share one precompiled header (MAPFS_TEST_PCH,
# tests/CMakeLists.txt): ~30 % less compile per test file.
if [ "${CI:-}" = true ]; then args+=(-DMAPFS_TEST_PCH=ON "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"); fi
if [ -n "${SANITIZE:-}" ]; then
  dir="build-${SANITIZE//,/-}"
  args+=(-DMAPFS_SANITIZE="$SANITIZE")
fi
cmake -S . -B "$dir" -G Ninja "${args[@]}" >/dev/null
# shellcheck disable=SC2086  # BUILD_TARGETS is a list of target names
cmake --build "$dir" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
if [ "${BUILD_ONLY:-}" = 1 ]; then exit 0; fi
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" ${CTEST_ARGS:-}
