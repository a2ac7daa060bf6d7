#!/usr/bin/env bash
# Calls on the mount beyond what coreutils exercise: copy_file_range and
# SEEK_DATA/SEEK_HOLE; FIFOs and device nodes (made in the pool, served by
# the kernel); owners of new inodes (the requesting user's, a set-group-ID
# directory's group); an unlinked file that is still open (fstat, I/O,
# truncate, link count 0, in no directory); O_TRUNC, also of a running
# program (ETXTBSY). Then unmount, fsck, remount:
# the nodes and owners are still there.
# Usage: calls_test.sh PATH/TO/mapfs
source "$(dirname "$0")/common.sh" "$@"
P=$WORK/pool M=$WORK/mnt
chmod 0755 "$WORK"  # user daemon must reach the mount
"$MAPFS" mkfs "$P" --size 256M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
mount_pool "$P" "$M"

python3 - "$M" <<'EOF' || fail "copy_file_range / lseek / unlinked open file (see above)"
import errno, os, sys
m = sys.argv[1]
data = os.urandom(3_000_000)
with open(f"{m}/src", "wb") as f:
    f.write(data)
# copy_file_range: whole file, then a range between offsets, then past the end.
i = os.open(f"{m}/src", os.O_RDONLY)
o = os.open(f"{m}/dst", os.O_CREAT | os.O_WRONLY, 0o644)
done = 0
while done < len(data):
    n = os.copy_file_range(i, o, len(data) - done)
    assert n > 0, "copy_file_range returned 0 before the end"
    done += n
assert os.copy_file_range(i, o, 100) == 0, "copy_file_range past the end"
assert os.copy_file_range(i, o, 5000, 12345, 1_000_000) == 5000
os.close(i); os.close(o)
want = bytearray(data); want[1_000_000:1_005_000] = data[12345:17345]
assert open(f"{m}/dst", "rb").read() == bytes(want), "copy_file_range: wrong bytes"
# SEEK_DATA / SEEK_HOLE: all data, the one hole at the end.
fd = os.open(f"{m}/src", os.O_RDONLY)
assert os.lseek(fd, 0, os.SEEK_DATA) == 0
assert os.lseek(fd, 4096, os.SEEK_DATA) == 4096
assert os.lseek(fd, 0, os.SEEK_HOLE) == len(data)
assert os.lseek(fd, 100, os.SEEK_SET) == 100
for w in (os.SEEK_DATA, os.SEEK_HOLE):
    try:
        os.lseek(fd, len(data), w)
        raise AssertionError("SEEK_DATA/HOLE at the end must be ENXIO")
    except OSError as e:
        assert e.errno == errno.ENXIO, e
os.close(fd)
# An unlinked file that is still open.
fd = os.open(f"{m}/tmp", os.O_CREAT | os.O_RDWR, 0o600)
os.write(fd, b"x" * 10000)
os.unlink(f"{m}/tmp")
assert "tmp" not in os.listdir(m) and not any(n.startswith(".fuse") for n in os.listdir(m)), os.listdir(m)
st = os.fstat(fd)
assert st.st_nlink == 0 and st.st_size == 10000, st
os.ftruncate(fd, 5)
os.fchmod(fd, 0o640)
assert os.fstat(fd).st_size == 5 and os.fstat(fd).st_mode & 0o777 == 0o640
assert os.pread(fd, 10, 0) == b"xxxxx"
os.close(fd)
# Renamed over while open: the open file keeps the old content.
open(f"{m}/a", "w").write("new")
open(f"{m}/b", "w").write("old")
fd = os.open(f"{m}/b", os.O_RDONLY)
os.rename(f"{m}/a", f"{m}/b")
assert os.read(fd, 10) == b"old" and os.fstat(fd).st_nlink == 0
assert open(f"{m}/b").read() == "new"
os.close(fd)
assert sorted(os.listdir(m)) == ["b", "dst", "src"], os.listdir(m)
# O_TRUNC: O_RDONLY|O_TRUNC truncates, as on tmpfs.
open(f"{m}/t", "w").write("x" * 5000)
os.close(os.open(f"{m}/t", os.O_RDONLY | os.O_TRUNC))
assert os.stat(f"{m}/t").st_size == 0 and open(f"{m}/t").read() == ""
os.unlink(f"{m}/t")
EOF

# A running program (ETXTBSY): no open for writing and no truncation, also
# O_RDONLY|O_TRUNC, which the kernel checks only after the open request; the
# program keeps running and its bytes stay. Repeated: right after the start
# the program is still faulting its pages in from the mount.
python3 - "$M" <<'EOF' || fail "a running program's file (see above)"
import errno, os, shutil, subprocess, sys
m = sys.argv[1]
sleep = shutil.which("sleep")
want = open(sleep, "rb").read()
for i in range(30):
    p = f"{m}/prog{i}"
    shutil.copyfile(sleep, p)
    os.chmod(p, 0o755)
    child = subprocess.Popen([p, "10"])
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC):
        try:
            os.close(os.open(p, flags))
            raise AssertionError(f"{p}: open({flags:#o}) of a running program succeeded")
        except OSError as e:
            assert e.errno == errno.ETXTBSY, e
    assert child.poll() is None, f"{p}: the program died ({child.returncode}) while it was started"
    child.kill()
    child.wait()
    assert open(p, "rb").read() == want, f"{p}: the program's bytes changed"
    os.unlink(p)
EOF

# A FIFO in the pool, served by the kernel.
mkfifo "$M/fifo"
[ "$(stat -c %F "$M/fifo")" = fifo ] || fail "mkfifo did not make a FIFO"
(echo through-the-fifo >"$M/fifo") &
read -r line <"$M/fifo"
wait
[ "$line" = through-the-fifo ] || fail "the FIFO did not pass the line"
mknod "$M/null" c 1 3
[ "$(stat -c '%F %t,%T' "$M/null")" = "character special file 1,3" ] || fail "mknod c 1 3: $(stat -c '%F %t,%T' "$M/null")"
mknod "$M/blk" b 8 1
[ "$(stat -c '%F %t,%T' "$M/blk")" = "block special file 8,1" ] || fail "mknod b 8 1"

# Owners: the requesting user's; a set-group-ID directory's group.
as_daemon() { setpriv --reuid=daemon --regid=daemon --clear-groups "$@"; }
[ "$(id -u)" = 0 ] || fail "the owner checks need root (to act as a second user)"
{
  mkdir -m 0777 "$M/open"
  as_daemon sh -c "echo hi > '$M/open/f' && mkdir '$M/open/d' && ln -s f '$M/open/l' && mkfifo '$M/open/p'" ||
    fail "creating as user daemon"
  for n in f d l p; do
    [ "$(stat -c %u:%g "$M/open/$n")" = 1:1 ] || fail "open/$n: owner $(stat -c %u:%g "$M/open/$n"), not daemon's 1:1"
  done
  mkdir -m 0777 "$M/sgid"
  chgrp nogroup "$M/sgid"
  chmod g+s "$M/sgid"
  as_daemon sh -c "echo hi > '$M/sgid/f' && mkdir '$M/sgid/d'" || fail "creating in the set-group-ID directory"
  [ "$(stat -c %u:%G "$M/sgid/f")" = 1:nogroup ] || fail "sgid/f: $(stat -c %u:%G "$M/sgid/f"), not 1:nogroup"
  [ "$(stat -c %u:%G:%A "$M/sgid/d")" = 1:nogroup:drwxr-sr-x ] ||
    fail "sgid/d: $(stat -c %u:%G:%A "$M/sgid/d"), not 1:nogroup:drwxr-sr-x"
}
list() { (cd "$M" && find . -printf '%p %y %m %U:%G\n' | sort); }
list >"$WORK/before"
unmount "$M"
"$MAPFS" fsck "$P" >"$WORK/fsck" || { cat "$WORK/fsck" >&2; fail "fsck"; }
mount_pool "$P" "$M"
list >"$WORK/after"
diff -u "$WORK/before" "$WORK/after" || fail "the tree changed across a remount"
[ "$(stat -c '%F %t,%T' "$M/null")" = "character special file 1,3" ] || fail "the device number was lost"
unmount "$M"
echo "copy_file_range, SEEK_DATA/HOLE, FIFOs and devices, owners, unlinked open files: ok"
