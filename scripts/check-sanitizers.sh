#!/bin/sh
# make check in an AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/): any
# memory error, undefined behaviour or leak outside Open MPI (tests/lsan.supp) fails a test.
# The tests Makefile.am lists in SANITIZER_SKIP_TESTS (each with why they prove nothing more
# under the sanitizers than in the plain suite) are left to the plain suite.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
# One compute capability: the sanitized kernels never run on a GPU here (the fake runtime runs
# their host-compiled twins), and five cost nvcc about 40 s more.
export BUILD_DIR=build-asan CONFIGURE_FLAGS="--enable-sanitizers CUDA_ARCH=90"
"$top/scripts/build.sh"
# The last line of each: build.sh has remade the Makefile, but make would say so first.
list() { make -s -C "$top/build-asan" --no-print-directory "$1" | tail -n 1; }
echo "sanitizers: left to the plain suite: $(list sanitizer-skipped-tests)"
exec "$top/scripts/test.sh" TESTS="$(list sanitizer-tests)"
