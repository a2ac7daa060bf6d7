#!/bin/sh
# The protection keys' cost per C API call: bench/pkey_cpu.cc run with keys
# (MAPFS_PKEYS unset) and without (MAPFS_PKEYS=0), interleaved, best figure
# of each per operation (CPU clock of the thread), and the difference.
#
#   scripts/pkey_cpu_compare.sh BIN POOL ROUNDS [pkey-cpu args...]
#
# BIN is build/bin/pkey-cpu; POOL an existing pool (mapfs mkfs). Each round
# runs keys on, then off; the best of several rounds is the least disturbed.
set -eu
bin=$1 pool=$2 rounds=$3
shift 3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
i=0
while [ "$i" -lt "$rounds" ]; do
  env -u MAPFS_PKEYS "$bin" "$pool" "$@" >>"$out/on"
  MAPFS_PKEYS=0 "$bin" "$pool" "$@" >>"$out/off"
  i=$((i + 1))
done
awk 'FNR == 1 { f++ } { k = $1; v = $2 + 0; if (!((k, f) in b) || v < b[k, f]) b[k, f] = v;
     if (f == 1 && !(k in seen)) { seen[k] = 1; order[++n] = k } }
     END { printf "%-12s %10s %10s %10s %7s\n", "op (ns, best)", "keys on", "keys off", "on - off", "on/off";
           for (i = 1; i <= n; i++) { k = order[i];
             printf "%-12s %10.1f %10.1f %10.1f %7.3f\n", k, b[k, 1], b[k, 2], b[k, 1] - b[k, 2], b[k, 1] / b[k, 2] } }' \
  "$out/on" "$out/off"
