#!/usr/bin/env bash
# CPython's own file-system regression tests (Debian's libpython3.11-testsuite)
# run twice in one go: with cwd and TMPDIR in a tmpfs directory, then with cwd
# and TMPDIR on mapfs, and compared per test case (regrtest's --junit-xml):
# every case that passes on tmpfs must pass on mapfs, except those listed in
# EXCEPTIONS below (each with its reason; the README's "mapfs run" and "The
# FUSE mount" sections list them too). A module that crashes loses its cases,
# which then count as failed.
#
# Usage: cpython_regrtest.sh shim|fuse PATH/TO/mapfs
#   shim: under `mapfs run --mount /mapfs`, cwd and TMPDIR in the pool
#         (tests/preload/cpython_test.sh, CTest preload.cpython)
#   fuse: on a `mapfs mount` of a fresh pool (tests/fuse/cpython_test.sh,
#         CTest fuse.cpython)
# MAPFS_CPYTHON_KEEP=1 keeps the work dir (logs, junit files, pool).
# Fails (never skips) when the test suite or /dev/fuse is missing.
set -euo pipefail
export LC_ALL=C TZ=UTC
umask 022
[ $# -eq 2 ] && { [ "$1" = shim ] || [ "$1" = fuse ]; } ||
  { echo "usage: $0 shim|fuse PATH/TO/mapfs" >&2; exit 2; }
MODE=$1
MAPFS=$(realpath -e -- "$2") || { echo "FAIL: mapfs binary $2 not found" >&2; exit 1; }
fail() { echo "FAIL [cpython $MODE]: $*" >&2; exit 1; }

# Debian's interpreter, whose standard library the test package extends (a
# python3 earlier in PATH, e.g. pyenv's, has another test directory).
PY=/usr/bin/python3.11
[ -x "$PY" ] || fail "$PY is missing (Debian package python3.11)"
"$PY" -c 'import test.test_os, test.test_zipfile' 2>/dev/null ||
  fail "CPython's test suite is not installed (Debian package libpython3.11-testsuite; scripts/install-deps.sh installs it)"

# The modules of issue 18. All of them run by default: with two workers the
# four runs (tmpfs and mapfs, in preload.cpython and fuse.cpython) took
# about 3.5 minutes together on a loaded 2-core machine (README).
MODULES="test_os test_shutil test_pathlib test_posix test_stat test_fcntl test_mmap test_tempfile
  test_glob test_fileio test_io test_zipfile test_tarfile test_genericpath test_posixpath test_filecmp
  test_dbm"

# Cases allowed to pass on tmpfs and not on mapfs: "MODE GLOB REASON" (MODE
# shim, fuse or any), GLOB against the case's id (test.MODULE.CLASS.METHOD).
# Only what cannot work by design; the README gives the same reasons.
EXCEPTIONS='
any test.test_os.ExtendedAttributeTests.* a pool has no extended attributes (ENOTSUP in every front)
any test.test_shutil.TestCopy.test_copyxattr* a pool has no extended attributes (ENOTSUP in every front)
any test.test_shutil.TestCopy.test_copy2_xattr a pool has no extended attributes (ENOTSUP in every front)
shim test.test_mmap.LargeMmapTests.test_around_[24]GB a shared map under the shim is the pool file at the file'"'"'s own pages, so mapping a sparse 2 or 4 GiB file takes that much pool space at mmap (the test pool has 1 GiB)
'

WORK=$(mktemp -d /dev/shm/mapfs-cpython-XXXXXX)
MNT=$WORK/mnt MOUNTED=0 POOL_SHM=
cleanup() {
  if [ $MOUNTED = 1 ]; then "$MAPFS" umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true; fi
  [ -z "$POOL_SHM" ] || rm -rf -- "$POOL_SHM" "$POOL_SHM".* 2>/dev/null || true
  if [ "${MAPFS_CPYTHON_KEEP:-0}" = 1 ]; then echo "work dir kept: $WORK" >&2; else rm -rf -- "$WORK"; fi
}
trap cleanup EXIT

# regrtest DIR NAME [PREFIX-COMMAND...]: the modules with cwd and TMPDIR in
# DIR (regrtest makes its test_python_PID working directories there), junit
# results in WORK/NAME.xml, output in WORK/NAME.log. Two workers: the
# modules are independent, and the time is mostly waiting (sleeps, forks).
regrtest() {
  local dir=$1 name=$2 t0=$SECONDS rc
  shift 2
  mkdir -p "$WORK/launch-$name"
  set +e
  # shellcheck disable=SC2086  # MODULES is a word list
  (cd "$WORK/launch-$name" && "$@" bash -c 'cd "$1" && shift && TMPDIR=$PWD exec "$@"' bash "$dir" \
     "$PY" -m test -j2 --timeout 600 --junit-xml "$WORK/$name.xml" $MODULES) >"$WORK/$name.log" 2>&1
  rc=$?
  set -e
  echo "$name: regrtest exit status $rc in $((SECONDS - t0)) s"
  [ -s "$WORK/$name.xml" ] || { tail -40 "$WORK/$name.log" >&2; fail "regrtest wrote no results on $name"; }
  # Nothing may land in the directory the run was started in (issue 18, item 3).
  [ -z "$(ls -A "$WORK/launch-$name")" ] ||
    fail "the $name run left files in its launch directory: $(ls -A "$WORK/launch-$name" | head)"
}

P=$WORK/pool
# --top-level 9: files may reach 64 GiB (the large-file cases write past 4 GiB);
# the pool file stays sparse.
"$MAPFS" mkfs "$P" --size 1G --top-level 9 >/dev/null || fail "mapfs mkfs"
POOL_SHM=/dev/shm/mapfs-$(od -An -tx1 -j16 -N16 "$P" | tr -d ' \n')

mkdir -p "$WORK/tmpfs"
regrtest "$WORK/tmpfs" tmpfs
if [ "$MODE" = shim ]; then
  [ -e /mapfs ] && fail "a real /mapfs exists: the shim's prefix would hide it"
  "$MAPFS" run --pool "$P" --mount /mapfs -- mkdir /mapfs/t || fail "mkdir /mapfs/t under the shim"
  regrtest /mapfs/t mapfs "$MAPFS" run --pool "$P" --mount /mapfs --
  [ -e /mapfs ] && fail "a real /mapfs appeared: the shim let paths under /mapfs through"
else
  [ -c /dev/fuse ] && [ -r /dev/fuse ] && [ -w /dev/fuse ] ||
    fail "/dev/fuse is missing or not usable: the FUSE mount cannot be tested here"
  mkdir -p "$MNT"
  "$MAPFS" mount "$P" "$MNT" || fail "mapfs mount $P $MNT was refused"
  MOUNTED=1
  mkdir "$MNT/t"
  regrtest "$MNT/t" mapfs
  "$MAPFS" umount "$MNT" || fail "mapfs umount $MNT"
  MOUNTED=0
fi

# Compare per test case; print the regressions with their messages.
cmp_rc=0
"$PY" - "$WORK/tmpfs.xml" "$WORK/mapfs.xml" "$MODE" "$EXCEPTIONS" <<'EOF' || cmp_rc=$?
import fnmatch, sys, xml.etree.ElementTree as ET
tmpfs_xml, mapfs_xml, mode, exceptions = sys.argv[1:]

def cases(path):
    out = {}
    for c in ET.parse(path).getroot().iter("testcase"):
        bad = [k for k in c if k.tag in ("failure", "error", "skipped")]
        out[c.get("name")] = (bad[0].tag, (bad[0].get("message") or bad[0].text or "")) if bad else ("passed", "")
    return out

def summary(cs):
    n = {}
    for status, _ in cs.values():
        n[status] = n.get(status, 0) + 1
    return ", ".join(f"{n[k]} {k}" for k in sorted(n))

rules = []
for line in exceptions.strip().splitlines():
    m, glob, reason = line.split(None, 2)
    if m in (mode, "any"):
        rules.append([glob, reason, 0])
t, m = cases(tmpfs_xml), cases(mapfs_xml)
print(f"tmpfs: {summary(t)}\nmapfs: {summary(m)}")
passed = [n for n, (s, _) in t.items() if s == "passed"]
if len(passed) < 1000:
    sys.exit(f"FAIL [cpython {mode}]: only {len(passed)} cases passed on tmpfs: the run is broken")
bad = 0
for name in passed:
    status, msg = m.get(name, ("missing (the module crashed or stopped)", ""))
    if status == "passed":
        continue
    rule = next((r for r in rules if fnmatch.fnmatchcase(name, r[0])), None)
    if rule:
        rule[2] += 1
        continue
    bad += 1
    print(f"FAIL: {name} passes on tmpfs but is {status} on mapfs: {msg.strip()[:600]}", file=sys.stderr)
for glob, reason, n in rules:
    print(f"exception ({n} cases): {glob}: {reason}")
if bad:
    sys.exit(f"FAIL [cpython {mode}]: {bad} cases pass on tmpfs and not on mapfs (logs: keep them with MAPFS_CPYTHON_KEEP=1)")
print("every case that passes on tmpfs passes on mapfs")
EOF
"$MAPFS" fsck "$P" >"$WORK/fsck" 2>&1 || { cat "$WORK/fsck" >&2; fail "fsck after the run is not clean"; }
[ $cmp_rc = 0 ] || exit 1
echo "PASS [cpython $MODE]: every case that passes on tmpfs passes on mapfs; fsck clean"
