# --cuda-graph on with W = 2 and 3 ranks and --allreduce nccl on the fake CUDA runtime: a full
# DDP step, its buckets' NCCL all-reduces included (forked onto NCCL's stream by an event as
# backward finishes each bucket, joined back by another before the update), is one graph that
# every rank replays. The parameters are the same bits with and without the graph, and so are
# the losses and the bytes the collectives sent (the replays count what the capture counted):
# many buckets cut inside tensors, --no-overlap's one collective after backward, --accum 2,
# uneven slices of the batch, --grad-dtype bf16 (rounded on NCCL's stream, inside the graph),
# and the README recipe's shape (plain BatchNorm, whose running statistics rank 0 broadcasts
# after each step, outside the graph; dropout; AdamW on a cosine schedule); each epoch's
# shorter last step runs eagerly between replays, log lines and checkpoints in between. The
# fake fails a capture in which the host queries or waits for the device
# (tests/fakecuda/test_fakecuda.c shows it does), so these runs show the captured step has no
# host synchronisation. A rank frozen during the replays ends the job through the watchdog,
# naming the graph's step. auto stays eager at W > 1 and says why; the host algorithms,
# SyncBatchNorm and ZeRO are refused by --cuda-graph on, naming why. Exits 77 where not built.
. "$srcdir/tests/common.sh"
fake="$top_builddir/tests/fakecuda/dp_worker"
[ -x "$fake" ] || { echo "fake CUDA tests not built"; exit 77; }
export FAKECUDA_CHECK_LEAKS=1 FAKECUDA_COUNT_LAUNCHES=1
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-graph-nccl-XXXXXX")
# The dp_worker processes of this test: those whose command line names its directory.
job_pids() {
    for pid in $(pgrep -x dp_worker); do
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$dir" && echo "$pid"
    done
}
trap 'kill -9 $(job_pids) 2>/dev/null; rm -rf "$dir"' EXIT
cases=0 failures=0

# run NP OUT ARGS...: dp_worker on NP ranks, each with a fake GPU of its own.
run() {
    np=$1 out=$2
    shift 2
    dp_mpirun 180 "$np" sh -c 'FAKECUDA_DEVICES="gpu$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$fake" --device cuda \
        --allreduce nccl "$@" >"$out" 2>&1
}

# launches FILE: the graph launches rank 0 reported (0 when none).
launches() {
    n=$(sed -n 's/^fakecuda: \([0-9]*\) graph launches$/\1/p' "$1" | head -n 1)
    echo "${n:-0}"
}

# checkpoints DIR: how many step checkpoints DIR holds.
checkpoints() {
    set -- "$1"/step-*.safetensors
    if [ -e "$1" ]; then echo $#; else echo 0; fi
}

# 310 rows in steps of 30: 10 full steps and a short one of 10 per epoch, 22 steps in 2 epochs,
# 20 full, the first eager: 19 launches. --accum 2: 5 full steps of 60 per epoch, 9 launches.
# --batch 32: 9 full steps per epoch, 17 launches; on 3 ranks slices of 11, 11 and 10 rows.
# 4931 parameters in buckets of 2 KiB: about ten all-reduces a step.
base="--data synthetic:310,8,3 --batch 30 --epochs 2 --log-every 4"
layers="--layers 8,64,64,3"
mlp="$layers --bucket-mb 0.002"
recipe="--model linear(16),batchnorm,relu,dropout(0.2),linear(12),batchnorm,relu,dropout(0.3),linear(3) --optimizer adamw --lr-schedule cosine"
for np in 2 3; do
    for config in "buckets:19:$mlp" "no-overlap:19:$layers --no-overlap" "accum2:9:$mlp --accum 2" \
        "bf16:19:$mlp --grad-dtype bf16" "uneven:17:$mlp --batch 32" "recipe:19:$recipe"; do
        name=$(echo "$config" | cut -d: -f1)-w$np want=$(echo "$config" | cut -d: -f2) args=$(echo "$config" | cut -d: -f3-)
        for graph in off on; do
            # shellcheck disable=SC2086
            run "$np" "$dir/$name-$graph" $base $args --cuda-graph $graph --checkpoint-every 7 --checkpoint-dir "$dir/$name-$graph.ck" \
                --metrics "$dir/$name-$graph.jsonl" --save "$dir/$name-$graph.safetensors" ||
                { echo "FAIL $name --cuda-graph $graph:"; sed 's/^/    /' "$dir/$name-$graph"; exit 1; }
            { grep -o ' loss [0-9.]*\| acc [0-9.]*%' "$dir/$name-$graph"; grep -o '"sent_bytes":[0-9]*' "$dir/$name-$graph.jsonl"; } \
                >"$dir/$name-$graph.values"
        done
        dp_check_same_bits "$name: the same parameters with and without the graph" \
            "$dir/$name-off.safetensors" "$dir/$name-on.safetensors"
        cases=$((cases + 1))
        if grep -q sent_bytes "$dir/$name-on.values" && cmp -s "$dir/$name-off.values" "$dir/$name-on.values" &&
            [ "$(launches "$dir/$name-on")" = "$want" ] && [ "$(launches "$dir/$name-off")" = 0 ] &&
            grep -q "^cuda graph: on: .*the gradients' NCCL collectives inside it" "$dir/$name-on" &&
            [ "$(checkpoints "$dir/$name-on.ck")" -ge 2 ]; then
            echo "ok   $name: the same losses and bytes sent, $want graph launches with NCCL inside, checkpoints kept"
        else
            dp_fail_case "$name: losses or bytes sent differ, or launches $(launches "$dir/$name-on") (want $want), or the banner" \
                "$dir/$name-on"
        fi
    done
done

# auto at W > 1: eager until a GPU has measured the graph, and the banner says so.
# shellcheck disable=SC2086
run 2 "$dir/auto" $base $mlp
dp_check_outcome "--cuda-graph auto on 2 ranks" ok $? "$dir/auto" \
    "cuda graph: off (auto): 2 ranks: not yet measured on a GPU; --cuda-graph on enables it"
[ "$(launches "$dir/auto")" = 0 ] || dp_fail_case "--cuda-graph auto on 2 ranks launched graphs" "$dir/auto"

# refused NAME PHRASE ARGS...: --cuda-graph on on 2 ranks fails naming why and leaves no --save file.
refused() {
    label=$1 phrase=$2
    shift 2
    rm -f "$dir/refused.safetensors"
    run 2 "$dir/refused" --data synthetic:310,8,3 --batch 30 --steps 3 --save "$dir/refused.safetensors" --cuda-graph on "$@"
    dp_check_outcome "--cuda-graph on, 2 ranks, $label" fail $? "$dir/refused" "$phrase"
    [ ! -e "$dir/refused.safetensors" ] || dp_fail_case "--cuda-graph on, $label: left $dir/refused.safetensors"
}
refused "--allreduce ring" "2 ranks with --allreduce ring: its collectives run on the host between backward's modules (--allreduce nccl's are captured)" \
    --layers 8,16,3 --allreduce ring
refused "SyncBatchNorm" "SyncBatchNorm on 2 ranks sums its statistics over the ranks on the host" \
    --model "linear(16),batchnorm(sync=1),relu,linear(3)"
refused "ZeRO" "the zero-2 strategy" --layers 8,16,3 --zero 2

# A rank frozen (SIGSTOP) while the others replay: their launch and its wait are watched as
# one operation, so the watchdog ends the job within --timeout 3.5 + 15 s, naming the graph's
# step (log lines, with their metrics all-reduce, only every 2000 steps: the freeze lands in
# a replay).
run 2 "$dir/frozen" --data synthetic:200000,8,3 --layers 8,16,3 --batch 30 --steps 1000000 --log-every 2000 \
    --timeout 3.5 --cuda-graph on --save "$dir/frozen.safetensors" &
job=$!
for _ in $(seq 600); do
    grep -q '^step ' "$dir/frozen" 2>/dev/null && break
    sleep 0.1
done
frozen=
for pid in $(job_pids); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && frozen=$pid
done
[ -n "$frozen" ] || { kill -9 "$job"; echo "FAIL a frozen rank: rank 1's process not found"; exit 1; }
kill -STOP "$frozen"
started=$(date +%s)
while kill -0 "$job" 2>/dev/null && [ $(($(date +%s) - started)) -lt 19 ]; do sleep 0.1; done
kill -0 "$job" 2>/dev/null && { kill -9 "$job"; echo "FAIL a frozen rank: the job still runs after 19 s"; exit 1; }
kill -9 "$frozen" 2>/dev/null
wait "$job"
dp_check_outcome "a rank frozen during the replays" fail $? "$dir/frozen" \
    "a CUDA graph's step with its collectives (nccl) has not completed after"
# Rank 1 is named when it froze before its launch; frozen inside it, every rank has arrived.
grep -Eq "ranks that have not arrived: (1|none .*)$" "$dir/frozen" ||
    dp_fail_case "a frozen rank: neither rank 1 named nor every rank arrived" "$dir/frozen"

echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
