# The watchdog watches outstanding requests: on 3 ranks, a rank that never starts bucket 3
# while the others keep computing (tests/watchdog_probe.c) ends the job (non-zero, no
# timeout) with a report naming the step, "the all-reduce of bucket 3" and the stalled rank:
# rank 2, named by rank 0; and rank 0 itself, named by rank 1 a grace period later.
. "$srcdir/tests/common.sh"
out=$(mktemp "${TMPDIR:-/tmp}/dptrain-watchdog-XXXXXX")
trap 'rm -f "$out"' EXIT
failures=0
for stalled in 2 0; do
    reporter=$([ "$stalled" -eq 0 ] && echo 1 || echo 0)
    dp_mpirun 30 3 "$top_builddir/tests/watchdog_probe" "$stalled" 1 >"$out" 2>&1
    status=$?
    report="rank $reporter: error: watchdog: step 7: the all-reduce of bucket 3 \\(ring, 3\\.9 KiB\\) has not completed after [0-9.]+ s \\(--timeout 1\\); ranks that have not arrived: $stalled\$"
    if [ "$status" -eq 0 ] || [ "$status" -ge 124 ] || ! grep -Eq "$report" "$out"; then
        echo "FAIL rank $stalled stalls: exit status $status (want non-zero, promptly), and want a line matching"
        echo "    $report"
        sed 's/^/    /' "$out"
        failures=$((failures + 1))
    else
        echo "ok   rank $stalled stalls (exit $status): $(grep -E -m1 "$report" "$out")"
    fi
done
[ "$failures" -eq 0 ]
