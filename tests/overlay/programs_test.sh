#!/usr/bin/env bash
# Real programs under `mapfs run --overlay DIR --engine ENGINE`, compared
# byte for byte with the same script run by the kernel alone: coreutils (cp,
# cat, dd, sort, split, tee, truncate), shell appends, tar, git, rsync,
# sqlite3 (WAL and rollback journal; three processes writing one database
# at once), python (appends, seeks, truncate,
# mmap), and fsx on an overlay file. On tmpfs, and on ext4 in a loop-mounted
# image when this machine allows it (root); in each mode. With the virtual
# engine the overlay's files are read back with `mapfs overlay cat` (their
# bytes on the kernel's side are their format) and each must pass
# `mapfs overlay fsck`.
# Usage: programs_test.sh PATH/TO/mapfs [--engine split|virtual] [MODES...]
set -euo pipefail
export LC_ALL=C TZ=UTC
umask 022
mapfs=$(realpath -e -- "$1"); shift
engine=split
if [ "${1:-}" = --engine ]; then engine=$2; shift 2; fi
modes=("$@"); [ ${#modes[@]} -gt 0 ] || modes=(posix sync strict)
work=$(mktemp -d /tmp/mapfs-ovl-prog-XXXXXX)
mnt=
cleanup() {
  if [ -n "$mnt" ]; then umount -l "$mnt" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fails=0

mkdir -p "$work/fix"
head -c 3000000 /dev/urandom >"$work/fix/rand"
seq 1 20000 | sed 's/$/ line of text/' | sort -R --random-source=<(yes) >"$work/fix/lines"

# The steps: each runs in bash with R = the directory under test.
read -r -d '' SCRIPT <<'EOS' || true
set -euo pipefail
cd "$R"
cp "$FIX/rand" a; cat a >b; cat a >>b; cmp <(cat a a) b && echo "cat >> ok"
dd if="$FIX/rand" of=c bs=4096 count=100 status=none
dd if="$FIX/rand" of=c bs=1000 skip=7 seek=333 count=900 conv=notrunc status=none
dd if=/dev/zero of=c bs=1 seek=5000000 count=1 status=none
for i in $(seq 1 200); do echo "append $i" >>log; done
sort "$FIX/lines" -o sorted; sort -n -o sorted2 sorted; head -3 sorted2; tail -2 sorted
split -b 100000 a part.; cat part.* | cmp - a && echo "split ok"
tee -a tee.out <"$FIX/lines" >/dev/null; tee -a tee.out <"$FIX/lines" >/dev/null
truncate -s 12345 b; truncate -s +1000 b; stat -c '%s' b
mkdir -p t/sub; cp "$FIX/lines" t/sub/l; cp a t/a
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf arch.tar t; tar -tf arch.tar | sort; mkdir x; tar -xf arch.tar -C x; cmp x/t/a a && echo "tar ok"
export GIT_AUTHOR_DATE=@1700000000 GIT_COMMITTER_DATE=@1700000000
mkdir g; (cd g && git init -q && git config user.email t@x && git config user.name t && cp "$FIX/lines" l && cp "$FIX/rand" r &&
  git add . && git commit -qm one && sed -i 's/line/LINE/' l && echo new >n && git add -A && git commit -qm two &&
  git gc -q && git fsck --no-progress && git log --format='%H %s' && git archive HEAD | sha256sum &&
  git clone -q --no-hardlinks . ../g2 && cd ../g2 && git log --format='%H %s' | tail -1 && cmp l ../g/l && echo "git ok")
rm -rf g/.git g2  # the index holds inode numbers and times: not comparable
mkdir rs; rsync -a "$FIX/" rs/; head -c 100000 "$FIX/rand" >rs/rand; rsync -a --checksum "$FIX/" rs/ && cmp rs/rand "$FIX/rand"
rsync -a --inplace --no-whole-file rs/ rs2/; echo x >>rs2/lines; rsync -a --inplace --no-whole-file "$FIX/" rs2/; cmp rs2/lines "$FIX/lines" && echo "rsync ok"
sqlite3 w.db 'PRAGMA journal_mode=WAL;' >/dev/null
sqlite3 w.db 'CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);'
for j in $(seq 1 20); do
  sqlite3 w.db "BEGIN; $(for i in $(seq 1 50); do echo "INSERT INTO t(v) VALUES(printf('%080d', $j * 1000 + $i) || '$j-$i');"; done) COMMIT;"
done
sqlite3 w.db 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null
sqlite3 w.db 'SELECT count(*), sum(length(v)) FROM t; PRAGMA integrity_check;'
sqlite3 r.db 'PRAGMA journal_mode=DELETE; CREATE TABLE t(x); INSERT INTO t VALUES(1),(2),(3); UPDATE t SET x=x*10; SELECT sum(x) FROM t;'
python3 - <<'EOP'
import mmap, os
with open("p", "wb") as f:
    for i in range(3000):
        f.write(b"%06d " % i * 7)
with open("p", "r+b") as f:
    f.seek(1000); f.write(b"OVERWRITE"); f.seek(0, 2); f.write(b"END")
    f.flush(); os.fsync(f.fileno())
    m = mmap.mmap(f.fileno(), 0); m[0:4] = b"MMAP"; print(m[1000:1009], len(m)); m.close()
with open("p", "ab") as f:
    f.write(b"tail"); print(f.tell())
os.truncate("p", 50000)
print(os.path.getsize("p"), os.stat("p").st_size)
fd = os.open("q", os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"x" * 10, 100000); os.lseek(fd, 0, 0); print(len(os.read(fd, 200000)))
print(os.lseek(fd, 0, os.SEEK_END)); os.close(fd)
# splice(2) out of a file whose bytes are still staged (split) or held in
# its format (virtual), and into a file: the shim's, never the kernel's
# view of the file.
body = b"0123456789abcdef" * 4096
with open("sp", "wb") as f:
    f.write(body); f.flush()
    src = os.open("sp", os.O_RDONLY)
    r, w = os.pipe()
    n = os.splice(src, w, 40000, offset_src=1000)
    got = os.read(r, n) if n > 0 else b""  # never waits on an empty pipe
    print("splice out", n, got == body[1000:1000 + n])
    os.write(w, b"SPLICED-IN")
    dst = os.open("sp2", os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(dst, b"head", 0)
    print("splice in", os.splice(r, dst, 10, offset_dst=2))
    os.close(dst); os.close(src); os.close(r); os.close(w)
with open("sp2", "rb") as f:
    print(f.read())
# A record lock survives the process's later opens of the file (a second
# SQLite connection): closing any descriptor of a file releases the
# process's locks on it, so the shim must never make and close a
# temporary one (it did, dup-then-move, at every overlay open).
import fcntl, sys
lk = os.open("lk", os.O_RDWR | os.O_CREAT, 0o644)
os.write(lk, b"x" * 4096)
fcntl.lockf(lk, fcntl.LOCK_EX, 100, 0)
again, ro = os.open("lk", os.O_RDWR), os.open("lk", os.O_RDONLY)
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    other = os.open("lk", os.O_RDWR)
    try:
        fcntl.lockf(other, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
        print("lock lost at a second open", flush=True)
    except OSError:
        print("lock held across a second open", flush=True)
    os._exit(0)
os.waitpid(pid, 0)
EOP
EOS

# Tree listing: names, types, sizes, hashes of the content (read by the
# kernel alone, or by `mapfs overlay cat`, which prints a virtualized
# file's content and a plain file's bytes).
listing() {  # DIR [cat]
  local reader=(cat); [ "${2:-}" = overlay ] && reader=("$mapfs" overlay cat)
  (cd "$1" && find . -path ./.mapfs-overlay -prune -o \( -type f -printf '%y %m %p\n' \) -o -printf '%y - %m %p\n' | sort &&
   find . -path ./.mapfs-overlay -prune -o -type f -print0 | sort -z | while IFS= read -r -d '' f; do
     printf '%s %s %s\n' "$("${reader[@]}" "$f" | wc -c)" "$("${reader[@]}" "$f" | sha256sum | cut -d' ' -f1)" "$f"; done)
}
# Every file of an overlay passes `mapfs overlay fsck` (plain ones trivially).
fsck_all() {
  [ "$engine" = virtual ] || return 0
  local bad; bad=$(cd "$1" && find . -path ./.mapfs-overlay -prune -o -type f -print0 |
    xargs -0 -r -n 50 "$mapfs" overlay fsck 2>&1 >/dev/null) || { echo "$bad" | head -5 >&2; return 1; }
}

run_case() {  # FS-PARENT LABEL MODE
  local parent=$1 label=$2 mode=$3
  local nat=$parent/native-$mode ovl=$parent/overlay-$mode
  rm -rf "$nat" "$ovl"; mkdir -p "$nat" "$ovl"
  local rc1=0 rc2=0
  R=$nat FIX=$work/fix bash -c "$SCRIPT" >"$work/nat.out" 2>"$work/nat.err" || rc1=$?
  R=$ovl FIX=$work/fix "$mapfs" run --overlay "$ovl" --engine "$engine" --mode "$mode" -- bash -c "$SCRIPT" >"$work/ovl.out" 2>"$work/ovl.err" || rc2=$?
  if [ "$rc1" != "$rc2" ] || ! cmp -s "$work/nat.out" "$work/ovl.out"; then
    echo "FAIL: $label $mode: output or status differs (native $rc1, overlay $rc2)" >&2
    diff "$work/nat.out" "$work/ovl.out" | head -20 >&2 || true; tail -5 "$work/ovl.err" >&2; fails=$((fails + 1)); return
  fi
  if ! diff <(listing "$nat") <(listing "$ovl" overlay) >"$work/tree.diff"; then
    echo "FAIL: $label $mode: files differ from the kernel's" >&2; head -20 "$work/tree.diff" >&2; fails=$((fails + 1)); return
  fi
  if ! fsck_all "$ovl"; then
    echo "FAIL: $label $mode: mapfs overlay fsck finds damage" >&2; fails=$((fails + 1)); return
  fi
  # Nothing left behind by processes that ended normally but for exec'd
  # ones' logs, which hold nothing: no staging file, no link.
  if ls "$ovl/.mapfs-overlay" 2>/dev/null | grep -q '^[st]-'; then
    echo "FAIL: $label $mode: staging files left behind: $(ls "$ovl/.mapfs-overlay")" >&2; fails=$((fails + 1)); return
  fi
  echo "ok: $engine $label $mode ($(wc -l <"$work/ovl.out") lines of output, same files)"
  # The ext4 image is small, and a virtualized file allocates in growing
  # chunks and keeps superseded blocks until its GC: space for what follows.
  rm -rf "$nat" "$ovl"
}

# Several sqlite3 processes writing one database at once (issue 15: rows
# whose COMMIT succeeded were lost), in WAL and in rollback-journal mode,
# compared with the kernel's run: every row kept, the database intact.
# SQLite's locks make the processes take turns; the engine's lock rule
# (docs/OVERLAY.md "Several processes") makes each see the others' writes.
# Checked to fail without each part of the rule: without the lock calls'
# publish and revalidate, the long connections lose rows; with a stale
# size in fstat, the short ones do.
read -r -d '' SQLITE_MP <<'EOS' || true
set -euo pipefail
cd "$R"
for jm in WAL DELETE; do
  db=mp-$jm.db
  sqlite3 "$db" "PRAGMA journal_mode=$jm; CREATE TABLE t(k INTEGER PRIMARY KEY, w INT, v TEXT);" >/dev/null
  tx() { echo "BEGIN IMMEDIATE; INSERT INTO t(w,v) VALUES($1, printf('%0300d', $2)); INSERT INTO t(w,v) VALUES($1, 'x'); COMMIT;"; }
  # One connection for many transactions, no fsync at commit: only the
  # lock calls tell the processes of each other's writes.
  long() { { echo '.timeout 10000'; echo 'PRAGMA synchronous=OFF;'; for j in $(seq 1 50); do tx "$1" "$j"; done; } | sqlite3 "$db" || echo "ERR $jm $1"; }
  # A process per transaction (fsync at commit): sizes by fstat at open.
  short() { for j in $(seq 1 8); do sqlite3 -cmd '.timeout 10000' "$db" "$(tx "$1" "$j")" || echo "ERR $jm $1 $j"; done; }
  long 1 & long 2 & short 3 &
  wait
  sqlite3 "$db" 'SELECT w, count(*), sum(length(v)) FROM t GROUP BY w; PRAGMA integrity_check;'
done
EOS

run_sqlite_mp() {  # FS-PARENT LABEL MODE
  local nat=$1/mp-native-$3 ovl=$1/mp-overlay-$3
  rm -rf "$nat" "$ovl"; mkdir -p "$nat" "$ovl"
  R=$nat bash -c "$SQLITE_MP" >"$work/mpn.out" 2>&1 || true
  R=$ovl "$mapfs" run --overlay "$ovl" --engine "$engine" --mode "$3" -- bash -c "$SQLITE_MP" >"$work/mpo.out" 2>&1 || true
  if grep -q ERR "$work/mpn.out" || ! cmp -s "$work/mpn.out" "$work/mpo.out"; then
    echo "FAIL: $engine concurrent sqlite3 on $2 $3 differs from the kernel's run" >&2
    diff "$work/mpn.out" "$work/mpo.out" | head -20 >&2 || true; fails=$((fails + 1))
  else
    echo "ok: $engine concurrent sqlite3 writers (WAL, rollback) on $2 $3"
  fi
  rm -rf "$nat" "$ovl"
}

# Locks held while the overlay works (docs/OVERLAY.md "Several processes"),
# compared with the kernel's run: a POSIX lock survives the engine's reopen
# of the file (A: before, its move of the new descriptor to a high number
# closed the low one, which released the lock); a close or dup2 that
# releases a lock first publishes this process's staged bytes to the lock's
# next holder (B, C: before, it saw the old size). D, the overlay's alone:
# an unlock whose publish fails (the file size limit) fails and keeps the
# lock. Each checked to fail without its fix.
read -r -d '' LOCKS <<'EOS' || true
import errno, fcntl, os, resource, signal, struct
R, OUT = os.environ["R"], os.environ["OUT"]
FL = "hhxxxxqqixxxx"  # struct flock on x86-64 and aarch64
def locked_elsewhere(fd):  # a child's F_GETLK: would a write lock conflict?
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        res = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(FL, fcntl.F_WRLCK, 0, 0, 0, 0))
        os.write(w, b"1" if struct.unpack(FL, res)[0] != fcntl.F_UNLCK else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    v = os.read(r, 1) == b"1"
    os.close(r); os.close(w)
    return v
# A: locked through a path outside the root (a descriptor the engine does
# not serve), then opened through the overlay, read-only and read-write.
p = os.path.join(R, "a")
with open(p, "wb") as f: f.write(b"x" * 100)
os.symlink(p, os.path.join(OUT, "lnk"))
lfd = os.open(os.path.join(OUT, "lnk"), os.O_RDWR)
fcntl.lockf(lfd, fcntl.LOCK_EX)
fd = os.open(p, os.O_RDONLY)
print("A locked after a read-only open:", locked_elsewhere(lfd))
fd2 = os.open(p, os.O_RDWR)
print("A locked after a read-write open:", locked_elsewhere(lfd))
os.close(fd2); os.close(fd); os.close(lfd)
# B, C: the lock's next holder (a child waiting for it) reads the size of a
# file appended to under the lock, which is released by close (B) or by a
# dup2 over the locking descriptor (C).
for case in "BC":
    d, l = os.path.join(R, case + ".data"), os.path.join(R, case + ".lock")
    open(d, "wb").close(); open(l, "wb").close()
    lfd = os.open(l, os.O_RDWR)
    fcntl.lockf(lfd, fcntl.LOCK_EX)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        fcntl.lockf(lfd, fcntl.LOCK_EX)
        os.write(w, str(os.stat(d).st_size).encode())
        os._exit(0)
    dfd = os.open(d, os.O_WRONLY | os.O_APPEND)
    os.write(dfd, b"y" * 5000)
    if case == "B":
        os.close(lfd)
    else:
        nfd = os.open("/dev/null", os.O_RDONLY)
        os.dup2(nfd, lfd)
        os.close(nfd); os.close(lfd)
    print(case, "size seen by the lock's next holder:", os.read(r, 32).decode())
    os.waitpid(pid, 0); os.close(dfd); os.close(r); os.close(w)
if os.environ.get("OVERLAY"):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    p = os.path.join(R, "d")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"a" * 100)
    fcntl.lockf(fd, fcntl.LOCK_EX)  # published: the staging file exists
    os.write(fd, b"b" * 10000)  # staged through its map, which the limit does not see
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        fcntl.lockf(fd, fcntl.LOCK_UN); print("D unlock: done")
    except OSError as e:
        print("D unlock:", errno.errorcode[e.errno])
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    print("D locked after the failed unlock:", locked_elsewhere(fd))
    fcntl.lockf(fd, fcntl.LOCK_UN)
    print("D unlocked:", not locked_elsewhere(fd), os.stat(p).st_size)
EOS

run_locks() {  # FS-PARENT LABEL MODE
  [ "$engine" = split ] || return 0
  local nat=$1/lk-native-$3 ovl=$1/lk-overlay-$3
  rm -rf "$nat" "$ovl" "$work/lk-out"; mkdir -p "$nat" "$ovl" "$work/lk-out"
  R=$nat OUT=$work/lk-out python3 -c "$LOCKS" >"$work/lkn.out" 2>&1 || true
  printf 'D unlock: EFBIG\nD locked after the failed unlock: True\nD unlocked: True 10100\n' >>"$work/lkn.out"
  rm -rf "$work/lk-out"; mkdir -p "$work/lk-out"
  R=$ovl OUT=$work/lk-out OVERLAY=1 "$mapfs" run --overlay "$ovl" --engine "$engine" --mode "$3" -- \
    python3 -c "$LOCKS" >"$work/lko.out" 2>&1 || true
  if ! grep -q "^C size" "$work/lkn.out" || ! cmp -s "$work/lkn.out" "$work/lko.out"; then
    echo "FAIL: $engine locks held while the overlay works on $2 $3 differ from the kernel's run" >&2
    diff "$work/lkn.out" "$work/lko.out" | head -20 >&2 || true; fails=$((fails + 1))
  else
    echo "ok: $engine locks kept across reopens, published before close and dup2, kept by a failed unlock on $2 $3"
  fi
  rm -rf "$nat" "$ovl" "$work/lk-out"
}

run_fsx() {  # FS-PARENT LABEL MODE
  local fsx; fsx=$(command -v fsx || true)
  [ -n "$fsx" ] || for d in "${CARGO_HOME:-$HOME/.cargo}/bin" /root/.cargo/bin; do [ -x "$d/fsx" ] && fsx=$d/fsx && break; done
  [ -n "$fsx" ] || { echo "FAIL: fsx is not installed (cargo install fsx)" >&2; fails=$((fails + 1)); return; }
  local d=$1/fsx-$3; mkdir -p "$d"
  if "$mapfs" run --overlay "$d" --engine "$engine" --mode "$3" -- "$fsx" -N "${FSX_OPS:-10000}" -S 42 -P "$work" "$d/fsx.dat" >"$work/fsx.log" 2>&1 &&
     grep -q "All operations completed A-OK" "$work/fsx.log" && fsck_all "$d"; then
    echo "ok: $engine fsx ${FSX_OPS:-10000} ops on $2 $3"; rm -rf "$d"
  else
    tail -20 "$work/fsx.log" >&2; echo "FAIL: $engine fsx on $2 $3" >&2; fails=$((fails + 1))
  fi
}

parents=("$work/tmpfs-side:tmpfs")
mkdir -p "$work/tmpfs-side"
# tmpfs: /tmp may be anything; the tmpfs side lives in /dev/shm.
shm=$(mktemp -d /dev/shm/mapfs-ovl-prog-XXXXXX); parents=("$shm:tmpfs")
trap 'cleanup; rm -rf "$shm"' EXIT
# The ext4 image lives in /dev/shm too: ext4 runs the same code (journal,
# commits, cache flushes to its loop device) whatever holds the image, and
# a flush of a tmpfs file costs nothing, where one of a disk file waits for
# the disk: the sync and strict rows (a commit per fsync or msync) took
# 94 s and 118 s in CI with the image in /tmp, most of it waiting on the
# disk (the virtual engine's strict row here: 209 s at load 4 with the
# image in /tmp, 56 s in /dev/shm).
if [ "$(id -u)" = 0 ]; then
  mnt=$work/ext4; mkdir -p "$mnt"
  if truncate -s 512M "$shm/ext4.img" && mkfs.ext4 -q -F -b 4096 "$shm/ext4.img" >/dev/null 2>&1 &&
     mount -o loop "$shm/ext4.img" "$mnt"; then
    parents+=("$mnt:ext4")
  else
    echo "FAIL: cannot loop-mount an ext4 image here (losetup impossible?)" >&2; fails=$((fails + 1)); mnt=
  fi
else
  echo "note: not root, the ext4 side is skipped"
fi
for p in "${parents[@]}"; do
  for mode in "${modes[@]}"; do
    run_case "${p%%:*}" "${p##*:}" "$mode"
    run_sqlite_mp "${p%%:*}" "${p##*:}" "$mode"
    run_locks "${p%%:*}" "${p##*:}" "$mode"
    run_fsx "${p%%:*}" "${p##*:}" "$mode"
  done
done
# The pool shim and the overlay in one process: files cross between them.
both=$shm/both; mkdir -p "$both"
"$mapfs" mkfs "$shm/p.pool" --size 64M >/dev/null
if "$mapfs" run --pool "$shm/p.pool" --mount /mapfs --overlay "$both" --engine "$engine" -- bash -c "
    set -e; cp '$work/fix/rand' '$both/x'; cp '$both/x' /mapfs/y; cat /mapfs/y >>'$both/x'; cp '$both/x' /mapfs/z
    cmp /mapfs/z '$both/x'; [ \$(stat -c %s /mapfs/z) = 6000000 ]" &&
   cmp <(cat "$work/fix/rand" "$work/fix/rand") <("$mapfs" overlay cat "$both/x") && "$mapfs" fsck "$shm/p.pool" >/dev/null; then
  echo "ok: pool and overlay in one process"
else
  echo "FAIL: pool and overlay in one process" >&2; fails=$((fails + 1))
fi
# ---- begin: concurrent sqlite3 processes, virtual engine (issue 15) ----
# Three sqlite3 processes write one database at once, in WAL mode (their
# WAL index is a MAP_SHARED map of w.db-shm, a virtualized file: direct
# maps, docs/OVERLAY.md "Maps shared between processes") and with a
# rollback journal (fcntl locks on w.db, kept across the engine's own
# opens). Every transaction commits (busy waits, not errors), none is lost,
# the database checks ok and every file passes fsck. Before the fix: "disk
# I/O error", "database disk image is malformed", rows missing. tmpfs only,
# ~1-2 s per journal mode. (The split engine's step, if any, is its own
# block.)
if [ "$engine" = virtual ]; then
  cat >"$work/sqlite_mp.sh" <<'SQLMP'
cd "$1"
sqlite3 w.db "PRAGMA journal_mode=$2; CREATE TABLE t(k INTEGER PRIMARY KEY, w INT, v TEXT);" >/dev/null
writer() {
  for j in $(seq 1 25); do
    sqlite3 -cmd '.timeout 20000' w.db "BEGIN IMMEDIATE; INSERT INTO t(w,v) VALUES($1, printf('%0300d', $j));
      INSERT INTO t(w,v) VALUES($1, 'x'); COMMIT;" || echo "ERR $1 $j"
  done
}
writer 1 & writer 2 & writer 3 &
wait
sqlite3 w.db 'SELECT w, count(*) FROM t GROUP BY w; PRAGMA integrity_check;'
SQLMP
  for mode in "${modes[@]}"; do
    for jm in WAL DELETE; do
      d=$shm/sqlite-mp-$jm-$mode; rm -rf "$d"; mkdir -p "$d"
      out=$("$mapfs" run --overlay "$d" --engine "$engine" --mode "$mode" -- bash "$work/sqlite_mp.sh" "$d" "$jm" 2>&1)
      if [ "$out" = "$(printf '1|50\n2|50\n3|50\nok')" ] && fsck_all "$d"; then
        echo "ok: $engine concurrent sqlite3 writers, $jm, $mode"
      else
        echo "FAIL: $engine concurrent sqlite3 writers, $jm, $mode:" >&2; echo "$out" | head -10 >&2; fails=$((fails + 1))
      fi
      rm -rf "$d"
    done
  done
fi
# ---- end: concurrent sqlite3 processes, virtual engine ----
[ "$fails" = 0 ] || { echo "FAIL: $fails overlay program cases" >&2; exit 1; }
echo "all overlay program cases passed ($engine engine)"
