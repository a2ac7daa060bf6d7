#!/usr/bin/env bash
# fio (psync engine, 4 KiB random 50 % read/write) on a mapfs file under
# `mapfs run`, every block verified with crc32c; then fsck, and the file
# must be in the pool (not on the kernel's side). Then the libaio, posixaio
# and splice engines the same way.
# Usage: fio_test.sh PATH/TO/mapfs
set -euo pipefail
mapfs=$1
command -v fio >/dev/null || { echo "FAIL: fio is not installed (Debian package fio)" >&2; exit 1; }
pool=/dev/shm/mapfs-fio-test-$$.pool
trap 'rm -f "$pool"' EXIT
"$mapfs" mkfs "$pool" --size 512M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
out=$("$mapfs" run --pool "$pool" -- fio --name=verify --filename=/mapfs/fio.dat --ioengine=psync \
  --rw=randrw --rwmixread=50 --bs=4k --size=64M --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
  --output-format=terse --terse-version=3)
echo "$out" | cut -d';' -f1-6
err=$(echo "$out" | cut -d';' -f5)
[ "$err" = 0 ] || { echo "FAIL: fio reported error $err" >&2; exit 1; }
"$mapfs" fsck "$pool"
"$mapfs" stat "$pool" /fio.dat | grep -q "Size: 67108864" || { echo "FAIL: /fio.dat not in the pool with 64 MiB" >&2; "$mapfs" stat "$pool" /fio.dat >&2; exit 1; }
[ ! -e /mapfs/fio.dat ] || { echo "FAIL: fio wrote to a kernel /mapfs" >&2; exit 1; }
echo "fio verify on mapfs: ok"

# The asynchronous engines and splice (issue 18, item 7): kernel AIO through
# libaio, POSIX AIO through glibc, splice/vmsplice through pipes; each
# verified, each file in the pool afterwards.
for engine in libaio posixaio splice; do
  out=$("$mapfs" run --pool "$pool" -- fio --name=$engine --filename=/mapfs/$engine.dat --ioengine=$engine --iodepth=8 \
    --rw=randrw --rwmixread=50 --bs=4k --size=16M --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
    --output-format=terse --terse-version=3) || { echo "FAIL: fio --ioengine=$engine exited with $?: $out" >&2; exit 1; }
  err=$(echo "$out" | tail -n 1 | cut -d';' -f5)  # after notes fio may print
  [ "$err" = 0 ] || { echo "FAIL: fio --ioengine=$engine reported error $err" >&2; exit 1; }
  "$mapfs" stat "$pool" /$engine.dat | grep -q "Size: 16777216" ||
    { echo "FAIL: /$engine.dat not in the pool with 16 MiB" >&2; exit 1; }
  echo "fio $engine verify on mapfs: ok"
done
"$mapfs" fsck "$pool"
