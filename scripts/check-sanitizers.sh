#!/bin/sh
# make check in an AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/): any
# memory error, undefined behaviour or leak outside Open MPI (tests/lsan.supp) fails a test.
# The tests Makefile.am lists in SANITIZER_SKIP_TESTS (each with why they prove nothing more
# under the sanitizers than in the plain suite) are left to the plain suite.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
export BUILD_DIR=build-asan CONFIGURE_FLAGS=--enable-sanitizers
"$top/scripts/build.sh"
skipped=$(make -s -C "$top/build-asan" --no-print-directory sanitizer-skipped-tests)
echo "sanitizers: left to the plain suite: $skipped"
exec "$top/scripts/test.sh" TESTS="$(make -s -C "$top/build-asan" --no-print-directory sanitizer-tests)"
