#!/usr/bin/env bash
# Installs what building and testing mapfs needs (Debian 12 packages).
set -euo pipefail
pkgs="cmake ninja-build g++ libgtest-dev"
# The preload tests run real programs under `mapfs run` (tests/preload).
pkgs="$pkgs python3 sqlite3 git rsync tar gzip diffutils libleveldb-dev fio libaio1"
# CPython's own file-system tests, under the shim and on the mount
# (tests/cpython_regrtest.sh).
pkgs="$pkgs libpython3.11-testsuite"
# The FUSE mount (src/fuse, tests/fuse).
pkgs="$pkgs libfuse3-dev fuse3 pkg-config"
# The benchmarks (bench/): RocksDB's db_bench, SQLite's headers for the
# TPC-C-like driver, matplotlib for `mapfs bench plot`.
pkgs="$pkgs rocksdb-tools libsqlite3-dev python3-matplotlib"
# mkfs.xfs: `mapfs bench overlay` measures an XFS directory too (on a loop
# device; without it the suite says "xfs skipped").
pkgs="$pkgs xfsprogs"
# The pool-image fuzzer (tests/crash/fuzz: libFuzzer needs clang).
pkgs="$pkgs clang"
# The man pages' test (tests/install/man_test.sh: groff renders them, man
# finds the installed ones).
pkgs="$pkgs groff-base man-db"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update
  $SUDO apt-get install -y $missing
fi
# fsx (crates.io) for tests/preload/fsx_test.sh and tests/fuse/fsx_test.sh,
# pjdfstest (crates.io, the Rust rewrite) for tests/fuse/pjdfstest_test.sh;
# those tests fail loudly without them.
cargo_bin=${CARGO_HOME:-$HOME/.cargo}/bin
for tool in fsx pjdfstest; do
  if ! command -v "$tool" >/dev/null && [ ! -x "$cargo_bin/$tool" ]; then
    cargo=$(command -v cargo || echo "$cargo_bin/cargo")
    if [ -x "$cargo" ]; then "$cargo" install --quiet "$tool"; else echo "install-deps: no cargo: $tool not installed" >&2; fi
  fi
done
