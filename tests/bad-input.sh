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
npy "$dir/cube.npy" '<f4' '(3, 2, 2)' 48
expect_failure "npy with an unsupported shape" "cube.npy" --data "$dir/cube.npy,$dir/labels.npy" --layers 4,3
printf 'not a safetensors file at all' >"$dir/garbage.safetensors"
expect_failure "malformed safetensors (rank 0 alone finds it)" "garbage.safetensors" --data "$good" --layers 4,3 --init "$dir/garbage.safetensors"
dp_mpirun 20 2 "$worker" --quiet --steps 1 --data "$good" --layers 4,3 --save "$dir/small.safetensors" >/dev/null 2>&1 ||
    { echo "FAIL could not write the fixture checkpoint"; failures=$((failures + 1)); }
expect_failure "safetensors shapes differ from --layers" "shape" --data "$good" --layers 4,5,3 --init "$dir/small.safetensors"
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
if "$worker" --help | grep -q "On GPU memory only"; then nccl_phrase="nccl sums GPU memory"; else nccl_phrase="unknown algorithm"; fi
expect_failure "--allreduce nccl on the CPU" "$nccl_phrase" --data "$good" --layers 4,3 --device cpu --allreduce nccl
export CUDA_VISIBLE_DEVICES=
expect_failure "--device cuda with no GPU visible" "--device cuda:" --data "$good" --layers 4,3 --device cuda
unset CUDA_VISIBLE_DEVICES

echo "bad input: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
