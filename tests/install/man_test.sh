#!/usr/bin/env bash
# The man pages document what exists and render cleanly:
#  - mapfs(1) has an entry for every verb the CLI's own help lists, every
#    bench suite its usage lists, and mentions every option those usages and
#    each verb's usage error show;
#  - mapfs(3) has a synopsis line and an entry for every function
#    include/mapfs/mapfs.h declares;
#  - groff renders both with every warning on and says nothing.
# Usage: man_test.sh MAPFS_CLI SOURCE_DIR
set -uo pipefail
mapfs=$1 src=$2
page1=$src/man/mapfs.1 page3=$src/man/mapfs.3
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# The first word of the line after each .TP: the entries of a page
# (".B mkfs", ".BI \"cat \" ...", ".B ls \fR[\fP..." all give the verb).
entries() {
  awk 'tp { l = $0; sub(/^\.[A-Z]+ +/, "", l); gsub(/^"|\\f[BIRP]/, "", l); split(l, w, /[ "]/); print w[1]; tp = 0 }
       /^\.TP/ { tp = 1 }' "$1" | sort -u
}
# Options as the page spells them in troff ("\-\-size", "\-l").
page1_text=$(sed 's/\\-/-/g' "$page1")

# --- mapfs(1) ---
help=$("$mapfs" help) || bad "'mapfs help' failed"
verbs=$(printf '%s\n' "$help" | grep -oE '^  [a-z]+' | tr -d ' ' | sort -u)
[ "$(printf '%s\n' "$verbs" | wc -l)" -ge 10 ] || bad "found only these verbs in 'mapfs help': $verbs"
e1=$(entries "$page1")
for v in $verbs; do
  grep -qx "$v" <<<"$e1" || bad "mapfs.1: no entry for the verb '$v' (listed by 'mapfs help')"
done
bench_usage=$("$mapfs" bench 2>&1 >/dev/null)
# The suites: those of the bench usage and the SUITE list of 'mapfs help'.
suites=$( (printf '%s\n' "$bench_usage" | grep -oE '^  [a-z]+  ' | tr -d ' '
           printf '%s\n' "$help" | grep -oE '[a-z]+(\|[a-z]+){4,}' | tr '|' '\n') | sort -u)
[ -n "$suites" ] || bad "found no suites in the usage of 'mapfs bench'"
for s in $suites; do
  grep -qx "$s" <<<"$e1" || bad "mapfs.1: no entry for the bench suite '$s'"
done
grep -q 'bench plot' <<<"$page1_text" || bad "mapfs.1: no 'bench plot'"
# Each verb's usage error shows its options (an unknown option makes every
# verb print its usage without touching anything; umount needs two words).
usages=$help$'\n'$bench_usage
for v in $verbs; do
  usages+=$'\n'$("$mapfs" "$v" --mapfs-man-test-unknown-option x 2>&1)
done
opts=$(printf '%s\n' "$usages" | grep -oE '(^|[[ ])--[a-z][a-z0-9-]*|\[-[a-zA-Z]\]' | tr -d '[] ' | grep -vx -- --mapfs-man-test-unknown-option | sort -u)
for o in $opts; do
  grep -qe "$o\b" <<<"$page1_text" || bad "mapfs.1: the option $o (in the CLI's usage) is not documented"
done
for env in MAPFS_POOL MAPFS_MOUNT MAPFS_MODE MAPFS_LOG MAPFS_PERSIST; do
  grep -q "^\.B $env\$" "$page1" || bad "mapfs.1: no entry for the environment variable $env"
done

# --- mapfs(3) ---
declared=$(perl -0pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g' "$src/include/mapfs/mapfs.h" |
           grep -oE '\bmapfs_[a-z0-9_]+[[:space:]]*\(' | tr -d '( \t' | sort -u)
[ "$(printf '%s\n' "$declared" | wc -l)" -ge 10 ] || bad "found only these functions in mapfs.h: $declared"
e3=$(entries "$page3")
synopsis=$(sed -n '/^\.SH SYNOPSIS/,/^\.SH DESCRIPTION/p' "$page3")
for f in $declared; do
  grep -qx "$f" <<<"$e3" || bad "mapfs.3: no entry for $f (declared in mapfs.h)"
  grep -qE "[ *]$f\(" <<<"$synopsis" || bad "mapfs.3: $f is not in the SYNOPSIS"
done
for env in MAPFS_MODE MAPFS_LOG MAPFS_PERSIST MAPFS_POOL MAPFS_MOUNT; do
  grep -q "$env" "$page3" || bad "mapfs.3: the environment variable $env is not mentioned"
done

# --- rendering ---
if ! command -v groff >/dev/null; then
  bad "groff not found (Debian package groff-base; run scripts/install-deps.sh)"
else
  for p in "$page1" "$page3"; do
    out=$(groff -man -Tutf8 -ww -z "$p" 2>&1)
    [ -z "$out" ] || bad "$(basename "$p") renders with warnings: $out"
  done
fi

[ "$fail" = 0 ] || exit 1
echo "$(wc -w <<<"$verbs") verbs, $(wc -w <<<"$suites") bench suites, $(wc -w <<<"$opts") options, $(wc -w <<<"$declared") API functions documented; 1 passed, 0 failed"
