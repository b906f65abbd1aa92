# --zero-live-mb through dp_worker: the peak each stage measured per rank (parameters,
# gradients, optimizer state and working buffers, allocation counter) is within 2% of
# --memory-plan's prediction under a budget; a model larger than --max-memory-mb trains on 4
# ranks under --zero 3 (its parameters, gradients and AdamW state exceed the limit, and so do
# its parameters and gradients; with SGD its parameters alone exceed it), and its checkpoint
# loads into PyTorch; a budget too small for a row, or for a column of a weight read in blocks
# of columns, is refused naming the least that works, which then trains.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-budget-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0

# 512 -> 2048 -> 2048 -> 10: 5.27M parameters, 20.1 MiB of float32; each Linear over the budget's blocks.
model="--data synthetic:600,512,10 --layers 512,2048,2048,10 --batch 64 --log-every 0 --device cpu --threads 1"
"$worker" --memory-plan $model --world 4 --optimizer adamw --zero-live-mb 2 >"$dir/plan" 2>&1 || dp_fail_case "--memory-plan" "$dir/plan"
for stage in 0 1 2 3; do
    cases=$((cases + 1))
    budget=""
    [ "$stage" -lt 2 ] || budget="--zero-live-mb 2"
    dp_mpirun 300 4 "$worker" $model --optimizer adamw --steps 2 --zero "$stage" $budget >"$dir/out" 2>&1 ||
        { dp_fail_case "--zero $stage run" "$dir/out"; continue; }
    # Plan: total + working, MB (10^6 bytes); measured: the four kinds' peaks, MiB.
    predicted=$(awk -v s="$stage" '$1 == "--zero" && $2 == s { i = (s == 0) ? 7 : 6; w = ($(i + 1) == "none") ? 0 : $(i + 1); print ($i + w) * 1e6 / 1048576 }' "$dir/plan")
    measured=$(sed -n 's/.*peaks: parameters \([0-9.]*\), gradients \([0-9.]*\), optimizer state \([0-9.]*\), working buffers \([0-9.]*\)).*/\1 \2 \3 \4/p' "$dir/out" |
        awk '{ print $1 + $2 + $3 + $4 }')
    if [ -n "$predicted" ] && [ -n "$measured" ] &&
        awk -v p="$predicted" -v m="$measured" 'BEGIN { d = m - p; if (d < 0) d = -d; exit !(d <= 0.02 * p) }'; then
        echo "ok   --zero $stage --zero-live-mb 2: measured $measured MiB, predicted $predicted MiB"
    else
        dp_fail_case "--zero $stage --zero-live-mb 2: measured '$measured' MiB, predicted '$predicted' MiB" "$dir/out"
    fi
done

# AdamW: 16 bytes per parameter (80.4 MiB), and the parameters with their gradients (40.2
# MiB), exceed 32 MiB; a --zero 3 rank holds a quarter of the state (20.1 MiB), its budget and
# 8 MiB of activations (256 evaluation rows of 2048).
big="--data synthetic:600,512,10 --layers 512,2048,2048,10 --batch 64 --steps 3 --log-every 0 --device cpu --threads 1"
dp_mpirun 300 4 "$worker" $big --optimizer adamw --max-memory-mb 32 --zero 0 >"$dir/out" 2>&1
dp_check_outcome "--zero 0 over --max-memory-mb 32" fail $? "$dir/out" "--max-memory-mb 32: "
dp_mpirun 300 4 "$worker" $big --optimizer adamw --max-memory-mb 32 --zero 3 --zero-live-mb 1 \
    --save "$dir/big.safetensors" >"$dir/out" 2>&1
dp_check_outcome "--zero 3 on 4 ranks under --max-memory-mb 32" ok $? "$dir/out" "memory and communication (--strategy zero-3"
# With AdamW a quarter of the state is as large as the parameters themselves, so no limit the
# parameters alone exceed lets 4 ranks train. SGD keeps 8 bytes per parameter: 256 -> 4096 ->
# 4096 -> 10 (68.4 MiB of parameters) trains under 60 MiB (17.1 MiB of parameters and
# gradients per rank, 16 MiB of activations).
wide="--data synthetic:600,256,10 --layers 256,4096,4096,10 --batch 64 --steps 2 --log-every 0 --device cpu --threads 1"
dp_mpirun 300 4 "$worker" $wide --optimizer sgd --momentum 0 --max-memory-mb 60 --zero 3 --zero-live-mb 2 \
    >"$dir/out" 2>&1
dp_check_outcome "SGD --zero 3 under --max-memory-mb 60, below the parameters alone" ok $? "$dir/out" \
    "memory and communication (--strategy zero-3"

# The checkpoint in PyTorch: load_state_dict(strict=True), and its outputs are --predict's.
python=python3
for candidate in python3 /usr/bin/python3; do
    "$candidate" -c 'import torch' 2>/dev/null && { python=$candidate; break; }
done
"$top_builddir/tests/npy_fixture" "$dir/inputs.npy" 100 512 10 || failures=$((failures + 1))
dp_mpirun 120 1 "$worker" --predict "$dir/inputs.npy" --init "$dir/big.safetensors" --layers 512,2048,2048,10 \
    --output "$dir/outputs.npy" --device cpu >"$dir/out" 2>&1
dp_check_outcome "predict with the --zero 3 checkpoint" ok $? "$dir/out" "wrote $dir/outputs.npy"
status=0
"$python" "$srcdir/scripts/torch_interop.py" --layers 512,2048,2048,10 "$dir/big.safetensors" "$dir/inputs.npy" \
    "$dir/outputs.npy" >"$dir/out" 2>&1 || status=$?
if [ "$status" -eq 77 ]; then
    echo "skip PyTorch: $(cat "$dir/out")"
else
    dp_check_outcome "PyTorch loads the --zero 3 checkpoint and computes its outputs" ok "$status" "$dir/out" \
        "load_state_dict(strict=True)"
fi

dp_mpirun 60 2 "$worker" --data synthetic:100,512,10 --layers 512,64,10 --steps 1 --zero 3 --zero-live-mb 0.001 \
    --device cpu >"$dir/out" 2>&1
dp_check_outcome "a budget below one row" fail $? "$dir/out" "is smaller than a row (512 floats)"

# 16 -> 2048 fits rows of 16 floats, but not a column of 2048 (on 2 ranks, gathered in place).
model="linear(16),relu,linear(2048,bias=0)"
dp_mpirun 60 2 "$worker" --data synthetic:100,8,2048 --model "$model" --steps 1 --zero 3 --zero-live-mb 0.025 \
    --device cpu >"$dir/out" 2>&1
dp_check_outcome "a budget below one column" fail $? "$dir/out" \
    "is smaller than a column of the layer whose parameters are [144, 32912) (2048 floats: 2048 rows); give at least 0.031495 MiB"
dp_mpirun 60 2 "$worker" --data synthetic:100,8,2048 --model "$model" --steps 1 --zero 3 --zero-live-mb 0.032 \
    --device cpu >"$dir/out" 2>&1
dp_check_outcome "the least budget the refusal named" ok $? "$dir/out" "summary: 1 steps"

echo "zero-budget: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
