#!/bin/sh
# Times two builds of libmapfs.so with one meta-cpu binary (bench/meta_cpu.cc),
# interleaved, and prints the best figure of each per operation.
#
#   scripts/meta_cpu_compare.sh BIN BEFORE_LIBDIR AFTER_LIBDIR ROUNDS [meta-cpu args...]
#
# BIN is build/bin/meta-cpu; each LIBDIR holds a libmapfs.so.0 (LD_LIBRARY_PATH
# wins over the binary's RUNPATH). Each round runs before, then after; on a
# shared machine the best of several rounds is the least disturbed one.
set -eu
bin=$1 before=$2 after=$3 rounds=$4
shift 4
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
i=0
while [ "$i" -lt "$rounds" ]; do
  LD_LIBRARY_PATH=$before "$bin" "$@" >>"$out/before"
  LD_LIBRARY_PATH=$after "$bin" "$@" >>"$out/after"
  i=$((i + 1))
done
awk 'FNR == 1 { f++ } { k = $1; v = $2 + 0; if (!((k, f) in b) || v < b[k, f]) b[k, f] = v;
     if (f == 1 && !(k in seen)) { seen[k] = 1; order[++n] = k } }
     END { printf "%-22s %10s %10s %7s\n", "op (ns, best)", "before", "after", "after/before";
           for (i = 1; i <= n; i++) { k = order[i];
             printf "%-22s %10d %10d %7.2f\n", k, b[k, 1], b[k, 2], b[k, 2] / b[k, 1] } }' \
  "$out/before" "$out/after"
