# dp_bench on 2 and 3 ranks (3 oversubscribed here): every algorithm exits 0 with nccl-tests'
# columns and footer and #wrong 0 on every row, counts below, at and not divisible by W;
# --tune writes a table auto then runs from; --grad-dtype bf16 sums exactly too and reports
# half the bytes; bad options exit 2 with the usage, without hanging.
. "$srcdir/tests/common.sh"
bench="$top_builddir/dp_bench"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-dp-bench-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0
fail() {
    echo "FAIL $1"
    sed 's/^/    /' "$dir/out"
    failures=$((failures + 1))
}
# 4 B .. 128 KiB by 8: counts 1 (< W), 8 (not divisible by 3), ... 32768.
sizes="-b 4 -e 128K -f 8 -w 1 -n 2"
rows_per_algorithm=6
titles='^#       size         count      type   redop     time   algbw   busbw #wrong     time   algbw   busbw #wrong$'

# check_report NP ALGORITHM_COUNT: dp_bench's output in $dir/out has the header, one table
# per algorithm, rows of 12 fields with #wrong 0, and one passing footer per algorithm.
check_report() {
    grep -q "^# dp_bench .*: all-reduce, float32 sum, $1 ranks" "$dir/out" || return 1
    [ "$(grep -c '^# Algorithm: ' "$dir/out")" -eq "$2" ] || return 1
    [ "$(grep -c "$titles" "$dir/out")" -eq "$2" ] || return 1
    [ "$(grep -c '^# Out of bounds values : 0 OK$' "$dir/out")" -eq "$2" ] || return 1
    [ "$(grep -cE '^# Avg bus bandwidth    : [0-9.e+-]+$' "$dir/out")" -eq "$2" ] || return 1
    awk -v want=$(($2 * rows_per_algorithm)) '
        !/^#/ { rows++; if (NF != 12 || $3 != "float" || $4 != "sum" || $8 != "0" || $12 != "0") bad++ }
        END { exit !(rows == want && bad == 0) }' "$dir/out"
}

# Through mpirun and under a timeout like every other run: a singleton MPI start is the one
# run of this test that nothing bounded, and it is what differs from the others under load.
algorithms=$(dp_mpirun 60 1 "$bench" --help | sed -n 's/^Algorithms: //p' | wc -w)
[ "$algorithms" -gt 0 ] || { echo "FAIL dp_bench --help listed no algorithms"; exit 1; }
for np in 2 3; do
    if ! dp_mpirun 120 "$np" "$bench" $sizes -a all >"$dir/out" 2>&1; then
        fail "W=$np -a all: non-zero exit"
    elif ! check_report "$np" "$algorithms"; then
        fail "W=$np -a all: report format or #wrong"
    else
        echo "ok   W=$np -a all: $algorithms algorithms, every #wrong 0"
    fi
done

# bf16: the same counts, each row's size their bf16 bytes (2 per element), every #wrong 0.
if dp_mpirun 120 2 "$bench" $sizes -a all --grad-dtype bf16 >"$dir/out" 2>&1 &&
    grep -q "^# dp_bench .*: all-reduce, bfloat16 sum, 2 ranks" "$dir/out" &&
    [ "$(grep -c '^# Out of bounds values : 0 OK$' "$dir/out")" -eq "$algorithms" ] &&
    awk -v want=$((algorithms * rows_per_algorithm)) '
        !/^#/ { rows++; if (NF != 12 || $1 != 2 * $2 || $3 != "bfloat16" || $8 != "0" || $12 != "0") bad++ }
        END { exit !(rows == want && bad == 0) }' "$dir/out"; then
    echo "ok   W=2 -a all --grad-dtype bf16: every #wrong 0, sizes of 2 bytes per element"
else
    fail "W=2 -a all --grad-dtype bf16: report format, sizes or #wrong"
fi

table="$dir/auto.table"
if dp_mpirun 120 2 "$bench" $sizes --tune "$table" >"$dir/out" 2>&1 &&
    grep -q "^# --tune wrote $table, rules of W=2: " "$dir/out" &&
    grep -qE '^2 +inf +[a-z-]+$' "$table" &&
    dp_mpirun 60 2 "$bench" $sizes -a auto,mpi --auto-table "$table" >"$dir/out" 2>&1 &&
    grep -q "^# auto table $table, rules of W=2: " "$dir/out" && check_report 2 2; then
    echo "ok   --tune wrote a table that auto runs from: $(grep -c . "$table") lines"
else
    fail "--tune, then auto from its table"
fi

# expect_usage_error PHRASE OPTIONS...: exit status 2 within the timeout, PHRASE and the usage.
expect_usage_error() {
    phrase=$1
    shift
    dp_mpirun 20 2 "$bench" "$@" >"$dir/out" 2>&1
    status=$?
    if [ "$status" -ne 2 ]; then
        fail "$*: exit status $status (want 2)"
    elif ! grep -F -q -- "$phrase" "$dir/out" || ! grep -q '^Usage: mpirun -np W dp_bench' "$dir/out"; then
        fail "$*: lacks '$phrase' or the usage"
    elif [ "$(grep -c '^Usage:' "$dir/out")" -ne 1 ]; then
        fail "$*: usage printed by more than rank 0"
    else
        echo "ok   $* -> exit 2: $(grep -F -m1 -- "$phrase" "$dir/out")"
    fi
}
expect_usage_error "-x: unknown option" -x
expect_usage_error "-b: missing value" -b
expect_usage_error "-b '3': must be a byte count" -b 3
expect_usage_error "-e 1024 is below -b 2048" -b 2K -e 1K
expect_usage_error "unknown algorithm 'bogus' (valid: mpi " -a ring,bogus
expect_usage_error "-c '2'" -c 2
expect_usage_error "--grad-dtype 'fp16': unknown (valid: fp32 bf16)" --grad-dtype fp16
expect_usage_error "--tune with --grad-dtype bf16" --grad-dtype bf16 --tune "$dir/never.table"

printf 'malformed\n' >"$dir/bad.table"
dp_mpirun 20 2 "$bench" $sizes -a auto --auto-table "$dir/bad.table" >"$dir/out" 2>&1
status=$?
if [ "$status" -eq 0 ] || [ "$status" -ge 124 ] || ! grep -q "$dir/bad.table:1: expected" "$dir/out"; then
    fail "malformed --auto-table: exit status $status"
else
    echo "ok   malformed --auto-table -> exit $status: $(grep -m1 "bad.table:1" "$dir/out")"
fi
# --tune's output checked before measuring, with the reason (here: a directory).
dp_mpirun 20 2 "$bench" $sizes --tune "$dir" >"$dir/out" 2>&1
status=$?
if [ "$status" -eq 0 ] || [ "$status" -ge 124 ] || ! grep -q -- "--tune $dir: is a directory, not a regular file" "$dir/out" ||
    grep -q "^# Algorithm" "$dir/out"; then
    fail "--tune DIR: exit status $status"
else
    echo "ok   --tune DIR -> exit $status before measuring: $(grep -m1 -- "--tune $dir" "$dir/out")"
fi
exit $((failures > 0))
