#!/usr/bin/env bash
# The main job: install, build, format a default pool in /dev/shm, run real
# programs on it through the LD_PRELOAD shim, then LevelDB under YCSB on
# mapfs and on tmpfs side by side, and the pswap experiment (ctFS Fig. 6).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Only what this script runs (the CLI, the shim, the YCSB driver: the `demo`
# target of CMakeLists.txt); scripts/test.sh builds the tests.
echo "== building the CLI, the shim and the YCSB driver"
cmake --build build --target demo
POOL=${MAPFS_POOL:-/dev/shm/mapfs.pool}
./build/bin/mapfs mkfs "$POOL" --size 1G
./build/bin/mapfs info "$POOL"
echo "== unmodified programs on the pool (mapfs run): /mapfs is the pool"
./build/bin/mapfs run --pool "$POOL" -- bash -c '
  mkdir -p /mapfs/demo && cd /mapfs/demo
  cp -r /usr/share/doc/bash . && tar czf bash-doc.tgz bash && ls -l
  sqlite3 demo.db "create table t(x); insert into t values (1),(2),(3); select sum(x) from t;"
  python3 -c "import os; print(sum(len(f) for _, _, f in os.walk(\"/mapfs\")), \"files in the pool\")"'
./build/bin/mapfs fsck "$POOL"
echo "== LevelDB under YCSB (quick): tmpfs vs mapfs through the shim"
./build/bin/mapfs bench ycsb --quick ${MAPFS_BENCH_ARGS:-}
echo "== pswap vs copying (ctFS Fig. 6)"
./build/bin/mapfs bench pswap --quick ${MAPFS_BENCH_ARGS:-}
