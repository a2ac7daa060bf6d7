#!/usr/bin/env bash
# coreutils and findutils under `mapfs run`, compared with tmpfs:
# cp (-r -a -P -L, in, out of and within mapfs), mv (also across the mount
# boundary: EXDEV), rm -r, ls, cat, mkdir -p, touch, ln/ln -s, stat, du,
# find, sort -o (also with temporary files in mapfs), dd (bs/count/skip/
# seek/conv=notrunc), truncate, split, tee, chmod, install.
# Usage: coreutils_test.sh PATH/TO/mapfs
source "$(dirname "$0")/lib.sh"

on_both "cp" '
cp "$FIX/rand1m" big                       # kernel -> mapfs
cp big big2                                # mapfs -> mapfs
cp "$FIX/text" "$FIX/rand300k" .
cp big "$S/out"; sha256sum <"$S/out"       # mapfs -> kernel
cp "$FIX/rand300k" big2                    # overwrite a longer file: truncates
stat -c "%s %n" big big2
mkdir d; cp big text d/; ls d
mktree src
cp -r src copy
cp -r src/a copy/a2                        # into an existing directory
cp -a src preserved
for f in hello.txt a/odd d2/run.sh; do
  [ "$(stat -c %Y "src/$f")" = "$(stat -c %Y "preserved/$f")" ] && echo "cp -a kept the mtime of $f"
done
cp -P src/link plink; cp -L src/link llink; cp src/dirlink/"text part" viadirlink
readlink plink; cat llink
cp -r src "$S/copyout"; (cd "$S/copyout" && find . | sort && find . -type f -exec sha256sum {} + | sort)
cp nonexistent x 2>&1 || echo "cp status $?"
cp -r src src/a 2>&1 || echo "cp into itself status $?"
'

on_both "mv" '
mktree src
mv src/hello.txt moved.txt
mv src/a src/a-renamed
mv src/d2 .
printf x >"$S/kfile"; mv "$S/kfile" fromkernel            # across the boundary
mkdir "$S/kdir"; printf y >"$S/kdir/f"; mv "$S/kdir" fromkernel-dir
mv moved.txt "$S/tokernel"; cat "$S/tokernel"; [ ! -e moved.txt ] && echo "moved out"
mv src/.hidden src/empty .
printf 1 >o1; printf 2 >o2; mv -f o1 o2; cat o2; echo
mkdir e1 e2; touch e2/x; mv e1 e2; ls e2
mkdir e3 e4; touch e4/y; mv -T e3 e4 2>&1 || echo "mv -T status $?"
mv nothing here 2>&1 || echo "mv status $?"
mv src/link renamed-link; readlink renamed-link
ls -a . src
'

on_both "rm" '
mktree x; mktree y
rm -r x; [ ! -e x ] && echo "x gone"
rm -rf y/a; rm y/link; rm -f y/nonexistent
rm y/nonexistent 2>&1 || echo "rm status $?"
rm -r "y/empty dir"
rmdir y/d2 2>&1 || echo "rmdir status $?"
rm y/d2 2>&1 || echo "rm dir status $?"
rm -f y/d2/readonly
mkdir -p deep/1/2/3/4/5
for i in $(seq 200); do : >deep/1/f$i; done
for i in $(seq 50); do : >deep/1/2/3/4/5/g$i; done
rm -r deep
rm -rf nothing/at/all
ls -a y
'

on_both "ls" '
mktree t
chmod 4755 t/d2/run.sh; chmod 1777 "t/empty dir"
ls t; echo; ls -a t; echo; ls -R t; echo; ls -d t/*; echo; ls -1F t; echo; ls -A t/d2
lsl() { ls -l --time-style=+T "$@" | awk '"'"'$1 == "total" { next } /^$/ || /:$/ { print; next }
  { m = $1; s = $5; sub(/^[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +T /, ""); if (m ~ /^d/) s = "-"; print m, s, $0 }'"'"'; }
lsl t; lsl -a t/a; lsl -R t; lsl -d t; lsl t/link t/dangling
ls -S t/d2; ls -r t; ls -L t/dirlink
ls nonexistent 2>&1 || echo "ls status $?"
'

on_both "cat" '
cat "$FIX/text" >t1
cat t1 t1 >t2; wc -c t2
cat -n t1 | tail -3
cat <t1 | sha256sum
cat t1 - <"$FIX/rand300k" >t3; sha256sum t3
cat "$FIX/rand1m" "$FIX/rand300k" "$FIX/rand1m" >t4; cat t4 | sha256sum
: >empty; cat empty empty; cat empty t1 | wc -l
cat nonexistent 2>&1 || echo "cat status $?"
cat . 2>&1 || echo "cat dir status $?"
'

on_both "mkdir touch ln stat" '
mkdir -p a/b/c/d; mkdir -p a/b; mkdir a 2>&1 || echo "mkdir status $?"
mkdir -m 700 priv; mkdir -p -m 711 p/q
mkdir x/y 2>&1 || echo "mkdir no parent status $?"
touch new; touch new; touch -d "2001-02-03 04:05:06" new; stat -c "%Y %X %s" new
touch -m -d @1234567890 new; touch -a -d @1111111111 new; stat -c "%Y %X" new
touch -r new other; stat -c "%Y" other
touch -c nothing; [ ! -e nothing ] && echo "touch -c created nothing"
ln -s new sl; touch -h -d @5 sl; stat -c %Y sl; stat -L -c %Y sl
ln -s new rel; ln -s /etc/hostname abslink; ln -s a/b/c dl; ln -s "$R/new" fulllink
ls dl/; readlink rel abslink dl fulllink; readlink -f dl fulllink
ln -sf priv rel; readlink rel
ln -s x new 2>&1 || echo "ln -s status $?"
ln new hard; stat -c "%h %s" new hard; ln hard hard2; stat -c %h new
ln a hardlink-to-dir 2>&1 || echo "ln dir status $?"
for f in new hard sl rel dl abslink; do stat -c "%n %s %F %a" "$f"; done
for f in a a/b/c/d priv p p/q; do stat -c "%n %F %a" "$f"; done
stat -L -c "%n %s %F %a" sl; stat -L -c "%n %F %a" dl
stat -c "%N" sl dl
stat nothing 2>&1 || echo "stat status $?"
rm fulllink   # its size is the length of R
'

on_both "du find" '
mktree t
cp "$FIX/rand1m" t/a/
# Directory sizes differ between file systems: leave them out.
du -ab --apparent-size t | while read -r s p; do [ -d "$p" ] || echo "$s $p"; done | sort -k2
total=$(du -sb --apparent-size t | cut -f1)
dirs=$(find t -type d -printf "%s\n" | awk "{ s += \$1 } END { print s }")
echo "files+links total: $((total - dirs))"
du -b --apparent-size t/a/odd t/hello.txt
find t | sort; echo
find t -type f | sort; echo
find t -type l | sort; echo
find t -name "*.txt"; find t -iname "HELLO*"
find t -size +4k -type f | sort
find t -empty | sort
find t -perm 600; find t -perm -111 -type f
find t -maxdepth 1 | sort
find t -mindepth 3 | sort
find t -type f -exec wc -c {} + | sort -k2
find -L t -type f | sort
find t -xtype l
find t -depth -type d | sort
find t -name odd -delete; [ ! -e t/a/odd ] && echo deleted
find t -newer t/a/rand1m -name nothing
find nonexistent 2>&1 || echo "find status $?"
'

on_both "sort -o" '
sort "$FIX/text" -o s1
sort -r -o s2 "$FIX/text"
cp "$FIX/text" s3; sort -o s3 s3
sort -t" " -n -k3 -o s4 s3
sort -u -k4,4 s3
mkdir tmp
sort -S 64K -T "$R/tmp" --parallel=1 -k3n "$FIX/text" >s5     # spills to temporary files in mapfs
ls tmp
sha256sum s1 s2 s3 s4 s5
sort -c s1 && echo sorted
sort -m s1 s3 -o merged; wc -l merged
'

on_both "dd" '
dd if="$FIX/rand1m" of=d1 bs=4k count=10 status=none; stat -c %s d1
dd if="$FIX/rand1m" of=d1 bs=4k count=2 seek=20 status=none; stat -c %s d1
dd if="$FIX/rand300k" of=d1 bs=1000 count=3 seek=5 conv=notrunc status=none; stat -c %s d1
dd if="$FIX/rand300k" of=d1 bs=1000 count=3 seek=200 conv=notrunc status=none; stat -c %s d1
dd if=/dev/zero of=sparse bs=1 count=1 seek=10M status=none; stat -c %s sparse
dd if=d1 bs=512 skip=3 count=4 status=none | sha256sum
dd if=d1 of=d2 bs=1M status=none; cmp d1 d2 && echo same
dd if=d1 of=d3 bs=7 count=1000 conv=fsync status=none; dd if=d1 of=d4 bs=64k oflag=sync status=none
printf head >d5; dd if="$FIX/rand300k" of=d5 bs=4k count=3 oflag=append conv=notrunc status=none; stat -c %s d5
dd if=/dev/zero of=d1 bs=1 count=0 seek=5000 status=none; stat -c %s d1
dd if=d1 of=/dev/null bs=100 skip=10 count=10 2>&1 | sed -n 1,2p   # sed reads all: no SIGPIPE
dd if="$FIX/rand1m" of=d6 bs=1 count=3 seek=1048576 skip=5 conv=notrunc,sparse status=none; stat -c %s d6
'

on_both "truncate split tee chmod install" '
printf abc >f; truncate -s 12345 f; stat -c %s f; truncate -s +100 f; stat -c %s f
truncate -s 2 f; cat f; echo; truncate -s 0 f; stat -c %s f
truncate -c -s 10 notcreated; [ ! -e notcreated ] && echo "truncate -c created nothing"
split -b 100k "$FIX/rand1m" part_; ls part_*; cat part_* >joined; cmp joined "$FIX/rand1m" && echo joined
split -l 5000 -d "$FIX/text" lines_; wc -l lines_*
echo tee | tee t1 t2 >t3; echo more | tee -a t1 >/dev/null; cat t1 t2 t3
mktree m; chmod -R go-rwx m/a; chmod u+s m/hello.txt; chmod g+s m/d2; chmod 1777 "m/empty dir"; chmod 0 m/empty
chmod 755 nothing 2>&1 || echo "chmod status $?"
install -m 640 "$FIX/rand300k" installed; install -d -m 750 idir/sub; install -D -m 600 "$FIX/text" ideep/x/y
md5sum installed ideep/x/y; head -c 100 "$FIX/text" | tail -c 20; tail -c 30 ideep/x/y; wc ideep/x/y
sync installed; sync
'

finish
