# --exact: bitwise the same parameters (and running statistics, and logged losses) after 30
# steps for W = 1, 2, 3, 4, 8 (oversubscribed), every all-reduce algorithm, --accum 2, uneven
# slices and a short last step, BatchNorm with and without sync, dropout; a W=3 checkpoint
# resumed on W=2 continues bitwise like the uninterrupted W=1 run. Without --exact the same
# runs differ (so the comparisons can fail). Sums that are not finite stop or skip the same
# step on every W. Shards too small for BatchNorm are refused.
# shellcheck disable=SC2086 # $base and $exact are lists of words
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-exact-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
# 500 samples in steps of 42 (the last 38): row groups of 8 leave 2 and 6 rows; 42 and 38 split
# unevenly over 4 and 8 ranks. The device and BLAS threads pinned, as --exact needs.
model="linear(16,bias=0),batchnorm,relu,dropout(0.2),linear(3)"
exact="--exact --exact-shard 8"
base="--data synthetic:500,12,3 --model $model --batch 42 --steps 30 --seed 3 --device cpu --threads $dp_threads"

# train NAME RANKS [options]: 30 steps, parameters (and running statistics) to
# $dir/NAME.safetensors, every step's logged loss to $dir/NAME.loss.
train() {
    name=$1 np=$2
    shift 2
        if ! dp_mpirun 120 "$np" "$worker" $base --save "$dir/$name.safetensors" --metrics "$dir/$name.jsonl" \
        --log-every 1 "$@" >"$dir/$name.out" 2>&1; then
        echo "FAIL $name: dp_worker failed on $np ranks"
        sed 's/^/    /' "$dir/$name.out"
        failures=$((failures + 1))
    fi
    grep -o '"loss":[^,]*' "$dir/$name.jsonl" >"$dir/$name.loss" 2>/dev/null
}

# same NAME REFERENCE: parameters and logged losses bitwise equal.
same() {
    dp_check_same_bits "$1: parameters as $2's" "$dir/$2.safetensors" "$dir/$1.safetensors"
    dp_check_same_bits "$1: losses as $2's" "$dir/$2.loss" "$dir/$1.loss"
}

train w1 1 $exact --sync-bn
for np in 2 3 4 8; do
    train "w$np" "$np" $exact --sync-bn
    same "w$np" w1
done
# Every host-memory algorithm, as dp_worker lists them (tiny segments where they apply: ring-pipelined pipelines).
algorithms=$(dp_mpirun 60 1 "$worker" --data synthetic:50,4,2 --layers 4,2 --allreduce none 2>&1 |
    sed -n 's/.*unknown algorithm (valid: \([^;)]*\).*/\1/p')
[ -n "$algorithms" ] || { echo "FAIL could not list the algorithms"; failures=$((failures + 1)); }
for algorithm in $algorithms; do
    case $algorithm in ring-pipelined | auto) segments="--segment-bytes 64" ;; *) segments="" ;; esac
    for np in 3 4; do
        # shellcheck disable=SC2086
        train "$algorithm-w$np" "$np" $exact --sync-bn --allreduce "$algorithm" $segments
        same "$algorithm-w$np" w1
    done
done
train accum-w1 1 $exact --sync-bn --accum 2
for np in 3 8; do
    train "accum-w$np" "$np" $exact --sync-bn --accum 2
    same "accum-w$np" accum-w1
done
# The row groups cut the step, not the micro-batch: --batch 21 --accum 2 is --batch 42 --accum 1.
train half-accum-w2 2 $exact --sync-bn --batch 21 --accum 2
dp_check_same_bits "--batch 21 --accum 2 as --batch 42 --accum 2" "$dir/half-accum-w2.safetensors" \
    "$dir/w1.safetensors"
# A learning rate that makes the gradients grow: from some step on the sums need a fourth
# digit on 2 and 3 ranks, which the ranks learn from the digits' own all-reduce and send in a
# second one.
train growing-w1 1 $exact --model "linear(16,bias=0),relu,linear(3)" --lr 10
for np in 2 3; do
    train "growing-w$np" "$np" $exact --model "linear(16,bias=0),relu,linear(3)" --lr 10
    same "growing-w$np" growing-w1
done
# Sums that are not finite: the ranks that have some flag which in an all-reduce of their own,
# so every W stops at the same step naming the same count and tensor, or skips the same steps.
nan="--model linear(16,bias=0),relu,linear(3) --lr 1e6"
for np in 1 2 3; do
    dp_mpirun 60 "$np" "$worker" $base $exact $nan --on-nan abort >"$dir/nan-w$np.out" 2>&1
    dp_check_outcome "sums not finite on $np ranks" fail $? "$dir/nan-w$np.out" \
        "step 3: 174 non-finite gradient values, the first in layers.0.weight"
done
train nan-skip-w1 1 $exact $nan --on-nan skip
train nan-skip-w3 3 $exact $nan --on-nan skip
same nan-skip-w3 nan-skip-w1
train plain-bn-w1 1 $exact
train plain-bn-w3 3 $exact --allreduce ring
same plain-bn-w3 plain-bn-w1

# Resume: 15 steps on 3 ranks, then to step 30 on 2 ranks, as the 30 steps on 1 rank.
dp_mpirun 120 3 "$worker" $base $exact --sync-bn --steps 15 --checkpoint-dir "$dir/ckpt" >"$dir/ckpt.out" 2>&1 ||
    { echo "FAIL could not write the W=3 checkpoint"; sed 's/^/    /' "$dir/ckpt.out"; failures=$((failures + 1)); }
train resumed-w2 2 $exact --sync-bn --resume "$dir/ckpt"
dp_check_same_bits "W=3 checkpoint resumed on W=2: parameters as W=1's" "$dir/w1.safetensors" "$dir/resumed-w2.safetensors"
dp_check_outcome "the resume on another W says it is bit-exact" ok 0 "$dir/resumed-w2.out" "continuing bit-exactly"

# Without --exact, W ranks add in another order: the comparisons above could fail.
train ddp-w1 1 --sync-bn
train ddp-w3 3 --sync-bn
cases=$((cases + 1))
if cmp -s "$dir/ddp-w1.safetensors" "$dir/ddp-w3.safetensors"; then
    echo "FAIL without --exact, W=1 and W=3 agree bitwise: this test cannot tell"
    failures=$((failures + 1))
else
    echo "ok   without --exact, W=1 and W=3 differ bitwise"
fi

# A BatchNorm over a 1-row group is refused before training, on every rank.
dp_mpirun 60 2 "$worker" $base --exact --exact-shard 41 >"$dir/small.out" 2>&1
dp_check_outcome "a 1-row group under BatchNorm" fail $? "$dir/small.out" "a BatchNorm normalises over each row group and needs at least 2 values per feature (rows x H x W), but a group of 1 row of one value occurs (groups of 41 rows"
dp_mpirun 60 1 "$worker" --data synthetic:50,4,2 --layers 4,2 --exact-shard 8 >"$dir/alone.out" 2>&1
dp_check_outcome "--exact-shard without --exact" fail $? "$dir/alone.out" "--exact-shard applies to the strategies exact, but the run's is ddp"
dp_mpirun 60 1 "$worker" --data synthetic:50,4,2 --layers 4,2 --exact --zero 1 >"$dir/zero.out" 2>&1
dp_check_outcome "--exact with --zero 1" fail $? "$dir/zero.out" "--exact and --zero 1 both choose how the ranks' work is combined"

echo "exact: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
