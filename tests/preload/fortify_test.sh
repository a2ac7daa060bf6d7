#!/usr/bin/env bash
# Each fortified call asked for more than its buffer: the program aborts
# (SIGABRT, status 134) on its own and under `mapfs run` alike.
set -uo pipefail
mapfs=$1 prog=$2
pool=/dev/shm/mapfs-fortify-test-$$.pool
file=/dev/shm/mapfs-fortify-test-$$.dat
trap 'rm -f "$pool" "$file"' EXIT
head -c 4096 /dev/zero >"$file"
"$mapfs" mkfs "$pool" --size 64M >/dev/null || exit 1
fail=0
for call in read pread recv fread readlink getcwd; do
  "$prog" "$call" "$file" >/dev/null 2>&1
  native=$?
  "$mapfs" run --pool "$pool" -- "$prog" "$call" "$file" >/dev/null 2>&1
  shim=$?
  echo "$call: native $native, shim $shim"
  if [ "$native" != 134 ] || [ "$shim" != 134 ]; then fail=1; fi
done
exit $fail
