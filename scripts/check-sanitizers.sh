#!/bin/sh
# make check in an AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/): any
# memory error, undefined behaviour or leak outside Open MPI (tests/lsan.supp) fails a test.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=build-asan CONFIGURE_FLAGS=--enable-sanitizers exec "$top/scripts/test.sh"
