# --precision bf16 through the CUDA backend on the fake CUDA runtime (its cuBLAS rounds the GEMM
# inputs to bfloat16 and adds in FP32; its cuBLASLt writes the hidden layers' activations in
# bf16): bf16 training within 1% of FP32 after 20 steps, and W = 2, 3, 4 ranks within the same
# 1% of one rank at bf16 (test_mpi_train's bf16 case, 20,32,16,5: two bf16 activations);
# then through dp_worker: the GEMMs write bf16 activations, checkpoints hold FP32 master
# weights and optimizer state only, a resume at bf16 continues bit-exactly (the same --save
# bytes as one uninterrupted run), a resume at fp32 says the compute changed, --cuda-graph on
# gives eager's bits on 1 rank and on 2 (NCCL); and --memory-plan's activations at bf16 on the
# wide model (8192,8192,8192,10, --batch 4096) are the bf16 ones; on an sm_75 GPU
# (FAKECUDA_CC=75) --precision bf16 and tf32 say it has no such tensor cores and train
# --precision fp32's bits. Exits 77 where not built.
. "$srcdir/tests/common.sh"
fake="$top_builddir/tests/fakecuda"
[ -x "$fake/test_mpi_train" ] || { echo "fake CUDA tests not built"; exit 77; }
export FAKECUDA_CHECK_LEAKS=1
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-bf16-XXXXXX")
trap 'rm -rf "$dir"' EXIT
cases=0 failures=0
for w in 2 3 4; do
    cases=$((cases + 1))
    if DP_TEST_DEVICE=cuda CK_RUN_CASE=bf16 dp_mpirun 300 "$w" sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0"' \
        "$fake/test_mpi_train" >"$dir/w$w" 2>&1 && grep -q "W=$w bf16" "$dir/w$w"; then
        echo "ok   $(grep "W=$w bf16" "$dir/w$w")"
    else
        echo "FAIL W=$w bf16 against FP32 and 1 rank:"
        sed 's/^/    /' "$dir/w$w"
        failures=$((failures + 1))
    fi
done

base="--data synthetic:300,8,3 --layers 8,16,3 --batch 30 --seed 5 --device cuda --precision bf16 --log-every 0"
# shellcheck disable=SC2086
FAKECUDA_COUNT_GEMMS=1 dp_mpirun 120 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' \
    "$fake/dp_worker" $base --steps 20 --save "$dir/whole.safetensors" >"$dir/out" 2>&1 ||
    { echo "FAIL 20 bf16 steps:"; cat "$dir/out"; exit 1; }
cases=$((cases + 1))
written=$(sed -n 's/^fakecuda: GEMM outputs in bfloat16: \([0-9]*\)$/\1/p' "$dir/out" | sort -u)
if [ -n "$written" ] && [ "$written" -gt 0 ]; then
    echo "ok   20 bf16 steps: the hidden layer's GEMM wrote its activation in bf16 ($written times a rank)"
else
    dp_fail_case "20 bf16 steps wrote no bf16 activation: '$written'" "$dir/out"
fi
# shellcheck disable=SC2086
dp_mpirun 120 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$fake/dp_worker" $base \
    --steps 10 --checkpoint-dir "$dir/ck" >"$dir/out" 2>&1 || { echo "FAIL 10 bf16 steps:"; cat "$dir/out"; exit 1; }
checkpoint="$dir/ck/step-000000010.safetensors"
cases=$((cases + 1))
# The header's dtypes: every tensor F32 (weights, biases, momentum), none BF16.
dtypes=$(head -c 4096 "$checkpoint" | tr ',' '\n' | sed -n 's/.*"dtype":"\([A-Z0-9]*\)".*/\1/p' | sort | uniq -c | tr -s ' ')
if [ -n "$dtypes" ] && ! printf '%s\n' "$dtypes" | grep -qv ' F32$'; then
    echo "ok   the bf16 checkpoint holds FP32 tensors only:$dtypes"
else
    echo "FAIL the bf16 checkpoint's dtypes: $dtypes"
    failures=$((failures + 1))
fi
# shellcheck disable=SC2086
dp_mpirun 120 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$fake/dp_worker" $base \
    --steps 20 --resume "$dir/ck" --save "$dir/resumed.safetensors" >"$dir/resume" 2>&1
dp_check_outcome "bf16 resume" ok $? "$dir/resume" "continuing bit-exactly"
dp_check_same_bits "bf16 resume equals the uninterrupted run" "$dir/whole.safetensors" "$dir/resumed.safetensors"
fp32=$(echo "$base" | sed 's/--precision bf16/--precision fp32/')
# shellcheck disable=SC2086
dp_mpirun 120 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$fake/dp_worker" $fp32 \
    --steps 20 --resume "$dir/ck" >"$dir/resume-fp32" 2>&1
dp_check_outcome "fp32 resume of a bf16 checkpoint" ok $? "$dir/resume-fp32" "compute cuda, bf16 GEMM inputs -> cuda"
# --cuda-graph on replays the bf16 step to eager's bits: one rank, and two over NCCL.
for w in 1 2; do
    nccl=""
    [ "$w" = 2 ] && nccl="--allreduce nccl"
    for graph in on off; do
        # shellcheck disable=SC2086
        dp_mpirun 120 "$w" sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' \
            "$fake/dp_worker" $base $nccl --steps 20 --cuda-graph "$graph" --save "$dir/graph-$w-$graph.safetensors" \
            >"$dir/graph-$w-$graph" 2>&1 || dp_fail_case "W=$w bf16 --cuda-graph $graph" "$dir/graph-$w-$graph"
    done
    dp_check_same_bits "W=$w bf16: --cuda-graph on equals eager" "$dir/graph-$w-on.safetensors" "$dir/graph-$w-off.safetensors"
done

# --memory-plan: FP32's activations of the wide model with its batch (4096 x (8192 + 1 + 10) x 4
# bytes), then at bf16 the two hidden outputs in bf16 (-2 x 4096 x 8192 x 2 bytes) and the bf16
# operand copies without the two inputs those are.
"$fake/dp_worker" --memory-plan --precision bf16 --layers 8192,8192,8192,10 --batch 4096 --world 1 >"$dir/plan" 2>&1
cases=$((cases + 1))
if grep -q "^activations per rank, every stage alike .*: 671.4 MB (640.33 MiB) for --batch 4096" "$dir/plan" &&
    grep -q "^activations per rank on a GPU at bf16 .*: 537.2 MB$" "$dir/plan" &&
    grep -q "^bf16 GEMM operands per rank on a GPU.*: 470.0 MB$" "$dir/plan"; then
    echo "ok   --memory-plan at bf16, wide model: activations 671.4 MB in FP32, 537.2 MB with bf16 activations, copies 470.0 MB"
else
    dp_fail_case "--memory-plan's bf16 activations" "$dir/plan"
fi
# A GPU older than sm_80 has no bf16 or TF32 tensor cores: --precision says so and trains FP32,
# the bits of --precision fp32 on the same GPU.
one="--data synthetic:300,8,3 --layers 8,16,3 --batch 30 --seed 5 --device cuda --steps 10 --log-every 0"
for precision in fp32 bf16 tf32; do
    # shellcheck disable=SC2086
    FAKECUDA_CC=75 FAKECUDA_DEVICES=fake0 "$fake/dp_worker" $one --precision $precision \
        --save "$dir/sm75-$precision.safetensors" >"$dir/sm75-$precision" 2>&1 ||
        dp_fail_case "--precision $precision on an sm_75 GPU" "$dir/sm75-$precision"
done
for precision in bf16 tf32; do
    words=$precision
    [ "$precision" = tf32 ] && words=TF32
    cases=$((cases + 1))
    if grep -q "exact FP32 GEMMs (--precision $precision: sm_75 has no $words tensor cores, which came with sm_80)" \
        "$dir/sm75-$precision"; then
        echo "ok   --precision $precision on an sm_75 GPU says it has no $words tensor cores and computes in FP32"
    else
        dp_fail_case "--precision $precision on an sm_75 GPU: no such words" "$dir/sm75-$precision"
    fi
    dp_check_same_bits "--precision $precision on sm_75 trains --precision fp32's bits" "$dir/sm75-fp32.safetensors" \
        "$dir/sm75-$precision.safetensors"
done
echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
