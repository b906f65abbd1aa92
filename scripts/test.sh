#!/bin/sh
# Installs what is missing, builds, runs make check (arguments go to make: TESTS='...'); exits 0
# only if every test passed.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/build.sh"
cd "$top/${BUILD_DIR:-build}"
status=0
make -j"$(nproc)" check --no-print-directory "$@" || status=$?
# Failing tests' logs, then automake's counts as one closing line.
if [ -f test-suite.log ]; then
    count() { grep -E "^# $1: " test-suite.log | awk '{print $3}'; }
    [ "$status" -eq 0 ] || sed -n '/^FAIL\|^ERROR/,/^$/p' test-suite.log | head -n 200
    echo "check: $(count PASS) passed, $(($(count FAIL) + $(count ERROR))) failed, $(count SKIP) skipped"
fi
exit "$status"
