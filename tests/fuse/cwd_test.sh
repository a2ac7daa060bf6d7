#!/usr/bin/env bash
# A process's cwd on the mount keeps its path while the daemon tells the
# kernel about changed names, also when the change ring overflowed and the
# daemon expires every name it gave the kernel (issue 18: CPython's
# regrtest lost test_io and test_zipfile to getcwd's ENOENT on the mount).
# The kernel's plain entry invalidation unhashed the cwd's dentry; the
# daemon expires names instead (src/fuse/follow.cc).
# Usage: cwd_test.sh PATH/TO/mapfs
source "$(dirname "$0")/common.sh" "$@"
P=$WORK/pool M=$WORK/mnt
"$MAPFS" mkfs "$P" --size 256M >/dev/null
mount_pool "$P" "$M"
mkdir -p "$M/cwd/deeper"

# Many changes through the mount and behind its back (the shim), more than
# the ring holds; getcwd is asked throughout, from a cwd two levels down.
"$MAPFS" run --pool "$P" -- sh -c 'i=0; while [ $i -lt 3000 ]; do echo $i >/mapfs/s$((i % 20)); i=$((i + 1)); done' &
shim_pid=$!
python3 - "$M" <<'PY' || fail "getcwd failed on the mount while names were invalidated (above)"
import os, sys
m = sys.argv[1]
os.chdir(os.path.join(m, "cwd", "deeper"))
bad = []
for i in range(20000):
    with open(os.path.join(m, "f%d" % (i % 50)), "wb") as f:
        f.write(b"x" * 10)
    if i % 200 == 0:
        try:
            if os.getcwd() != os.path.join(m, "cwd", "deeper"):
                bad.append((i, os.getcwd()))
        except OSError as e:
            bad.append((i, e.strerror))
if bad:
    sys.exit(f"getcwd wrong {len(bad)} times of 100, first: {bad[:3]}")
PY
wait $shim_pid || fail "the shim's writer failed"
# Changed names are still seen through the mount at once (not only expired).
"$MAPFS" run --pool "$P" -- sh -c 'mv /mapfs/cwd/deeper /mapfs/cwd/moved && echo x >/mapfs/cwd/deeper'
for i in $(seq 1 100); do [ -f "$M/cwd/deeper" ] && [ -d "$M/cwd/moved" ] && break; sleep 0.01; done
[ -f "$M/cwd/deeper" ] && [ -d "$M/cwd/moved" ] || fail "a renamed directory was not seen through the mount within 1 s"
unmount "$M"
"$MAPFS" fsck "$P" >/dev/null || fail "fsck after the run"
echo "cwd on the mount: getcwd right throughout; renames seen"
