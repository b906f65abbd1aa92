#!/bin/sh
# Times every test of `make check` (in build/, or BUILD_DIR) through automake's test driver and
# prints them longest first with their share of the summed time; extra arguments go to make
# (TESTS='...', -j1). As `--driver FILE DRIVER ARGS...` it is that wrapper: it runs automake's
# DRIVER with ARGS and appends "SECONDS NAME" to FILE.
set -eu
if [ "${1:-}" = --driver ]; then
    times=$2 driver=$3
    shift 3
    name=$(printf '%s\n' "$@" | sed -n '/^--test-name$/{n;p;q;}')
    start=$(date +%s.%N)
    status=0
    sh "$driver" "$@" || status=$?
    echo "$(date +%s.%N) $start $name" | awk '{printf "%.1f %s\n", $1 - $2, $3}' >>"$times"
    exit "$status"
fi
top=$(cd "$(dirname "$0")/.." && pwd)
build="$top/${BUILD_DIR:-build}"
times=$(mktemp "${TMPDIR:-/tmp}/dptrain-test-times-XXXXXX")
trap 'rm -f "$times"' EXIT
wrapper="sh $top/scripts/test-times.sh --driver $times $top/build-aux/test-driver"
start=$(date +%s)
status=0
make -C "$build" --no-print-directory check LOG_DRIVER="$wrapper" SH_LOG_DRIVER="$wrapper" "$@" \
    >/dev/null || status=$?
echo "make check: $(($(date +%s) - start)) s wall, exit status $status"
sort -rn "$times" | awk '{ line[NR] = $0; t[NR] = $1; sum += $1 }
    END { for (i = 1; i <= NR; i++) printf "%8.1f s %5.1f%%  %s\n", t[i], 100 * t[i] / sum, substr(line[i], index(line[i], " ") + 1)
          printf "%8.1f s summed over %d tests\n", sum, NR }'
exit "$status"
