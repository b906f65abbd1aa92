# ZeRO-3's files without a whole model on any rank: a model whose parameters, gradients and
# AdamW state exceed --max-memory-mb on one rank trains on 4 ranks under --zero 3 and the
# limit from --init (each rank reads its slice of the file), checkpoints, resumes from the
# whole checkpoint (each rank reads its slice of the parameters and optimizer state) and
# --save's a file streamed piece by piece; the result equals --zero 0's within 1e-5 and loads
# into PyTorch. A truncated --init and one of another shape are named and stop every rank.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-zero3-files-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0

# 512 -> 2048 -> 2048 -> 10: 5.27M parameters, 80.4 MiB with gradients and AdamW state; a
# --zero 3 rank holds a quarter (20.1 MiB), its 1 MiB budget and the activations.
layers=512,2048,2048,10
model="--data synthetic:600,512,10 --layers $layers --batch 64 --log-every 0 --device cpu --threads $dp_threads --optimizer adamw --allreduce ring"
limited="--zero 3 --zero-live-mb 1 --max-memory-mb 32"
dp_mpirun 120 1 "$worker" $model --steps 1 --save "$dir/init.safetensors" >"$dir/out" 2>&1
dp_check_outcome "the starting model" ok $? "$dir/out" "summary:"
dp_mpirun 300 4 "$worker" $model --init "$dir/init.safetensors" --steps 4 --save "$dir/ddp.safetensors" >"$dir/out" 2>&1
dp_check_outcome "--zero 0 from --init, the reference" ok $? "$dir/out" "summary:"
dp_mpirun 300 4 "$worker" $model $limited --init "$dir/init.safetensors" --steps 4 --checkpoint-every 2 \
    --checkpoint-dir "$dir/ck" >"$dir/out" 2>&1
dp_check_outcome "--zero 3 under --max-memory-mb 32 from --init, checkpointing" ok $? "$dir/out" \
    "memory and communication (--strategy zero-3"
rm -f "$dir"/ck/step-000000004.safetensors
dp_mpirun 300 4 "$worker" $model $limited --resume "$dir/ck" --steps 4 --save "$dir/zero3.safetensors" \
    >"$dir/out" 2>&1
dp_check_outcome "--zero 3 under the limit resumes the whole checkpoint of step 2 and saves" ok $? "$dir/out" \
    "at step 2"
python3 "$srcdir/tests/params_close.py" "$dir/zero3.safetensors" "$dir/ddp.safetensors" 1e-5 >"$dir/out" 2>&1
dp_check_outcome "--zero 3's saved model equals --zero 0's within 1e-5" ok $? "$dir/out" "relative error"

# The saved file in PyTorch: load_state_dict(strict=True), and its outputs are --predict's.
python=python3
for candidate in python3 /usr/bin/python3; do
    "$candidate" -c 'import torch' 2>/dev/null && { python=$candidate; break; }
done
"$top_builddir/tests/npy_fixture" "$dir/inputs.npy" 100 512 10 || failures=$((failures + 1))
dp_mpirun 120 1 "$worker" --predict "$dir/inputs.npy" --init "$dir/zero3.safetensors" --layers $layers \
    --output "$dir/outputs.npy" --device cpu >"$dir/out" 2>&1
dp_check_outcome "predict with the streamed --save" ok $? "$dir/out" "wrote $dir/outputs.npy"
status=0
"$python" "$srcdir/scripts/torch_interop.py" --layers $layers "$dir/zero3.safetensors" "$dir/inputs.npy" \
    "$dir/outputs.npy" >"$dir/out" 2>&1 || status=$?
if [ "$status" -eq 77 ]; then
    echo "skip PyTorch: $(cat "$dir/out")"
else
    dp_check_outcome "PyTorch loads the streamed --save" ok "$status" "$dir/out" "load_state_dict(strict=True)"
fi

# Bad files: every rank stops, the file and the problem named.
head -c 1000000 "$dir/init.safetensors" >"$dir/truncated.safetensors"
dp_mpirun 120 4 "$worker" $model $limited --init "$dir/truncated.safetensors" --steps 1 >"$dir/out" 2>&1
dp_check_outcome "a truncated --init under --zero 3" fail $? "$dir/out" "$dir/truncated.safetensors"
dp_mpirun 120 4 "$worker" $model --layers 512,2048,1024,10 $limited --init "$dir/init.safetensors" --steps 1 \
    >"$dir/out" 2>&1
dp_check_outcome "an --init of another shape under --zero 3" fail $? "$dir/out" \
    "tensor 'layers.1.weight' has shape [2048, 2048], expected [1024, 2048]"

echo "zero3-files: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
