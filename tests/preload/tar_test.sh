#!/usr/bin/env bash
# GNU tar under `mapfs run`, compared with tmpfs: create (reproducible
# archive, so its bytes must match), list, extract into another directory
# (contents, modes, mtimes, symlinks, hard links, long names), gzip through
# a pipe, append in place (tar r) and delete in place (tar --delete).
# Usage: tar_test.sh PATH/TO/mapfs
source "$(dirname "$0")/lib.sh"
need tar tar
need gzip gzip
need diff diffutils

on_both "tar create, list, extract" '
mktree src
cp "$FIX/rand1m" src/a/
ln src/hello.txt src/hard
long=$(printf "d%.0s" {1..120})/$(printf "e%.0s" {1..120})
mkdir -p "src/$long"; printf "deep\n" >"src/$long/$(printf "f%.0s" {1..200})"
truncate -s 3M src/sparse; printf z >>src/sparse
flags=(--sort=name --mtime=@1000000000 --owner=0 --group=0 --numeric-owner --format=gnu)
tar cf a.tar "${flags[@]}" src
sha256sum a.tar; stat -c %s a.tar
tar tvf a.tar
mkdir out; tar xf a.tar -C out
diff -r --no-dereference src out/src && echo "extracted tree is identical"
stat -c "%Y %a %h %n" out/src/hello.txt out/src/hard out/src/d2/run.sh out/src/a
stat -c "%Y %N" out/src/link
# gzip through pipes, both ways; tar -C changes directory inside mapfs.
tar c "${flags[@]}" -C src . | gzip -n >b.tgz; sha256sum b.tgz
mkdir out2; gzip -dc b.tgz | tar x -C out2; diff -r --no-dereference src out2 && echo "gzip round trip identical"
mkdir out3; tar xzf b.tgz -C out3 ./a ./hard; find out3 | sort
tar cf - "${flags[@]}" src/d2 | (mkdir out4 && cd out4 && tar xf -); find out4 | sort
# In place: append to the archive, then delete members from it.
printf "appended\n" >extra.txt
tar rf a.tar "${flags[@]}" extra.txt; sha256sum a.tar; tar tf a.tar | tail -3
tar --delete -f a.tar src/hello.txt src/a/rand1m; sha256sum a.tar; stat -c %s a.tar; tar tf a.tar | grep -c .
mkdir out5; tar xf a.tar -C out5; cat out5/extra.txt; [ ! -e out5/src/hello.txt ] && echo "deleted member is gone"
tar xf nonexistent.tar 2>&1 || echo "tar status $?"
'

on_both "tar of a kernel tree into mapfs and back" '
mkdir -p "$S/k/sub"; cp "$FIX/rand300k" "$FIX/text" "$S/k/"; cp "$FIX/rand1m" "$S/k/sub/"
tar cf k.tar --sort=name --mtime=@0 --owner=0 --group=0 -C "$S" k
sha256sum k.tar
mkdir x; tar xf k.tar -C x
tar cf "$S/back.tar" --sort=name --mtime=@0 --owner=0 --group=0 -C x k
cmp k.tar "$S/back.tar" && echo "archive of the extracted tree is identical"
'

finish
