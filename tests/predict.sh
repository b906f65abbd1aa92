# --predict: data-parallel inference writes bitwise the same outputs and classes on 1, 2, 3
# and 4 ranks; the checkpoint loads into the matching PyTorch model (load_state_dict, strict)
# whose eval outputs equal ours, where Debian's python3-torch is installed.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-predict-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
model="linear(24,bias=0),batchnorm,relu,dropout(0.3),linear(16),relu,linear(5)"

# --device cpu: with --device auto one rank would take a GPU where two ranks fall back to the CPU.
run() { np=$1; shift; dp_mpirun 60 "$np" "$@" --device cpu >"$dir/out" 2>&1; }
check() { dp_check_outcome "$1" ok "$2" "$dir/out" "$3"; }

run 2 "$worker" --data synthetic:600,12,5 --model "$model" --optimizer adamw --steps 30 --batch 64 \
    --sync-bn --save "$dir/model.safetensors"
check "train the model to run" $? "summary:"
# 1000 rows: blocks of 256 at fixed positions, the last short: one each on 4 ranks, 2, 1, 1 on 3.
"$top_builddir/tests/npy_fixture" "$dir/inputs.npy" 1000 12 5 || failures=$((failures + 1))
for np in 1 2 3 4; do
    run "$np" "$worker" --predict "$dir/inputs.npy" --init "$dir/model.safetensors" --model "$model" \
        --output "$dir/out-$np.npy" --threads "$dp_threads"
    check "predict on $np rank(s)" $? "wrote $dir/out-$np.npy, float32 outputs [N, K]"
    run "$np" "$worker" --predict "$dir/inputs.npy" --init "$dir/model.safetensors" --model "$model" \
        --output "$dir/classes-$np.npy" --predict-classes --threads "$dp_threads"
    check "predict classes on $np rank(s)" $? "int64 classes [N]"
done
for np in 2 3 4; do
    cases=$((cases + 1))
    if cmp -s "$dir/out-1.npy" "$dir/out-$np.npy" && cmp -s "$dir/classes-1.npy" "$dir/classes-$np.npy"; then
        echo "ok   outputs and classes on $np ranks are bitwise those of 1 rank"
    else
        echo "FAIL outputs on $np ranks differ from 1 rank"
        failures=$((failures + 1))
    fi
done
# A rank started alone is bound to no core, where training would take every core as a BLAS
# thread; OpenBLAS rounds a 10-wide product differently on 2 threads (these sizes, measured),
# so --predict's default of one thread per rank is what keeps its bits those of 2 ranks.
wide="linear(256),relu,linear(10)"
run 1 "$worker" --data synthetic:600,128,10 --model "$wide" --steps 5 --save "$dir/wide.safetensors"
check "train a 10-class model" $? "summary:"
"$top_builddir/tests/npy_fixture" "$dir/wide.npy" 1000 128 9 || failures=$((failures + 1))
timeout 60 "$worker" --predict "$dir/wide.npy" --init "$dir/wide.safetensors" --model "$wide" \
    --output "$dir/wide-alone.npy" --device cpu >"$dir/out" 2>&1
check "predict in a rank started without mpirun" $? "wrote $dir/wide-alone.npy"
run 2 "$worker" --predict "$dir/wide.npy" --init "$dir/wide.safetensors" --model "$wide" --output "$dir/wide-2.npy"
check "predict the 10-class model on 2 ranks" $? "wrote $dir/wide-2.npy"
dp_check_same_bits "a rank alone (unbound) writes the bits of 2 ranks" "$dir/wide-alone.npy" "$dir/wide-2.npy"
# A CNN on images [2, 6, 5] (issue 18): trained on 2 ranks, predicted bitwise alike on 1 and 3.
cnn="conv2d(4,3,padding=1,bias=0),batchnorm,relu,maxpool(2),conv2d(6,2),relu,avgpool(1),flatten,linear(5)"
"$top_builddir/tests/npy_fixture" "$dir/images.npy" 600 2x6x5 7 &&
    "$top_builddir/tests/npy_fixture" --labels "$dir/image-labels.npy" 600 5 8 || failures=$((failures + 1))
run 2 "$worker" --data "$dir/images.npy,$dir/image-labels.npy" --model "$cnn" --optimizer adamw --steps 30 \
    --batch 64 --sync-bn --save "$dir/cnn.safetensors"
check "train the CNN to run" $? "summary:"
"$top_builddir/tests/npy_fixture" "$dir/image-inputs.npy" 300 2x6x5 9 || failures=$((failures + 1))
for np in 1 3; do
    run "$np" "$worker" --predict "$dir/image-inputs.npy" --init "$dir/cnn.safetensors" --model "$cnn" \
        --output "$dir/cnn-$np.npy" --threads "$dp_threads"
    check "predict with the CNN on $np rank(s)" $? "wrote $dir/cnn-$np.npy"
done
dp_check_same_bits "the CNN's outputs on 3 ranks are bitwise those of 1 rank" "$dir/cnn-1.npy" "$dir/cnn-3.npy"
# The first Python with PyTorch (Debian's python3-torch lives under /usr/bin); none: skipped.
python=python3
for candidate in python3 /usr/bin/python3; do
    "$candidate" -c 'import torch' 2>/dev/null && { python=$candidate; break; }
done
# compare_with_torch WHAT SPEC CHECKPOINT INPUTS OUTPUTS
compare_with_torch() {
    status=0
    "$python" "$srcdir/scripts/torch_interop.py" --model "$2" "$3" "$4" "$5" >"$dir/out" 2>&1 || status=$?
    if [ "$status" -eq 77 ]; then
        echo "skip PyTorch comparison ($1): $(cat "$dir/out")"
    else
        check "PyTorch loads $1 and computes the same outputs" "$status" "load_state_dict(strict=True)"
    fi
}
compare_with_torch "the MLP checkpoint" "$model" "$dir/model.safetensors" "$dir/inputs.npy" "$dir/out-1.npy"
compare_with_torch "the CNN checkpoint (nn.Conv2d, BatchNorm2d, pooling, Flatten)" "$cnn" "$dir/cnn.safetensors" \
    "$dir/image-inputs.npy" "$dir/cnn-1.npy"

echo "predict: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
