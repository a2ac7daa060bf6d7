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

finish
