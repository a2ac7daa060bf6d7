#!/usr/bin/env bash
# Shell redirections under `mapfs run`, compared with tmpfs. They exercise
# descriptor inheritance across fork and exec, offsets shared between a
# parent and its children, O_APPEND from several processes, dup/dup2,
# read-write descriptors and noclobber.
# Usage: redirects_test.sh PATH/TO/mapfs
source "$(dirname "$0")/lib.sh"

on_both "redirects, shared offsets, inheritance" '
echo a >f; (echo b; echo c) >>f; cat f
exec 3>f2; echo x >&3; /bin/echo y >&3; (echo z >&3); bash -c "echo w >&3"; sh -c "printf v\\\\n >&3"; exec 3>&-; cat f2
{ echo 1; /bin/echo 2; echo 3; sh -c "echo 4"; printf "5\n"; cat f; } >g; cat g
# A child reads on from where the shell stopped (bash lseeks back after read).
exec 4<f; read -r l1 <&4; echo "read $l1"; cat <&4; exec 4<&-
exec 4<g; read -r l1 <&4; read -r l2 <&4; head -n 1 <&4; read -r l3 <&4; echo "$l1 $l2 $l3"; exec 4<&-
# Read-write descriptors: a read then a write at the shared offset.
exec 5<>rw; echo hello >&5; exec 5>&-; cat rw
printf abcdef >rw2; exec 6<>rw2; read -r -n 2 x <&6; echo XY >&6; exec 6>&-; cat rw2; echo; echo "x=$x"
# dup: two descriptors, one description.
exec 8>dupf; exec 9>&8; echo a >&8; echo b >&9; exec 8>&-; echo c >&9; /bin/echo d >&9; exec 9>&-; cat dupf
# noclobber
set -C; { echo x >f; } 2>/dev/null || echo "noclobber refused"; echo y >|f; set +C; cat f
# stdout and stderr into one file through one description.
cat f nonexistent >both 2>&1 || true; cat both
cat f nonexistent >o1 2>o2 || true; cat o1 o2
# The shell itself redirected, then restored.
exec 7>&1 >allout; echo one; /bin/echo two; ls -d .; exec 1>&7 7>&-; cat allout
: >truncated; echo kept >>truncated; : >truncated; stat -c %s truncated
echo t | tee t1 t2 >>t3; echo u | tee -a t1 >>t3; cat t1 t2 t3
seq 1 10000 | grep 7 >sevens; wc -l <sevens; sha256sum <sevens
cat <<<"here string" >h; cat <<EOF >>h
here doc $((6 * 7))
EOF
cat h
printf "%s\n" 1 2 3 | xargs -I{} sh -c "echo {} >>xf"; cat xf
mkdir sub; (cd sub && echo in >rel && pwd && /bin/pwd); cat sub/rel
exec 7>>log; for i in 1 2 3; do sh -c "echo child \$0 >&7" "$i"; done; exec 7>&-; cat log
# Appends from concurrent processes: no line lost or torn.
for j in 1 2 3 4; do (for i in $(seq 300); do echo "$j $i"; done >>bg) & done; wait
wc -l <bg; sort bg >bg.sorted; rm bg; sha256sum bg.sorted   # bg: order varies
# A descriptor inherited by a background job and written after the parent closes its copy.
exec 3>late; (sleep 0.2; echo late >&3) & exec 3>&-; wait; cat late
'

finish
