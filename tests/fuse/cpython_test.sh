#!/usr/bin/env bash
# CPython's file-system regression tests with cwd and TMPDIR on a FUSE mount
# of a fresh pool, against the same run on tmpfs (the shared script:
# tests/cpython_regrtest.sh, which the preload test runs under the shim).
# Usage: cpython_test.sh PATH/TO/mapfs
exec bash "$(dirname "$0")/../cpython_regrtest.sh" fuse "$@"
