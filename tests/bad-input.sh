# Bad input ends the whole 2-rank job within 10 s, non-zero, with a message naming the
# file or option and the problem. A hang shows up as timeout's exit status 124.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-bad-input-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0

# expect_failure NAME PHRASE [dp_worker options...]
expect_failure() {
    name=$1 phrase=$2
    shift 2
    dp_mpirun 10 2 "$worker" --quiet --steps 2 "$@" >"$dir/out" 2>&1
    dp_check_outcome "$name" fail $? "$dir/out" "$phrase"
}

bytes() { printf "$@"; }
be32() { printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"; }
# idx_images FILE COUNT: COUNT images of 2x2 pixels
idx_images() { { bytes '\0\0\010\003'; be32 "$2"; be32 2; be32 2; head -c $(($2 * 4)) /dev/zero; } >"$1"; }
# idx_labels FILE LABEL...: one byte per label
idx_labels() { f=$1; shift; { bytes '\0\0\010\001'; be32 $#; for l in "$@"; do bytes "\\$(printf %03o "$l")"; done; } >"$f"; }
# npy FILE DESCR SHAPE DATA_BYTES: a version 1.0 .npy file
npy() {
    header="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
    while [ $(( (10 + ${#header} + 1) % 64 )) -ne 0 ]; do header="$header "; done
    len=$((${#header} + 1))
    { bytes '\223NUMPY\001\0'; printf "\\$(printf %03o $((len & 255)))\\$(printf %03o $((len >> 8)))"; printf '%s\n' "$header"; head -c "$4" /dev/zero; } >"$1"
}
# mnist_dir NAME: a directory of MNIST-named IDX files, 3 images per split; prints its path
mnist_dir() {
    mkdir -p "$dir/$1"
    for split in train t10k; do
        idx_images "$dir/$1/$split-images-idx3-ubyte" 3
        idx_labels "$dir/$1/$split-labels-idx1-ubyte" 0 1 2
    done
    echo "$dir/$1"
}

good=$(mnist_dir good)
expect_failure "missing data directory" "$dir/nowhere" --data "$dir/nowhere"
wrong_magic=$(mnist_dir wrong-magic); idx_labels "$wrong_magic/train-images-idx3-ubyte" 1 2 3
expect_failure "wrong IDX magic" "magic" --data "$wrong_magic" --layers 4,3
truncated=$(mnist_dir truncated); { bytes '\0\0\010\003'; be32 3; be32 2; be32 2; head -c 5 /dev/zero; } >"$truncated/train-images-idx3-ubyte"
expect_failure "truncated IDX data" "truncated" --data "$truncated" --layers 4,3
mismatch=$(mnist_dir mismatch); idx_labels "$mismatch/train-labels-idx1-ubyte" 0 1
expect_failure "image and label counts differ" "train-labels-idx1-ubyte" --data "$mismatch" --layers 4,3
out_of_range=$(mnist_dir out-of-range); idx_labels "$out_of_range/train-labels-idx1-ubyte" 0 7 1
expect_failure "label beyond the output layer" "go up to 7" --data "$out_of_range" --layers 4,3
expect_failure "input width differs from --layers" "--layers starts with 5" --data "$good" --layers 5,3
npy "$dir/f64.npy" '<f8' '(3, 4)' 96; npy "$dir/labels.npy" '<i8' '(3,)' 24
expect_failure "npy with an unsupported dtype" "f8" --data "$dir/f64.npy,$dir/labels.npy" --layers 4,3
npy "$dir/cube.npy" '<f4' '(3, 1, 1, 2, 2)' 48
expect_failure "npy with an unsupported shape" "cube.npy" --data "$dir/cube.npy,$dir/labels.npy" --layers 4,3
printf 'not a safetensors file at all' >"$dir/garbage.safetensors"
expect_failure "malformed safetensors (rank 0 alone finds it)" "garbage.safetensors" --data "$good" --layers 4,3 --init "$dir/garbage.safetensors"
dp_mpirun 20 2 "$worker" --quiet --steps 1 --data "$good" --layers 4,3 --save "$dir/small.safetensors" >/dev/null 2>&1 ||
    { echo "FAIL could not write the fixture checkpoint"; failures=$((failures + 1)); }
expect_failure "safetensors shapes differ from --layers" "tensor 'layers.0.weight' has shape [3, 4], expected [5, 4]" --data "$good" --layers 4,5,3 --init "$dir/small.safetensors"
# --model: the spec's mistakes, and models that do not fit the data or the batch.
expect_failure "unknown module" "module 1 'tanh': unknown module" --data "$good" --model "linear(3),tanh"
expect_failure "bad module argument" "out='x' must be an integer" --data "$good" --model "linear(x)"
expect_failure "missing module argument" "module 0 (linear) needs out" --data "$good" --model "linear"
expect_failure "dropout p outside [0, 1)" "p='1' must be a number in [0, 1)" --data "$good" --model "dropout(1),linear(3)"
expect_failure "batchnorm before any linear" "comes before any linear" --data "$good" --model "batchnorm,linear(3)"
expect_failure "output width differs from the classes" "the output layer of --model 'linear(2)' has 2 units" --data "$good" --model "linear(2)"
expect_failure "plain BatchNorm with one row per rank" "needs at least 2 values per feature on each rank" --data "$good" --model "linear(3),batchnorm" --batch 2
# CNNs (issue 18): messages name the module and the shapes. The good images are [1, 2, 2].
expect_failure "conv2d kernel larger than the padded input" "module 0 (conv2d): kernel 5x5 is larger than its input [1, 2, 2] padded by 1" --data "$good" --model "conv2d(2,5,padding=1),flatten,linear(3)"
expect_failure "pooling window larger than its input" "module 1 (maxpool): window 3x3 is larger than its input [2, 2, 2]" --data "$good" --model "conv2d(2,1),maxpool(3),flatten,linear(3)"
expect_failure "linear after conv2d without flatten" "module 2 (linear) gets images [2, 2, 2] from module 0 (conv2d): put flatten before it" --data "$good" --model "conv2d(2,1),relu,linear(3)"
npy "$dir/flat-images.npy" '<f4' '(3, 2, 2)' 48
expect_failure "conv2d on samples that are not images" "module 0 (conv2d) needs images [C, H, W] but gets [2, 2]" --data "$dir/flat-images.npy,$dir/labels.npy" --model "conv2d(2,1),flatten,linear(3)"
npy "$dir/two-channels.npy" '<f4' '(3, 2, 1, 2)' 48
expect_failure "test images of another shape" "has samples [2, 1, 2] but the model (--model 'conv2d(2,1),flatten,linear(3)') takes [1, 2, 2]" --data "$good" --test-data "$dir/two-channels.npy,$dir/labels.npy" --model "conv2d(2,1),flatten,linear(3)"
dp_mpirun 20 2 "$worker" --quiet --steps 1 --data "$good" --model "conv2d(2,1),flatten,linear(3)" --save "$dir/conv.safetensors" >/dev/null 2>&1 ||
    { echo "FAIL could not write the conv fixture checkpoint"; failures=$((failures + 1)); }
expect_failure "conv2d checkpoint with other input channels" "tensor 'layers.0.weight' has shape [2, 1, 1, 1], expected [2, 2, 1, 1]" --data "$dir/two-channels.npy,$dir/labels.npy" --model "conv2d(2,1),flatten,linear(3)" --init "$dir/conv.safetensors"
# --predict: a file of the wrong width, and no model to run.
npy "$dir/wide.npy" '<f4' '(3, 5)' 60
expect_failure "--predict file of the wrong width" "wide.npy has 5 features per sample but --layers starts with 4" --predict "$dir/wide.npy" --init "$dir/small.safetensors" --output "$dir/pred.npy" --layers 4,3
expect_failure "--predict without --init" "needs --init MODEL.safetensors" --predict "$dir/wide.npy" --output "$dir/pred.npy"
expect_failure "--predict output in a missing directory" "--output $dir/nowhere/pred.npy" --predict "$dir/wide.npy" --init "$dir/small.safetensors" --output "$dir/nowhere/pred.npy" --layers 5,3
expect_failure "unknown option" "--bogus" --bogus
expect_failure "batch 0" "--batch '0'" --batch 0
expect_failure "negative learning rate" "--lr '-1'" --lr -1
expect_failure "batch smaller than the world size" "smaller than the world size 2" --batch 1
expect_failure "unknown all-reduce algorithm" "valid: mpi" --allreduce telepathy
printf '2 4K mpi\n2 1M telepathy\n' >"$dir/bad.table"
expect_failure "auto table naming an unknown algorithm" "bad.table:2: unknown algorithm 'telepathy'" --data "$good" --layers 4,3 --allreduce auto --auto-table "$dir/bad.table"
expect_failure "missing auto table" "$dir/none.table" --data "$good" --layers 4,3 --allreduce auto --auto-table "$dir/none.table"
# GPU choices: flags that need a GPU on the CPU, and a GPU asked for where none is visible.
expect_failure "--tf32 with --device cpu" "--tf32 applies to GPUs" --device cpu --tf32
expect_failure "--precision bf16 on the CPU" "the cpu backend cannot run gemm in BF16" --data "$good" --layers 4,3 --device cpu --precision bf16
expect_failure "--precision fp16 for training" "--precision fp16 applies to --memory-plan" --precision fp16
if "$worker" --help | grep -q "On GPU memory only"; then nccl_phrase="nccl sums GPU memory"; else nccl_phrase="unknown algorithm"; fi
expect_failure "--allreduce nccl on the CPU" "$nccl_phrase" --data "$good" --layers 4,3 --device cpu --allreduce nccl
export CUDA_VISIBLE_DEVICES=
expect_failure "--device cuda with no GPU visible" "--device cuda:" --data "$good" --layers 4,3 --device cuda
unset CUDA_VISIBLE_DEVICES


# --- issue 11: hostile but realistic use (docs/RELIABILITY.md, "Hostile use") ---
# expect_success NAME PHRASE [dp_worker options...]: exit 0 within 20 s, PHRASE in the output.
expect_success() {
    name=$1 phrase=$2
    shift 2
    dp_mpirun 20 2 "$worker" --quiet --steps 2 "$@" >"$dir/out" 2>&1
    dp_check_outcome "$name" ok $? "$dir/out" "$phrase"
}
# Runs that would train for minutes: a check made only after training would time out.
long="--steps 10000000"
# 1. The test set's targets must be the training set's kind (the loss is chosen from it).
npy "$dir/f4.npy" '<f4' '(3, 4)' 48; npy "$dir/targets.npy" '<f4' '(3, 3)' 36
expect_failure "test targets of another kind than the training labels" "--test-data $dir/targets.npy has float targets but the training data $dir/labels.npy has class labels" \
    --data "$dir/f4.npy,$dir/labels.npy" --test-data "$dir/f4.npy,$dir/targets.npy" --layers 4,3
# 2. Sizes derived from options: range-checked naming the options, never wrapped or clamped.
expect_failure "per-rank slice beyond an int" "--batch 8589934592 over 2 ranks puts 4294967296 samples on a rank" --batch 8589934592
expect_failure "batch x accum overflowing" "--batch 4 x --accum 4611686018427387904: more than" --batch 4 --accum 4611686018427387904
expect_failure "epochs x steps per epoch overflowing" "--epochs 999999999999999999 x 2 steps per epoch" --data "$good" --layers 4,3 --batch 2 --steps 0 --epochs 999999999999999999
expect_failure "--threads beyond the limit (not clamped)" "--threads '2000': too large: at most 1024" --threads 2000
# (A sanitizer build must let the 128 TiB malloc fail as plain malloc would, not abort.)
saved_asan=${ASAN_OPTIONS-}
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
expect_failure "out of memory names the options and real sizes" "--batch 16777216 over 2 ranks = 8388608 rows per rank" \
    --data "$good" --layers 4,4194304,3 --batch 16777216
export ASAN_OPTIONS="$saved_asan"
# 3. A FIFO where a file is read (no writer: opening it would block before the watchdog).
fifo_data=$(mnist_dir fifo-data); rm "$fifo_data/train-images-idx3-ubyte"; mkfifo "$fifo_data/train-images-idx3-ubyte"
mkfifo "$dir/fifo"
expect_failure "FIFO as a data file" "--data $fifo_data: $fifo_data/train-images-idx3-ubyte: is a FIFO" --data "$fifo_data" --layers 4,3
expect_failure "FIFO as an .npy file" "--data $dir/f4.npy,$dir/fifo: $dir/fifo: is a FIFO" --data "$dir/f4.npy,$dir/fifo" --layers 4,3
expect_failure "FIFO as --auto-table" "--auto-table: $dir/fifo: is a FIFO" --data "$good" --layers 4,3 --allreduce auto --auto-table "$dir/fifo"
expect_failure "FIFO as --init" "--init: $dir/fifo: is a FIFO" --data "$good" --layers 4,3 --init "$dir/fifo"
expect_failure "FIFO as --resume" "--resume $dir/fifo: is a FIFO" --data "$good" --layers 4,3 --resume "$dir/fifo"
# 4 and 12. Output paths checked at start-up; nothing that is not a regular file replaced.
expect_failure "--save onto a FIFO, at start-up" "--save $dir/fifo: is a FIFO (named pipe), not a regular file: refusing to replace it" \
    --data "$good" --layers 4,3 $long --save "$dir/fifo"
[ -p "$dir/fifo" ] || { echo "FAIL the FIFO at --save was replaced"; failures=$((failures + 1)); }
ln -s "$dir/small.safetensors" "$dir/link.safetensors"
expect_failure "--save onto a symbolic link" "--save $dir/link.safetensors: is a symbolic link" --data "$good" --layers 4,3 $long --save "$dir/link.safetensors"
expect_failure "--save in a missing directory, at start-up" "--save $dir/missing/m.safetensors: directory $dir/missing: No such file" \
    --data "$good" --layers 4,3 $long --save "$dir/missing/m.safetensors"
expect_failure "--checkpoint-dir that is a file, at start-up" "--checkpoint-dir $dir/small.safetensors: is a regular file, not a directory" \
    --data "$good" --layers 4,3 $long --checkpoint-dir "$dir/small.safetensors"
# 5. A checkpoint directory holding another run's checkpoints is refused, not pruned.
expect_success "a run with checkpoints" "summary:" --data "$good" --layers 4,3 --checkpoint-dir "$dir/ckpt" --checkpoint-every 1
expect_failure "a new run into another run's checkpoint directory" "holds step-000000002.safetensors of another run" \
    --data "$good" --layers 4,3 --checkpoint-dir "$dir/ckpt"
[ -f "$dir/ckpt/step-000000001.safetensors" ] || { echo "FAIL the other run's checkpoint was deleted"; failures=$((failures + 1)); }
# 13 and 14. A name without zero padding resumes and is pruned by its own name; resuming a
# finished run says so; a --save file is not a checkpoint.
mv "$dir/ckpt/step-000000002.safetensors" "$dir/ckpt/step-2.safetensors"
expect_success "resume from step-2.safetensors, pruned later" "summary: 2 steps" --data "$good" --layers 4,3 \
    --resume "$dir/ckpt" --checkpoint-dir "$dir/ckpt" --keep 1 --steps 4
[ ! -e "$dir/ckpt/step-2.safetensors" ] && [ -f "$dir/ckpt/step-000000004.safetensors" ] ||
    { echo "FAIL pruning did not delete step-2.safetensors: $(ls "$dir/ckpt")"; failures=$((failures + 1)); }
expect_success "resume of a finished run" "summary: 0 steps: the run was already at its last step (4 of 4)" \
    --data "$good" --layers 4,3 --resume "$dir/ckpt" --steps 4
expect_failure "--resume of a --save file" "not a dptrain checkpoint" --data "$good" --layers 4,3 --resume "$dir/small.safetensors"
# 6. The checksum covers the metadata: one changed digit of the step is caught.
ckpt="$dir/ckpt/step-000000004.safetensors"
offset=$(grep -obUa '"step":"4"' "$ckpt" | cut -d: -f1)
printf 7 | dd of="$ckpt" bs=1 seek=$((offset + 8)) conv=notrunc 2>/dev/null
expect_failure "a checkpoint whose step was changed" "checksum mismatch" --data "$good" --layers 4,3 --resume "$ckpt" --steps 8
# 14. Messages that keep what was given and name the file and tensor.
expect_failure "--momentum rounding to 1 in float32" "--momentum '0.99999999': must be below 1, but it rounds to 1 in float32" --momentum 0.99999999
cp "$dir/small.safetensors" "$dir/nan.safetensors"
printf '\000\000\300\177' | dd of="$dir/nan.safetensors" bs=1 seek=$(($(wc -c <"$dir/nan.safetensors") - 4)) conv=notrunc 2>/dev/null
expect_failure "--init with a NaN weight" "--init $dir/nan.safetensors: tensor 'layers.0.bias' holds 1 non-finite value" \
    --data "$good" --layers 4,3 --init "$dir/nan.safetensors"

echo "bad input: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
