# --exact with its accumulator on the fake GPU (the kernels' own code on the host): each
# shard's gradient is added where it lies, so W = 1, 2 and 3, --accum 2, uneven slices and a
# short last step, BatchNorm (sync) and dropout all train to the bits of one fake GPU; and the
# gradient no longer crosses the bus: at W = 1 the bytes copied down to the host are those of
# the same run without --exact but for the shards' loss totals (under one gradient's bytes in
# all; the host accumulator downloaded every shard's gradient, 180 of them here), and at W = 2
# with shards of 4 only the digits go down, one int64 a parameter with the sums' size in the
# same copy (under one gradient's bytes a step more than the ordinary run, which sends its
# gradient down; three float digits were over it, and rank 0's 6 shards' gradients before).
# Sums that are not finite stop 2 fake GPUs at the step and count one does.
# The digits and floats are the host loops' bit for bit (tests/test_exact_device.c);
# the CPU backend cannot be the reference here, as its GEMMs round otherwise than cuBLAS's.
# Exits 77 where not built.
# shellcheck disable=SC2086 # $base and $exact are lists of words
. "$srcdir/tests/common.sh"
worker="$top_builddir/tests/fakecuda/dp_worker"
[ -x "$worker" ] || { echo "fake CUDA tests not built"; exit 77; }
export FAKECUDA_CHECK_LEAKS=1 FAKECUDA_COUNT_COPIES=1
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-fakecuda-exact-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
# 500 samples in steps of 42 (the last 38): shards of 8 leave 2 and 6 rows, and 42 and 38
# split unevenly over 2 and 3 ranks; --batch 21 --accum 2 is the same step as --batch 42.
# 4355 parameters: 17420 bytes a gradient.
model="linear(256,bias=0),batchnorm,relu,dropout(0.2),linear(3)"
base="--device cuda --data synthetic:500,12,3 --model $model --batch 42 --steps 30 --seed 3 --sync-bn"
exact="--exact --exact-shard 8"
gradient_bytes=17420

# train NAME RANKS [options]: on RANKS fake GPUs (one each), parameters to $dir/NAME.safetensors.
train() {
    name=$1 np=$2
    shift 2
    if ! dp_mpirun 120 "$np" sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$worker" $base \
        --save "$dir/$name.safetensors" "$@" >"$dir/$name.out" 2>&1; then
        dp_fail_case "$name: dp_worker failed on $np fake GPUs" "$dir/$name.out"
    fi
}

# down NAME: the most bytes one rank copied from device to host.
down() {
    sed -n 's/^fakecuda: copies device->host: [0-9]* (\([0-9]*\) bytes).*/\1/p' "$dir/$1.out" | sort -n | tail -1
}

train w1 1 $exact
train accum-w1 1 $exact --accum 2
for case in "w2 w1 2" "w3 w1 3" "w3-ring w1 3 --allreduce ring" "accum-w3 accum-w1 3 --accum 2" \
    "half-accum-w2 w1 2 --batch 21 --accum 2"; do
    set -- $case
    name=$1 reference=$2
    shift 2
    train "$name" "$@" $exact
    dp_check_same_bits "--exact on fake GPUs, $name: parameters as $reference's" "$dir/$reference.safetensors" \
        "$dir/$name.safetensors"
done

# Sums that are not finite: the device marks them in its digits, the host turns the marks into
# flags; 2 fake GPUs stop at the step one does, naming the same count and tensor.
for np in 1 2; do
    dp_mpirun 120 "$np" sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$worker" $base $exact \
        --lr 1e6 --on-nan abort >"$dir/nan-w$np.out" 2>&1
    sed -n 's/.*error: \(step [0-9]*: [0-9]* non-finite gradient values.*\)/\1/p' "$dir/nan-w$np.out" >"$dir/nan-w$np.line"
done
cases=$((cases + 1))
if [ -s "$dir/nan-w1.line" ] && cmp -s "$dir/nan-w1.line" "$dir/nan-w2.line"; then
    echo "ok   sums not finite on 2 fake GPUs as on one: $(cat "$dir/nan-w1.line")"
else
    dp_fail_case "sums not finite: one fake GPU and two differ or do not stop" "$dir/nan-w2.out"
fi

train s4-w1 1 --exact --exact-shard 4
train s4-w2 2 --exact --exact-shard 4
dp_check_same_bits "--exact-shard 4 on fake GPUs, W = 2: parameters as one fake GPU's" "$dir/s4-w1.safetensors" \
    "$dir/s4-w2.safetensors"
train plain-w1 1
# Through host memory, as --exact's digits go (auto would take NCCL and copy no gradient down).
train plain-w2 2 --allreduce mpi
exact_down=$(down w1) plain_down=$(down plain-w1)
if [ -n "$exact_down" ] && [ -n "$plain_down" ] && [ $((exact_down - plain_down)) -lt $gradient_bytes ]; then
    echo "ok   W = 1: --exact copied $exact_down bytes down, the ordinary run $plain_down: no gradient left the GPU"
else
    dp_fail_case "W = 1: --exact copied ${exact_down:-?} bytes down against ${plain_down:-?} without it" "$dir/w1.out"
fi
exact_down=$(down s4-w2) plain_down=$(down plain-w2)
if [ -n "$exact_down" ] && [ -n "$plain_down" ] && [ $((exact_down - plain_down)) -lt $((30 * gradient_bytes)) ]; then
    echo "ok   W = 2, shards of 4: --exact copied $exact_down bytes down a rank, the ordinary run $plain_down: the digits alone"
else
    dp_fail_case "W = 2: --exact copied ${exact_down:-?} bytes down against ${plain_down:-?} without it" "$dir/s4-w2.out"
fi
cases=$((cases + 2))
echo "$cases cases"
[ "$failures" -eq 0 ]
