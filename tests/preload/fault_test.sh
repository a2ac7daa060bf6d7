#!/usr/bin/env bash
# A program's own SIGSEGV/SIGBUS handlers under `mapfs run` (fault_app.c):
# mapfs's page faults never reach them, on a fresh and on an aged pool;
# every other fault does, with its address; sigaction(sig, NULL, &old),
# signal(), sysv_signal(), sigset() and syscall(SYS_rt_sigaction) answer
# as without mapfs (compared with a native run); SIG_DFL and SIG_IGN
# faults kill with SIGSEGV; Python's faulthandler sees only its own
# program's crash.
# Usage: fault_test.sh PATH/TO/mapfs PATH/TO/fault_app
set -euo pipefail
mapfs=$1 app=$2
pool=/dev/shm/mapfs-fault-test-$$.pool
work=$(mktemp -d /dev/shm/mapfs-fault-test-XXXXXX)
trap 'rm -rf "$pool" "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run() { "$mapfs" run --pool "$pool" -- "$@"; }
"$mapfs" mkfs "$pool" --size 1G ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null

echo "== heavy pool I/O with an aborting handler: a fresh pool"
run mkdir /mapfs/fresh
run "$app" io /mapfs/fresh || fail "pool I/O reached the program's SIGSEGV handler (fresh pool)"

echo "== the same on an aged pool (files removed, pages reused)"
run sh -c 'rm -rf /mapfs/fresh/many-* /mapfs/fresh/big1 && mkdir /mapfs/aged'
run "$app" io /mapfs/aged || fail "pool I/O reached the program's SIGSEGV handler (aged pool)"
run rm -rf /mapfs/aged

echo "== a bad pointer after pool I/O reaches the program's handler"
run mkdir /mapfs/bad
set +e
run "$app" bad /mapfs/bad 2>"$work/bad.err"; rc=$?
set -e
cat "$work/bad.err"
[ $rc = 42 ] || fail "fault_app bad exited with $rc, want 42 (its handler, with si_addr of the bad store)"
grep -q "handler ran" "$work/bad.err" || fail "no marker from the program's handler"

# The modes whose output must be the same under mapfs and natively.
for mode in query exec dfl ign signal; do
  echo "== $mode: compared with a native run"
  mkdir "$work/native-$mode"
  "$app" $mode "$work/native-$mode" >"$work/$mode.native" 2>&1 || fail "native $mode run failed: $(cat "$work/$mode.native")"
  run mkdir /mapfs/$mode
  run "$app" $mode /mapfs/$mode >"$work/$mode.mapfs" 2>&1 || fail "$mode under mapfs failed: $(cat "$work/$mode.mapfs")"
  diff -u "$work/$mode.native" "$work/$mode.mapfs" || fail "$mode: mapfs differs from the native run"
  cat "$work/$mode.mapfs"
  run rm -rf /mapfs/$mode
done
grep -q "killed by signal 11" "$work/dfl.mapfs" || fail "SIG_DFL: the child was not killed by SIGSEGV"
grep -q "killed by signal 11" "$work/ign.mapfs" || fail "SIG_IGN: the child was not killed by SIGSEGV"

echo "== python3 with faulthandler"
run rm -rf /mapfs/fresh /mapfs/bad
command -v python3 >/dev/null || fail "python3 is not installed (Debian package python3)"
cat >"$work/io.py" <<'PY'
import faulthandler, hashlib, mmap, os, shutil, sys
d = sys.argv[1]
os.makedirs(d)  # the first pool access: the shim mounts the pool
if not faulthandler.is_enabled():
    faulthandler.enable()  # after the mount, as CPython's test runner (regrtest) does
data = bytes(range(256)) * 4096  # 1 MiB
for i in range(32):
    with open(f"{d}/f{i}", "wb") as f:
        for _ in range(i % 3 + 1):
            f.write(data)
for i in range(32):
    with open(f"{d}/f{i}", "rb") as f:
        assert f.read() == data * (i % 3 + 1), i
with open(f"{d}/f3", "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[0:5] = b"HELLO"
    m.flush()
    m.close()
os.makedirs(f"{d}/many")  # directories of many entries: new directory blocks, splits
for i in range(3000):
    os.close(os.open(f"{d}/many/entry-{i}", os.O_CREAT | os.O_WRONLY, 0o644))
for i in range(200):
    os.makedirs(f"{d}/sub{i}/inner")
assert len(list(os.scandir(f"{d}/many"))) == 3000
shutil.copytree(d, d + ".copy")
assert sorted(os.listdir(d + ".copy")) == sorted(os.listdir(d))
shutil.rmtree(d + ".copy")
print("python pool I/O ok", len(os.listdir(d)))  # 32 files, many, 200 sub
if len(sys.argv) > 2:  # then a real crash of the program: faulthandler's report, death by SIGSEGV
    import ctypes
    ctypes.string_at(0)
PY
# The cwd in the pool, as in the issue; faulthandler enabled at start-up
# (-X faulthandler) and after the pool is mounted.
run mkdir /mapfs/cwd
n=0
for how in "-X faulthandler" ""; do
  n=$((n + 1))
  out=$(run sh -c 'cd /mapfs/cwd && exec python3 $1 "$2" "$3"' - "$how" "$work/io.py" py$n 2>&1) ||
    fail "python3 $how with pool I/O failed: $out"
  echo "$out"
done
set +e
run sh -c 'cd /mapfs/cwd && exec python3 "$1" py-crash crash' - "$work/io.py" >"$work/py.out" 2>&1; rc=$?
set -e
cat "$work/py.out"
[ $rc = 139 ] || fail "python's own crash: exit status $rc, want 139 (SIGSEGV)"
grep -q "Fatal Python error: Segmentation fault" "$work/py.out" || fail "faulthandler did not report the crash"
[ "$(grep -c "Fatal Python error" "$work/py.out")" = 1 ] || fail "faulthandler reported more than one fault"

"$mapfs" fsck "$pool"
