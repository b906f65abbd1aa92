# --data-on-device on the fake CUDA runtime: the training and test sets held in GPU memory and
# each micro-batch's rows gathered there train to the bits of rows read on the host and
# uploaded (off), for class labels and float targets, synthetic and .npy data, 1 and 2 ranks,
# --accum 2, --exact's shards, and with --cuda-graph on (whose replays must read each step's new rows: the same
# bits and the same 29 launches); evaluation reads the held test set in place (the same test
# losses). The held bytes are counted as "data". on where the sets do not fit the GPU's free
# memory (a small FAKECUDA_MEMORY) fails naming the size and the limit and writes nothing;
# auto declines sets over a quarter of the GPU and says so; on with the CPU backend is an
# error. A checkpoint written with the rows on the host resumes with them on the device to the
# same bits; --memory-plan states the sets' size. Exits 77 where not built.
. "$srcdir/tests/common.sh"
fake="$top_builddir/tests/fakecuda/dp_worker"
[ -x "$fake" ] || { echo "fake CUDA tests not built"; exit 77; }
export FAKECUDA_CHECK_LEAKS=1 FAKECUDA_COUNT_LAUNCHES=1
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-resident-XXXXXX")
trap 'rm -rf "$dir"' EXIT
cases=0 failures=0

fixture="$top_builddir/tests/npy_fixture"
"$fixture" "$dir/x.npy" 300 12 1 && "$fixture" --labels "$dir/y.npy" 300 4 2 && "$fixture" "$dir/t.npy" 300 4 3 &&
    "$fixture" "$dir/tx.npy" 70 12 4 && "$fixture" --labels "$dir/ty.npy" 70 4 5 && "$fixture" "$dir/tt.npy" 70 4 6 ||
    exit 1

# run NAME NP PLACEMENT ARGS...: trains on NP fake GPUs (one per rank) with --data-on-device
# PLACEMENT, saving $dir/NAME-PLACEMENT.safetensors; the output in $dir/NAME-PLACEMENT.
run() {
    name=$1 np=$2 placement=$3
    shift 3
    dp_mpirun 120 "$np" sh -c 'FAKECUDA_DEVICES="gpu$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$fake" --device cuda \
        --data-on-device "$placement" --save "$dir/$name-$placement.safetensors" "$@" >"$dir/$name-$placement" 2>&1
}

# launches FILE: the graph launches the fake reported (0 when none).
launches() {
    n=$(sed -n 's/^fakecuda: \([0-9]*\) graph launches$/\1/p' "$1")
    echo "${n:-0}"
}

# same NAME LABEL NP ARGS...: on and off train to the same parameters and the same loss lines.
same() {
    name=$1 label=$2 np=$3
    shift 3
    for placement in off on; do
        run "$name" "$np" "$placement" "$@" ||
            { dp_fail_case "$label, --data-on-device $placement: exit status $?" "$dir/$name-$placement"; return; }
    done
    dp_check_same_bits "$label: the same parameters with the data on the device and on the host" \
        "$dir/$name-off.safetensors" "$dir/$name-on.safetensors"
    cases=$((cases + 1))
    grep -o ' loss [0-9.]*\| acc [0-9.]*%' "$dir/$name-off" >"$dir/$name-off.losses"
    grep -o ' loss [0-9.]*\| acc [0-9.]*%' "$dir/$name-on" >"$dir/$name-on.losses"
    if ! grep -q '^data on device: on: ' "$dir/$name-on" || ! grep -q '^data on device: off: ' "$dir/$name-off"; then
        dp_fail_case "$label: the banner does not say where the data is" "$dir/$name-on"
    elif ! grep -q '^memory: .* data [0-9.]*' "$dir/$name-on" || grep -q '^memory: .* data [0-9.]*' "$dir/$name-off"; then
        dp_fail_case "$label: the allocation counter does not count the held data as 'data' (only with on)" "$dir/$name-on"
    elif [ -s "$dir/$name-on.losses" ] && cmp -s "$dir/$name-off.losses" "$dir/$name-on.losses"; then
        echo "ok   $label: the same training and test losses ($(wc -l <"$dir/$name-on.losses") values); banner and counter say where"
    else
        dp_fail_case "$label: the losses differ" "$dir/$name-on"
    fi
}

synthetic="--data synthetic:310,8,3 --layers 8,16,3 --batch 30 --epochs 3 --log-every 4"
labels="--data $dir/x.npy,$dir/y.npy --test-data $dir/tx.npy,$dir/ty.npy --layers 12,16,4 --batch 32 --epochs 2 --log-every 3"
targets="--data $dir/x.npy,$dir/t.npy --test-data $dir/tx.npy,$dir/tt.npy --layers 12,16,4 --batch 32 --epochs 2 --log-every 3"
for np in 1 2; do
    # shellcheck disable=SC2086
    same "labels-$np" "synthetic labels, $np rank(s)" "$np" $synthetic --cuda-graph off
    # shellcheck disable=SC2086
    same "targets-$np" "synthetic targets (mse), $np rank(s)" "$np" $synthetic --loss mse --cuda-graph off
    # shellcheck disable=SC2086
    same "npy-labels-$np" ".npy labels, $np rank(s)" "$np" $labels --cuda-graph off
    # shellcheck disable=SC2086
    same "npy-targets-$np" ".npy targets (mse), $np rank(s)" "$np" $targets --cuda-graph off
    # shellcheck disable=SC2086
    same "accum-$np" "--accum 2, AdamW, $np rank(s)" "$np" $labels --accum 2 --optimizer adamw --cuda-graph off
    # shellcheck disable=SC2086
    same "exact-$np" "--exact (shards of 8 rows), $np rank(s)" "$np" $synthetic --exact --exact-shard 8 --cuda-graph off
done

# A replayed graph reads the rows gathered for its step: the eager bits, 29 launches for 30 full steps.
# shellcheck disable=SC2086
run graph 1 on $synthetic --cuda-graph on && run graph 1 off $synthetic --cuda-graph on ||
    dp_fail_case "--cuda-graph on: exit status $?" "$dir/graph-on"
dp_check_same_bits "--cuda-graph on: the data on the device gives the eager bits" \
    "$dir/graph-on.safetensors" "$dir/labels-1-off.safetensors"
dp_check_same_bits "--cuda-graph on: the data on the host gives the eager bits" \
    "$dir/graph-off.safetensors" "$dir/labels-1-off.safetensors"
cases=$((cases + 1))
if [ "$(launches "$dir/graph-on")" = 29 ] && [ "$(launches "$dir/graph-off")" = 29 ]; then
    echo "ok   --cuda-graph on: 29 graph launches with the data on the device and off it"
else
    dp_fail_case "--cuda-graph on: $(launches "$dir/graph-on") and $(launches "$dir/graph-off") launches (want 29)" \
        "$dir/graph-on"
fi

# A checkpoint of a run with the rows read on the host resumes with them on the device:
# checkpoints record nothing of where the data lived.
# shellcheck disable=SC2086
run first 1 off $synthetic --cuda-graph off --checkpoint-dir "$dir/ck" --checkpoint-every 15 &&
    run resumed 1 on $synthetic --cuda-graph off --resume "$dir/ck/step-000000015.safetensors" ||
    dp_fail_case "resume across --data-on-device: exit status $?" "$dir/resumed-on"
dp_check_same_bits "a resume at step 15 with the data moved onto the device gives the uninterrupted run's bits" \
    "$dir/labels-1-off.safetensors" "$dir/resumed-on.safetensors"

# A GPU of 40 MiB: cuBLASLt's 32 MiB workspace leaves about 7 for the rest.
big="--data synthetic:40000,64,3 --layers 64,16,3 --batch 64 --steps 2 --cuda-graph off"
# shellcheck disable=SC2086
FAKECUDA_MEMORY=$((40 << 20)) run big 1 on $big
dp_check_outcome "--data-on-device on, sets larger than the GPU's free memory" fail $? "$dir/big-on" \
    "--data-on-device on: the sets take 12.05 MiB but the GPU has"
[ ! -e "$dir/big-on.safetensors" ] || dp_fail_case "a refused --data-on-device on left its --save file" "$dir/big-on"
# shellcheck disable=SC2086
FAKECUDA_MEMORY=$((40 << 20)) run big 1 auto $big
dp_check_outcome "--data-on-device auto, sets larger than the GPU's free memory" ok $? "$dir/big-auto" \
    "data on device: off (auto): the sets take 12.05 MiB but the GPU has"
# Over a quarter of an 80 MiB GPU, within its free memory: auto declines, on holds them.
quarter="--data synthetic:100000,64,3 --layers 64,16,3 --batch 64 --steps 2 --cuda-graph off"
# shellcheck disable=SC2086
FAKECUDA_MEMORY=$((80 << 20)) run quarter 1 auto $quarter
dp_check_outcome "--data-on-device auto, sets over a quarter of the GPU" ok $? "$dir/quarter-auto" \
    "data on device: off (auto): the sets take 30.14 MiB, more than auto's 1/4 of the GPU's 80.00 MiB"
# shellcheck disable=SC2086
FAKECUDA_MEMORY=$((80 << 20)) run quarter 1 on $quarter
dp_check_outcome "--data-on-device on, sets over a quarter of the GPU that fit its free memory" ok $? \
    "$dir/quarter-on" "data on device: on: 30.14 MiB (training set 24.80 MiB, test set 4.96 MiB, the epoch's order 0.38 MiB) held in GPU memory"
# auto on a GPU of the default 80 GiB: held.
# shellcheck disable=SC2086
run small 1 auto $synthetic --steps 2
dp_check_outcome "--data-on-device auto, small sets" ok $? "$dir/small-auto" "data on device: on (auto): "

# --memory-plan says what the sets would take on a GPU (no GPU needed).
dp_mpirun 60 1 "$top_builddir/dp_worker" --memory-plan --data synthetic:40000,64,3 --layers 64,16,3 >"$dir/plan" 2>&1
dp_check_outcome "--memory-plan" ok $? "$dir/plan" \
    "data held on a GPU (--data-on-device), every rank alike: 12.05 MiB (training set 9.92 MiB, test set 1.98 MiB"

# The CPU backend: on is an error, named or chosen by --device auto without a GPU.
dp_mpirun 60 1 "$top_builddir/dp_worker" --data synthetic:310,8,3 --layers 8,16,3 --steps 2 --device cpu \
    --data-on-device on >"$dir/cpu" 2>&1
dp_check_outcome "--data-on-device on --device cpu" fail $? "$dir/cpu" \
    "--data-on-device on applies to GPUs, but --device is cpu"
dp_mpirun 60 1 "$top_builddir/dp_worker" --data synthetic:310,8,3 --layers 8,16,3 --steps 2 --data-on-device on \
    >"$dir/cpu-auto" 2>&1
dp_check_outcome "--data-on-device on, the CPU backend chosen by --device auto" fail $? "$dir/cpu-auto" \
    "--data-on-device on: the cpu backend computes in host memory"

echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
