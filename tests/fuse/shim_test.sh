#!/usr/bin/env bash
# One pool used by the shim (`mapfs run`) and the FUSE mount at the same
# time: what one writes, the other reads at once, both ways, also after
# overwrites and truncation (the mount keeps no stale cache).
# Usage: shim_test.sh PATH/TO/mapfs
source "$(dirname "$0")/common.sh" "$@"
P=$WORK/pool M=$WORK/mnt
"$MAPFS" mkfs "$P" --size 256M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
mount_pool "$P" "$M"
shim() { "$MAPFS" run --pool "$P" -- "$@"; }

shim sh -c 'echo x > /mapfs/f' || fail "shim write"
[ "$(cat "$M/f")" = x ] || fail "the mount does not read what the shim wrote"
echo y >"$M/g"
[ "$(shim cat /mapfs/g)" = y ] || fail "the shim does not read what the mount wrote"

# Overwrite and grow through the shim while the mount has read the file.
exec 3<"$M/f"  # an open file on the mount while the shim changes it
shim sh -c 'printf "second version\n" > /mapfs/f' || fail "shim overwrite"
[ "$(cat "$M/f")" = "second version" ] || fail "the mount shows stale data after a shim overwrite"
[ "$(stat -c %s "$M/f")" = 15 ] || fail "the mount shows a stale size after a shim overwrite"
exec 3<&-
# Shrink through the mount, read through the shim.
truncate -s 3 "$M/g"; printf 'abc' >"$M/g"
[ "$(shim cat /mapfs/g)" = abc ] || fail "the shim reads stale data after a mount truncate"
# Names: made by one, listed and removed by the other.
shim sh -c 'mkdir -p /mapfs/d/e && echo 1 > /mapfs/d/e/one && ln -s one /mapfs/d/e/l' || fail "shim mkdir"
[ "$(cat "$M/d/e/l")" = 1 ] || fail "the mount does not see the shim's tree"
mv "$M/d/e/one" "$M/d/two"
[ "$(shim cat /mapfs/d/two)" = 1 ] || fail "the shim does not see the mount's rename"
shim test ! -e /mapfs/d/e/one || fail "the shim still sees the old name"
shim rm -r /mapfs/d || fail "shim rm -r"
[ ! -e "$M/d" ] || fail "the mount still sees a directory the shim removed"
# A bigger file both ways, compared byte for byte.
head -c 3000000 /dev/urandom >"$WORK/big"
cp "$WORK/big" "$M/big"
shim cat /mapfs/big | cmp - "$WORK/big" || fail "the shim reads a different big file"
shim sh -c "cat '$WORK/big' '$WORK/big' > /mapfs/big2" || fail "shim big write"
cat "$WORK/big" "$WORK/big" | cmp - "$M/big2" || fail "the mount reads a different big file"
unmount "$M"
"$MAPFS" fsck "$P" >/dev/null || fail "fsck"
echo "shim <-> mount on one pool: ok"
