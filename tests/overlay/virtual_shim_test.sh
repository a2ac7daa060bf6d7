#!/usr/bin/env bash
# What the shim must do for the virtual engine beyond plain reads and
# writes, checked against the kernel: one python program runs on a kernel
# directory and, under `mapfs run --overlay DIR --engine virtual`, on an
# overlay; its output and the files' content (read back with `mapfs overlay
# cat`) must be the same, and every file must pass `mapfs overlay fsck`.
# Covers: descriptors inherited by fork children and by exec'd programs
# (stdin/stdout redirects, pass_fds), dup2, MAP_SHARED maps (stores reach
# the file at msync and munmap, a read sees them, a write shows in the map,
# a fork child shares them and its stores reach the file, the program's
# mprotect of them), MAP_PRIVATE maps (stores stay private),
# SEEK_DATA/SEEK_HOLE, O_TRUNC while another process has the file open,
# write-only opens, fallocate, stat by path and descriptor.
# Usage: virtual_shim_test.sh PATH/TO/mapfs
set -euo pipefail
export LC_ALL=C
mapfs=$(realpath -e -- "$1")
work=$(mktemp -d /dev/shm/mapfs-vshim-XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

cat >"$work/prog.py" <<'EOP'
import mmap, os, subprocess, sys
os.chdir(sys.argv[1])
out = []
def say(*a): out.append(" ".join(str(x) for x in a))

# Write-only opens, O_TRUNC, stat.
with open("w", "wb") as f: f.write(b"abc" * 5000)
fd = os.open("w", os.O_WRONLY); os.pwrite(fd, b"XYZ", 10); os.close(fd)
say("stat", os.stat("w").st_size, os.path.getsize("w"))
# Raw system calls by number (syscall(3)) act on the content as the C
# library's calls do: 0 read, 1 write, 17 pread64, 8 lseek, 5 fstat.
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
fd = os.open("w", os.O_RDWR); b = ctypes.create_string_buffer(16)
say("raw-pread", libc.syscall(L(17), L(fd), b, L(8), L(9)), b.raw[:8])
say("raw-write", libc.syscall(L(1), L(fd), b"RAW!", L(4)), libc.syscall(L(8), L(fd), L(0), L(1)))
say("raw-read", libc.syscall(L(0), L(fd), b, L(6)), b.raw[:6], os.pread(fd, 8, 0))
st = ctypes.create_string_buffer(144)
say("raw-fstat", libc.syscall(L(5), L(fd), st, L(0)), int.from_bytes(st.raw[48:56], "little"))  # st_size
os.close(fd)
r = os.open("w", os.O_RDONLY)                        # open elsewhere, then emptied
pid = os.fork()
if pid == 0:
    t = os.open("w", os.O_WRONLY | os.O_TRUNC); os.write(t, b"after"); os.close(t); os._exit(0)
os.waitpid(pid, 0)
say("trunc", os.fstat(r).st_size, os.pread(r, 100, 0)); os.close(r)

# Fork: the child writes through an inherited descriptor, at the shared offset.
fd = os.open("fork", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"parent-1 ")
pid = os.fork()
if pid == 0:
    os.write(fd, b"child "); os._exit(0)
os.waitpid(pid, 0)
os.write(fd, b"parent-2")
say("fork", os.pread(fd, 100, 0), os.lseek(fd, 0, os.SEEK_CUR)); os.close(fd)

# Exec: redirects and passed descriptors.
with open("in", "wb") as f: f.write(b"".join(b"line %d\n" % i for i in range(3000)))
with open("in", "rb") as i, open("sorted", "wb") as o:
    subprocess.run(["sort", "-r"], stdin=i, stdout=o, check=True)
fd = os.open("passed", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.write(fd, b"before exec\n")
subprocess.run(["sh", "-c", "echo from-sh >&%d; cat in >&%d" % (fd, fd)], pass_fds=[fd], check=True)
os.write(fd, b"after exec\n"); os.close(fd)
fd = os.open("dup", os.O_RDWR | os.O_CREAT, 0o644); os.dup2(fd, 9); os.write(9, b"via 9"); os.close(9)
say("dup", os.pread(fd, 10, 0)); os.close(fd)
say("sizes", [os.stat(n).st_size for n in ("in", "sorted", "passed")])

# MAP_SHARED: stores, msync, read coherence, writes shown in the map, fork.
with open("m", "wb") as f: f.write(bytes(range(256)) * 100)
fd = os.open("m", os.O_RDWR)
m = mmap.mmap(fd, 0)
m[0:5] = b"HELLO"
say("map-read", os.pread(fd, 5, 0))                  # a read sees the store
os.pwrite(fd, b"WRITE", 100)
say("map-sees-write", m[100:105])
pid = os.fork()
if pid == 0:
    m[200:205] = b"CHILD"; m.flush(); os._exit(0)
os.waitpid(pid, 0)
say("map-child", m[200:205])
say("map-child-file", os.pread(fd, 5, 200))          # the parent writes back what the child stored
m[5000:5004] = b"LAST"; m.flush()
say("after-flush", os.pread(fd, 4, 5000))
m[6000:6003] = b"END"; m.close(); os.close(fd)        # munmap writes back
with open("m", "rb") as f: d = f.read(); say("after-close", d[6000:6003], len(d))
# MAP_PRIVATE: private stores.
with open("m", "r+b") as f:
    p = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    p[0:5] = b"PRIVT"; say("private", p[0:5]); p.close()
with open("m", "rb") as f: say("private-file", f.read(5))
# The program's mprotect of a shared map: read-only and back (clean pages
# stay write-protected under mapfs, stores after it still reach the file).
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
fd = os.open("mp", os.O_RDWR | os.O_CREAT, 0o644); os.write(fd, b"." * 3 * 4096)
m = mmap.mmap(fd, 0)
buf = ctypes.c_char.from_buffer(m); addr = ctypes.addressof(buf)
m[0:2] = b"P1"; say("mprotect-before", os.pread(fd, 2, 0))
say("mprotect-ro", libc.mprotect(addr, 3 * 4096, mmap.PROT_READ), os.pread(fd, 2, 0))
say("mprotect-rw", libc.mprotect(addr, 3 * 4096, mmap.PROT_READ | mmap.PROT_WRITE))
m[4096:4098] = b"P2"; m[0:2] = b"Q1"
say("mprotect-after", os.pread(fd, 2, 0), os.pread(fd, 2, 4096))
# The kernel storing into the map (readv from a pipe into a clean page):
# no EFAULT, and the bytes reach the file.
r, w = os.pipe(); os.write(w, b"PIPE")
say("readv-into-map", os.readv(r, [memoryview(m)[8192:8196]]), os.pread(fd, 4, 8192))
os.close(r); os.close(w)
import socket                                           # recv, recvfrom and recvmsg alike
s1, s2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); s2.settimeout(10)
s1.send(b"RCV1"); s1.send(b"RCV2"); s1.send(b"RCV3")
say("recv-into-map", s2.recv_into(memoryview(m)[4100:4104]), s2.recvfrom_into(memoryview(m)[8200:8204])[0],
    s2.recvmsg_into([memoryview(m)[8300:8304]])[0], os.pread(fd, 4, 4100), os.pread(fd, 4, 8200), os.pread(fd, 4, 8300))
libc.recvmsg.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)   # a bad header: EFAULT, not a crash
r = libc.recvmsg(s2.fileno(), 8, 0); say("recvmsg-bad-header", r, ctypes.get_errno() if r < 0 else 0)
# recvmmsg: two datagrams into clean pages (written back first), the
# vector itself in the map too (the kernel stores each entry's msg_len).
class Iov(ctypes.Structure): _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
class Hdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.c_void_p),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]
class Mmsg(ctypes.Structure): _fields_ = [("hdr", Hdr), ("len", ctypes.c_uint)]
iovs = (Iov * 2)((addr + 4200, 4), (addr + 8400, 4))
m.flush()
vec = (Mmsg * 2).from_buffer(m, 64)
for i in range(2): vec[i].hdr.iov = ctypes.addressof(iovs[i]); vec[i].hdr.iovlen = 1
m.flush()
s1.send(b"MM-1"); s1.send(b"MM-2")
libc.recvmmsg.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p)
r = libc.recvmmsg(s2.fileno(), ctypes.addressof(vec), 2, 0, None)
say("recvmmsg-into-map", r, ctypes.get_errno() if r < 0 else 0, vec[0].len, vec[1].len,
    os.pread(fd, 4, 4200), os.pread(fd, 4, 8400))
m.flush(); s1.send(b"SY-1"); s1.send(b"SY-2")                 # the raw system call (299: recvmmsg)
libc.syscall.restype = ctypes.c_long
r = libc.syscall(ctypes.c_long(299), ctypes.c_long(s2.fileno()), ctypes.c_void_p(ctypes.addressof(vec)),
                 ctypes.c_long(2), ctypes.c_long(0), ctypes.c_void_p(None))
say("syscall-recvmmsg-into-map", r, ctypes.get_errno() if r < 0 else 0, os.pread(fd, 4, 4200), os.pread(fd, 4, 8400))
m.flush(); libc.stat.argtypes = (ctypes.c_char_p, ctypes.c_void_p)   # stat into a clean page of the map
say("stat-into-map", libc.stat(b"in", ctypes.c_void_p(ctypes.addressof(vec) + 4096)),
    int.from_bytes(m[64 + 4096 + 48:64 + 4096 + 56], "little"))
m[64 + 4096:64 + 4096 + 144] = b"." * 144                       # inode numbers and times differ by run
del vec; m[64:64 + 2 * ctypes.sizeof(Mmsg)] = b"." * (2 * ctypes.sizeof(Mmsg))  # its pointers differ by run
s1.close(); s2.close()
libc.fdopen.restype = ctypes.c_void_p                   # fread: its read(2) is inside the C library
libc.fread.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
r, w = os.pipe(); os.write(w, b"F" * 8192); os.close(w)
stream = libc.fdopen(r, b"rb")
cbuf = ctypes.c_char.from_buffer(m, 12288 - 8192 - 100); dst = ctypes.addressof(cbuf); del cbuf
say("fread-into-map", libc.fread(dst, 1, 8192, stream), os.pread(fd, 3, 12288 - 8192 - 100))
libc.fclose(stream)
del buf; m.close(); os.close(fd)

# A map placed with MAP_FIXED over a shared map replaces it: the new
# (read-only, anonymous) memory is the program's, a store into it faults as
# on the kernel (a tracked map's fault must not be served there any more),
# and nothing of it reaches the file.
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
fd = os.open("fx", os.O_RDWR | os.O_CREAT, 0o644); os.write(fd, b"." * 2 * 4096)
m = mmap.mmap(fd, 2 * 4096)
buf = ctypes.c_char.from_buffer(m); addr = ctypes.addressof(buf); del buf
m[0:2] = b"F1"
r = libc.mmap(addr, 2 * 4096, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x10, -1, 0)  # MAP_FIXED
say("fixed-over-map", r == addr, os.pread(fd, 2, 0))
pid = os.fork()
if pid == 0:
    ctypes.memset(addr + 4096, ord("Z"), 4); os._exit(0)
_, status = os.waitpid(pid, 0)
say("fixed-ro-store", os.WIFSIGNALED(status) and os.WTERMSIG(status))
say("fixed-file", os.pread(fd, 4, 4096))
m.close(); os.close(fd)

# Write access to a shared map through a read-only description is refused
# (EACCES) by mprotect and pkey_mprotect alike, and the file stays as it
# was: under the engine the map is of its own memory, which the kernel
# alone would let the program make writable. With a protection key (where
# the machine has them) a writable map keeps reaching the file.
libc.pkey_mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int)
libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
def err(r): return 0 if r == 0 else ctypes.get_errno()
rw = mmap.PROT_READ | mmap.PROT_WRITE
key = libc.pkey_alloc(0, 0)                            # -1 where the machine has no keys
with open("ro", "wb") as f: f.write(b"r" * 8192)
fd = os.open("ro", os.O_RDONLY)
a = libc.mmap(None, 8192, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
say("ro-mprotect-rw", err(libc.mprotect(a, 8192, rw)), err(libc.pkey_mprotect(a, 8192, rw, -1)),
    err(libc.pkey_mprotect(a, 8192, rw, key)) if key >= 0 else "no keys")
say("ro-file", os.pread(fd, 2, 0))
libc.munmap(a, 8192); os.close(fd)
fd = os.open("pk", os.O_RDWR | os.O_CREAT, 0o644); os.write(fd, b"." * 8192)
m = mmap.mmap(fd, 8192)
buf = ctypes.c_char.from_buffer(m); addr = ctypes.addressof(buf); del buf
say("pkey-rw", err(libc.pkey_mprotect(addr, 8192, rw, key)) if key >= 0 else "no keys")
m[4096:4098] = b"K1"; m.flush()
say("pkey-file", os.pread(fd, 2, 4096))
if key >= 0: libc.pkey_free(key)
m.close(); os.close(fd)

# Holes: SEEK_DATA / SEEK_HOLE, fallocate.
fd = os.open("sparse", os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"x" * 100, 1 << 20); os.pwrite(fd, b"y", 3 << 20)
say("seek", os.lseek(fd, 0, os.SEEK_DATA), os.lseek(fd, 0, os.SEEK_HOLE),
    os.lseek(fd, (1 << 20) + 50, os.SEEK_HOLE), os.lseek(fd, (1 << 20) + 8192, os.SEEK_DATA))
try:
    os.lseek(fd, 4 << 20, os.SEEK_DATA)
except OSError as e:
    say("seek-past-end", e.errno)
os.posix_fallocate(fd, 0, 5 << 20)
say("fallocate", os.fstat(fd).st_size); os.close(fd)
print("\n".join(out))
EOP

run() {  # DIR [mapfs run...]
  local d=$1; shift
  mkdir -p "$d"
  "$@" python3 "$work/prog.py" "$d" >"$d.out" 2>"$d.err" || { echo "FAIL: $d: exit $?" >&2; cat "$d.err" >&2; exit 1; }
}
run "$work/native"
# Twice: with the default (a file's first shared maps are plain writable
# maps, compared whole: src/overlay/virtual/vview.h) and with every map
# write-protected and dirty-tracked (MAPFS_OVERLAY_TRACK_FROM=0).
for track in default 0; do
  o=$work/overlay-$track
  if [ "$track" = default ]; then
    run "$o" "$mapfs" run --overlay "$o" --engine virtual --
  else
    run "$o" env MAPFS_OVERLAY_TRACK_FROM="$track" "$mapfs" run --overlay "$o" --engine virtual --
  fi
  diff "$work/native.out" "$o.out" || { echo "FAIL: output differs from the kernel's (tracking: $track)" >&2; exit 1; }
  for f in "$work"/native/*; do
    n=$(basename "$f")
    "$mapfs" overlay cat "$o/$n" | cmp -s - "$f" || { echo "FAIL: $n differs from the kernel's (tracking: $track)" >&2; exit 1; }
    "$mapfs" overlay fsck "$o/$n" >/dev/null || { echo "FAIL: fsck of $n (tracking: $track)" >&2; exit 1; }
  done
  # The files are virtualized (the test would pass vacuously otherwise).
  "$mapfs" overlay fsck "$o/m" | grep -q clean || { echo "FAIL: m is not virtualized" >&2; exit 1; }
done
echo "ok: $(wc -l <"$work/native.out") checks, $(ls "$work/native" | wc -l) files as the kernel's"
