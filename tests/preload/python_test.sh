#!/usr/bin/env bash
# Python 3 under `mapfs run`, compared with tmpfs: file I/O (seek, tell,
# append, truncate, pread/pwrite, large writes, mmap), os.walk, os.listdir,
# os.scandir, os.stat/lstat, utime in nanoseconds, links, shutil.copytree/
# copyfile (sendfile)/move/rmtree, os.rename and os.replace (and their
# errors), tempfile in the mapfs directory, fork and subprocess with
# inherited descriptors, and the errno of common failures.
# Usage: python_test.sh PATH/TO/mapfs
source "$(dirname "$0")/lib.sh"
need python3 python3

on_both "python file I/O" '
python3 - "$FIX" <<"EOF"
import hashlib, mmap, os, sys
fix = sys.argv[1]
print("cwd", os.getcwd())
with open("f.bin", "wb") as f:
    for i in range(100):
        f.write(bytes([i]) * (1000 + i))
    print("tell", f.tell())
with open("f.bin", "r+b") as f:
    f.seek(5000); print(f.read(3))
    f.seek(-10, os.SEEK_END); print(f.tell(), f.read())
    f.seek(5000); f.write(b"MIDDLE"); f.seek(0, os.SEEK_END); f.write(b"END")
    f.seek(200000); f.write(b"past the end")          # a hole before it
    f.truncate(150000); print("after truncate", f.tell(), os.fstat(f.fileno()).st_size)
with open("f.bin", "ab") as f:
    f.seek(0); f.write(b"appended"); print("append tell", f.tell())
with open("f.bin", "rb") as f:
    data = f.read()
print(len(data), hashlib.sha256(data).hexdigest(), data[4998:5008], data[-12:])
os.truncate("f.bin", 7); print(open("f.bin", "rb").read())
fd = os.open("p.bin", os.O_RDWR | os.O_CREAT, 0o640)
os.pwrite(fd, b"0123456789", 0); os.pwrite(fd, b"abc", 20)
print(os.pread(fd, 100, 0), os.lseek(fd, 0, os.SEEK_CUR), os.lseek(fd, 0, os.SEEK_END))
os.ftruncate(fd, 4096); os.fsync(fd); os.fdatasync(fd); os.close(fd)
print(os.stat("p.bin").st_size)
big = open(os.path.join(fix, "rand1m"), "rb").read() * 8
with open("big", "wb") as f:
    f.write(big)                                        # one 8 MiB write
h = hashlib.sha256()
with open("big", "rb", buffering=0) as f:
    while chunk := f.read(1 << 20):
        h.update(chunk)
print("big", h.hexdigest() == hashlib.sha256(big).hexdigest())
with open("m.bin", "wb") as f:
    f.write(b"." * 10000)
with open("m.bin", "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[100:105] = b"HELLO"; m[9995:] = b"TAIL!"; m.flush()
    print("mmap read", m[98:107], len(m)); m.close()
print(open("m.bin", "rb").read()[95:110])
with open("text.txt", "w") as f:
    f.write("".join(f"line {i}\n" for i in range(5000)))
with open("text.txt") as f:
    lines = f.readlines()
print(len(lines), lines[4999])
with open("text.txt", "a") as f:
    print("appended line", file=f)
print(open("text.txt").read()[-30:])
EOF
'

on_both "python directories and names" '
mktree t
python3 - <<"EOF"
import errno, os, shutil, stat, tempfile, glob
def err(fn, *a, **k):
    try:
        fn(*a, **k); return "ok"
    except OSError as e:
        return f"{type(e).__name__} {errno.errorcode[e.errno]}"
for top, dirs, files in os.walk("t"):
    dirs.sort()
    print(top, sorted(dirs), sorted(files))
up = [(top, len(dirs), len(files)) for top, dirs, files in os.walk("t", topdown=False, followlinks=True)]
print("bottom-up", sorted(up), up[-1])   # siblings come in directory order
print(sorted(os.listdir("t")), sorted(os.listdir("t/a")), os.listdir("t/empty dir"))
for e in sorted(os.scandir("t"), key=lambda e: e.name):
    st = e.stat(follow_symlinks=False)
    print(e.name, e.path, e.is_dir(), e.is_file(), e.is_symlink(), e.is_dir(follow_symlinks=False),
          e.inode() == st.st_ino, stat.filemode(st.st_mode), st.st_size if not e.is_dir() else "-")
for p in ["t/hello.txt", "t/d2/run.sh", "t/link", "t/dirlink", "t/a"]:
    st, lst = os.stat(p), os.lstat(p)
    print(p, stat.S_IFMT(st.st_mode), oct(stat.S_IMODE(st.st_mode)), stat.S_IFMT(lst.st_mode),
          st.st_size if stat.S_ISREG(st.st_mode) else "-", st.st_nlink if stat.S_ISREG(st.st_mode) else "-")
print(os.path.exists("t/dangling"), os.path.lexists("t/dangling"), os.path.isdir("t/dirlink"),
      os.path.islink("t/dirlink"), os.path.getsize("t/a/odd"), os.readlink("t/link"))
print(os.path.realpath("t/dirlink"), os.path.abspath("t/x"))
os.utime("t/hello.txt", ns=(1000000001, 2000000003))
st = os.stat("t/hello.txt"); print("utime", st.st_atime_ns, st.st_mtime_ns)
os.utime("t/link", ns=(5, 7), follow_symlinks=False)
print("lutime", os.lstat("t/link").st_mtime_ns, os.stat("t/link").st_mtime_ns)
os.chmod("t/hello.txt", 0o600); print(oct(os.stat("t/hello.txt").st_mode))
os.link("t/hello.txt", "t/hard"); print("nlink", os.stat("t/hello.txt").st_nlink)
os.symlink("../hello.txt", "t/a/up"); print(open("t/a/up").read().strip())
os.makedirs("n/o/p", exist_ok=True); os.makedirs("n/o/p", exist_ok=True)
print(err(os.makedirs, "n/o/p"), err(os.mkdir, "n"), err(os.rmdir, "n"), err(os.rmdir, "t/hello.txt"),
      err(os.unlink, "n"), err(os.open, "t/hello.txt", os.O_CREAT | os.O_EXCL | os.O_WRONLY),
      err(open, "nonexistent"), err(open, "n", "w"), err(os.listdir, "t/hello.txt"),
      err(os.rename, "t/a", "t/a/b/inside"), err(os.stat, "t/hello.txt/x"), err(os.readlink, "t/hello.txt"),
      err(os.symlink, "x", "t/link"), err(os.link, "t/a", "t/alink"), err(os.chdir, "t/hello.txt"))
# rename and replace
open("r1", "w").write("one"); open("r2", "w").write("two")
os.rename("r1", "r3"); os.replace("r3", "r2"); print(open("r2").read(), os.path.exists("r3"))
os.mkdir("d1"); os.mkdir("d2"); open("d1/f", "w").write("f")
os.rename("d1", "d2"); print(sorted(os.listdir("d2")), os.path.exists("d1"))
os.mkdir("d3"); print(err(os.rename, "d3", "d2"), err(os.replace, "r2", "d2"), err(os.rename, "d2", "r2"))
os.rename("d2", "t/a/b/moved"); print(sorted(os.listdir("t/a/b")))
# shutil
shutil.copytree("t", "tc", symlinks=True); shutil.copytree("t/a", "tc2")
shutil.copyfile("t/a/b/64k", "cf"); shutil.copy2("t/a/odd", "c2")
print(os.stat("c2").st_mtime_ns == os.stat("t/a/odd").st_mtime_ns, os.path.getsize("cf"))
for top, dirs, files in os.walk("tc"):
    dirs.sort(); print("tc", top, sorted(files))
tmpd = os.environ["TMPDIR"]
shutil.move("tc2", os.path.join(tmpd, "out")); print(sorted(os.listdir(os.path.join(tmpd, "out"))))
shutil.move(os.path.join(tmpd, "out"), "back"); print(sorted(os.listdir("back")), os.path.exists("tc2"))
shutil.rmtree("tc/a"); print(sorted(os.listdir("tc")))
print(sorted(glob.glob("t/**/*", recursive=True)))
# tempfile in the mapfs directory
with tempfile.NamedTemporaryFile(dir=".", prefix="nt", suffix=".tmp") as nt:
    nt.write(b"temporary"); nt.flush()
    print("named temp", os.path.dirname(nt.name) == os.getcwd(), open(nt.name, "rb").read(), os.path.basename(nt.name).startswith("nt"))
    tmpname = nt.name
print("deleted", not os.path.exists(tmpname))
nt = tempfile.NamedTemporaryFile(dir=os.getcwd(), delete=False); nt.write(b"kept"); nt.close()
os.rename(nt.name, "kept.txt"); print(open("kept.txt").read())
td = tempfile.mkdtemp(dir="."); open(os.path.join(td, "x"), "w").write("x"); os.rename(td, "madedir")
with tempfile.TemporaryDirectory(dir=".") as tdir:
    open(os.path.join(tdir, "y"), "w").write("y"); print("tmpdir", os.listdir(tdir))
fd, name = tempfile.mkstemp(dir="."); os.write(fd, b"mk"); os.close(fd); os.replace(name, "mkstemp.txt")
with tempfile.TemporaryFile(dir=".") as tf:
    tf.write(b"anon"); tf.seek(0); print("temporary file", tf.read())
print(sorted(os.listdir(".")))
EOF
'

on_both "python fork and subprocess" '
python3 - <<"EOF"
import os, subprocess, sys
f = open("shared", "wb", buffering=0)
f.write(b"parent1\n")
pid = os.fork()
if pid == 0:
    f.write(b"child\n"); os._exit(0)
os.waitpid(pid, 0)
f.write(b"parent2\n")
subprocess.run(["sh", "-c", f"echo sh-child >&{f.fileno()}"], pass_fds=(f.fileno(),), check=True)
f.write(b"parent3\n"); f.close()
print(open("shared").read())
with open("sub.out", "w") as out:
    subprocess.run(["cat", "shared"], stdout=out, check=True)
    subprocess.run(["echo", "after cat"], stdout=out, check=True)
print(open("sub.out").read())
print(subprocess.run(["ls", "-a", "."], capture_output=True, text=True, check=True).stdout)
print(subprocess.run(["wc", "-c"], stdin=open("shared"), capture_output=True, text=True).stdout.strip())
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    with open("forked-file", "w") as g:
        g.write("written by child")
    os.write(w, b"done"); os._exit(0)
os.close(w); print(os.read(r, 10)); os.waitpid(pid, 0)
print(open("forked-file").read())
EOF
'

finish
