# dp_overlap_bench on 2 ranks, small: exits 0 with its header and one row per algorithm and
# way of progressing (the numbers are a benchmark's, not checked); a bad option exits 2 with
# the usage, printed once.
. "$srcdir/tests/common.sh"
out=$(mktemp "${TMPDIR:-/tmp}/dptrain-overlap-XXXXXX")
trap 'rm -f "$out"' EXIT
cases=0 failures=0
dp_mpirun 60 2 "$top_builddir/dp_overlap_bench" -s 64K -n 3 -m 64 -a ring,mpi >"$out" 2>&1
dp_check_outcome "ring and mpi, 64 KiB" ok $? "$out" "# dp_overlap_bench: 2 ranks, all-reduce of 65536 bytes; pieces: sgemm 64^3; medians of 3 steps"
rows=$(grep -cE '^(ring|mpi) +(none|test|thread)' "$out")
cases=$((cases + 1))
if [ "$rows" -ne 10 ]; then
    echo "FAIL want 10 rows (2 algorithms x 5 ways), found $rows:"
    sed 's/^/    /' "$out"
    failures=$((failures + 1))
fi
dp_mpirun 60 2 "$top_builddir/dp_overlap_bench" --sleep 100 -s 16K -n 2 -a rhd >"$out" 2>&1
dp_check_outcome "sleeping pieces" ok $? "$out" "pieces: sleep 100 us"
dp_mpirun 60 2 "$top_builddir/dp_overlap_bench" -n 0 >"$out" 2>&1
status=$?
dp_check_outcome "-n 0 refused" fail $status "$out" "--iterations: bad value '0'"
cases=$((cases + 1))
if [ "$status" -ne 2 ] || [ "$(grep -c '^Usage:' "$out")" -ne 1 ]; then
    echo "FAIL -n 0: want exit 2 and the usage once, got exit $status"
    failures=$((failures + 1))
fi
echo "dp_overlap_bench: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
