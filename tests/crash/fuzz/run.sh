#!/usr/bin/env bash
# Builds the pool-image fuzzer (clang, libFuzzer + AddressSanitizer) in its
# own build directory and runs it.
#
#   tests/crash/fuzz/run.sh [SECONDS] [LIBFUZZER ARGS...]
#
# SECONDS defaults to 60 (the CI's run); for a long local run try
#   tests/crash/fuzz/run.sh 3600 -fork=2 -ignore_crashes=1
# (two processes, going on past crashes: each is saved, see below).
# The corpus grows in $FUZZ_BUILD/corpus (kept between runs; FUZZ_BUILD
# defaults to build-fuzz), the seeds (small real pools) are regenerated in
# $FUZZ_BUILD/seeds, inputs that once crashed it are kept (and replayed
# first) in tests/crash/fuzz/regressions, and a crashing input is saved as
# $FUZZ_BUILD/artifacts/crash-*; replay it with
#   $FUZZ_BUILD/bin/pool_fuzz $FUZZ_BUILD/artifacts/crash-...
# Exit status: 0 when the fuzzer found nothing.
# FUZZ_BUILD_ONLY=1 builds the fuzzer and runs nothing (.ci/run builds it
# while other tests run).
set -euo pipefail
cd "$(dirname "$0")/../../.."
secs=${1:-60}
shift || true
build=${FUZZ_BUILD:-build-fuzz}
command -v clang++ >/dev/null || { echo "run.sh: clang++ not found (apt-get install clang)" >&2; exit 1; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DMAPFS_FUZZ=ON -DMAPFS_SANITIZE=address,undefined -DMAPFS_WERROR=OFF >/dev/null
cmake --build "$build" -j "${FUZZ_JOBS:-2}" --target pool_fuzz
if [ "${FUZZ_BUILD_ONLY:-}" = 1 ]; then exit 0; fi
bin="$build/bin/pool_fuzz"
mkdir -p "$build/seeds" "$build/corpus" "$build/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:handle_segv=1:allow_user_segv_handler=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
MAPFS_FUZZ_MAKE_SEEDS="$build/seeds" "$bin"
"$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -max_len=262144 -print_final_stats=1 \
  -artifact_prefix="$build/artifacts/" "$@" "$build/corpus" "$build/seeds" tests/crash/fuzz/regressions
