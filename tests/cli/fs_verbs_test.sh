#!/usr/bin/env bash
# End-to-end checks of the file verbs (ls cat put get rm mkdir mv ln stat df)
# and of fsck on a pool holding files. Every command is its own process and
# its own mount, so each check also shows that what the previous command
# wrote survived its unmount. Contents are compared byte for byte (cmp),
# listings against the real ls on the same tree made locally.
set -u
MAPFS=$1
export LC_ALL=C TZ=UTC
umask 022
dir=$(mktemp -d /dev/shm/mapfs-cli-fs-XXXXXX)
pool=$dir/p
shm_of_pool() { echo "/dev/shm/mapfs-$(od -An -tx1 -j16 -N16 "$pool" | tr -d ' \n')"; }
cleanup() {
  [ -f "$pool" ] && rm -f "$(shm_of_pool)"
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
m() { "$MAPFS" "$@"; }
# expect_fail CODE WHAT CMD...: CMD must exit with CODE; its stderr is in $dir/err.
expect_fail() {
  local code=$1 what=$2; shift 2
  "$@" >"$dir/out" 2>"$dir/err"
  local rc=$?
  [ $rc -eq "$code" ] || fail "$what: exit $rc, wanted $code; stderr: $(cat "$dir/err")"
}
used_bytes() { m df "$pool" | sed -n 's/^used .*(\([0-9]*\) bytes)$/\1/p'; }
free_bytes() { m df "$pool" | sed -n 's/^free .*(\([0-9]*\) bytes)$/\1/p'; }
start=$(date +%s)

m mkfs "$pool" --size 128M >/dev/null || fail "mkfs"
shm=$(shm_of_pool)
[ -z "$(m ls "$pool")" ] || fail "fresh pool not empty: $(m ls "$pool")"
m fsck "$pool" >"$dir/out" || fail "fsck of a fresh file system: $(cat "$dir/out")"
grep -q "clean" "$dir/out" || fail "fsck fresh: $(cat "$dir/out")"
m info "$pool" | grep -q "^file system " || fail "info has no file-system summary"

# put/get round trips: 5 MiB of random bytes, an empty file, stdin/stdout.
used0=$(used_bytes)
free0=$(free_bytes)
[ -n "$used0" ] && [ -n "$free0" ] || fail "df output: $(m df "$pool")"
head -c 5242880 /dev/urandom >"$dir/rand"
: >"$dir/empty"
m put "$pool" "$dir/rand" /rand || fail "put rand"
m put "$pool" "$dir/empty" /empty || fail "put empty"
m get "$pool" /rand "$dir/rand.out" || fail "get rand"
cmp "$dir/rand" "$dir/rand.out" || fail "5 MiB round trip differs"
m get "$pool" /empty "$dir/empty.out" || fail "get empty"
cmp "$dir/empty" "$dir/empty.out" || fail "empty round trip differs"
m get "$pool" /rand - >"$dir/rand.stdout" || fail "get to stdout"
cmp "$dir/rand" "$dir/rand.stdout" || fail "get - differs"
m cat "$pool" rand >"$dir/rand.cat" || fail "cat (relative path)"
cmp "$dir/rand" "$dir/rand.cat" || fail "cat differs"
printf 'from stdin\n' | m put "$pool" - /stdin.txt || fail "put from stdin"
[ "$(m cat "$pool" /stdin.txt)" = "from stdin" ] || fail "stdin put content"
m cat "$pool" /stdin.txt /empty /rand >"$dir/multi" || fail "cat of several files"
{ printf 'from stdin\n'; cat "$dir/rand"; } | cmp - "$dir/multi" || fail "cat of several differs"
# put again truncates: a shorter file replaces a longer one.
printf 'short' >"$dir/short"
m put "$pool" "$dir/short" /rand2 && m put "$pool" "$dir/rand" /rand2 && m put "$pool" "$dir/short" /rand2 ||
  fail "put over an existing file"
[ "$(m cat "$pool" /rand2)" = "short" ] || fail "put did not truncate"

# df follows the space used.
used1=$(used_bytes)
[ "$used1" -ge $((used0 + 5242880)) ] || fail "df used $used0 -> $used1 after a 5 MiB put"
free1=$(free_bytes)
[ "$free1" -le $((free0 - 5242880)) ] || fail "df free $free0 -> $free1 after a 5 MiB put"
m rm "$pool" /rand2 || fail "rm /rand2"
m df "$pool" | grep -q '^use% *[0-9]*%$' || fail "df use%: $(m df "$pool")"
m df "$pool" | grep -q '^inodes *[0-9]* of [0-9]* allocated' || fail "df inodes: $(m df "$pool")"

# stat fields.
m stat "$pool" /rand >"$dir/stat" || fail "stat"
grep -q '^  File: /rand$' "$dir/stat" || fail "stat File: $(cat "$dir/stat")"
grep -Eq '^  Size: 5242880 +Blocks: [0-9]+ +IO Block: 4096 +regular file$' "$dir/stat" || fail "stat Size: $(cat "$dir/stat")"
blocks=$(sed -n 's/.*Blocks: \([0-9]*\).*/\1/p' "$dir/stat")
[ "$blocks" -ge 10240 ] || fail "stat Blocks $blocks < 5 MiB"
grep -Eq '^Device: [0-9a-f]+h/[0-9]+d	Inode: [0-9]+ +Links: 1' "$dir/stat" || fail "stat Inode/Links: $(cat "$dir/stat")"
grep -Eq "^Access: \(0644/-rw-r--r--\)  Uid: \( *$(id -u)/ *[^)]*\)   Gid: \( *$(id -g)/ *[^)]*\)$" "$dir/stat" ||
  fail "stat Access/Uid/Gid: $(cat "$dir/stat")"
for t in Access Modify Change; do
  line=$(grep -E "^$t: [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{9} \+0000$" "$dir/stat") ||
    fail "stat $t time: $(cat "$dir/stat")"
  s=$(date -d "${line#"$t": }" +%s)
  [ "$s" -ge $((start - 5)) ] && [ "$s" -le $(($(date +%s) + 5)) ] || fail "stat $t time $line not now"
done
m stat "$pool" /empty | grep -q 'regular empty file' || fail "stat of an empty file"
m stat "$pool" / | grep -Eq '^  Size: .*directory$' || fail "stat of the root"
m stat "$pool" / | grep -q '^Access: (0755/drwxr-xr-x)' || fail "stat root mode"

# mkdir, -p, and a tree listed like the real ls lists the same tree.
m mkdir "$pool" /t || fail "mkdir /t"
expect_fail 1 "mkdir of an existing directory" m mkdir "$pool" /t
grep -q "/t" "$dir/err" || fail "mkdir exists message: $(cat "$dir/err")"
expect_fail 1 "mkdir without -p under a missing parent" m mkdir "$pool" /no/such
m mkdir -p "$pool" /x/y/z /t/sub || fail "mkdir -p"
m mkdir -p "$pool" /x/y/z || fail "mkdir -p of an existing tree"
[ "$(m ls "$pool" /x/y)" = "z" ] || fail "mkdir -p nested: $(m ls "$pool" /x/y)"
mkdir -p "$dir/local/t/sub"
printf 'aaa\n' >"$dir/local/t/a.txt"
printf '#!/bin/sh\n' >"$dir/local/t/run.sh"
printf 'hidden\n' >"$dir/local/t/.hidden"
printf 'ccc\n' >"$dir/local/t/sub/c.txt"
chmod 0755 "$dir/local/t/run.sh"
chmod 0600 "$dir/local/t/.hidden"
for f in a.txt run.sh .hidden sub/c.txt; do
  m put "$pool" "$dir/local/t/$f" "/t/$f" || fail "put $f"
done
ls "$dir/local/t" >"$dir/ls.want"
m ls "$pool" /t >"$dir/ls.got" || fail "ls /t"
cmp "$dir/ls.want" "$dir/ls.got" || fail "ls differs: $(diff "$dir/ls.want" "$dir/ls.got")"
ls -a "$dir/local/t" >"$dir/ls.want"
m ls -a "$pool" t >"$dir/ls.got" || fail "ls -a t"
cmp "$dir/ls.want" "$dir/ls.got" || fail "ls -a differs: $(diff "$dir/ls.want" "$dir/ls.got")"
# ls -l: mode strings and names as the real ls, mtimes in its long format.
ls -la "$dir/local/t" | awk 'NR>1 {sub(/[.+]$/, "", $1); print $1, $NF}' >"$dir/ls.want"
m ls -la "$pool" /t >"$dir/ls.long" || fail "ls -la"
head -1 "$dir/ls.long" | grep -Eq '^total [0-9]+$' || fail "ls -l total: $(cat "$dir/ls.long")"
awk 'NR>1 {print $1, $NF}' "$dir/ls.long" >"$dir/ls.got"
cmp "$dir/ls.want" "$dir/ls.got" || fail "ls -la modes differ: $(diff "$dir/ls.want" "$dir/ls.got")"
grep -Eq "^-rwxr-xr-x 1 $(id -u) $(id -g) +10 [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2} run.sh$" "$dir/ls.long" ||
  fail "ls -l line: $(cat "$dir/ls.long")"
[ "$(m ls "$pool" /t/a.txt)" = "/t/a.txt" ] || fail "ls of a file"
m ls -l "$pool" /t/a.txt | grep -Eq '^-rw-r--r-- 1 .* 4 .* /t/a.txt$' || fail "ls -l of a file: $(m ls -l "$pool" /t/a.txt)"
m ls "$pool" / >"$dir/ls.got"
printf 'empty\nrand\nstdin.txt\nt\nx\n' | cmp - "$dir/ls.got" || fail "ls /: $(cat "$dir/ls.got")"

# Links: ls -l shows a symlink's target, cat follows it, stat names it.
m ln -s "$pool" a.txt /t/link || fail "ln -s"
m ls -l "$pool" /t | grep -Eq '^lrwxrwxrwx 1 .* link -> a.txt$' || fail "ls -l symlink: $(m ls -l "$pool" /t)"
[ "$(m cat "$pool" /t/link)" = "aaa" ] || fail "cat through a symlink"
m stat "$pool" /t/link | grep -q '^  File: /t/link -> a.txt$' || fail "stat symlink name"
m stat "$pool" /t/link | grep -q 'symbolic link$' || fail "stat symlink type"
m stat -L "$pool" /t/link | grep -q 'regular file$' || fail "stat -L"
m ln "$pool" /t/a.txt /t/hard || fail "ln (hard)"
m stat "$pool" /t/a.txt | grep -Eq 'Links: 2' || fail "hard link count: $(m stat "$pool" /t/a.txt)"
m ln -s "$pool" /rand /x || fail "ln -s into a directory"
[ "$(m ls -l "$pool" /x | grep -c 'rand -> /rand$')" = 1 ] || fail "ln -s into a directory: $(m ls -l "$pool" /x)"

# mv: rename a file, move a file into a directory, move a directory.
m mv "$pool" /t/hard /t/hard2 || fail "mv file"
[ "$(m cat "$pool" /t/hard2)" = "aaa" ] || fail "content after mv"
expect_fail 1 "cat of a moved-away name" m cat "$pool" /t/hard
m mv "$pool" /stdin.txt /x || fail "mv into a directory"
[ "$(m cat "$pool" /x/stdin.txt)" = "from stdin" ] || fail "mv into a directory content"
m mv "$pool" /x/y /t/yy || fail "mv directory"
[ "$(m ls "$pool" /t/yy)" = "z" ] || fail "mv directory content: $(m ls "$pool" /t/yy)"
expect_fail 1 "ls of a moved directory's old name" m ls "$pool" /x/y
m put "$pool" "$dir/rand.out" /x || fail "put into a directory"
m get "$pool" /x/rand.out "$dir/rand.x" && cmp "$dir/rand" "$dir/rand.x" || fail "put into a directory content"

# Errors: exit 1 and a message naming the path; usage errors exit 2.
expect_fail 1 "cat of a missing file" m cat "$pool" /missing
grep -q "^mapfs cat: /missing: .*No such file or directory" "$dir/err" || fail "cat missing message: $(cat "$dir/err")"
expect_fail 1 "ls of a missing path" m ls "$pool" /missing/dir
grep -q "/missing/dir" "$dir/err" || fail "ls missing message: $(cat "$dir/err")"
expect_fail 1 "get of a missing file" m get "$pool" /missing "$dir/never"
[ ! -e "$dir/never" ] || fail "get of a missing file made a local file"
expect_fail 1 "rm of a non-empty directory without -r" m rm "$pool" /t
grep -q "^mapfs rm: /t: is a directory" "$dir/err" || fail "rm dir message: $(cat "$dir/err")"
expect_fail 1 "rm of an empty directory without -r" m rm "$pool" /t/yy/z
expect_fail 1 "rm of a missing file" m rm "$pool" /missing
grep -q "/missing" "$dir/err" || fail "rm missing message: $(cat "$dir/err")"
m rm -f "$pool" /missing || fail "rm -f of a missing file"
expect_fail 1 "rm -r of the root" m rm -r "$pool" /
expect_fail 1 "cat of a directory" m cat "$pool" /t
expect_fail 1 "put of a missing local file" m put "$pool" "$dir/missing" /y
grep -q "$dir/missing" "$dir/err" || fail "put missing message: $(cat "$dir/err")"
expect_fail 1 "put of stdin onto a directory" m put "$pool" - /t </dev/null
expect_fail 1 "mv of a missing file" m mv "$pool" /missing /t
grep -q "^mapfs mv: /missing -> /t/missing: " "$dir/err" || fail "mv missing message: $(cat "$dir/err")"
expect_fail 1 "verb on a missing pool" m ls "$dir/nopool"
expect_fail 2 "ls without a pool" m ls
expect_fail 2 "unknown short flag" m rm -z "$pool" /t
expect_fail 2 "put with too few arguments" m put "$pool" "$dir/rand"
expect_fail 2 "mv with too few arguments" m mv "$pool" /t
m cat "$pool" /missing /t/a.txt >"$dir/out" 2>/dev/null
[ "$(cat "$dir/out")" = "aaa" ] || fail "cat goes on after a missing file"

# rm: files, -r trees, combined -rf; the tree is gone afterwards.
used_before_rm=$(used_bytes)
m rm "$pool" /t/link /t/hard2 || fail "rm of two files"
m rm -r "$pool" /t || fail "rm -r /t"
expect_fail 1 "ls of a removed tree" m ls "$pool" /t
grep -q "/t" "$dir/err" || fail "ls removed message: $(cat "$dir/err")"
m ls "$pool" / | grep -qx t && fail "/t still listed"
m rm -rf "$pool" /x /missing || fail "rm -rf"
m ls "$pool" / >"$dir/ls.got"
printf 'empty\nrand\n' | cmp - "$dir/ls.got" || fail "ls / after rm: $(cat "$dir/ls.got")"
used2=$(used_bytes)
[ "$used2" -le $((used_before_rm - 5242880)) ] || fail "df used did not fall after rm -r ($used_before_rm -> $used2)"

# What is left is intact and the file system is consistent.
m get "$pool" /rand "$dir/rand.end" && cmp "$dir/rand" "$dir/rand.end" || fail "rand changed"
m fsck "$pool" >"$dir/out"
rc=$?
[ $rc -eq 0 ] || fail "fsck after all commands (exit $rc): $(cat "$dir/out")"
grep -q "clean" "$dir/out" || fail "fsck not clean: $(cat "$dir/out")"
grep -Eq '^file system: 3 inodes \(1 directories, 2 files, 0 symlinks\), 2 directory entries$' "$dir/out" ||
  fail "fsck counts: $(cat "$dir/out")"
m fsck "$pool" --repair >"$dir/out" || fail "fsck --repair of a clean pool: $(cat "$dir/out")"
# Every command unmounted cleanly: the pool's shared-memory segment is gone.
[ ! -e "$shm" ] || fail "shared-memory segment $shm left behind"
echo "cli fs verbs ok"
