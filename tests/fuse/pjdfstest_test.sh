#!/usr/bin/env bash
# pjdfstest (the Rust suite from crates.io) on a tmpfs directory and on a
# FUSE mount of a fresh pool, in the same run: every test that passes on
# tmpfs must pass on the mount, except those listed in EXCEPTIONS below (and
# in README.md, "The FUSE mount", with the reason). Then unmount and fsck.
# Runs as root for the whole suite (tests that switch users need it; as
# another user pjdfstest skips them on both sides).
# Usage: pjdfstest_test.sh PATH/TO/mapfs [MOUNT-ARGS...]
# (fuse.pjdfstest-no-default-permissions passes --no-default-permissions:
# then the daemon's checks, as each request's caller, are the only ones.)
source "$(dirname "$0")/common.sh" "$@"
MOUNT_ARGS=("${@:2}")

# Tests allowed to pass on tmpfs and fail on the mount (none today).
EXCEPTIONS=()

pjd=$(command -v pjdfstest || true)
[ -n "$pjd" ] || for d in "${CARGO_HOME:-$HOME/.cargo}/bin" /root/.cargo/bin; do
  [ -x "$d/pjdfstest" ] && pjd=$d/pjdfstest && break
done
[ -n "$pjd" ] || fail "pjdfstest is not installed (cargo install pjdfstest; scripts/install-deps.sh does it)"

# Two users and their groups for the tests that switch users: accounts
# every Debian system has.
for ug in nobody:nogroup daemon:daemon; do
  getent passwd "${ug%:*}" >/dev/null && getent group "${ug#*:}" >/dev/null ||
    fail "pjdfstest needs user ${ug%:*} and group ${ug#*:}"
done
cat >"$WORK/pjdfstest.toml" <<'EOF'
# What tmpfs and mapfs both offer (pjdfstest -l lists the optional features).
[features]
posix_fallocate = {}
utime_now = {}
utimensat = {}
rename_ctime = {}

[settings]
naptime = 0.01
allow_remount = false

[dummy_auth]
entries = [["nobody", "nogroup"], ["daemon", "daemon"]]
EOF

# Both trees have paths of the same length: pjdfstest builds its
# longest-path cases from the length of the directory it is given.
P=$WORK/pool T=$WORK/tmpfs M=$WORK/mapfs
chmod 0755 "$WORK"  # the other users must reach both trees
mkdir -p "$T" "$WORK/other"
# --top-level 9: files may reach 64 GiB (pjdfstest writes at 2 GiB); the
# pool file stays sparse.
"$MAPFS" mkfs "$P" --size 1G --top-level 9 ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
mount_pool "$P" "$M" "${MOUNT_ARGS[@]}"
mkdir "$M/other"

# run DIR SECONDARY NAME: pjdfstest on DIR (SECONDARY: a directory on
# another file system, for the EXDEV cases); NAME.list gets "test result".
run() {
  (cd "$1" && "$pjd" -c "$WORK/pjdfstest.toml" -p "$1" -s "$2") >"$WORK/$3.log" 2>&1 || true
  awk '$1 ~ /::/ && ($NF == "ok" || $NF == "FAILED" || $NF == "skipped") {print $1, $NF}' "$WORK/$3.log" |
    sort >"$WORK/$3.list"
  grep -q "^Summary:" "$WORK/$3.log" || { tail -30 "$WORK/$3.log" >&2; fail "pjdfstest did not finish on $1"; }
}
run "$T" "$M/other" tmpfs
run "$M" "$WORK/other" mapfs

count() { grep -c " $2\$" "$WORK/$1.list" || true; }
for n in tmpfs mapfs; do
  echo "$n: $(count $n ok) passed, $(count $n FAILED) failed, $(count $n skipped) skipped"
done
[ "$(count tmpfs ok)" -ge 300 ] || fail "only $(count tmpfs ok) pjdfstest tests passed on tmpfs: the run is broken"

# Passing on tmpfs but not on the mount.
join <(awk '$2 == "ok" {print $1}' "$WORK/tmpfs.list") <(awk '$2 != "ok" {print $1, $2}' "$WORK/mapfs.list") \
  >"$WORK/regressed" || true
# Tests that ran on tmpfs but not at all on the mount count too.
comm -23 <(awk '$2 == "ok" {print $1}' "$WORK/tmpfs.list") <(awk '{print $1}' "$WORK/mapfs.list") |
  sed 's/$/ missing/' >>"$WORK/regressed"
bad=0
while read -r name result; do
  allowed=0
  for e in "${EXCEPTIONS[@]}"; do [ "$e" = "$name" ] && allowed=1; done
  if [ $allowed = 1 ]; then
    echo "exception (README): $name $result"
  else
    echo "FAIL: $name passes on tmpfs but is $result on the mount:" >&2
    awk -v t="$name" '$1 == t {p = 1; print; next} p && /^[a-z_]+::/ {exit} p {print}' "$WORK/mapfs.log" | head -20 >&2
    bad=$((bad + 1))
  fi
done <"$WORK/regressed"
unmount "$M"
"$MAPFS" fsck "$P" >"$WORK/fsck" || { cat "$WORK/fsck" >&2; fail "fsck after pjdfstest"; }
[ $bad = 0 ] || fail "$bad pjdfstest tests pass on tmpfs and not on the mount"
echo "pjdfstest: every test that passes on tmpfs passes on the mount; fsck clean"
