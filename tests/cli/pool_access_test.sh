#!/usr/bin/env bash
# Who may use a pool, through the CLI and the shim (docs/SECURITY.md, "Safe
# defaults"): mkfs creates pools 0600 whatever the umask, --perm/--group
# share one (a group only the caller is in, unless root), the shared-memory
# segment and lock files take the pool's rights, a symbolic link in place of
# a pool is refused by every verb, and a pool someone else put in a
# world-writable directory is refused with a message naming its owner.
# The cases that hand files to another user need root (CI runs as root);
# without it they are reported as skipped and the rest still runs.
# Usage: pool_access_test.sh PATH/TO/mapfs
set -euo pipefail
mapfs=$(realpath -e -- "$1")
work=$(mktemp -d /dev/shm/mapfs-cli-access-XXXXXX)
planted=/dev/shm/mapfs-cli-access-$$.pool  # beside the default pool path
trap 'rm -rf "$work" "$planted"' EXIT
chmod 0755 "$work"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() {
  echo "FAIL: $*" >&2
  fail=$((fail + 1))
}
# expect_refused WHAT PATTERN COMMAND...: COMMAND fails and says PATTERN.
expect_refused() {
  local what=$1 pattern=$2 out
  shift 2
  if out=$("$@" 2>&1); then
    bad "$what: succeeded: $*"
  elif ! grep -q -- "$pattern" <<<"$out"; then
    bad "$what: message does not say '$pattern': $out"
  else
    ok
  fi
}
# Sanitized builds do not build the shim: there the segment and lock files
# are checked by medium_pool_access_test only.
have_shim=false
[ -e "$(dirname "$mapfs")/../lib/libmapfs-preload.so" ] && have_shim=true
rights() { stat -c '%a %G' "$1"; }
segment() {  # the shared-memory segment of pool $1
  local uuid
  uuid=$("$mapfs" info "$1" | sed -n 's/.*uuid \([0-9a-f-]*\).*/\1/p' | tr -d -)
  echo "/dev/shm/mapfs-$uuid"
}
# The rights of the segment and of the shim's lock file (made by the first
# flock) while a program runs on pool $1.
shared_rights() {
  local seg
  seg=$(segment "$1")
  "$mapfs" run --pool "$1" -- bash -c \
    "echo x > /mapfs/f; flock /mapfs/f stat -c '%a %G' '$seg' '$seg.ofd'" | tr '\n' ' '
}

# Created for the owner only, even with no umask at all.
(umask 0 && "$mapfs" mkfs "$work/own.pool" --size 64M >/dev/null)
got=$(stat -c %a "$work/own.pool")
[ "$got" = 600 ] && ok || bad "mkfs with umask 0 made a pool $got (want 600)"
if $have_shim; then
  got=$(shared_rights "$work/own.pool")
  [ "$got" = "600 $(id -gn) 600 $(id -gn) " ] && ok || bad "segment and lock file of a 0600 pool: $got"
fi
# An existing file being formatted gets the same rights.
install -m 0666 /dev/null "$work/old.pool"
"$mapfs" mkfs "$work/old.pool" --size 64M >/dev/null
[ "$(stat -c %a "$work/old.pool")" = 600 ] && ok || bad "mkfs over a 0666 file left it $(stat -c %a "$work/old.pool")"

# Shared with a group: --perm and --group, or --group alone (0660).
grp=$(id -gn)
[ "$(id -u)" = 0 ] && grp=daemon
"$mapfs" mkfs "$work/shared.pool" --size 64M --perm 0660 --group "$grp" >/dev/null
[ "$(rights "$work/shared.pool")" = "660 $grp" ] && ok || bad "--perm 0660 --group $grp: $(rights "$work/shared.pool")"
if $have_shim; then
  got=$(shared_rights "$work/shared.pool")
  [ "$got" = "660 $grp 660 $grp " ] && ok || bad "segment and lock file of a 0660 $grp pool: $got"
fi
"$mapfs" mkfs "$work/group.pool" --size 64M --group "$grp" >/dev/null
[ "$(rights "$work/group.pool")" = "660 $grp" ] && ok || bad "--group $grp alone: $(rights "$work/group.pool")"
expect_refused "--perm without the owner's rights" "include 0600" \
  "$mapfs" mkfs "$work/x.pool" --size 64M --perm 0060
expect_refused "--group of no such group" "no such group" \
  "$mapfs" mkfs "$work/x.pool" --size 64M --group no-such-group-here
[ ! -e "$work/x.pool" ] && ok || bad "a refused mkfs left $work/x.pool"

# A symbolic link in place of a pool: refused by every verb, target untouched.
ln -s "$work/own.pool" "$work/link.pool"
sum=$(md5sum <"$work/own.pool")
for verb in info fsck; do
  expect_refused "$verb through a link" "is a symbolic link" "$mapfs" "$verb" "$work/link.pool"
done
expect_refused "ls through a link" "is a symbolic link" "$mapfs" ls "$work/link.pool" /
expect_refused "run through a link" "is a symbolic link" "$mapfs" run --pool "$work/link.pool" -- true
expect_refused "mkfs through a link" "is a symbolic link" "$mapfs" mkfs "$work/link.pool" --size 64M
[ "$(md5sum <"$work/own.pool")" = "$sum" ] && ok || bad "the pool behind the link changed"

if [ "$(id -u)" != 0 ]; then
  echo "skipped: the cases of other users' files and groups need root"
else
  # Someone else's file at a pool path in /dev/shm (as if planted at the
  # default /dev/shm/mapfs.pool before its user formatted it): every verb
  # refuses it, naming the owner, and mkfs leaves it as it was.
  "$mapfs" mkfs "$planted" --size 64M >/dev/null
  chown nobody "$planted"
  for verb in info fsck; do
    expect_refused "$verb of a planted pool" "owned by uid $(id -u nobody) (nobody)" "$mapfs" "$verb" "$planted"
  done
  expect_refused "run on a planted pool" "owned by uid $(id -u nobody) (nobody)" \
    "$mapfs" run --pool "$planted" -- true
  sum=$(md5sum <"$planted")
  expect_refused "mkfs over a planted pool" "owned by uid $(id -u nobody) (nobody)" \
    "$mapfs" mkfs "$planted" --size 64M
  [ "$(md5sum <"$planted")" = "$sum" ] && [ "$(stat -c %U "$planted")" = nobody ] && ok ||
    bad "mkfs changed a planted pool"
  # A world-writable directory that is someone else's: refused, nothing created.
  mkdir -m 1777 "$work/theirs"
  chown nobody "$work/theirs"
  expect_refused "mkfs in someone else's world-writable directory" "writable by everyone" \
    "$mapfs" mkfs "$work/theirs/p.pool" --size 64M
  [ ! -e "$work/theirs/p.pool" ] && ok || bad "mkfs created a pool in someone else's world-writable directory"
  # A group the caller is not in (nobody is in no group but nogroup).
  chmod 0777 "$work"
  expect_refused "--group of a group the caller is not in" "not a member" \
    setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$mapfs" mkfs "$work/ng.pool" --size 64M --group daemon
  [ ! -e "$work/ng.pool" ] && ok || bad "mkfs --group of a group the caller is not in created $work/ng.pool"
  # But one it is in works, for a user who is not root.
  setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
    "$mapfs" mkfs "$work/nb.pool" --size 64M --group "$(id -gn nobody)" >/dev/null
  [ "$(stat -c '%a %U %G' "$work/nb.pool")" = "660 nobody $(id -gn nobody)" ] && ok ||
    bad "mkfs --group as nobody: $(stat -c '%a %U %G' "$work/nb.pool")"
  chmod 0755 "$work"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
