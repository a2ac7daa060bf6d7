#!/usr/bin/env bash
# Processes that end without unmounting — exec of a new image, _exit of a
# fork child — leave the pool clean (the next mount runs no recovery, fsck
# finds nothing): one that holds nothing marks its end idle; an exec that
# holds files hands them to the next image, which confirms it took them
# all (close-on-exec and mapped ones it closes for the old image); a
# single-threaded _exit closes what it holds. Where that cannot be known —
# the next image runs without the shim, another thread may be inside a
# call — the pool is still left to recovery, which counts the files again.
# Usage: clean_exit_test.sh PATH/TO/mapfs
set -euo pipefail
mapfs=$1
pool=/dev/shm/mapfs-clean-exit-$$.pool
trap 'rm -f "$pool"' EXIT
pass=0 fail=0
recoveries() { "$mapfs" info "$pool" | sed -n 's/.* \([0-9][0-9]*\) recoveries.*/\1/p'; }
check() {  # check WANT_RECOVERIES DESCRIPTION COMMAND
  local want=$1 what=$2 cmd=$3
  "$mapfs" mkfs "$pool" --size 64M ${MAPFS_TEST_FILES:+--files "$MAPFS_TEST_FILES"} >/dev/null
  "$mapfs" run --pool "$pool" -- bash -c "$cmd" >/dev/null
  local got
  got=$(recoveries)
  if [ "$got" = "$want" ]; then
    pass=$((pass + 1))
  else
    echo "FAIL: $what: $got recoveries after it (want $want): $cmd" >&2
    fail=$((fail + 1))
  fi
  "$mapfs" fsck "$pool" >/dev/null
}
check 0 "the issue's command"        'sh -c true; ls'
check 0 "fork, exec, exit"           'echo hi > /mapfs/a; sh -c true; ls /mapfs'
check 0 "the last command exec'd"    'echo hi > /mapfs/a; ls /mapfs'
check 0 "a subshell"                 'echo hi > /mapfs/a; (cat /mapfs/a; exit 0); true'
check 0 "_exit in a fork child"      'echo hi > /mapfs/a; python3 -c "import os
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)"; cat /mapfs/a'
check 0 "a pipeline"                 'echo hi > /mapfs/a; cat /mapfs/a | wc -c; ls /mapfs | sort'
# Exec holding files: handed to the next image, which takes them over.
check 0 "a redirect to an exec'd program" 'echo hi > /mapfs/a; ls /mapfs > /mapfs/b; cat /mapfs/a >> /mapfs/b'
check 0 "exec holding a descriptor"  'echo hi > /mapfs/a; exec 3</mapfs/a; exec cat <&3'
check 0 "exec of an unlinked file"   'echo hi > /mapfs/a; exec 3</mapfs/a; rm /mapfs/a; exec cat <&3'
check 0 "exec losing close-on-exec"  'python3 -c "import os
f = os.open(\"/mapfs/c\", os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC)
os.unlink(\"/mapfs/c\")
os.execv(\"/bin/true\", [\"true\"])"'
check 0 "exec losing a map"          'python3 -c "import mmap, os
f = os.open(\"/mapfs/m\", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
os.ftruncate(f, 4096)
m = mmap.mmap(f, 4096)
m[0:2] = b\"hi\"
os.close(f)
os.unlink(\"/mapfs/m\")
os.execv(\"/bin/true\", [\"true\"])"'
# _exit holding an unlinked open file: closed on the way out, so it is freed.
check 0 "_exit holding an open file" 'python3 -c "import os
f = os.open(\"/mapfs/held\", os.O_CREAT | os.O_WRONLY)
os.unlink(\"/mapfs/held\")
os._exit(0)"'
# Loops of all of it, in a script.
check 0 "forks, execs and _exits in loops" 'for i in $(seq 1 15); do
  echo $i > /mapfs/f$i
  sh -c "cat /mapfs/f$i" > /mapfs/g$i
  (exec 4>>/mapfs/g$i; exec sh -c "echo more >&4")
  python3 -c "import os
for k in range(3):
    pid = os.fork()
    if pid == 0:
        fd = os.open(\"/mapfs/f$i\", os.O_RDONLY)
        os._exit(0)
    os.waitpid(pid, 0)"
  exec 5</mapfs/f$i; rm /mapfs/f$i; cat <&5 >/dev/null; exec 5<&-
done; ls /mapfs | wc -l'
# Where it cannot be known that nothing leaked, recovery still runs (and
# counts again): a next image without the shim never confirms the hand-off;
# another thread may be inside a call at _exit.
check 1 "exec into a program without the shim" 'echo hi > /mapfs/a; exec 3</mapfs/a; exec env -u LD_PRELOAD true'
check 1 "_exit with another thread running" 'python3 -c "import os, threading, time
f = os.open(\"/mapfs/t\", os.O_CREAT | os.O_WRONLY)
threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
os._exit(0)"'
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
