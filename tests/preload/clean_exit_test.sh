#!/usr/bin/env bash
# Processes that end without unmounting — exec of a new image, _exit of a
# fork child — leave the pool clean when they hold nothing of it (no open
# or mapped mapfs file): the next mount runs no recovery. One that dies
# holding a file still leaves the pool to recovery, which counts it again.
# Usage: clean_exit_test.sh PATH/TO/mapfs
set -euo pipefail
mapfs=$1
pool=/dev/shm/mapfs-clean-exit-$$.pool
trap 'rm -f "$pool"' EXIT
pass=0 fail=0
recoveries() { "$mapfs" info "$pool" | sed -n 's/.* \([0-9][0-9]*\) recoveries.*/\1/p'; }
check() {  # check WANT_RECOVERIES DESCRIPTION COMMAND
  local want=$1 what=$2 cmd=$3
  "$mapfs" mkfs "$pool" --size 64M >/dev/null
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
check 0 "fork, exec, exit"           'echo hi > /mapfs/a; sh -c true; ls /mapfs'
check 0 "the last command exec'd"    'echo hi > /mapfs/a; ls /mapfs'
check 0 "a subshell"                 'echo hi > /mapfs/a; (cat /mapfs/a; exit 0); true'
check 0 "_exit in a fork child"      'echo hi > /mapfs/a; python3 -c "import os
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)"; cat /mapfs/a'
check 0 "a pipeline"                 'echo hi > /mapfs/a; cat /mapfs/a | wc -c; ls /mapfs | sort'
# Held across _exit: the open count must be collected by recovery.
check 1 "_exit holding an open file" 'python3 -c "import os
f = os.open(\"/mapfs/held\", os.O_CREAT | os.O_WRONLY)
os.unlink(\"/mapfs/held\")
os._exit(0)"'
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
