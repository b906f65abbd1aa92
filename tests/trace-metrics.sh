# --trace and --metrics on 2 ranks: the timeline is valid JSON with every rank's data, forward,
# backward, collective and optimizer spans, none dropped, collectives overlap backward with
# buckets and never with --no-overlap, --exact's row groups each with its add, ZeRO-3's blocks each
# gathered; on fake GPUs every pass also has its device-lane span from CUDA events;
# the metrics are one JSON object per step and a summary (tests/trace_check.py, python3's json
# module: a reader independent of ours).
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-trace-XXXXXX")
trap 'rm -rf "$dir"' EXIT
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
failures=0 cases=0
steps=4
# check_trace MODE: trace_check.py's properties of $dir/MODE.json and $dir/MODE.jsonl.
check_trace() {
    cases=$((cases + 1))
    if python3 "$srcdir/tests/trace_check.py" "$dir/$1.json" "$dir/$1.jsonl" 2 "$steps" "$1" >"$dir/check"; then
        echo "ok   the trace and metrics hold ($1): $(grep -c '^ok' "$dir/check") properties"
    else
        echo "FAIL the trace or metrics ($1):"
        sed 's/^/    /' "$dir/check"
        failures=$((failures + 1))
    fi
}
for mode in overlap no-overlap; do
    # Small buckets: several per step, the first started while layers.0 still computes; or none,
    # one collective after backward.
    flag="--bucket-mb 0.5"
    [ "$mode" = overlap ] || flag=--no-overlap
    dp_mpirun 60 2 "$worker" --data synthetic:2000,64,10 --layers 64,512,512,10 --batch 128 --steps "$steps" \
        --log-every 1 --threads 1 $flag --trace "$dir/$mode.json" --metrics "$dir/$mode.jsonl" \
        >"$dir/out" 2>&1
    dp_check_outcome "train with --trace and --metrics ($mode)" ok $? "$dir/out" "summary:"
    check_trace "$mode"
done
# --exact: 4 shards a rank each step, every one's backward and exact add in the trace (it was cut
# short: its room was counted in micro-batches), and the step's exact sums as one collective.
dp_mpirun 60 2 "$worker" --data synthetic:2000,64,10 --layers 64,512,512,10 --batch 128 --steps "$steps" \
    --log-every 1 --threads 1 --exact --exact-shard 16 --trace "$dir/exact.json" --metrics "$dir/exact.jsonl" \
    >"$dir/out" 2>&1
dp_check_outcome "train with --exact and --trace" ok $? "$dir/out" "summary:"
check_trace exact
# ZeRO-3 under a budget smaller than a layer: each layer gathered in blocks for every pass (its
# room in the trace was counted in whole layers).
dp_mpirun 60 2 "$worker" --data synthetic:2000,64,10 --layers 64,512,512,10 --batch 128 --steps "$steps" \
    --log-every 1 --threads 1 --zero 3 --zero-live-mb 0.05 --trace "$dir/zero3.json" --metrics "$dir/zero3.jsonl" \
    >"$dir/out" 2>&1
dp_check_outcome "train with --zero 3 under a sub-layer budget and --trace" ok $? "$dir/out" "summary:"
check_trace zero3
# On a GPU (the fake CUDA runtime, where built) the passes are also timed by CUDA events.
fake="$top_builddir/tests/fakecuda/dp_worker"
if [ -x "$fake" ]; then
    dp_mpirun 60 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$fake" --device cuda \
        --data synthetic:2000,64,10 --layers 64,512,512,10 --batch 128 --steps "$steps" --log-every 1 \
        --trace "$dir/device.json" --metrics "$dir/device.jsonl" >"$dir/out" 2>&1
    dp_check_outcome "train on fake GPUs with --trace" ok $? "$dir/out" "summary:"
    check_trace device
else
    echo "skip the device lane: no fake CUDA build"
fi
# A path in a missing directory is refused before training, naming it.
dp_mpirun 60 2 "$worker" --data synthetic:200,8,2 --layers 8,16,2 --steps 1 --trace "$dir/none/t.json" >"$dir/out" 2>&1
dp_check_outcome "--trace into a missing directory" fail $? "$dir/out" "$dir/none"
echo "trace-metrics: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
