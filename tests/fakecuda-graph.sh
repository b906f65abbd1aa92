# --cuda-graph on the fake CUDA runtime, whose graphs record a capturing stream's work and
# queue it again at each launch: one rank trains to the same bits with and without the graph,
# with SGD and with AdamW on a cosine schedule (the learning rate and AdamW's step change every
# step and reach the replays through device memory), a plain MLP and the README recipe's shape
# (BatchNorm, plain and sync=1, whose statistics are finished on the device, and dropout, whose
# masks hash the step number, read from device memory too), over epochs whose last batch is shorter
# (run eagerly), with log lines, checkpoints and evaluation between the replays. The fake counts
# the launches, so the replays are shown to happen: every full step but the warm-up. The saved
# files hold the running statistics and num_batches_tracked, which the replays move too.
# With --accum 2 and 3 a full step of 2 or 3 micro-batches is one graph, each micro-batch
# reading its own buffers (filled before the launch, from the host or gathered from the sets
# held on the device), and the epoch's last step, with a shorter micro-batch, runs eagerly.
# --cuda-graph on where a step cannot be captured is an error naming why and writes nothing
# (more ranks with nccl: tests/fakecuda-graph-nccl.sh);
# auto says why in the banner and trains eagerly. A replayed step with non-finite gradients stops
# with the eager step's error. Exits 77 where not built.
. "$srcdir/tests/common.sh"
fake="$top_builddir/tests/fakecuda/dp_worker"
[ -x "$fake" ] || { echo "fake CUDA tests not built"; exit 77; }
export FAKECUDA_CHECK_LEAKS=1 FAKECUDA_DEVICES=gpu0 FAKECUDA_COUNT_LAUNCHES=1
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-graph-XXXXXX")
trap 'rm -rf "$dir"' EXIT
cases=0 failures=0
# 310 rows in steps of 30: 10 full steps and a short one of 10 per epoch, 33 steps in 3 epochs;
# 30 full steps, the first eager: 29 launches.
base="--data synthetic:310,8,3 --batch 30 --epochs 3 --log-every 4 --checkpoint-every 7 --device cuda"
models="mlp:8,16,3 recipe:linear(16),batchnorm,relu,dropout(0.2),linear(12),batchnorm(sync=1),relu,dropout(0.3),linear(3)"

# model_args MODEL: the options that pick MODEL (name:layers, or name:model spec).
model_args() {
    case ${1#*:} in
    *\(*) echo "--model ${1#*:}" ;;
    *) echo "--layers ${1#*:}" ;;
    esac
}

# launches FILE: the graph launches the fake reported (0 when none).
launches() {
    n=$(sed -n 's/^fakecuda: \([0-9]*\) graph launches$/\1/p' "$1")
    echo "${n:-0}"
}

for model in $models; do
    for optimizer in "sgd" "adamw --lr-schedule cosine"; do
        name=${model%%:*}-${optimizer%% *}
        for graph in off on; do
            # shellcheck disable=SC2046,SC2086
            dp_mpirun 120 1 "$fake" $base $(model_args "$model") --optimizer $optimizer --cuda-graph $graph --checkpoint-dir "$dir/$name-$graph.ck" \
                --save "$dir/$name-$graph.safetensors" >"$dir/$name-$graph" 2>&1 ||
                { echo "FAIL $name --cuda-graph $graph:"; sed 's/^/    /' "$dir/$name-$graph"; exit 1; }
        done
        dp_check_same_bits "$name: the same parameters with and without the graph" \
            "$dir/$name-off.safetensors" "$dir/$name-on.safetensors"
        cases=$((cases + 1))
        grep -o ' loss [0-9.]*\| acc [0-9.]*%' "$dir/$name-off" >"$dir/$name-off.losses"
        grep -o ' loss [0-9.]*\| acc [0-9.]*%' "$dir/$name-on" >"$dir/$name-on.losses"
        if [ -s "$dir/$name-on.losses" ] && cmp -s "$dir/$name-off.losses" "$dir/$name-on.losses"; then
            echo "ok   $name: the same losses and accuracies in every step and epoch line ($(wc -l <"$dir/$name-on.losses") values)"
        else
            dp_fail_case "$name: the losses differ" "$dir/$name-on"
        fi
        cases=$((cases + 1))
        if [ "$(launches "$dir/$name-on")" = 29 ] && [ "$(launches "$dir/$name-off")" = 0 ] &&
            grep -q '^cuda graph: on: ' "$dir/$name-on" && grep -q '^cuda graph: off$' "$dir/$name-off"; then
            echo "ok   $name: 29 graph launches for the 30 full steps, none with --cuda-graph off"
        else
            dp_fail_case "$name: launches $(launches "$dir/$name-on") with the graph, $(launches "$dir/$name-off") without (want 29, 0)" \
                "$dir/$name-on"
        fi
        cases=$((cases + 1))
        if [ -f "$dir/$name-on.ck/step-000000028.safetensors" ]; then
            echo "ok   $name: checkpoints between replays"
        else
            dp_fail_case "$name: no checkpoint at step 28" "$dir/$name-on"
        fi
    done
done

# --accum K: 310 rows in steps of K x 30. K = 2: 5 full steps and a step of one micro-batch of
# 10 per epoch, 15 full steps, 14 launches; K = 3: 3 full steps and a step of micro-batches of
# 30 and 10, 9 full steps, 8 launches. The data uploaded by the host and held on the device.
for accum in 2:14 3:8; do
    k=${accum%:*} want=${accum#*:}
    for placement in off on; do
        for model in "mlp:8,16,3 sgd" "recipe:linear(16),batchnorm,relu,dropout(0.2),linear(3) adamw --lr-schedule cosine"; do
            spec=${model%% *} optimizer=${model#* }
            name=accum$k-${spec%%:*}-data-$placement
            for graph in off on; do
                # shellcheck disable=SC2046,SC2086
                dp_mpirun 120 1 "$fake" $base $(model_args "$spec") --optimizer $optimizer --accum "$k" \
                    --data-on-device $placement --cuda-graph $graph --checkpoint-dir "$dir/$name-$graph.ck" \
                    --save "$dir/$name-$graph.safetensors" >"$dir/$name-$graph" 2>&1 ||
                    { echo "FAIL $name --cuda-graph $graph:"; sed 's/^/    /' "$dir/$name-$graph"; exit 1; }
                grep -o ' loss [0-9.]*\| acc [0-9.]*%' "$dir/$name-$graph" >"$dir/$name-$graph.losses"
            done
            dp_check_same_bits "$name: the same parameters with and without the graph" \
                "$dir/$name-off.safetensors" "$dir/$name-on.safetensors"
            cases=$((cases + 1))
            if [ -s "$dir/$name-on.losses" ] && cmp -s "$dir/$name-off.losses" "$dir/$name-on.losses" &&
                [ "$(launches "$dir/$name-on")" = "$want" ] && [ "$(launches "$dir/$name-off")" = 0 ] &&
                grep -q "^cuda graph: on: full steps of $k micro-batches" "$dir/$name-on" &&
                grep -q "^data on device: $placement: .*the CUDA graph's $((k - 1)) further micro-batches' rows" "$dir/$name-on"; then
                echo "ok   $name: the same losses, $want graph launches for the full steps, the micro-batches' buffers shown"
            else
                dp_fail_case "$name: losses differ, or launches $(launches "$dir/$name-on") (want $want), or the banner" \
                    "$dir/$name-on"
            fi
        done
    done
done

# The further micro-batches' buffers (--accum 3: 2 x 300 rows of 64 features, a label and 10
# targets, 0.17 MiB) in the allocation counter's data, on the banner, and in --memory-plan.
wide="--data synthetic:3100,64,10 --layers 64,256,10 --batch 300 --accum 3"
# shellcheck disable=SC2086
dp_mpirun 120 1 "$fake" $wide --steps 3 --device cuda --data-on-device off --cuda-graph on >"$dir/slots" 2>&1
dp_check_outcome "--accum 3: the micro-batches' buffers on the banner" ok $? "$dir/slots" \
    "the CUDA graph's 2 further micro-batches' rows in their own buffers, 0.17 MiB"
grep -q '^memory: .* data 0.17, ' "$dir/slots" || dp_fail_case "--accum 3: the buffers are not the counter's data" "$dir/slots"
# shellcheck disable=SC2086
dp_mpirun 120 1 "$fake" $wide --memory-plan >"$dir/slots-plan" 2>&1
dp_check_outcome "--accum 3: the micro-batches' buffers in --memory-plan" ok $? "$dir/slots-plan" \
    "a CUDA graph's further micro-batches' rows on one rank's GPU, counted as data (--cuda-graph with --accum 3, each micro-batch's rows in its own buffers): 0.17 MiB"

# A replayed step whose gradients overflow (lr 1e5 diverges at step 6, after the warm-up and the
# capture) stops as an eager one does, naming the same step.
for graph in off on; do
    dp_mpirun 120 1 "$fake" --data synthetic:310,8,3 --layers 8,16,3 --batch 30 --steps 8 --lr 1e5 --device cuda \
        --cuda-graph $graph >"$dir/nan-$graph" 2>&1
    dp_check_outcome "non-finite gradients, --cuda-graph $graph" fail $? "$dir/nan-$graph" "non-finite gradient values"
done
grep -o 'step [0-9]*: .* non-finite.*' "$dir/nan-off" >"$dir/nan-off.error"
grep -o 'step [0-9]*: .* non-finite.*' "$dir/nan-on" >"$dir/nan-on.error"
dp_check_same_bits "non-finite values: the same error with and without the graph" "$dir/nan-off.error" "$dir/nan-on.error"

# refused NAME NP PHRASE ARGS...: --cuda-graph on fails naming why and leaves no --save file.
refused() {
    label=$1 np=$2 phrase=$3
    shift 3
    rm -f "$dir/refused.safetensors"
    dp_mpirun 120 "$np" sh -c 'FAKECUDA_DEVICES="gpu$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$fake" \
        --data synthetic:310,8,3 --batch 30 --steps 3 --save "$dir/refused.safetensors" --cuda-graph on "$@" >"$dir/refused" 2>&1
    dp_check_outcome "--cuda-graph on, $label" fail $? "$dir/refused" "$phrase"
    [ ! -e "$dir/refused.safetensors" ] || dp_fail_case "--cuda-graph on, $label: left $dir/refused.safetensors"
}
refused "2 ranks, a host algorithm" 2 "2 ranks with --allreduce ring: its collectives run on the host" --device cuda --layers 8,16,3 --allreduce ring
refused "ZeRO" 1 "the zero-1 strategy" --device cuda --layers 8,16,3 --zero 1
refused "--on-nan skip" 1 "--on-nan skip decides on the host" --device cuda --layers 8,16,3 --on-nan skip
refused "--trace" 1 "--trace marks every module's pass" --device cuda --layers 8,16,3 --trace "$dir/trace.json"
refused "--device cpu" 1 "--cuda-graph on applies to GPUs, but --device is cpu" --device cpu --layers 8,16,3
CUDA_LAUNCH_BLOCKING=1 refused "CUDA_LAUNCH_BLOCKING=1" 1 "CUDA_LAUNCH_BLOCKING=1 synchronises after every kernel" --device cuda --layers 8,16,3
# The CPU backend, chosen by --device auto without a GPU (hidden where the machine has one).
CUDA_VISIBLE_DEVICES= dp_mpirun 120 1 "$top_builddir/dp_worker" --data synthetic:310,8,3 --layers 8,16,3 --batch 30 --steps 3 --cuda-graph on >"$dir/cpu" 2>&1
dp_check_outcome "--cuda-graph on, the CPU backend" fail $? "$dir/cpu" "the cpu backend has no CUDA graphs"

# auto where a step cannot be captured: trained eagerly, the banner says why.
dp_mpirun 120 1 "$fake" --data synthetic:310,8,3 --batch 30 --steps 3 --device cuda --on-nan skip \
    --model "linear(16),batchnorm,relu,linear(3)" >"$dir/auto" 2>&1
dp_check_outcome "--cuda-graph auto with --on-nan skip" ok $? "$dir/auto" \
    "cuda graph: off (auto): --on-nan skip decides on the host"
[ "$(launches "$dir/auto")" = 0 ] || dp_fail_case "--cuda-graph auto with --on-nan skip launched graphs" "$dir/auto"

echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
