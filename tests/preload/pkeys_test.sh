#!/usr/bin/env bash
# Protection keys under `mapfs run` (pkey_app.c, issue 16): a program's
# stores into the pool view, the shared segment and the region fault with
# SEGV_PKUERR and the pool stays clean (fsck), from the main thread, other
# threads (also one the shim creates for an AIO notification), signal
# handlers (interrupting a call or not; one doing I/O through the shim,
# an lseek first), a forked child and an exec'd image. MAPFS_PKEYS=0 turns the keys off:
# then the same (harmless) store goes through, and `mapfs info` says so.
# Without pkeys on this machine, the test checks only the fallback.
# Usage: pkeys_test.sh PATH/TO/mapfs PATH/TO/pkey_app
set -euo pipefail
mapfs=$1 app=$2
pool=/dev/shm/mapfs-pkeys-test-$$.pool
work=$(mktemp -d /dev/shm/mapfs-pkeys-test-XXXXXX)
trap 'rm -rf "$pool" "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run() { "$mapfs" run --pool "$pool" -- "$@"; }
clean() { "$mapfs" fsck "$pool" | tail -1 | grep -q ': clean$' || fail "fsck after $1: $("$mapfs" fsck "$pool")"; }
"$mapfs" mkfs "$pool" --size 512M >/dev/null

echo "== MAPFS_PKEYS=0: no keys, a store goes through, mapfs info says so"
out=$(MAPFS_PKEYS=0 run "$app" same /mapfs/off) || fail "pkey_app same with MAPFS_PKEYS=0"
[ "$out" = stored ] || fail "MAPFS_PKEYS=0: want the store to go through, got '$out'"
MAPFS_PKEYS=0 "$mapfs" info "$pool" | grep -q '^protection keys off (MAPFS_PKEYS=0)' || fail "mapfs info with MAPFS_PKEYS=0"
clean "MAPFS_PKEYS=0"
MAPFS_PKEYS=0 MAPFS_LOG=1 run sh -c 'echo x > /mapfs/off/log' 2>"$work/log.err"
grep -q 'protection keys: off (MAPFS_PKEYS=0)' "$work/log.err" || fail "the shim's log does not say the keys are off"

info=$("$mapfs" info "$pool" | grep '^protection keys') || fail "mapfs info has no protection keys line"
echo "$info"
if ! grep -qw pku /proc/cpuinfo || ! grep -qw ospke /proc/cpuinfo; then
  echo "$info" | grep -q ' off ' || fail "no pku/ospke here, but mapfs info says: $info"
  echo "SKIP: this machine has no protection keys; only the fallback was checked"
  exit 0
fi
echo "$info" | grep -q '^protection keys on ' || fail "pku and ospke are here, but: $info"
MAPFS_LOG=1 run sh -c 'echo x > /mapfs/off/log2' 2>"$work/log.err"
grep -q 'protection keys: on' "$work/log.err" || fail "the shim's log does not say the keys are on"

for mode in scribble same threads signal; do
  echo "== $mode"
  run "$app" $mode /mapfs/$mode || fail "pkey_app $mode"
  clean "$mode"
done
echo "== fork, then exec"
run "$app" fork /mapfs/fork "$app" || fail "pkey_app fork"
clean fork
echo "== the files the programs wrote are intact"
run sh -c 'cmp /mapfs/scribble/after /mapfs/signal/after && test -s /mapfs/fork/sub/after && ls /mapfs/threads | wc -l' \
  >"$work/ls" || fail "reading the programs' files back"
[ "$(cat "$work/ls")" -ge 81 ] || fail "the threads' files are missing: $(cat "$work/ls")"
clean "reading back"
echo "all passed"
