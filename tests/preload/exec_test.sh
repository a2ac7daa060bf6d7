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

# posix_spawn file actions that open pool paths (relative to a cwd in the
# pool, absolute, appending, truncating; one that cannot be opened fails the
# spawn with its errno), as CPython's test_posix uses them (issue 18).
on_both "posix_spawn file actions opening pool files" '
mkdir sub; printf "old contents, longer\n" >sub/trunc
python3 -c "
import os, sys
def spawn(actions, text, code=\"import sys; sys.stdout.write(sys.argv[1])\"):
    prog = sys.executable
    try:
        pid = os.posix_spawn(prog, [prog, \"-c\", code, text],
                             os.environ, file_actions=actions)
    except OSError as e:
        return \"spawn failed: \" + os.strerror(e.errno)
    return os.waitpid(pid, 0)[1]
W = os.O_WRONLY | os.O_CREAT
print(spawn([(os.POSIX_SPAWN_OPEN, 1, \"out\", W | os.O_TRUNC, 0o600)], \"relative\\n\"))
print(spawn([(os.POSIX_SPAWN_OPEN, 1, \"out\", W | os.O_APPEND, 0o600)], \"appended\\n\"))
print(spawn([(os.POSIX_SPAWN_OPEN, 1, os.path.abspath(\"sub/trunc\"), W | os.O_TRUNC, 0o644)], \"absolute\\n\"))
print(spawn([(os.POSIX_SPAWN_OPEN, 3, \"sub/trunc\", os.O_RDONLY, 0),
             (os.POSIX_SPAWN_DUP2, 3, 0), (os.POSIX_SPAWN_OPEN, 1, \"copy\", W, 0o640)], \"\",
            \"import sys; sys.stdout.write(sys.stdin.read())\"))
print(spawn([(os.POSIX_SPAWN_OPEN, 1, \"missing/out\", W, 0o600)], \"x\"))
print(spawn([(os.POSIX_SPAWN_OPEN, 1, os.environ[\"TMPDIR\"] + \"/k\", W, 0o600)], \"kernel file\\n\"))
print(open(os.environ[\"TMPDIR\"] + \"/k\").read(), end=\"\")
"
cat out sub/trunc copy
'

finish
