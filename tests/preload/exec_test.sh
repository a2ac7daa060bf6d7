#!/usr/bin/env bash
# Programs stored in mapfs under `mapfs run`, compared with tmpfs: scripts
# sourced, read by a shell, and executed by path (execve of a mapfs file,
# directly, from a child shell and through PATH).
# Usage: exec_test.sh PATH/TO/mapfs
source "$(dirname "$0")/lib.sh"

on_both "scripts stored in mapfs" '
printf "echo sourced \$1\n" >s.sh
. ./s.sh one; bash s.sh two; sh <s.sh
chmod +x s.sh
printf "#!/bin/sh\necho exec \"\$@\"\n" >x.sh; chmod 755 x.sh
./x.sh three
sh -c "./x.sh four"
env PATH="$R:$PATH" x.sh five
'

# A link in the pool to a program outside it is run where it ends: by path
# (posix_spawn, execv) and through a PATH directory in the pool (posix_spawnp,
# execvp); CPython's test_posix links sys.executable so (issue 18).
on_both "links in the pool to programs outside it" '
mkdir bin; ln -s "$(python3 -c "import sys; print(sys.executable)")" bin/py.exe
PATH="$R/bin:$PATH" python3 -c "
import os, subprocess
def run(spawn, path):
    pid = spawn(path, [\"py.exe\", \"-c\", \"print(\\\"ran\\\")\"], os.environ)
    return os.waitpid(pid, 0)[1]
print(\"posix_spawnp\", run(os.posix_spawnp, \"py.exe\"))
print(\"posix_spawn\", run(os.posix_spawn, \"bin/py.exe\"))
print(subprocess.run([\"py.exe\", \"-c\", \"print(7)\"], capture_output=True, text=True).stdout.strip())
pid = os.fork()
if pid == 0:
    os.execvp(\"py.exe\", [\"py.exe\", \"-c\", \"print(\\\"execvp\\\")\"])
print(\"child\", os.waitpid(pid, 0)[1])
"
bin/py.exe -c "print(\"by path\")"
'

finish
