#!/usr/bin/env bash
# Symlinks whose absolute targets leave the pool, come back into it, or
# loop (issue 18, item 1): a target is a path of the process's namespace,
# so under `mapfs run --mount /mapfs` a link to /mapfs/d is the pool's /d,
# a link to /etc/hostname the kernel's file, a link to /d the kernel's /d.
#
# First compared with tmpfs (lib.sh): trees whose links point at absolute
# paths inside R, out to the kernel's scratch directory S, back from S into
# R, and around in loops, used by coreutils and by Python's os.walk
# (followlinks), shutil.copytree (symlinks=False), pathlib's resolve and
# os.path.realpath. Then direct checks that need the pool's root: /d,
# /etc/hostname, ".." past the pool's root, and the ELOOP limit of 40 links
# counted across both namespaces.
# Usage: symlinks_test.sh PATH/TO/mapfs
source "$(dirname "$0")/lib.sh"
need python3 python3

# Absolute targets inside R and out to S, followed by every kind of call.
# The links' own sizes are the lengths of R and S, which differ between
# the sides: the steps compare what the programs print, not the tree.
NOTREE=1
on_both "links in and out of the pool, coreutils" '
mkdir -p d/sub "$S/k/kdir"
echo inside >d/f
echo outside >"$S/k/kf"
ln -s "$R/d" abs_in                 # absolute, into the tree under test
ln -s "$S/k" out                    # out to the kernel
ln -s "$S/k/kf" out_file
ln -s "$R/d/f" "$S/k/back_file"     # a kernel link back in
ln -s "$R/d" "$S/k/back"
ln -s "$S/k/back" chain             # R -> S -> R
ln -s "$S/nowhere" out_dangling
ls abs_in abs_in/ out/ chain/ | sort
cat abs_in/f out/kf out_file chain/f out/back_file
readlink abs_in out chain out_dangling | sed "s|^|target |"
stat -c "%n %F %s" abs_in/f out/kf chain/f; stat -c "%n %F" abs_in out
stat -L -c "%n %F" abs_in out chain
test -d out/ && test -f out/kf && test -r chain/f && echo tests ok
echo more >>out/kf; cat "$S/k/kf"
echo new >out/created; cat "$S/k/created"
echo dangle >out_dangling; cat "$S/nowhere"
mkdir out/newdir abs_in/newdir chain/newdir2
truncate -s 3 out/kf; cat "$S/k/kf"; echo
chmod 600 out/kf; stat -c "%a" "$S/k/kf"
touch -d @1000000000 out/kf; stat -c "%Y" "$S/k/kf"
mv out/created out/moved; ls "$S/k" | sort
rm out/moved; rmdir out/newdir
(cd out && pwd -P && ls | sort)
(cd chain && pwd -P && ls | sort)
cp out_file copied; cat copied
find -L . -name "f*" | sort
ls -lL out_file | cut -d" " -f1,5
ln -s /bin/echo echo_out; ./echo_out run through a link out   # execve
ln -s /bin/sh d/sh_out
printf "#!$R/chain/sh_out\necho script ran\n" >d/script; chmod +x d/script
./chain/script                                                  # and its interpreter
find "$S" | sort
find . | sort
'

NOTREE=1
on_both "loops across the pool and the kernel" '
mkdir d
ln -s "$S/loop2" loop1
ln -s "$R/loop1" "$S/loop2"
ln -s "$R/self" self
cat loop1 2>&1 | sed "s/^cat: //" || true
cat self 2>&1 | sed "s/^cat: //" || true
ls loop1/ 2>&1 | sed "s/^ls: //" || true
stat -c %F loop1 self
readlink loop1 self
'

NOTREE=1
on_both "python walk, copytree, resolve" '
mkdir -p d/sub "$S/k/kdir"
echo inside >d/f
echo deep >d/sub/g
echo outside >"$S/k/kf"
echo kdeep >"$S/k/kdir/kg"
ln -s "$R/d/sub" "$S/k/back"
mkdir t
ln -s "$R/d" t/abs_in
ln -s "$S/k" t/out
ln -s "$S/k/back" t/chain
ln -s ../d/f t/rel
python3 - "$R" "$S" <<"EOF"
import os, pathlib, shutil, sys
R, S = sys.argv[1], sys.argv[2]
for top, dirs, files in os.walk("t", followlinks=True):
    dirs.sort()
    print(top, sorted(dirs), sorted(files))
for e in sorted(os.scandir("t"), key=lambda e: e.name):
    print(e.name, e.is_dir(), e.is_file(), e.is_symlink(), e.stat().st_size if e.is_file() else "-")
shutil.copytree("t", "copy", symlinks=False)
for top, dirs, files in os.walk("copy"):
    dirs.sort()
    print("copy", top, sorted(dirs), sorted(files), [os.path.islink(os.path.join(top, d)) for d in sorted(dirs)])
print(open("copy/out/kf").read().strip(), open("copy/chain/g").read().strip())
for p in ["t/abs_in", "t/out", "t/chain", "t/rel", "t/out/back/g", "t/chain/../f"]:
    print(p, pathlib.Path(p).resolve(), os.path.realpath(p))
print(pathlib.Path("t/chain").resolve(strict=True), os.readlink("t/chain"))
shutil.copy("t/out/kf", "t/chain/copied"); print(open("d/sub/copied").read().strip())
shutil.rmtree("copy"); print(sorted(os.listdir(".")))
EOF
'

# ---------------------------------------------------------------- direct
# Paths of the pool's root and of the kernel's fixed tree, so not compared
# with tmpfs: each check states what Linux gives.
if [ "$PRELOAD_DRY" = 1 ]; then finish; exit 0; fi
POOL=$WORK/direct.pool
"$MAPFS" mkfs "$POOL" --size 256M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
uuid=$(od -An -tx1 -j16 -N16 "$POOL" | tr -d ' \n')
PRELOAD_SHM+=("/dev/shm/mapfs-$uuid")
KERNEL_FILE=/etc/hostname
[ -r "$KERNEL_FILE" ] || KERNEL_FILE=/etc/passwd
ABSENT=mapfs-symlinks-absent-$$        # a name the kernel's root lacks
[ ! -e "/$ABSENT" ] || fail "/$ABSENT exists on this machine"
K=$WORK/k                              # kernel links for the chains
mkdir -p "$K"

direct() {  # direct LABEL EXPECTED SCRIPT: stdout+stderr of SCRIPT must be EXPECTED
  local label=$1 want=$2 got
  got=$(run_mapfs "$POOL" "$label" bash -c "set -u; cd $MOUNT; $3" 2>&1) || true
  if [ "$got" != "$want" ]; then
    fail "$label: expected"$'\n'"$want"$'\n'"got"$'\n'"$got"
  fi
  echo "ok $label"
}

direct "link to $MOUNT/d is the pool's /d" "f" "mkdir d; echo x >d/f; ln -s $MOUNT/d l_pool; ls l_pool"
direct "link to $KERNEL_FILE is the kernel's file" "same" \
  "ln -s $KERNEL_FILE l_kernel; cmp l_kernel $KERNEL_FILE && echo same"
direct "link to /$ABSENT is the kernel's, not the pool's /$ABSENT" \
  "ls: cannot access 'l_absent/': No such file or directory" \
  "mkdir $ABSENT; ln -s /$ABSENT l_absent; ls l_absent/ 2>&1"
direct "readlink returns the stored target" "$MOUNT/d /$ABSENT" "echo \$(readlink l_pool l_absent)"
direct "relative '..' past the pool's root leaves it" "same" \
  "ln -s $(printf '../%.0s' $(seq 0 $(( $(tr -cd / <<<"$MOUNT" | wc -c) ))))${KERNEL_FILE#/} d/up; cmp d/up $KERNEL_FILE && echo same"
direct "'$MOUNT/..' in a target is the kernel's /" "same" \
  "ln -s $MOUNT/../${KERNEL_FILE#/} dotdot; cmp dotdot $KERNEL_FILE && echo same"

# A chain of n links alternating between the pool and the kernel, ending at
# a pool file: pool c0 -> kernel c1 -> pool c2 -> ... Linux follows 40.
mkchain() {  # mkchain N: links 0..N-1 alternate pool, kernel; the last one points at $MOUNT/end
  local n=$1 i s="rm -f c*; echo end >end;"
  rm -f "$K"/c*
  for ((i = 0; i < n; i++)); do
    local next=$MOUNT/end
    ((i + 1 < n)) && { ((i % 2 == 0)) && next=$K/c$((i + 1)) || next=$MOUNT/c$((i + 1)); }
    if ((i % 2 == 0)); then s+=" ln -s $next $MOUNT/c$i;"; else s+=" ln -s $next $K/c$i;"; fi
  done
  echo "$s"
}
direct "40 links across pool and kernel are followed" "end" "$(mkchain 40) cat c0"
direct "41 links across pool and kernel give ELOOP" "cat: c0: Too many levels of symbolic links" \
  "$(mkchain 41) cat c0 2>&1"
direct "a pool/kernel loop gives ELOOP" "cat: c0: Too many levels of symbolic links" \
  "rm -f c*; ln -s $K/c1 c0; ln -sfn $MOUNT/c0 $K/c1; cat c0 2>&1"
rm -rf "$K"
finish
