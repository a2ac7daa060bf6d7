#!/usr/bin/env bash
# The daemon stopped by a signal. For SIGINT and SIGTERM: it unmounts DIR,
# closes what was open, unmounts the core cleanly (fsck clean with no
# recovery) and exits 0. For SIGKILL: the dead mount is lazily unmounted
# (fusermount3 -u -z), the next mount recovers the pool (journal replay,
# orphans freed), and fsck is clean. In every case each file whose fsync
# through the mount returned is there with its exact content.
#
# The daemon runs as `mapfs mount -f ... &`: bash starts background jobs
# with SIGINT ignored, which is the case the daemon must undo.
# Usage: signal_test.sh PATH/TO/mapfs
source "$(dirname "$0")/common.sh" "$@"

# The writer: creates files through the mount, each with content derived
# from its name, fsyncs it, then logs its name (only then is it
# acknowledged). Runs until it fails (the mount went away) or is killed.
# Every name is reached from a descriptor of the mount's root, so once the
# mount is gone nothing lands in the directory under it.
cat >"$WORK/writer.py" <<'EOF'
import os, random, sys
mnt, log, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def content(i):
    r = random.Random(i)
    return r.randbytes(r.choice([0, 1, 4095, 4096, 10000, 70001, 300000]))
root = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
with open(log, "a") as lg:
    for i in range(first, first + count):
        name = f"d{i % 7}/f{i}"
        try:
            try:
                os.mkdir(f"d{i % 7}", dir_fd=root)
            except FileExistsError:
                pass
            fd = os.open(name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644, dir_fd=root)
            data = content(i)
            off = 0
            while off < len(data):
                off += os.write(fd, data[off:off + 65536])
            os.fsync(fd)
            os.close(fd)
        except OSError:
            sys.exit(0)
        lg.write(f"{i} {name}\n")
        lg.flush()
EOF

# check.py MNT LOG: every logged file has its content.
cat >"$WORK/check.py" <<'EOF'
import os, random, sys
mnt, log = sys.argv[1], sys.argv[2]
n = 0
for line in open(log):
    i, name = line.split()
    r = random.Random(int(i))
    want = r.randbytes(r.choice([0, 1, 4095, 4096, 10000, 70001, 300000]))
    with open(os.path.join(mnt, name), "rb") as f:
        got = f.read()
    if got != want:
        sys.exit(f"{name}: {len(got)} bytes read, {len(want)} written and fsync'd")
    n += 1
print(n)
EOF

# Waits (30 s at most) for child $1 to end; sets EXIT_CODE.
wait_exit() {
  local i state
  for i in $(seq 1 600); do
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)
    if [ -z "$state" ] || [ "$state" = Z ]; then
      EXIT_CODE=0
      wait "$1" || EXIT_CODE=$?
      return 0
    fi
    sleep 0.05
  done
  fail "process $1 did not end within 30 s of $2"
}

for sig in INT TERM KILL; do
  P=$WORK/pool-$sig M=$WORK/mnt-$sig L=$WORK/log-$sig
  "$MAPFS" mkfs "$P" --size 512M --mode posix ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
  mkdir -p "$M"
  : >"$L"
  "$MAPFS" mount "$P" "$M" -f 2>"$WORK/daemon-$sig.err" &
  daemon=$!
  FUSE_MOUNTED+=("$M")
  wait_mounted "$M"
  # Files written and fsync'd while nothing else runs...
  python3 "$WORK/writer.py" "$M" "$L" 0 40 || fail "writer"
  [ "$(wc -l <"$L")" = 40 ] || fail "SIG$sig: the first 40 files were not all written"
  # ... and more being written while the signal arrives.
  python3 "$WORK/writer.py" "$M" "$L" 1000 100000 &
  writer=$!
  while [ "$(wc -l <"$L")" -lt 60 ]; do
    kill -0 "$writer" 2>/dev/null || fail "SIG$sig: the writer stopped early"
    sleep 0.05
  done
  kill -s "$sig" "$daemon"
  wait_exit "$daemon" "SIG$sig"
  code=$EXIT_CODE
  wait_exit "$writer" "the daemon's end (the writer)"
  acked=$(wc -l <"$L")
  if [ "$sig" != KILL ]; then
    [ "$code" = 0 ] || { cat "$WORK/daemon-$sig.err" >&2; fail "SIG$sig: the daemon exited with $code, not 0"; }
    ! is_mounted "$M" || fail "SIG$sig: $M is still mounted after the daemon ended"
    "$MAPFS" fsck "$P" >"$WORK/fsck-$sig" || { cat "$WORK/fsck-$sig" >&2; fail "SIG$sig: fsck after the daemon ended"; }
    "$MAPFS" info "$P" >"$WORK/info-$sig" || fail "mapfs info"
    grep -q "state *clean" "$WORK/info-$sig" || fail "SIG$sig: the pool was not left clean"
  else
    [ "$code" = 137 ] || fail "SIGKILL: the daemon exited with $code, not 137"
    is_mounted "$M" || fail "SIGKILL: the dead mount vanished by itself (expected it to stay until unmounted)"
    fusermount3 -u -z "$M" || fail "fusermount3 -u -z of the dead mount"
    ! is_mounted "$M" || fail "SIGKILL: $M is still mounted after fusermount3 -u -z"
  fi
  # The next mount (after SIGKILL: the one that recovers the pool).
  mount_pool "$P" "$M"
  n=$(python3 "$WORK/check.py" "$M" "$L") || fail "SIG$sig: a file acknowledged by fsync is missing or wrong"
  [ "$n" = "$acked" ] && [ "$n" -ge 60 ] || fail "SIG$sig: checked $n files of $acked"
  unmount "$M"
  "$MAPFS" fsck "$P" >"$WORK/fsck-$sig" || { cat "$WORK/fsck-$sig" >&2; fail "SIG$sig: fsck after the remount"; }
  if [ "$sig" = KILL ]; then
    "$MAPFS" info "$P" >"$WORK/info-$sig" || fail "mapfs info"
    grep -Eq "[1-9][0-9]* recoveries" "$WORK/info-$sig" || fail "SIGKILL: the remount did not recover the pool"
  fi
  echo "SIG$sig: daemon exit $code, $n fsync'd files intact, fsck clean"
done
echo "signals: ok"
