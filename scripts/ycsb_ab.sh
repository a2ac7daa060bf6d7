#!/usr/bin/env bash
# Interleaved A/B of LevelDB under YCSB (bench/ycsb_driver.cc): tmpfs, the
# shim of build BEFORE and the shim of build AFTER, in turn, ROUNDS times,
# each mapfs run on a fresh pool in sync mode (MAPFS_AB_MODE=posix|strict
# for another). Prints per round and phase:
# wall µs/op and CPU µs/op (the driver's, all threads) with the load average.
#   scripts/ycsb_ab.sh BEFORE_BUILD AFTER_BUILD [ROUNDS] [RECORDS] [PHASES...]
# e.g. scripts/ycsb_ab.sh /tmp/base/build build 3 200000 load-a run-a run-f
# MAPFS_AB_ENGINE=virtual|split: instead of a pool, run the shims as
# `mapfs run --overlay DIR --engine E --mode posix` (or MAPFS_AB_MODE) on a fresh directory of
# the same file system as the kernel's run (docs/OVERLAY.md).
set -euo pipefail
before=$1 after=$2 rounds=${3:-3} records=${4:-200000}
shift $(( $# < 4 ? $# : 4 ))
phases=${*:-load-a run-a run-f}
driver=$after/bin/mapfs-ycsb
dir=${MAPFS_AB_DIR:-/dev/shm}/mapfs-ycsb-ab-$$
trap 'rm -rf "$dir" "$dir".*.pool' EXIT
for r in $(seq 1 "$rounds"); do
  for w in tmpfs before after; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    case $w in
      tmpfs) rm -rf "$dir"; mkdir -p "$dir"; out=$("$driver" "$dir/db" "$records" "$records" $phases) ;;
      *) if [ -n "${MAPFS_AB_ENGINE:-}" ]; then
           b=$before; [ "$w" = after ] && b=$after
           rm -rf "$dir"; mkdir -p "$dir"
           out=$("$b/bin/mapfs" run --overlay "$dir" --engine "$MAPFS_AB_ENGINE" --mode "${MAPFS_AB_MODE:-posix}" -- "$driver" "$dir/db" "$records" "$records" $phases)
           echo "$out" | awk -v w="$w" -v r="$r" -v l="$load" '{printf "%d %-6s %-7s wall %8.2f cpu %8.2f us/op  load %s\n", r, w, $1, $3/$2/1000, $4/$2/1000, l}'
           continue
         fi
         b=$before; [ "$w" = after ] && b=$after
         pool=$dir.$w.pool; rm -f "$pool"
         "$after/bin/mapfs" mkfs "$pool" --size 3G >/dev/null
         out=$("$b/bin/mapfs" run --pool "$pool" --mount /mapfs-ab --mode "${MAPFS_AB_MODE:-sync}" -- "$driver" /mapfs-ab/db "$records" "$records" $phases)
         rm -f "$pool" ;;
    esac
    echo "$out" | awk -v w="$w" -v r="$r" -v l="$load" '{printf "%d %-6s %-7s wall %8.2f cpu %8.2f us/op  load %s\n", r, w, $1, $3/$2/1000, $4/$2/1000, l}'
  done
done
