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

# FIFOs and socket nodes are pool nodes (issue 18: CPython's test_tarfile,
# test_shutil, test_pathlib, test_posix and test_stat make FIFOs in TMPDIR):
# made, listed, archived, extracted, copied and removed as on tmpfs; only
# opening one differs (ENXIO under the shim), so nothing here opens one.
# Device nodes need root (as CAP_MKNOD); CI runs as root.
on_both "FIFOs and socket nodes" '
mkdir d; mkfifo d/fifo; mkfifo -m 600 d/private-fifo; umask 027; mkfifo d/masked; umask 022
python3 -c "import os, stat; os.mknod(\"d/sock\", stat.S_IFSOCK | 0o644); os.mknod(\"d/fifo2\", stat.S_IFIFO | 0o640)"
stat -c "%n %F %a %s" d/* | sort
mkfifo d/fifo 2>&1 || echo "mkfifo over an existing name: status $?"
python3 -c "import os; os.mknod(\"d/dev\", 0o20644, os.makedev(1, 3))" 2>/dev/null &&
  stat -c "device made: %F %a %t:%T" d/dev || echo "device refused (not root)"
rm -f d/dev
python3 -c "
import os, shutil, stat
print(stat.S_ISFIFO(os.stat(\"d/fifo\").st_mode), stat.S_ISSOCK(os.lstat(\"d/sock\").st_mode))
try:
    shutil.copyfile(\"d/fifo\", \"copy\")
except shutil.SpecialFileError as e:
    print(\"SpecialFileError\", e)
os.mkfifo(\"pyfifo\", dir_fd=os.open(\"d\", os.O_RDONLY)); print(sorted(os.listdir(\"d\")))
"
tar cf "$S/f.tar" --sort=name --mtime=@0 --owner=0 --group=0 d
tar tvf "$S/f.tar" | awk "{print \$1, \$NF}"
mkdir x; tar xf "$S/f.tar" -C x; cp -a d cp-a
stat -c "%n %F %a" x/d/* cp-a/* | sort
rm d/fifo; mv d/sock d/sock2; ls d
'

finish
