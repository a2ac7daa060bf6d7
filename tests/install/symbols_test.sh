#!/usr/bin/env bash
# libmapfs.so exports the C API and nothing else: every dynamic symbol it
# defines is a mapfs_* function of include/mapfs/mapfs.h (or the version
# node MAPFS_*), and every function that header declares is exported.
# Programs linking the library can then rely on neither more nor less.
# Usage: symbols_test.sh LIBMAPFS_SO MAPFS_H [NM]
set -euo pipefail
lib=$1 header=$2 nm=${3:-nm}
[ -f "$lib" ] || { echo "FAIL: no library at $lib"; exit 1; }
[ -f "$header" ] || { echo "FAIL: no header at $header"; exit 1; }

# "ADDR TYPE NAME[@[@]VERSION]" -> "TYPE NAME", defined symbols only.
exported=$("$nm" -D --defined-only "$lib" | awk '{ sub(/@.*/, "", $3); print $2, $3 }')
fail=0
# Anything else (C++ internals, runtime templates) is an ABI promise nobody
# made, and lets programs bind to internals that change without notice.
extra=$(printf '%s\n' "$exported" | awk '!($2 ~ /^mapfs_/ || ($1 == "A" && $2 ~ /^MAPFS_/))')
if [ -n "$extra" ]; then
  echo "FAIL: $(printf '%s\n' "$extra" | wc -l) exported symbols are not part of the C API, e.g.:"
  printf '%s\n' "$extra" | head -n 20 | sed 's/^/  /'
  fail=1
fi

# Function names declared in the header: comments removed, then every
# "mapfs_name(" (a declaration's name is followed by its parameter list).
declared=$(perl -0pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g' "$header" | grep -oE '\bmapfs_[a-z0-9_]+[[:space:]]*\(' | tr -d '( \t' | sort -u)
[ -n "$declared" ] || { echo "FAIL: found no mapfs_* function declarations in $header"; exit 1; }
names=$(printf '%s\n' "$exported" | awk '{ print $2 }' | sort -u)
missing=$(comm -23 <(printf '%s\n' "$declared") <(printf '%s\n' "$names"))
if [ -n "$missing" ]; then
  echo "FAIL: declared in $(basename "$header") but not exported:" $missing
  fail=1
fi
# Exported mapfs_* names the header does not declare: nobody can call them
# without a prototype, so they are internals leaking under the API prefix.
undeclared=$(comm -13 <(printf '%s\n' "$declared") <(printf '%s\n' "$names" | grep '^mapfs_'))
if [ -n "$undeclared" ]; then
  echo "FAIL: exported but not declared in $(basename "$header"):" $undeclared
  fail=1
fi
[ "$fail" = 0 ] || exit 1
echo "$(printf '%s\n' "$declared" | wc -l) API functions exported, nothing else; 1 passed, 0 failed"
