#!/usr/bin/env bash
# LevelDB under `mapfs run`, compared with tmpfs: leveldb_roundtrip builds a
# 20,000-key database (background flushes and compactions on another
# thread, fcntl lock on LOCK, CURRENT replaced by rename, mmapped tables),
# reopens it and reads every key back; its output (counts and checksums)
# must match. The file layout depends on compaction timing, so the tree
# itself is not compared.
# Usage: leveldb_test.sh PATH/TO/mapfs PATH/TO/leveldb_roundtrip
PROG=$(realpath -m -- "${2:?usage: leveldb_test.sh PATH/TO/mapfs PATH/TO/leveldb_roundtrip}")
source "$(dirname "$0")/lib.sh"
[ -x "$PROG" ] || fail "$PROG is not an executable (build the leveldb_roundtrip target)"
cp "$PROG" "$FIX/leveldb_roundtrip"

NOTREE=1
on_both "leveldb 20,000 keys" '
"$FIX/leveldb_roundtrip" db 20000
ls db | grep -c "\.ldb$" >/dev/null && echo "has tables"
[ -s db/CURRENT ] && echo "has CURRENT"
"$FIX/leveldb_roundtrip" db 2>&1 || echo "second create refused: status $?"
'

finish
