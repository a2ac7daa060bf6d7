#!/usr/bin/env bash
# Coreutils, tar and git over a FUSE mount of a fresh pool, compared byte for
# byte with the same script on tmpfs: its output, and a listing of the tree
# (types, modes, sizes, link counts, symlink targets, sha256 of contents).
# Then unmount and `mapfs fsck`; remount and list again (the tree survived).
# Usage: coreutils_test.sh PATH/TO/mapfs
source "$(dirname "$0")/common.sh" "$@"

FIX=$WORK/fix
mkdir -p "$FIX/tree/sub/deeper" "$FIX/tree/empty dir"
head -c 300000 /dev/urandom >"$FIX/rand"
seq 1 20000 | sort -R --random-source=<(yes) >"$FIX/unsorted"
printf 'hello\n' >"$FIX/tree/hello"
: >"$FIX/tree/empty"
head -c 70001 "$FIX/rand" >"$FIX/tree/sub/odd size"
cp "$FIX/rand" "$FIX/tree/sub/deeper/rand"
printf 'hidden\n' >"$FIX/tree/.hidden"
ln -s hello "$FIX/tree/link-to-hello"
ln -s ../nowhere "$FIX/tree/sub/dangling"
chmod 0750 "$FIX/tree/sub"
chmod 0600 "$FIX/tree/hello"

# The steps; cwd is the directory under test, S a scratch dir on tmpfs.
script='
set -euo pipefail
cp -r "$FIX/tree" copy
cp -a "$FIX/tree" preserved
mkdir -p a/b/c/d
touch -d "2021-02-03 04:05:06" a/b/c/d/stamp
mv copy/sub a/b/moved
mv a/b/moved/deeper/rand a/rand
rm -r preserved/sub
ln -s ../a/rand a/b/rel-link
ln a/rand a/hard
ls -ln --time-style=+ a | tail -n +2 | awk "{print \$1, \$2, (\$1 ~ /^d/ ? \"-\" : \$5), \$NF}"
ls -1AR . | grep -v "^$"
cat copy/hello a/b/moved/"odd size" | sha256sum
stat -c "%n %s %a %F %h %Y" a/b/c/d/stamp
stat -c "%n %s %a %F %h" a/rand a/hard  # copied now: no fixed mtime
stat -c "%n %F %N" a/b/rel-link
find . -name "*rand*" | sort
find . -type d | sort
sort -o sorted "$FIX/unsorted"
sort -n -o sorted-n "$FIX/unsorted"
head -3 sorted-n
dd if="$FIX/rand" of=dd.out bs=4096 count=20 skip=3 status=none
dd if="$FIX/rand" of=dd.out bs=1000 count=7 seek=100 conv=notrunc status=none
dd if=/dev/zero of=sparse bs=1 count=1 seek=1000000 status=none
truncate -s 123456 truncated; truncate -s 99 dd.out
tar -cf "$S/t.tar" --sort=name --mtime=2020-01-01 --owner=0 --group=0 a copy
mkdir extracted && tar -xf "$S/t.tar" -C extracted
tar -tvf "$S/t.tar" --numeric-owner | awk "{print \$1, \$3, \$NF}"
cmp extracted/a/rand a/rand
mkdir repo && cd repo
export GIT_AUTHOR_DATE="2020-01-01T00:00:00Z" GIT_COMMITTER_DATE="2020-01-01T00:00:00Z"
git init -q -b main . && git config user.email t@t && git config user.name t
cp -r ../copy src && git add -A && git commit -qm one
echo more >>src/hello && git commit -qam two
git log --format="%H %s"
git status --porcelain
git gc -q
git fsck --no-progress
cd ..
rm -rf repo
echo done
'

# list DIR: the tree below DIR, one line per entry.
list() {
  (cd "$1" && find . -mindepth 1 -printf '%y %m %s %n %p -> %l\n' | sed 's/^d \([0-7]*\) [0-9]* /d \1 - /' | sort)
  (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum)
}

run_on() {  # run_on DIR OUT
  mkdir -p "$1" "$WORK/s-$(basename "$2")"
  (cd "$1" && FIX=$FIX S=$WORK/s-$(basename "$2") bash -c "$script") >"$2.out" 2>"$2.err" || {
    cat "$2.err" >&2
    fail "the script failed in $1"
  }
}

run_on "$WORK/tmpfs" "$WORK/native"
list "$WORK/tmpfs" >"$WORK/native.tree"

"$MAPFS" mkfs "$WORK/pool" --size 512M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
mount_pool "$WORK/pool" "$WORK/mnt"
run_on "$WORK/mnt/t" "$WORK/mapfs"
list "$WORK/mnt/t" >"$WORK/mapfs.tree"

diff -u "$WORK/native.out" "$WORK/mapfs.out" || fail "output differs between tmpfs and the mount"
diff -u "$WORK/native.tree" "$WORK/mapfs.tree" || fail "tree differs between tmpfs and the mount"

unmount "$WORK/mnt"
"$MAPFS" fsck "$WORK/pool" || fail "fsck after unmount"
mount_pool "$WORK/pool" "$WORK/mnt"
list "$WORK/mnt/t" >"$WORK/remount.tree"
diff -u "$WORK/native.tree" "$WORK/remount.tree" || fail "tree differs after remount"
unmount "$WORK/mnt"
"$MAPFS" fsck "$WORK/pool" >/dev/null || fail "fsck after the second unmount"
echo "coreutils, tar, git over the mount: same as tmpfs; fsck clean"
