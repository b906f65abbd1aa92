# The classes of issue 37 (docs/RELIABILITY.md, "Hostile use, version 3"), each with more than
# its reproducer: every case is a 2-rank job that must end within 10 s (20 s for runs that must
# succeed) with the message named; what a refused run would have written is absent. Root
# cause 5 (memory accounting) is tests/memory-measured.sh, with one case here.
. "$srcdir/tests/common.sh"
worker="$(cd "$top_builddir" && pwd)/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-hostile-v3-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
python3 "$srcdir/tests/hostile_v3_fixtures.py" "$dir" || { echo "FAIL could not write the fixtures"; exit 1; }
cd "$dir" || exit 1

# expect_failure NAME PHRASE [dp_worker options...]; expect_success likewise, exit 0.
expect_failure() {
    name=$1 phrase=$2
    shift 2
    dp_mpirun 10 2 "$worker" --quiet --device cpu --threads 1 "$@" >out 2>&1
    dp_check_outcome "$name" fail $? out "$phrase"
}
expect_success() {
    name=$1 phrase=$2
    shift 2
    dp_mpirun 20 2 "$worker" --device cpu --threads "$dp_threads" "$@" >out 2>&1
    dp_check_outcome "$name" ok $? out "$phrase"
}
absent() { cases=$((cases + 1)); if [ -e "$1" ]; then dp_fail_case "$2 left $1"; else echo "ok   $2 left no $1"; fi; }
images="--data i8.npy,y64.npy"
mlp="--data x16.npy,y48.npy --model linear(8),relu,linear(3) --batch 16"

# 1. Every module's width is checked against int with the data's shape, before anything is sized.
expect_failure "conv2d(1048576,1,padding=28) on 8x8 images" "module 0 (conv2d) makes [1048576, 64, 64] of each sample [1, 8, 8]: 4294967296 values, more than the 2147483647" \
    $images --model "conv2d(1048576,1,padding=28),flatten,linear(3)" --steps 2 --batch 16
expect_failure "conv2d(4096,1,padding=2048)" "makes [4096, 4104, 4104] of each sample [1, 8, 8]: 68988174336 values" \
    $images --model "conv2d(4096,1,padding=2048),flatten,linear(3)" --steps 2 --batch 16
expect_failure "--memory-plan of the same" "makes [4096, 4104, 4104] of each sample" \
    --memory-plan $images --model "conv2d(4096,1,padding=2048),flatten,linear(3)" --batch 16

# 2. The output width is the last module's, whatever it is.
expect_failure "conv2d,maxpool,flatten against 4 target columns" "training targets in t4.npy have 4 columns but the output layer of --model 'conv2d(4,3),maxpool(2),flatten' has 36 units" \
    --data i8.npy,t4.npy --model "conv2d(4,3),maxpool(2),flatten" --steps 2 --batch 16
expect_success "the same against its 36 columns" "summary:" --data i8.npy,t36.npy --model "conv2d(4,3),maxpool(2),flatten" --steps 2 --batch 16
expect_failure "a model ending in relu" "have 4 columns but the output layer of --model 'linear(8),relu' has 8 units" \
    --data x16.npy,y4.npy --model "linear(8),relu" --steps 2 --batch 16

# 3. BatchNorm running statistics are checked after each step, plain and synchronised: nothing saved.
for bn in batchnorm "batchnorm(sync=1)"; do
    expect_failure "$bn statistics overflowing float32" "values of the running statistics layers.1.running_var became non-finite" \
        --data bnhuge.npy,y64.npy --model "conv2d(4,3,bias=0),$bn,relu,flatten,linear(3)" --batch 16 --steps 8 --save bh.safetensors
    absent bh.safetensors "a run whose statistics overflowed"
done

# 4. --init loads strictly: a tensor the model has no place for is refused, in training and --predict.
expect_success "a BatchNorm model saved" "summary:" $images --model "linear(8),batchnorm,relu,linear(3)" --steps 2 --batch 16 --save bn.safetensors
expect_failure "its file into a model without the BatchNorm" "--init: bn.safetensors holds 5 tensors the model has no place for (layers.1.bias, layers.1.num_batches_tracked, layers.1.running_mean, layers.1.running_var, layers.1.weight)" \
    $images --model "linear(8),relu,dropout,linear(3)" --steps 2 --batch 16 --init bn.safetensors
expect_failure "--predict with it" "holds 5 tensors the model has no place for" \
    --predict i8.npy --init bn.safetensors --model "linear(8),relu,dropout,linear(3)" --output p.npy
absent p.npy "a refused --predict"
expect_failure "a file with one tensor more" "--init: extra.safetensors holds 1 tensor the model has no place for (head.weight)" $mlp --steps 2 --init extra.safetensors
expect_success "the file without it" "summary:" $mlp --steps 2 --init mlp.safetensors

# 5. What a strategy holds for itself is counted: --exact's accumulator, local SGD's copies.
expect_failure "--exact's accumulator under --max-memory-mb" "working buffers 0.20" \
    --data x16.npy,y48.npy --model "linear(256),relu,linear(3)" --batch 16 --steps 2 --strategy exact --max-memory-mb 0.3
expect_failure "local SGD's copies under --max-memory-mb" "of working buffers for the replicas' average" \
    --data x16.npy,y48.npy --model "linear(256),relu,linear(3)" --batch 16 --steps 2 --strategy local-sgd --max-memory-mb 0.12

# 6. --segment-bytes has a practical floor, and the advice works.
expect_failure "--segment-bytes 4 on linear(4096)" "--segment-bytes 4: ring-pipelined would move each 40962-float block of 81923 floats over 2 ranks in 40962 segments, each a message of its own; give at least 44" \
    --data x16.npy,y48.npy --model "linear(4096),relu,linear(3)" --batch 16 --steps 2 --allreduce ring-pipelined --segment-bytes 4
expect_success "--segment-bytes 44, as advised" "summary:" \
    --data x16.npy,y48.npy --model "linear(4096),relu,linear(3)" --batch 16 --steps 1 --allreduce ring-pipelined --segment-bytes 44

# 7. One verdict on a damaged checkpoint: --resume auto and --resume DIR pass over it alike,
# and the directory claim lets the run replace it; renamed shards resume under both.
expect_success "6 steps, checkpoints every 2" "summary:" $mlp --steps 6 --checkpoint-dir ck --checkpoint-every 2
truncate -s -10 ck/step-000000006.safetensors
cp -r ck ck-dir
expect_success "--resume auto past a truncated newest" "summary: 4 steps" $mlp --steps 8 --checkpoint-dir ck --checkpoint-every 2 --resume auto
grep -q "passed over incomplete checkpoints in ck: step-000000006.safetensors" out || dp_fail_case "--resume auto does not name the checkpoint it passed over" out
expect_success "--resume DIR past the same" "summary: 4 steps" $mlp --steps 8 --resume ck-dir
grep -q "passed over incomplete checkpoints: step-000000006.safetensors" out || dp_fail_case "--resume DIR does not name the checkpoint it passed over" out
expect_success "zero-3 shards every 3 steps" "summary:" $mlp --steps 6 --strategy zero-3 --checkpoint-dir cs --checkpoint-every 3 --checkpoint-shards
for f in cs/step-000000006*; do mv "$f" "cs/step-6${f#cs/step-000000006}"; done
expect_success "renamed shards under --resume DIR" "summary: 2 steps" $mlp --steps 8 --strategy zero-3 --resume cs
expect_success "renamed shards under --resume auto" "summary: 2 steps" $mlp --steps 8 --strategy zero-3 --resume auto --checkpoint-dir cs

# 8. An option of another mode is refused, naming what it applies to.
expect_failure "--hier-inner without hier" "--hier-inner applies to --allreduce hier, but --allreduce is auto" $mlp --steps 2 --hier-inner ring
expect_failure "--keep without --checkpoint-dir" "--keep applies to --checkpoint-dir, but --checkpoint-dir is not given" $mlp --steps 2 --keep 3
expect_failure "--bucket-mb with --no-overlap" "--bucket-mb applies to buckets reduced during backward, but --no-overlap is given" $mlp --steps 2 --bucket-mb 1 --no-overlap
expect_failure "--sync-bn without a BatchNorm" "--sync-bn applies to a model with batchnorm, but --model 'linear(8),relu,linear(3)' has none" $mlp --steps 2 --sync-bn

# 9. No output takes a name checkpointing uses inside --checkpoint-dir: nothing is created.
expect_failure "--metrics named like a checkpoint's temporary" "lies in --checkpoint-dir c9 under a name checkpointing uses" \
    $mlp --steps 2 --checkpoint-dir c9 --metrics "c9/step-000000004.safetensors.tmp.$(hostname).99999"
expect_failure "--trace named like a shard" "--trace c9/step-2.rank-0-of-2.safetensors lies in --checkpoint-dir c9" \
    $mlp --steps 2 --checkpoint-dir c9 --trace c9/step-2.rank-0-of-2.safetensors
absent c9 "the refused outputs"

# 10. BatchNorm2d counts values per channel (rows x H x W), BatchNorm1d rows.
cnn_bn="conv2d(4,3,bias=0),batchnorm,relu,flatten,linear(3)"
expect_success "one 8x8 image per rank under BatchNorm2d" "summary:" $images --model "$cnn_bn" --steps 2 --batch 2
expect_success "--exact row groups of one image" "summary:" $images --model "$cnn_bn" --steps 2 --batch 4 --strategy exact:rows=1
expect_failure "one row per rank under BatchNorm1d" "needs at least 2 values per feature on each rank in every micro-batch (rows x H x W), but some rank gets 1 row of 1 value each" \
    --data x16.npy,y48.npy --model "linear(8),batchnorm,relu,linear(3)" --steps 2 --batch 2

# 11. --predict blames the input width only when the width is what failed.
expect_failure "--predict --init of a missing file" "--init: missing.safetensors: cannot open" \
    --predict i8.npy --init missing.safetensors --model "$cnn_bn" --output p.npy
grep -q "features per sample" out && dp_fail_case "a missing --init file blamed on the input width" out
expect_failure "--predict of an input 4 wide" "--predict t4wide.npy has 4 features per sample, the width --model 'linear(8),relu,linear(3)' takes there" \
    --predict t4wide.npy --init mlp.safetensors --model "linear(8),relu,linear(3)" --output p.npy
absent p.npy "a refused --predict"

# 12. --exact names its range limit, stopping or skipping.
exact="--data x16.npy,ht.npy --loss mse --model linear(8),relu,linear(3) --batch 24 --exact --exact-shard 2"
expect_failure "--exact beyond its sums' range" "finite but beyond the 2^32 that --exact's sums hold, so their sums are NaN" $exact --steps 1
expect_success "--exact beyond it with --on-nan skip" "finite but beyond the 2^32 that --exact's sums hold" $exact --steps 2 --on-nan skip

# 13. Limits printed are limits that work, and float32's largest value is a value.
conv="conv2d(4,3),relu,flatten,linear(3)"
expect_failure "--zero-live-mb 0.001 on a CNN" "give at least 0.002198 MiB" $images --model "$conv" --batch 16 --steps 2 --zero 3 --zero-live-mb 0.001
expect_success "--zero-live-mb 0.002198, as advised" "summary:" $images --model "$conv" --batch 16 --steps 2 --zero 3 --zero-live-mb 0.002198
expect_success "--lr 3.4028235e38 (float32's largest)" "summary:" $mlp --steps 1 --lr 3.4028235e38
expect_failure "--lr 3.5e38" "--lr '3.5e38': too large for float32 (at most 3.40282347e+38)" $mlp --steps 1 --lr 3.5e38
expect_failure "--max-memory-mb 0.05 is printed as given" "--max-memory-mb 0.05: " \
    --data x16.npy,y48.npy --model "linear(256),relu,linear(3)" --batch 16 --steps 2 --max-memory-mb 0.05

# 14. --predict takes the arrays training takes: [N, H, W] as [N, 1, H, W] as [N, H*W].
expect_success "training on [N, 8, 8]" "summary:" --data h8.npy,y64.npy --model "linear(3)" --steps 2 --batch 16 --save h.safetensors
expect_success "--predict of [N, 8, 8]" "" --predict h8.npy --init h.safetensors --model "linear(3)" --output ph.npy
expect_success "--predict of [N, 1, 8, 8]" "" --predict i8.npy --init h.safetensors --model "linear(3)" --output pi.npy
dp_check_same_bits "both predict the same outputs" ph.npy pi.npy

# 15. Minor: messages that help, a trailing slash, training files alone, bytes kept printable.
expect_failure "conv2d(4) without k" "needs k (the square kernel's side), e.g. conv2d(4, 3)" $mlp --steps 1 --model "conv2d(4)"
expect_failure "an unknown module option" "unknown option 'outs' (known: out, bias)" $mlp --steps 1 --model "linear(8,outs=3)"
expect_success "--checkpoint-dir new/ is created" "summary:" $mlp --steps 2 --checkpoint-dir nd/ --checkpoint-every 1
cases=$((cases + 1))
[ -f nd/step-000000002.safetensors ] && echo "ok   nd/ holds its checkpoints" || dp_fail_case "nd/ holds no checkpoint"
expect_success "an IDX directory without t10k files" "test none" --data train-only --layers 4,3 --steps 2 --batch 2
expect_failure "a .npy header with an escape sequence" 'expected a dimension at "\x1b[31m' --data escape.npy,y48.npy --layers 4,3 --steps 1
cases=$((cases + 1))
if grep -q "$(printf '\033')" out; then dp_fail_case "the message carried the escape byte" out; else echo "ok   no control byte reached the output"; fi

echo "$((cases - failures)) of $cases cases passed"
[ "$failures" -eq 0 ]
