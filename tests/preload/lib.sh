# Differential harness for the LD_PRELOAD shim, sourced by each
# tests/preload/*_test.sh as `source lib.sh "$@"` ($1 = the mapfs binary).
#
#   on_both [LABEL] 'SCRIPT'
#
# runs the bash SCRIPT twice on fresh state:
#   mapfs side : mapfs run --pool POOL --mount /mapfs -- bash -c SCRIPT, R=/mapfs/t
#                (a fresh 512M pool in /dev/shm for every on_both)
#   native side: bash -c SCRIPT, R=<fresh dir on tmpfs>/t
# and compares, byte for byte: the exit status, the script's stdout (with R
# and S replaced by @R@ and @S@), and a listing of the tree under R (names,
# types, sizes, modes, link counts of files, symlink targets, sha256 of
# contents) made by find + sha256sum under the same shim in a separate
# `mapfs run` (so it also shows that the tree survived the unmount). After
# every `mapfs run`, `mapfs fsck POOL` must say clean.
#
# Inside SCRIPT (bash, set -euo pipefail, LC_ALL=C, TZ=UTC, umask 022, cwd R):
#   R    the directory under test (created empty, absent before)
#   S    a scratch directory on the kernel's tmpfs, one per side (TMPDIR=S)
#   FIX  read-only fixtures on tmpfs shared by both sides (see make_fixtures)
#   mktree DIR   makes a small deterministic tree (dirs, empty/odd-sized
#                files, spaces in names, a hidden file, symlinks, modes)
#
# Knobs, set before on_both (reset after it):
#   NOHASH='ERE'  files whose relative path matches are listed without size
#                 and hash (contents that legitimately differ: .git/index)
#   NOTREE=1      compare stdout and status only (e.g. LevelDB's layout)
#
# MAPFS_PRELOAD_KEEP_GOING=1 reports every differing step instead of stopping
# at the first.
# MAPFS_PRELOAD_DRY=1 replaces the mapfs side by a second native run in
# another tmpfs directory: it checks the scripts themselves (it must pass,
# and needs no mapfs binary; dry_run.sh runs every group so).
# MAPFS_PRELOAD_KEEP=1 keeps the work dir (per step: native.result,
# mapfs.result, *.out, *.err, the pool). MAPFS_PRELOAD_MOUNT changes the
# mount prefix (default /mapfs).
set -euo pipefail
export LC_ALL=C TZ=UTC
umask 022

PRELOAD_DRY=${MAPFS_PRELOAD_DRY:-0}
MOUNT=${MAPFS_PRELOAD_MOUNT:-/mapfs}
if [ "$PRELOAD_DRY" = 1 ]; then
  MAPFS=${1:-}
else
  [ $# -ge 1 ] || { echo "usage: $0 PATH/TO/mapfs [ARGS...]" >&2; exit 2; }
  MAPFS=$(realpath -e -- "$1") || { echo "FAIL: mapfs binary $1 not found" >&2; exit 1; }
fi
TEST_NAME=$(basename "$0" .sh)
WORK=$(mktemp -d /dev/shm/mapfs-preload-XXXXXX)
FIX=$WORK/fix
PRELOAD_SHM=()   # /dev/shm names belonging to our pools (segment, lock file)
PRELOAD_N=0
PRELOAD_FAILED=0
cd "$WORK"
NOHASH=
NOTREE=0

preload_cleanup() {
  local s
  for s in ${PRELOAD_SHM[@]+"${PRELOAD_SHM[@]}"}; do rm -rf -- "$s" "$s".* 2>/dev/null || true; done
  if [ "${MAPFS_PRELOAD_KEEP:-0}" = 1 ]; then
    echo "work dir kept: $WORK" >&2
  else
    rm -rf -- "$WORK"
  fi
}
trap preload_cleanup EXIT

fail() { echo "FAIL [$TEST_NAME]: $*" >&2; exit 1; }

# need PROG DEBIAN-PACKAGE: the test fails (never skips) when PROG is missing.
need() {
  command -v "$1" >/dev/null 2>&1 ||
    fail "'$1' is not installed (Debian package $2; scripts/install-deps.sh installs it)"
}
need find findutils
need sha256sum coreutils

# The fixtures both sides read from (never written by the scripts).
make_fixtures() {
  mkdir -p "$FIX"
  head -c 1048576 /dev/urandom >"$FIX/rand1m"
  head -c 300007 /dev/urandom >"$FIX/rand300k"
  awk 'BEGIN { for (i = 1; i <= 20000; i++) printf "line %05d %d %s\n", i, (i * 7919) % 10007, (i % 3 ? "abc" : "xyzzy") }' >"$FIX/text"
}
make_fixtures

# Defined inside every script (prepended to it).
PRELOAD_PRELUDE='set -euo pipefail
R=$1 S=$2 FIX=$3
export LC_ALL=C TZ=UTC TMPDIR=$S
umask 022
mktree() {
  mkdir -p "$1/a/b/c" "$1/empty dir" "$1/d2"
  : >"$1/empty"
  printf "hello\n" >"$1/hello.txt"
  head -c 4097 "$FIX/rand1m" >"$1/a/odd"
  head -c 65536 "$FIX/rand300k" >"$1/a/b/64k"
  head -c 200000 "$FIX/text" >"$1/a/b/c/text part"
  printf "secret\n" >"$1/.hidden"
  printf "#!/bin/sh\necho hi\n" >"$1/d2/run.sh"
  chmod 755 "$1/d2/run.sh"
  printf "ro\n" >"$1/d2/readonly"
  chmod 444 "$1/d2/readonly"
  printf "priv\n" >"$1/d2/private"
  chmod 600 "$1/d2/private"
  ln -s hello.txt "$1/link"
  ln -s a/b/c "$1/dirlink"
  ln -s nowhere "$1/dangling"
}
mkdir "$R"
cd "$R"
'

# Lists the tree under $1 (run as: bash -c "$PRELOAD_LISTER" bash ROOT).
PRELOAD_LISTER='set -euo pipefail
export LC_ALL=C
cd /
find "$1" \( -type d -printf "%P d %m\n" \) -o \( -type l -printf "%P l %s %m -> %l\n" \) \
  -o \( -type f -printf "%P f %s %m n=%n\n" \) -o -printf "%P %y %s %m\n" | sort
echo "--- sha256 ---"
find "$1" -type f -print0 | sort -z | xargs -0 -r sha256sum
'

# normalize ROOT SCRATCH < text: ROOT -> @R@, SCRATCH -> @S@.
normalize() {
  local text
  text=$(cat; printf x)
  text=${text%x}
  text=${text//"$1"/@R@}
  text=${text//"$2"/@S@}
  printf '%s' "$text"
}

# Files whose path matches $NOHASH keep their name, type, mode and links in
# the listing, but not their size ("?") nor their hash ("(not hashed)").
drop_hashes() {
  local line p re='^(.*) f [0-9]+ ([0-7]+ n=[0-9]+)$'
  while IFS= read -r line; do
    if [ -n "$NOHASH" ] && [[ $line =~ $re ]] && [[ ${BASH_REMATCH[1]} =~ $NOHASH ]]; then
      [[ $line =~ $re ]]
      printf '%s f ? %s\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
      continue
    fi
    p=${line#*  @R@/}
    if [ -n "$NOHASH" ] && [ "$p" != "$line" ] && [[ $p =~ $NOHASH ]]; then
      printf '(not hashed)  @R@/%s\n' "$p"
    else
      printf '%s\n' "$line"
    fi
  done
}

# fsck_clean POOL WHAT
fsck_clean() {
  local out
  if ! out=$("$MAPFS" fsck "$1" 2>&1); then
    fail "mapfs fsck after $2 is not clean (exit status $?):"$'\n'"$out"
  fi
  grep -q ': clean$' <<<"$out" || fail "mapfs fsck after $2 does not say clean:"$'\n'"$out"
}

# run_mapfs POOL WHAT CMD...: CMD under the shim; sets rc. Checks that nothing
# leaked into a real $MOUNT and that fsck is clean afterwards.
run_mapfs() {
  local pool=$1 what=$2; shift 2
  local existed=0
  [ -e "$MOUNT" ] && existed=1
  set +e
  "$MAPFS" run --pool "$pool" --mount "$MOUNT" -- "$@"
  rc=$?
  set -e
  if [ $existed = 0 ] && [ -e "$MOUNT" ]; then
    fail "$what: a real $MOUNT appeared on the kernel's file system: the shim let paths under $MOUNT through (remove $MOUNT by hand)"
  fi
  fsck_clean "$pool" "$what"
}

# side_result ROOT SCRATCH RC OUT TREE: what is compared, normalized.
side_result() {
  printf 'exit status %s\n--- stdout ---\n' "$3"
  normalize "$1" "$2" <"$4"
  printf '\n--- tree ---\n'
  if [ "$NOTREE" = 1 ]; then
    echo "(not compared)"
  else
    normalize "$1" "$2" <"$5" | drop_hashes
  fi
}

on_both() {
  local label script
  if [ $# -ge 2 ]; then label=$1 script=$2; else script=$1 label="step"; fi
  PRELOAD_N=$((PRELOAD_N + 1))
  label="#$PRELOAD_N $label"
  local d=$WORK/$PRELOAD_N
  mkdir -p "$d/native/s" "$d/other/s"
  local full="$PRELOAD_PRELUDE$script"
  local t0=$SECONDS rc

  # Native side: the reference. A failure here is a bug in the test script.
  local nroot=$d/native/t nrc
  set +e
  bash -c "$full" bash "$nroot" "$d/native/s" "$FIX" >"$d/native.out" 2>"$d/native.err"
  nrc=$?
  set -e
  if [ $nrc != 0 ]; then
    echo "--- native stderr ---" >&2
    cat "$d/native.err" >&2
    fail "$label: the native (tmpfs) run failed with status $nrc: the test script is wrong or a program is missing"
  fi
  if [ "$NOTREE" = 1 ]; then : >"$d/native.tree"; else
    bash -c "$PRELOAD_LISTER" bash "$nroot" >"$d/native.tree" 2>"$d/native.lerr" ||
      fail "$label: native listing failed: $(cat "$d/native.lerr")"
  fi

  # The side under test: mapfs (or, dry, a second tmpfs directory).
  local oroot orc side lrc=0
  : >"$d/other.lerr"
  if [ "$PRELOAD_DRY" = 1 ]; then
    side=dry
    oroot=$d/other/t
    set +e
    bash -c "$full" bash "$oroot" "$d/other/s" "$FIX" >"$d/other.out" 2>"$d/other.err"
    orc=$?
    set -e
    if [ "$NOTREE" = 1 ]; then : >"$d/other.tree"; else
      bash -c "$PRELOAD_LISTER" bash "$oroot" >"$d/other.tree" 2>"$d/other.lerr" || lrc=$?
    fi
  else
    side=mapfs
    oroot=$MOUNT/t
    local pool=$d/pool uuid mk
    mk=$("$MAPFS" mkfs "$pool" --size 512M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} 2>&1) || fail "$label: mapfs mkfs $pool: $mk"
    uuid=$(od -An -tx1 -j16 -N16 "$pool" | tr -d ' \n')
    PRELOAD_SHM+=("/dev/shm/mapfs-$uuid")
    run_mapfs "$pool" "$label (script)" bash -c "$full" bash "$oroot" "$d/other/s" "$FIX" \
      >"$d/other.out" 2>"$d/other.err"
    orc=$rc
    if [ "$NOTREE" = 1 ]; then : >"$d/other.tree"; else
      run_mapfs "$pool" "$label (listing)" bash -c "$PRELOAD_LISTER" bash "$oroot" \
        >"$d/other.tree" 2>"$d/other.lerr"
      lrc=$rc
    fi
    # The tree must be in the pool, as the CLI (no shim) sees it.
    if [ $orc = 0 ]; then
      "$MAPFS" ls "$pool" / 2>&1 | grep -qx t ||
        fail "$label: after the run, 'mapfs ls POOL /' does not show t: $("$MAPFS" ls "$pool" / 2>&1)"
    fi
  fi

  side_result "$nroot" "$d/native/s" "$nrc" "$d/native.out" "$d/native.tree" >"$d/native.result"
  side_result "$oroot" "$d/other/s" "$orc" "$d/other.out" "$d/other.tree" >"$d/$side.result"
  if [ $lrc != 0 ] || ! cmp -s "$d/native.result" "$d/$side.result"; then
    {
      echo "=== MISMATCH in $TEST_NAME $label: native (tmpfs) vs $side ==="
      echo "--- script ---"
      printf '%s\n' "$script"
      echo "--- diff -u native $side (status, stdout with R=@R@ S=@S@, tree) ---"
      diff -u --label native --label "$side" "$d/native.result" "$d/$side.result" || true
      [ $lrc = 0 ] || echo "--- $side listing failed (status $lrc) ---"
      echo "--- $side stderr ---"
      cat "$d/other.err"
      cat "$d/other.lerr"
      echo "--- native stderr ---"
      cat "$d/native.err"
    } >&2
    PRELOAD_FAILED=$((PRELOAD_FAILED + 1))
    [ "${MAPFS_PRELOAD_KEEP_GOING:-0}" = 1 ] || fail "$label: $side differs from native (diff above)"
    echo "FAIL [$TEST_NAME]: $label: $side differs from native (diff above)" >&2
  else
    echo "ok $label ($((SECONDS - t0)) s)"
  fi
  NOHASH= NOTREE=0
}

# Call at the end of a test script.
finish() {
  [ $PRELOAD_FAILED = 0 ] || fail "$PRELOAD_FAILED of $PRELOAD_N steps differ"
  echo "PASS [$TEST_NAME]: $PRELOAD_N steps match$([ "$PRELOAD_DRY" = 1 ] && echo ' (dry: tmpfs vs tmpfs)')"
}
