#!/usr/bin/env bash
# Real programs under `mapfs run --overlay DIR` (split engine), compared byte
# for byte with the same script run by the kernel alone: coreutils (cp, cat,
# dd, sort, split, tee, truncate), shell appends, tar, sqlite3 (WAL and
# rollback journal), python (appends, seeks, truncate, mmap), and fsx on an
# overlay file. On tmpfs, and on ext4 in a loop-mounted image when this
# machine allows it (root); in each mode.
# Usage: programs_test.sh PATH/TO/mapfs [MODES...]
set -euo pipefail
export LC_ALL=C TZ=UTC
umask 022
mapfs=$(realpath -e -- "$1"); shift
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
EOP
EOS

# Tree listing: names, types, sizes, hashes (made by the kernel alone).
listing() { (cd "$1" && find . -path ./.mapfs-overlay -prune -o \( -type f -printf '%y %s %m %p\n' \) -o -printf '%y - %m %p\n' | sort &&
             find . -path ./.mapfs-overlay -prune -o -type f -print0 | sort -z | xargs -0 sha256sum); }

run_case() {  # FS-PARENT LABEL MODE
  local parent=$1 label=$2 mode=$3
  local nat=$parent/native-$mode ovl=$parent/overlay-$mode
  rm -rf "$nat" "$ovl"; mkdir -p "$nat" "$ovl"
  local rc1=0 rc2=0
  R=$nat FIX=$work/fix bash -c "$SCRIPT" >"$work/nat.out" 2>"$work/nat.err" || rc1=$?
  R=$ovl FIX=$work/fix "$mapfs" run --overlay "$ovl" --mode "$mode" -- bash -c "$SCRIPT" >"$work/ovl.out" 2>"$work/ovl.err" || rc2=$?
  if [ "$rc1" != "$rc2" ] || ! cmp -s "$work/nat.out" "$work/ovl.out"; then
    echo "FAIL: $label $mode: output or status differs (native $rc1, overlay $rc2)" >&2
    diff "$work/nat.out" "$work/ovl.out" | head -20 >&2 || true; tail -5 "$work/ovl.err" >&2; fails=$((fails + 1)); return
  fi
  if ! diff <(listing "$nat") <(listing "$ovl") >"$work/tree.diff"; then
    echo "FAIL: $label $mode: files differ from the kernel's" >&2; head -20 "$work/tree.diff" >&2; fails=$((fails + 1)); return
  fi
  # Nothing left behind by processes that ended normally but for exec'd
  # ones' logs, which hold nothing: no staging file, no link.
  if ls "$ovl/.mapfs-overlay" | grep -q '^[st]-'; then
    echo "FAIL: $label $mode: staging files left behind: $(ls "$ovl/.mapfs-overlay")" >&2; fails=$((fails + 1)); return
  fi
  echo "ok: $label $mode ($(wc -l <"$work/ovl.out") lines of output, same files)"
}

run_fsx() {  # FS-PARENT LABEL MODE
  local fsx; fsx=$(command -v fsx || true)
  [ -n "$fsx" ] || for d in "${CARGO_HOME:-$HOME/.cargo}/bin" /root/.cargo/bin; do [ -x "$d/fsx" ] && fsx=$d/fsx && break; done
  [ -n "$fsx" ] || { echo "FAIL: fsx is not installed (cargo install fsx)" >&2; fails=$((fails + 1)); return; }
  local d=$1/fsx-$3; mkdir -p "$d"
  if "$mapfs" run --overlay "$d" --mode "$3" -- "$fsx" -N "${FSX_OPS:-20000}" -S 42 -P "$work" "$d/fsx.dat" >"$work/fsx.log" 2>&1 &&
     grep -q "All operations completed A-OK" "$work/fsx.log"; then
    echo "ok: fsx ${FSX_OPS:-20000} ops on $2 $3"
  else
    tail -20 "$work/fsx.log" >&2; echo "FAIL: fsx on $2 $3" >&2; fails=$((fails + 1))
  fi
}

parents=("$work/tmpfs-side:tmpfs")
mkdir -p "$work/tmpfs-side"
# tmpfs: /tmp may be anything; the tmpfs side lives in /dev/shm.
shm=$(mktemp -d /dev/shm/mapfs-ovl-prog-XXXXXX); parents=("$shm:tmpfs")
trap 'cleanup; rm -rf "$shm"' EXIT
if [ "$(id -u)" = 0 ]; then
  mnt=$work/ext4; mkdir -p "$mnt"
  if truncate -s 512M "$work/ext4.img" && mkfs.ext4 -q -F -b 4096 "$work/ext4.img" >/dev/null 2>&1 &&
     mount -o loop "$work/ext4.img" "$mnt"; then
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
    run_fsx "${p%%:*}" "${p##*:}" "$mode"
  done
done
# The pool shim and the overlay in one process: files cross between them.
both=$shm/both; mkdir -p "$both"
"$mapfs" mkfs "$shm/p.pool" --size 64M >/dev/null
if "$mapfs" run --pool "$shm/p.pool" --mount /mapfs --overlay "$both" -- bash -c "
    set -e; cp '$work/fix/rand' '$both/x'; cp '$both/x' /mapfs/y; cat /mapfs/y >>'$both/x'; cp '$both/x' /mapfs/z
    cmp /mapfs/z '$both/x'; [ \$(stat -c %s /mapfs/z) = 6000000 ]" &&
   cmp <(cat "$work/fix/rand" "$work/fix/rand") "$both/x" && "$mapfs" fsck "$shm/p.pool" >/dev/null; then
  echo "ok: pool and overlay in one process"
else
  echo "FAIL: pool and overlay in one process" >&2; fails=$((fails + 1))
fi
[ "$fails" = 0 ] || { echo "FAIL: $fails overlay program cases" >&2; exit 1; }
echo "all overlay program cases passed"
