#!/bin/bash
# mapfs overlay cat|import|export|fsck on a scratch directory: round trip of
# content and permissions, fsck clean, damage reported (exit 1, a message,
# no crash), usage errors exit 2.
set -u
MAPFS=$1
D=$(mktemp -d /dev/shm/mapfs-vcli.XXXXXX)
trap 'rm -rf "$D"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

head -c 300000 /dev/urandom > "$D/orig"
cp "$D/orig" "$D/f"
chmod 640 "$D/f"
"$MAPFS" overlay import "$D/f" || fail "import"
cmp -s "$D/orig" "$D/f" && fail "import left the file plain"
[ "$(stat -c %a "$D/f")" = 640 ] || fail "import lost the permissions"
"$MAPFS" overlay cat "$D/f" | cmp - "$D/orig" || fail "cat differs from the content"
out=$("$MAPFS" overlay fsck "$D/f") || fail "fsck of a fresh import: $out"
echo "$out" | grep -q "clean: size 300000" || fail "fsck report: $out"
"$MAPFS" overlay import "$D/f" 2>/dev/null && fail "import twice accepted"
"$MAPFS" overlay export "$D/f" || fail "export"
cmp "$D/orig" "$D/f" || fail "export differs"
"$MAPFS" overlay cat "$D/f" | cmp - "$D/orig" || fail "cat of a plain file"

# Damage: the header's version field.
"$MAPFS" overlay import "$D/f" || fail "import again"
printf '\x07' | dd of="$D/f" bs=1 seek=9 conv=notrunc status=none
err=$("$MAPFS" overlay fsck "$D/f" 2>&1); rc=$?
[ $rc = 1 ] || fail "fsck of a damaged file exited $rc: $err"
echo "$err" | grep -q "meta block header" || fail "fsck message: $err"
"$MAPFS" overlay cat "$D/f" > /dev/null 2>&1 && fail "cat of a damaged file succeeded"

"$MAPFS" overlay > /dev/null 2>&1; [ $? = 2 ] || fail "usage exit code"
"$MAPFS" overlay frob "$D/f" > /dev/null 2>&1; [ $? = 2 ] || fail "unknown verb exit code"
echo OK
