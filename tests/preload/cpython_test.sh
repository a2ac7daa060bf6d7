#!/usr/bin/env bash
# CPython's file-system regression tests with cwd and TMPDIR in the pool under
# `mapfs run`, against the same run on tmpfs (the shared script:
# tests/cpython_regrtest.sh, which the FUSE test runs on the mount).
# Usage: cpython_test.sh PATH/TO/mapfs
exec bash "$(dirname "$0")/../cpython_regrtest.sh" shim "$@"
