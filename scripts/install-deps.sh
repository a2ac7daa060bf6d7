#!/usr/bin/env bash
# Installs what building and testing mapfs needs (Debian 12 packages).
set -euo pipefail
pkgs="cmake ninja-build g++ libgtest-dev"
# The preload tests run real programs under `mapfs run` (tests/preload).
pkgs="$pkgs python3 sqlite3 git rsync tar gzip diffutils libleveldb-dev"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update
  $SUDO apt-get install -y $missing
fi
