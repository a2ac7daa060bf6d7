#!/usr/bin/env bash
# The main job: install, build, format a default pool in /dev/shm, show it,
# and run the pswap experiment (ctFS Fig. 6).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
POOL=${MAPFS_POOL:-/dev/shm/mapfs.pool}
./build/bin/mapfs mkfs "$POOL" --size 1G
./build/bin/mapfs info "$POOL"
./build/bin/mapfs fsck "$POOL"
./build/bin/mapfs bench pswap ${MAPFS_BENCH_ARGS:-}
