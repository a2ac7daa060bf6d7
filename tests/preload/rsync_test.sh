#!/usr/bin/env bash
# rsync -a under `mapfs run`, compared with tmpfs: copies within mapfs, from
# the kernel's file system into mapfs and back, a second run that must find
# nothing to do (so modes, symlinks and every mtime, directories' too, were
# kept), an update with --delete, the delta algorithm in place, and hard
# links (-H). rsync forks a sender and a receiver joined by a socket pair,
# and writes through temporary files renamed into place.
# Usage: rsync_test.sh PATH/TO/mapfs
source "$(dirname "$0")/lib.sh"
need rsync rsync
need diff diffutils

on_both "rsync" '
settime() { find "$1" -exec touch -h -d @1500000000 {} +; }   # so that -i output is fixed
mktree src
cp "$FIX/rand1m" src/a/
ln src/hello.txt src/hard
settime src
rsync -a src/ dst/
diff -r --no-dereference src dst && echo "copy identical"
stat -c "%Y %a %n" dst/hello.txt dst/a dst/d2/run.sh dst/link "dst/empty dir"
stat -c "%h" dst/hard
echo "second run:"; rsync -ai src/ dst/; echo "(end)"
rsync -aH src/ dsth/; stat -c "%h %n" dsth/hard dsth/hello.txt
# Changes, then an update that also deletes.
printf "more\n" >>src/hello.txt; rm src/a/odd; mkdir src/new; printf n >src/new/file; chmod 600 src/d2/run.sh
settime src
rsync -ai --delete src/ dst/ | sort
echo "third run:"; rsync -ai --delete src/ dst/; echo "(end)"
diff -r --no-dereference src dst && echo "update identical"
# The delta algorithm, rewriting the destination in place.
dd if="$FIX/rand300k" of=src/a/rand1m bs=1000 count=5 seek=300 conv=notrunc status=none
touch -d @1600000000 src/a/rand1m     # a new mtime, or the quick check skips it
rsync -a --no-whole-file --inplace --stats src/ dst/ | grep -E "^(Number of (regular )?files transferred|Matched data|Literal data)"
cmp src/a/rand1m dst/a/rand1m && echo "delta identical"
dd if="$FIX/rand300k" of=src/a/rand1m bs=1000 count=2 seek=700 conv=notrunc status=none; touch -d @1700000000 src/a/rand1m
rsync -a --no-whole-file --stats src/a/rand1m dst/a/rand1m | grep -E "^(Literal|Matched) data"   # a temporary, renamed
cmp src/a/rand1m dst/a/rand1m && echo "delta via a temporary identical"
# Into mapfs from the kernel, and back out.
rsync -a "$FIX/" fix/
rsync -a dst/ "$S/back/"
diff -r --no-dereference src "$S/back" && echo "round trip identical"
rsync -ai dst/ "$S/back/"; echo "(nothing to do out)"
rsync -ai "$FIX/" fix/; echo "(nothing to do in)"
rsync -a nonexistent/ x/ 2>&1 | grep -o "change_dir.*failed: No such file or directory" || true
'

finish
