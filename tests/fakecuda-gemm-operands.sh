# --precision bf16 hands cuBLAS and cuBLASLt bf16 operands (CUDA_R_16BF copies), fp32 and tf32
# FP32 ones: the fake CUDA runtime counts every GEMM call by its operands' type
# (FAKECUDA_COUNT_GEMMS=1), and at bf16 none may be float32, at fp32 and tf32 none bf16, fused
# or not, from a CUDA graph (the copies' buffer grown before the capture: the fake refuses an
# allocation inside one; evaluation growing it later must keep the graph's) and under ZeRO-3 on
# 2 ranks. The banner says which operands, and at
# bf16 the bias gradient is not fused (BGRADB would sum the bf16 copy). At bf16 a Linear rounds
# X, W and dY once per micro-batch for its three GEMMs, where each GEMM rounding its own two
# operands made 16 launches for 8,16,16,3 (the first layer computes no input gradient); the two
# hidden layers write bf16 activations, which the next layer reads as its X unrounded, and round
# their bias for that GEMM instead: 3 a layer, 9 a micro-batch, and 2 GEMMs writing bf16 (none
# at fp32, tf32 or --fuse off). tests/test_gpu.c checks that the held copies give per-GEMM
# rounding's bits. Exits 77 where not built.
. "$srcdir/tests/common.sh"
fake="$top_builddir/tests/fakecuda"
[ -x "$fake/dp_worker" ] || { echo "fake CUDA tests not built"; exit 77; }
export FAKECUDA_CHECK_LEAKS=1 FAKECUDA_COUNT_GEMMS=1
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-operands-XXXXXX")
trap 'rm -rf "$dir"' EXIT
cases=0 failures=0
base="--data synthetic:240,8,3 --layers 8,16,16,3 --batch 24 --seed 5 --device cuda --log-every 0 --steps 12"

# run NAME RANKS PRECISION ARGS...: trains; every rank's count must show PRECISION's operands.
run() {
    name=$1 ranks=$2 precision=$3
    shift 3
    cases=$((cases + 1))
    # shellcheck disable=SC2086
    if ! dp_mpirun 120 "$ranks" sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$fake/dp_worker" \
        $base --precision "$precision" "$@" >"$dir/$name" 2>&1; then
        dp_fail_case "$name: training" "$dir/$name"
        return
    fi
    counts=$(sed -n 's/^fakecuda: GEMM operands: \([0-9]*\) float32, \([0-9]*\) bfloat16$/\1 \2/p' "$dir/$name")
    wrong=$(echo "$counts" | awk -v bf16="$([ "$precision" = bf16 ] && echo 1 || echo 0)" \
        'NF != 2 || (bf16 && ($1 > 0 || $2 == 0)) || (!bf16 && ($2 > 0 || $1 == 0)) { bad++ } END { print bad + 0 }')
    if [ "$(echo "$counts" | grep -c .)" -eq "$ranks" ] && [ "$wrong" -eq 0 ]; then
        echo "ok   $name: GEMM calls by operand type (float32 bfloat16) per rank: $(echo "$counts" | tr '\n' ';')"
    else
        dp_fail_case "$name: the GEMMs' operand types: '$counts'" "$dir/$name"
    fi
}
for precision in fp32 tf32 bf16; do
    run "$precision-fused" 1 "$precision" --fuse auto --cuda-graph off
    run "$precision-unfused" 1 "$precision" --fuse off --cuda-graph off
done
run bf16-graph 1 bf16 --cuda-graph on
run bf16-zero3-w2 2 bf16 --zero 3

# A graph replays its GEMMs on the operand buffer it was captured with; evaluation's 256-row
# chunks then need a larger one: the old buffer must stay (the fake keeps freed addresses unused
# while a graph exists, so a replay on a freed buffer faults). Same bits as without the graph.
long="--data synthetic:2400,8,3 --steps 150"
run bf16-graph-eval 1 bf16 $long --cuda-graph on --save "$dir/graph.safetensors"
run bf16-eager-eval 1 bf16 $long --cuda-graph off --save "$dir/eager.safetensors"
dp_check_same_bits "bf16: a graph replayed after evaluation grew the operand buffer equals eager steps" \
    "$dir/graph.safetensors" "$dir/eager.safetensors"

# The roundings of 2 steps: the count of 4 steps less that of 2 (an epoch is 10 steps, 5 with
# --accum 2, so both runs evaluate once, at the end).
roundings() {
    sed -n 's/^fakecuda: bf16 roundings: \([0-9]*\) launches, [0-9]* values$/\1/p' "$dir/$1"
}
bf16_outputs() {
    sed -n 's/^fakecuda: GEMM outputs in bfloat16: \([0-9]*\)$/\1/p' "$dir/$1"
}
for accum in 1 2; do
    for steps in 2 4; do
        run "rounds-$steps-accum$accum" 1 bf16 --steps "$steps" --accum "$accum" --cuda-graph off
    done
    cases=$((cases + 1))
    two=$(roundings "rounds-2-accum$accum") four=$(roundings "rounds-4-accum$accum")
    extra=$(( ${four:-0} - ${two:-0} ))
    written=$(( $(bf16_outputs "rounds-4-accum$accum") - $(bf16_outputs "rounds-2-accum$accum") ))
    if [ -n "$two" ] && [ -n "$four" ] && [ "$extra" -eq $((2 * accum * 9)) ] && [ "$written" -eq $((2 * accum * 2)) ]; then
        echo "ok   --accum $accum: 9 bf16 roundings and 2 bf16 activations per micro-batch for 3 Linears ($two roundings after 2 steps, $four after 4)"
    else
        dp_fail_case "--accum $accum: $extra bf16 roundings and $written bf16 outputs in 2 steps, want $((2 * accum * 9)) and $((2 * accum * 2)) ($two after 2 steps, $four after 4)" \
            "$dir/rounds-4-accum$accum"
    fi
done

cases=$((cases + 1))
none=$(cat "$dir/bf16-unfused" "$dir/fp32-fused" "$dir/tf32-fused" | sed -n 's/^fakecuda: GEMM outputs in bfloat16: //p' | sort -u)
if [ "$none" = 0 ] && [ "$(bf16_outputs bf16-fused)" -gt 0 ]; then
    echo "ok   bf16 activations at bf16 with cuBLASLt only ($(bf16_outputs bf16-fused) GEMMs wrote bf16; none at fp32, tf32 or --fuse off)"
else
    dp_fail_case "GEMMs writing bf16: '$none' at fp32, tf32 and --fuse off, $(bf16_outputs bf16-fused) at bf16" "$dir/bf16-fused"
fi
cases=$((cases + 1))
if grep -q "bf16 tensor-core (bf16 operands, FP32 accumulation and outputs; bf16 activations with cuBLASLt) GEMMs, cuBLASLt epilogues: bias, relu, relu_mask, drelu;" \
    "$dir/bf16-fused" && grep -q "cuBLASLt epilogues: bias, relu, relu_mask, drelu, bias_grad;" "$dir/fp32-fused"; then
    echo "ok   the banner names bf16 operands, and the bias gradient is fused at fp32 only"
else
    dp_fail_case "the banners at bf16 and fp32" "$dir/bf16-fused"
fi
echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
