#!/usr/bin/env bash
# SIGKILL a program writing through the virtual engine under the shim
# (`mapfs run --overlay DIR --engine virtual`), in each mode: every write
# the program saw return is in the file afterwards (read with `mapfs
# overlay cat`), none is torn, `mapfs overlay fsck` is clean, and the next
# process under the shim goes on where the killed one stopped (recovery at
# attach). The program appends numbered records to one file (O_APPEND) and
# overwrites numbered slots of another (pwrite, unaligned), and reports each
# write after it returned on a descriptor outside the overlay.
# Usage: virtual_shim_crash_test.sh PATH/TO/mapfs [ROUNDS]
set -euo pipefail
mapfs=$(realpath -e -- "$1")
rounds=${2:-8}
work=$(mktemp -d /dev/shm/mapfs-vshim-crash-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0

cat >"$work/writer.py" <<'EOP'
import os, sys
d, acks = sys.argv[1], open(sys.argv[2], "a", buffering=1)
REC = 1000   # an append record: its number repeated, then a newline
SLOT = 3000  # an overwrite slot (not block-aligned): its number and generation repeated
log = os.open(d + "/log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
n = os.fstat(log).st_size // REC
slots = os.open(d + "/slots", os.O_RDWR | os.O_CREAT, 0o644)
g = n
while True:
    rec = (b"%08d," % n) * (REC // 9)
    rec = rec + b"." * (REC - 1 - len(rec)) + b"\n"
    os.write(log, rec)
    acks.write("a %d\n" % n)
    s = n % 40
    val = (b"%04d:%08d;" % (s, g)) * (SLOT // 14)
    val = val + b"#" * (SLOT - len(val))
    os.pwrite(slots, val, s * SLOT + 7)
    acks.write("s %d %d\n" % (s, g))
    n += 1
    g += 1
EOP

check() {  # DIR ACKS LABEL
  local d=$1 acks=$2 label=$3
  "$mapfs" overlay cat "$d/log" >"$work/log.txt"
  "$mapfs" overlay cat "$d/slots" >"$work/slots.bin"
  python3 - "$work/log.txt" "$work/slots.bin" "$acks" <<'EOP' || return 1
import sys
log, slots, acks = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read(), open(sys.argv[3]).read().split("\n")
REC, SLOT = 1000, 3000
if len(log) % REC:
    sys.exit("log: %d bytes, not whole records (a torn append)" % len(log))
for i in range(len(log) // REC):
    rec = log[i * REC:(i + 1) * REC]
    want = (b"%08d," % i) * (REC // 9)
    if rec != want + b"." * (REC - 1 - len(want)) + b"\n":
        sys.exit("log: record %d damaged" % i)
last_a, last_s = -1, {}
for line in acks:
    f = line.split()
    if len(f) == 2 and f[0] == "a": last_a = max(last_a, int(f[1]))
    if len(f) == 3 and f[0] == "s": last_s[int(f[1])] = int(f[2])
if len(log) // REC <= last_a:
    sys.exit("log: %d records, but record %d was acknowledged" % (len(log) // REC, last_a))
for s, g in last_s.items():
    got = slots[s * SLOT + 7:(s + 1) * SLOT + 7]
    head = got[:14]
    if len(got) != SLOT or not head.startswith(b"%04d:" % s):
        sys.exit("slots: slot %d missing" % s)
    gen = int(head[5:13])
    val = (b"%04d:%08d;" % (s, gen)) * (SLOT // 14)
    if got != val + b"#" * (SLOT - len(val)):
        sys.exit("slots: slot %d torn" % s)
    if gen < g:
        sys.exit("slots: slot %d has generation %d, %d was acknowledged" % (s, gen, g))
print("%d records, %d slots acknowledged" % (len(log) // REC, len(last_s)))
EOP
  "$mapfs" overlay fsck "$d/log" "$d/slots" >/dev/null || { echo "fsck finds damage" >&2; return 1; }
}

for mode in posix sync strict; do
  d=$work/$mode; mkdir -p "$d"; acks=$work/acks-$mode; : >"$acks"
  for r in $(seq 1 "$rounds"); do
    "$mapfs" run --overlay "$d" --engine virtual --mode "$mode" -- python3 "$work/writer.py" "$d" "$acks" &
    pid=$!
    # A random point once the writer is writing (its start-up under a
    # loaded machine takes long): tens to hundreds of writes in.
    had=$(wc -l <"$acks")
    for _ in $(seq 1 600); do [ "$(wc -l <"$acks")" -gt "$had" ] && break; sleep 0.05; done
    sleep "0.$((RANDOM % 3))$((RANDOM % 10))"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if ! out=$(check "$d" "$acks" "$mode round $r" 2>&1); then
      echo "FAIL: $mode round $r: $out" >&2; fails=$((fails + 1)); break
    fi
  done
  [ -f "$d/log" ] && echo "ok: $mode, $rounds kills: $out"
done
[ "$fails" = 0 ] || exit 1
echo "all kills recovered"
