# The classes of issue 23 (docs/RELIABILITY.md, "Hostile use, version 2"): each case is a
# 2-rank job that must end within 10 s (20 s for runs that must succeed), with the message
# named. Cases that must fail at start-up run --steps 10000000, so a late check times out.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-hostile-v2-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
long="--steps 10000000"
python3 "$srcdir/tests/state_fixtures.py" "$dir" || { echo "FAIL could not write the fixtures"; exit 1; }

# expect_failure NAME PHRASE [dp_worker options...]; expect_success likewise, exit 0.
expect_failure() {
    name=$1 phrase=$2
    shift 2
    dp_mpirun 10 2 "$worker" --quiet --device cpu --threads 1 "$@" >"$dir/out" 2>&1
    dp_check_outcome "$name" fail $? "$dir/out" "$phrase"
}
expect_success() {
    name=$1 phrase=$2
    shift 2
    dp_mpirun 20 2 "$worker" --device cpu --threads 1 "$@" >"$dir/out" 2>&1
    dp_check_outcome "$name" ok $? "$dir/out" "$phrase"
}
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
synthetic="--data synthetic:600,16,3"
bn_model="linear(8,bias=0),batchnorm,relu,linear(3)"

# 1. Every dataset the model touches has the model's input width, whatever built the model.
for width in 4 32; do
    expect_failure "--model: a test set $width wide" "test data NPY $dir/x$width.npy + $dir/labels100.npy (100 x $width) has $width features per sample but the model (--model 'linear(8),relu,linear(3)') takes 16" \
        $synthetic --test-data "$dir/x$width.npy,$dir/labels100.npy" --model "linear(8),relu,linear(3)" $long
done

# 2. State read from files lies in the range training gives it (--init, --resume).
expect_failure "--init: num_batches_tracked = INT64_MAX" "tensor 'layers.1.num_batches_tracked' holds 9223372036854775807 (outside [0, 999999999999999999])" \
    $synthetic --model "$bn_model" --init "$dir/nbt_max.safetensors" $long
expect_failure "--init: num_batches_tracked < 0" "tensor 'layers.1.num_batches_tracked' holds -5 (outside" \
    $synthetic --model "$bn_model" --init "$dir/nbt_negative.safetensors" $long
expect_failure "--predict --init: a negative running_var" "tensor 'layers.1.running_var' holds -1 (below 0) at flat index 0" \
    --predict "$dir/x16.npy" --init "$dir/negvar.safetensors" --model "$bn_model" --output "$dir/pred.npy"
[ ! -e "$dir/pred.npy" ] || fail "a refused --predict left $dir/pred.npy"
expect_success "--init of a valid BatchNorm model" "summary:" $synthetic --model "$bn_model" --init "$dir/bn.safetensors" --steps 2

# 4. Parameters the update makes non-finite stop the job at that step, in either --on-nan
# mode (the optimizer state moved too: the step cannot be skipped), and nothing is saved.
for mode in abort skip; do
    expect_failure "--lr 1e38 overflows the update (--on-nan $mode)" "step 1: the update made 163 parameter values non-finite, the first in layers.0.weight, from finite gradients" \
        $synthetic --model "linear(8),relu,linear(3)" --optimizer adamw --lr 1e38 --on-nan $mode --steps 1 --save "$dir/nan.safetensors"
done
[ ! -e "$dir/nan.safetensors" ] || fail "a run whose update overflowed saved $dir/nan.safetensors"

# 5 and 6. Spec text is never cut (a cut "bias=000...01" reads as 0), and float values are
# checked as float32 stores them, in --model as in --betas.
zeros=$(printf '0%.0s' $(seq 1 200))
expect_failure "a 206-character option value" "is 206 characters long, more than the 127" \
    $synthetic --model "linear(8,bias=${zeros}1),relu,linear(3)" $long
expect_failure "dropout(0.99999999)" "p='0.99999999' must be a number in [0, 1) (probability of zeroing a unit), but it rounds to 1 in float32" \
    $synthetic --model "linear(8),dropout(0.99999999),linear(3)" $long
expect_failure "batchnorm(eps=1e39)" "eps='1e39' must be a number >= 1e-30 (added to the variance), but it rounds to inf in float32" \
    $synthetic --model "linear(8),batchnorm(eps=1e39),linear(3)" $long
expect_failure "--betas 0.9,0.99999999" "--betas '0.9,0.99999999': must be in [0, 1), but they round to 0.899999976,1 in float32" \
    $synthetic --optimizer adamw --betas 0.9,0.99999999 $long
# 11. The message names the mistake.
expect_failure "linear(8)relu" "module 0 (linear): 'relu' follows its ')': modules are separated by commas" \
    $synthetic --model "linear(8)relu,linear(3)" $long

# 7. No output is another output's file, an input's, or a checkpoint's name in --checkpoint-dir.
pair="$dir/x4.npy,$dir/labels100.npy"
cp "$dir/labels100.npy" "$dir/labels-copy.npy"
expect_failure "--metrics onto a --data file" "--metrics $dir/labels100.npy is a file --data reads ($dir/labels100.npy): writing it would destroy the input" \
    --data "$pair" --layers 4,3 --metrics "$dir/labels100.npy" $long
cmp -s "$dir/labels100.npy" "$dir/labels-copy.npy" || fail "--metrics destroyed the --data file"
expect_failure "--trace = --metrics" "--trace $dir/t.json and --metrics $dir/./t.json name one file" \
    --data "$pair" --layers 4,3 --trace "$dir/t.json" --metrics "$dir/./t.json" $long
expect_failure "--save into --checkpoint-dir as a checkpoint" "--save $dir/ck/step-000000002.safetensors lies in --checkpoint-dir $dir/ck/ under a name checkpointing uses" \
    --data "$pair" --layers 4,3 --checkpoint-dir "$dir/ck/" --save "$dir/ck/step-000000002.safetensors" $long
expect_failure "--output = the --predict input" "--output $dir/x16.npy is a file --predict reads" \
    --predict "$dir/x16.npy" --init "$dir/bn.safetensors" --model "$bn_model" --output "$dir/x16.npy"
# 9. --predict refuses the options of training instead of ignoring them.
for option in "--memory-plan" "--save $dir/s.safetensors" "--zero 1" "--max-memory-mb 100"; do
    expect_failure "--predict with $option" "${option%% *} does not apply to --predict" \
        --predict "$dir/x16.npy" --init "$dir/bn.safetensors" --model "$bn_model" --output "$dir/p.npy" $option
done
[ ! -e "$dir/p.npy" ] || fail "a refused --predict wrote $dir/p.npy"

# 8. --metrics: JSON (null, not -nan), the rate each step used, not truncated by a run that
# fails at start-up, and written under --quiet.
metrics="$dir/m.jsonl"
echo "an earlier run's metrics" >"$metrics"
expect_failure "--metrics with a failing --init" "holds -1 (below 0)" $synthetic --model "$bn_model" --init "$dir/negvar.safetensors" --metrics "$metrics" $long
grep -q "an earlier run's metrics" "$metrics" || fail "a run that failed at start-up truncated --metrics"
expect_success "--metrics under --quiet with NaN losses" "summary" --quiet --data "$dir/x4nan.npy,$dir/labels100.npy" --layers 4,3 \
    --on-nan skip --batch 100 --steps 2 --log-every 1 --lr 0.1 --lr-schedule cosine --metrics "$metrics"
cases=$((cases + 1))
if python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l.get("step") for l in lines[:-1]] == [1, 2] and "summary" in lines[-1], lines
assert lines[0]["loss"] is None and lines[0]["lr"] == 0.1, lines[0]
' "$metrics" 2>"$dir/py.err"; then
    echo "ok   --metrics: JSON lines under --quiet, null for a NaN loss, lr 0.1 at step 1"
else
    fail "--metrics: $(cat "$dir/py.err") in: $(cat "$metrics")"
fi
expect_success "--model relu: the output is the input width, not 0 units" "summary" --quiet $synthetic --model relu --steps 2
expect_failure "--model: ranges in full" "out='99999999999' must be an integer in [1, 1073741824]" \
    $synthetic --model "linear(99999999999)" $long
# (A sanitizer build must let the 4 TB malloc fail as plain malloc would, not abort.)
saved_asan=${ASAN_OPTIONS-}
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
expect_failure "out of memory before the model exists" "--layers 16,1073741824,1000 = 1091995436008 parameters = 4367981744032 bytes" \
    $synthetic --layers 16,1073741824,1000 --batch 2 $long
export ASAN_OPTIONS="$saved_asan"
expect_failure "--predict: --model input of another width" "--predict $dir/x17.npy has 17 features per sample, the width --model '$bn_model' takes there: --init: $dir/bn.safetensors: tensor 'layers.0.weight' has shape [8, 16]" \
    --predict "$dir/x17.npy" --init "$dir/bn.safetensors" --model "$bn_model" --output "$dir/p.npy"

# 11 and 12. Sharded checkpoints: --init of an index or a shard says what it is; files renamed
# together to unpadded names resume; a non-file at a shard's name is refused at start-up; a
# failed run removes the --checkpoint-dir it created.
sharded="$synthetic --layers 16,8,3 --zero 1"
expect_success "a sharded checkpoint" "summary" --quiet $sharded --steps 2 --checkpoint-dir "$dir/sh" --checkpoint-shards
expect_failure "--init of a sharded index" "--init $dir/sh/step-000000002.safetensors is the index of a sharded checkpoint (2 shards" \
    $sharded --init "$dir/sh/step-000000002.safetensors" $long
expect_failure "--init of a shard" "--init $dir/sh/step-000000002.rank-1-of-2.safetensors is one rank's shard of a sharded checkpoint" \
    $sharded --init "$dir/sh/step-000000002.rank-1-of-2.safetensors" $long
for f in "" .rank-0-of-2 .rank-1-of-2; do mv "$dir/sh/step-000000002$f.safetensors" "$dir/sh/step-2$f.safetensors"; done
expect_success "resume a sharded checkpoint renamed to unpadded names" "resume: $dir/sh/step-2.safetensors at step 2 (sharded)" \
    $sharded --steps 4 --resume "$dir/sh"
mkdir -p "$dir/sh2/step-000000004.rank-1-of-2.safetensors"
expect_failure "a directory at a future shard's name" "--checkpoint-dir $dir/sh2 holds step-000000004.rank-1-of-2.safetensors, a directory under a shard's name" \
    $sharded --checkpoint-dir "$dir/sh2" --checkpoint-shards $long
expect_failure "a failed run with a new --checkpoint-dir" "the update made" $synthetic --model "linear(8),relu,linear(3)" \
    --optimizer adamw --lr 1e38 --steps 1 --checkpoint-dir "$dir/new-ckpt"
[ ! -e "$dir/new-ckpt" ] || fail "a failed run left the --checkpoint-dir it created"

# 3 and 10. Sizes in MiB have a lower bound, compared in bytes: no bucket per float (a step
# of hours), no limit that rounds to 0 (= unlimited).
expect_failure "--bucket-mb 1e-9" "--bucket-mb '1e-9': below 1024 bytes (0.0009765625 MiB), the smallest bucket" \
    $synthetic --model "linear(4096),relu,linear(3)" --bucket-mb 1e-9 $long
expect_failure "--memory-plan --world 2^63-1" "--world '9223372036854775807': too large: at most 2147483647 (MPI counts ranks in an int)" \
    --memory-plan --world 9223372036854775807 --params 1000
expect_failure "--max-memory-mb 1e-300" "--max-memory-mb '1e-300': below 1 byte" $synthetic --max-memory-mb 1e-300 $long

# When every rank fails alike, one rank (0) reports: Open MPI's help aggregation overflows on many.
dp_mpirun 20 4 --oversubscribe "$worker" --quiet --device cpu --threads 1 $synthetic --model "$bn_model" \
    --init "$dir/negvar.safetensors" --test-data "$dir/x4.npy,$dir/labels100.npy" $long >"$dir/out" 2>&1
status=$?
reports=$(grep -c "error:" "$dir/out")
if [ "$status" -eq 0 ] || [ "$status" -ge 124 ] || [ "$reports" -ne 1 ] || ! grep -q "rank 0: error: test data" "$dir/out"; then
    fail "4 ranks failing alike: exit $status, $reports error lines (want non-zero, 1 from rank 0):"
    sed 's/^/    /' "$dir/out"
else
    cases=$((cases + 1)); echo "ok   4 ranks failing alike: one message, from rank 0"
fi

echo "hostile v2: $cases cases, $failures failures"
[ "$failures" -eq 0 ]
