#!/bin/sh
# Same bits as another build: the runs a change must not alter (the demo, the README's
# BatchNorm and CNN recipes, ZeRO 1-3 with AdamW, --exact on W = 1-3, local SGD, --predict, a
# checkpoint resumed), each trained for a few steps by this build and by BASE (another
# build's dp_worker), their --save files compared with cmp. Usage:
#   scripts/compare-bits.sh /path/to/other/build/dp_worker [STEPS]
# Exits 0 only if every pair is byte for byte equal.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
base=$1 steps=${2:-40}
worker="$top/${BUILD_DIR:-build}/dp_worker"
. "$top/scripts/mpi-env.sh"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-bits-XXXXXX")
trap '[ -n "${KEEP_BITS_DIR:-}" ] || rm -rf "$dir"' EXIT
bn="linear(1024,bias=0),batchnorm,relu,dropout(0.3),linear(512,bias=0),batchnorm,relu,dropout(0.3),linear(10)"
cnn="conv2d(32,3,padding=1,bias=0),batchnorm,relu,maxpool(2),conv2d(64,3,padding=1,bias=0),batchnorm,relu,maxpool(2),flatten,linear(128),relu,dropout(0.3),linear(10)"
common="--device cpu --threads 1 --steps $steps --log-every 0 --quiet"
failed=0
# run NAME RANKS [dp_worker options]: both builds, then cmp of what each saved.
run() {
    name=$1 np=$2
    shift 2
    for side in new base; do
        program=$worker
        [ "$side" = base ] && program=$base
        if ! timeout 600 mpirun -np "$np" --bind-to none "$program" $common "$@" \
            --save "$dir/$name-$side.safetensors" >"$dir/$name-$side.out" 2>&1; then
            echo "FAIL $name: the $side build failed"
            sed 's/^/    /' "$dir/$name-$side.out"
            failed=$((failed + 1))
            return
        fi
    done
    if cmp -s "$dir/$name-new.safetensors" "$dir/$name-base.safetensors"; then
        echo "same $name"
    else
        echo "DIFF $name"
        failed=$((failed + 1))
    fi
}
run demo 2
run bn-recipe 2 --model "$bn" --sync-bn --optimizer adamw --lr 1e-3 --weight-decay 0.05 --lr-schedule cosine
run cnn-recipe 2 --model "$cnn" --sync-bn --optimizer adamw --lr 0.002 --weight-decay 0.05 --lr-schedule cosine \
    --batch 128 --steps 8
for stage in 1 2 3; do
    run "zero-$stage" 2 --zero "$stage" --optimizer adamw
done
for np in 1 2 3; do
    run "exact-w$np" "$np" --exact --model "$bn" --sync-bn
done
run local-sgd 2 --average-every 4
# A checkpoint written by BASE, resumed by both builds.
timeout 600 mpirun -np 2 --bind-to none "$base" $common --checkpoint-dir "$dir/ckpt" >/dev/null 2>&1 ||
    { echo "FAIL the base build's checkpoint"; failed=$((failed + 1)); }
run resume 2 --steps $((steps * 2)) --resume "$dir/ckpt"
# --predict of the demo's model on 1 rank, where the rows' blocks are the same in both builds
# (2bf96c4 cut each rank's rows from its own first row: at W > 1 its bits were the BLAS's to
# keep); this build's 3 ranks must write its 1 rank's bytes.
predict() {
    timeout 600 mpirun -np "$2" --bind-to none "$1" --device cpu --predict "$dir/x.npy" \
        --init "$dir/demo-base.safetensors" --output "$3" >/dev/null 2>&1 || { echo "FAIL predict with $1 on $2"; failed=$((failed + 1)); }
}
"$top/${BUILD_DIR:-build}/tests/npy_fixture" "$dir/x.npy" 700 784 5
predict "$worker" 1 "$dir/predict-new.npy"
predict "$base" 1 "$dir/predict-base.npy"
predict "$worker" 3 "$dir/predict-new-w3.npy"
for other in base new-w3; do
    if cmp -s "$dir/predict-new.npy" "$dir/predict-$other.npy"; then echo "same predict ($other)"; else
        echo "DIFF predict ($other)"
        failed=$((failed + 1))
    fi
done
[ "$failed" -eq 0 ] || { echo "compare-bits: $failed differ or failed"; exit 1; }
echo "compare-bits: every run saved the same bytes as $base"
