#!/usr/bin/env bash
# Regression (issue 16, defect 8): a new image under the shim adopts the
# descriptors and the cwd its parent handed over in memfds named
# mapfs-fd / mapfs-cwd. Their records are inherited bytes, not trusted:
# lengths whose 32-bit sum wraps made the loader throw (the process died at
# start), and large ones made it allocate gigabytes. Crafted records must be
# ignored: the program runs, with a small memory footprint.
# Usage: handoff_records_test.sh PATH/TO/mapfs
set -euo pipefail
mapfs=$1
pool=/dev/shm/mapfs-handoff-records-$$.pool
trap 'rm -f "$pool"' EXIT
"$mapfs" mkfs "$pool" --size 64M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
python3 - "$mapfs" "$pool" <<'PY'
import os, struct, subprocess, sys
mapfs, pool = sys.argv[1], sys.argv[2]
fail = 0
def crafted(kind, a, b):
    if kind == "fd":
        fd = os.memfd_create("mapfs-fd", 0)
        os.write(fd, b"MAPFSFD1" + struct.pack("<QiiII", 2, os.O_RDWR, 0, a, b) + pool.encode() + b"/x")
    else:
        fd = os.memfd_create("mapfs-cwd", 0)
        os.write(fd, b"MAPFSCWD" + struct.pack("<II", a, b) + pool.encode() + b"/")
    return fd
cases = [("fd", 0xFFFFFFFF, 2), ("fd", len(pool) + 1, 0xFFFFFFFF), ("fd", 0x7FFFFFFF, 0x7FFFFFFF),
         ("cwd", 0xFFFFFFFF, 2), ("cwd", 0x7FFFFFFF, 0x7FFFFFFF)]
for kind, a, b in cases:
    fd = crafted(kind, a, b)
    p = subprocess.Popen([mapfs, "run", "--pool", pool, "--", "sh", "-c", "echo ok"], pass_fds=[fd],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.stdout.read(), p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    rss_kib = usage.ru_maxrss  # the child and the descendants it waited for
    os.close(fd)
    what = "%s record, lengths %#x + %#x" % (kind, a, b)
    if p.returncode != 0 or out != "ok\n":
        print("FAIL: %s: exit %d, stdout %r, stderr %r" % (what, p.returncode, out, err[-300:]))
        fail = 1
    elif rss_kib > 256 * 1024:
        print("FAIL: %s: a child reached %d MiB of memory" % (what, rss_kib // 1024))
        fail = 1
    else:
        print("ok: %s ignored" % what)
# A malformed record is reported, once per process however many there
# are (MAPFS_LOG on), and the program still runs.
fds = [crafted("fd", 0xFFFFFFFF, 2), crafted("cwd", 0x7FFFFFFF, 0x7FFFFFFF), crafted("fd", 3, 3)]
env = dict(os.environ, MAPFS_LOG="1")
p = subprocess.run([mapfs, "run", "--pool", pool, "--", "sh", "-c", "echo ok"], pass_fds=fds, env=env,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
for fd in fds:
    os.close(fd)
warnings = p.stderr.count("malformed inherited")
if p.returncode != 0 or p.stdout != "ok\n" or warnings != 1:
    print("FAIL: three malformed records: exit %d, stdout %r, %d warnings (want 1), stderr %r"
          % (p.returncode, p.stdout, warnings, p.stderr[-500:]))
    fail = 1
else:
    print("ok: three malformed records, one warning")
sys.exit(fail)
PY
"$mapfs" fsck "$pool" >/dev/null
echo "1 passed, 0 failed"
