# dp_bench --group and --hier-inner, dp_worker --hier-inner on 3 ranks of one node: the node
# group is all 3, the leaders group rank 0 alone (the others wait and exit 0), every #wrong 0;
# unknown groups and inner algorithms exit 2 naming them, promptly.
. "$srcdir/tests/common.sh"
bench="$top_builddir/dp_bench" worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-hier-options-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
sizes="-b 4 -e 64K -f 16 -w 1 -n 2"

for case in "node 3" "leaders 1" "world 3"; do
    set -- $case
    dp_mpirun 120 3 "$bench" $sizes -a hier,ring --hier-inner rhd --group "$1" >"$dir/out" 2>&1
    status=$?
    if [ "$1" != world ] && ! grep -q "^# --group $1: timed on rank 0's group, $2 of the job's 3 ranks$" "$dir/out"; then
        status=1
    fi
    dp_check_outcome "dp_bench --group $1" ok "$status" "$dir/out" "float32 sum, $2 ranks"
    [ "$(grep -c '^# Out of bounds values : 0 OK$' "$dir/out")" -eq 2 ] ||
        { echo "FAIL dp_bench --group $1: a #wrong is not 0"; failures=$((failures + 1)); }
done

dp_mpirun 60 2 "$bench" $sizes --group rack >"$dir/out" 2>&1
dp_check_outcome "dp_bench --group rack" fail $? "$dir/out" "--group: group 'rack': unknown (valid: world node leaders)"
dp_mpirun 60 2 "$bench" $sizes -a hier --hier-inner hier >"$dir/out" 2>&1
dp_check_outcome "dp_bench --hier-inner hier" fail $? "$dir/out" "--hier-inner 'hier': cannot run among the nodes' leaders"
dp_mpirun 60 2 "$worker" --data synthetic:100,4,2 --layers 4,2 --steps 1 --allreduce hier --hier-inner tree \
    >"$dir/out" 2>&1
dp_check_outcome "dp_worker --hier-inner tree" fail $? "$dir/out" "--hier-inner 'tree': unknown algorithm (valid: "

echo "hier-options: $((cases - failures)) of $cases cases passed"
[ "$failures" -eq 0 ]
