#!/usr/bin/env bash
# SQLite (the sqlite3 shell) under `mapfs run`, compared with tmpfs: tables
# built in transactions (committed and rolled back, savepoints) in
# rollback-journal modes (DELETE, TRUNCATE, PERSIST) and in WAL mode (its
# -shm file is mmapped and shared with other processes reading while the
# writer is open), a small page cache so that transactions spill to the
# file, then reopened by new processes. `PRAGMA integrity_check` must print
# ok and every query's output must match.
# Usage: sqlite_test.sh PATH/TO/mapfs
source "$(dirname "$0")/lib.sh"
need sqlite3 sqlite3

# The work, the same for every journal mode, and the checks run by a new
# process afterwards (fixtures: read from the kernel's tmpfs).
cat >"$FIX/work.sql" <<'EOF'
PRAGMA cache_size = 20;
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, v BLOB);
CREATE TABLE log(seq INTEGER PRIMARY KEY AUTOINCREMENT, msg TEXT);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)
  INSERT INTO t SELECT x, printf('name-%06d', (x * 7919) % 20011), zeroblob(50 + x % 200) FROM c;
INSERT INTO log(msg) VALUES ('bulk insert');
COMMIT;
CREATE INDEX t_name ON t(name);
BEGIN;
DELETE FROM t WHERE id % 3 = 0;
UPDATE t SET name = 'gone' WHERE id % 5 = 0;
SELECT 'inside', count(*) FROM t;
ROLLBACK;
SELECT 'after rollback', count(*), sum(id) FROM t;
BEGIN;
UPDATE t SET name = upper(name), v = x'00ff' WHERE id % 7 = 0;
DELETE FROM t WHERE id % 11 = 0;
INSERT INTO log(msg) VALUES ('update and delete');
COMMIT;
SAVEPOINT s1;
INSERT INTO t(id, name) VALUES (100001, 'savepoint');
SAVEPOINT s2;
DELETE FROM t WHERE id < 1000;
ROLLBACK TO s2;
RELEASE s1;
SELECT 'counts', count(*), sum(id), sum(length(v)), count(DISTINCT name) FROM t;
PRAGMA integrity_check;
EOF
cat >"$FIX/check.sql" <<'EOF'
SELECT id, name, length(v) FROM t WHERE id % 997 = 0 ORDER BY id;
SELECT name FROM t ORDER BY name DESC LIMIT 5;
SELECT seq, msg FROM log ORDER BY seq;
SELECT 'counts', count(*), sum(id), sum(length(v)), count(DISTINCT name) FROM t;
PRAGMA integrity_check;
PRAGMA journal_mode;
EOF
cat >"$FIX/wal-writer.sql" <<'EOF'
PRAGMA wal_autocheckpoint = 0;
BEGIN;
INSERT INTO t(id, name) VALUES (200000, 'in flight');
.shell sqlite3 -batch wal.db "SELECT 'reader before commit', count(*) FROM t WHERE id = 200000;"
COMMIT;
.shell sqlite3 -batch wal.db "SELECT 'reader after commit', count(*) FROM t WHERE id = 200000;"
.shell ls
UPDATE t SET name = 'wal-update' WHERE id % 13 = 0;
.shell sqlite3 -batch wal.db "SELECT 'reader', count(*) FROM t WHERE name = 'wal-update';"
PRAGMA wal_checkpoint(TRUNCATE);
PRAGMA integrity_check;
EOF
# Thousands of transactions with no checkpoint: the wal-index (-shm) grows
# past its first 32 KiB region while mapped (each region is mapped as the
# index reaches it), and readers in other processes come and go meanwhile.
{
  echo "PRAGMA wal_autocheckpoint = 0;"
  for i in $(seq 1 6000); do
    echo "INSERT INTO k(v) VALUES ('row-$i');"
    if [ $((i % 1500)) = 0 ]; then
      echo ".shell sqlite3 -batch many.db \"SELECT 'reader at $i', count(*), max(id) FROM k; PRAGMA integrity_check;\""
    fi
  done
  echo "SELECT 'writer', count(*), sum(id) FROM k;"
  echo "PRAGMA integrity_check;"
} >"$FIX/many.sql"

NOHASH='-journal$'   # journals carry a random nonce
on_both "sqlite rollback journal (DELETE, TRUNCATE, PERSIST)" '
for mode in delete truncate persist; do
  echo "== $mode"
  { echo "PRAGMA journal_mode = $mode;"; cat "$FIX/work.sql"; } | sqlite3 -batch "$mode.db"
  ls
  { echo "PRAGMA journal_mode = $mode;"; cat "$FIX/check.sql"; } | sqlite3 -batch "$mode.db"
  sqlite3 -batch "$mode.db" "PRAGMA journal_mode = $mode; VACUUM; PRAGMA integrity_check; SELECT count(*) FROM t;"
  ls
done
'

on_both "sqlite WAL" '
{ echo "PRAGMA journal_mode = WAL;"; cat "$FIX/work.sql"; } | sqlite3 -batch wal.db
ls
# While a writer holds the database open, other processes read through the
# shared (mmapped) wal-index, before and after the writer commits.
sqlite3 -batch wal.db <"$FIX/wal-writer.sql"
sqlite3 -batch wal.db <"$FIX/check.sql"
ls
'

on_both "sqlite WAL, thousands of transactions (the wal-index grows while mapped)" '
sqlite3 -batch many.db "PRAGMA journal_mode = WAL; CREATE TABLE k(id INTEGER PRIMARY KEY, v TEXT);"
sqlite3 -batch many.db <"$FIX/many.sql"
sqlite3 -batch many.db "SELECT count(*), sum(id), max(v) FROM k; PRAGMA integrity_check; PRAGMA wal_checkpoint(TRUNCATE);"
sqlite3 -batch many.db "SELECT count(*) FROM k; PRAGMA integrity_check;"
ls
'

finish
