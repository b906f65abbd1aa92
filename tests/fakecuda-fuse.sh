# --fuse (cuBLASLt epilogues) on the fake CUDA runtime: every epilogue against the CPU and the
# unfused kernels, and which GEMMs a model fuses (test_epilogues); then dp_worker trains with
# --fuse auto and --fuse off to the same bits (the fake's cuBLASLt applies each epilogue to
# cuBLAS's product with the kernels' arithmetic), at fp32, tf32 and bf16 (bf16 activations
# without a bias), on 1 and 2 ranks, with
# a ReLU before dropout (no ReLU backward to fuse there), gradient accumulation (the bias
# gradient of a later micro-batch adds) and ZeRO-2 (gradients placed piece by piece); a resume
# under --fuse off says the compute changed; and the option's errors. Exits 77 where not built.
. "$srcdir/tests/common.sh"
fake="$top_builddir/tests/fakecuda"
[ -x "$fake/test_epilogues" ] || { echo "fake CUDA tests not built"; exit 77; }
export FAKECUDA_CHECK_LEAKS=1
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-fuse-XXXXXX")
trap 'rm -rf "$dir"' EXIT
cases=0 failures=0
cases=$((cases + 1))
if FAKECUDA_DEVICES=fakeA dp_mpirun 300 1 "$fake/test_epilogues" >"$dir/epilogues" 2>&1; then
    echo "ok   each epilogue against the CPU and unfused, and a model's fused GEMMs: $(tail -n 1 "$dir/epilogues")"
else
    dp_fail_case "test_epilogues" "$dir/epilogues"
fi

data="--data synthetic:240,8,3 --batch 24 --seed 5 --device cuda --log-every 0 --steps 12"
mlp="--layers 8,16,16,3"
# train NAME RANKS FUSE ARGS...: trains, saving $dir/NAME-FUSE.safetensors.
train() {
    name=$1 ranks=$2 fuse=$3
    shift 3
    # shellcheck disable=SC2086
    dp_mpirun 300 "$ranks" sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$fake/dp_worker" \
        $data "$@" --fuse "$fuse" --save "$dir/$name-$fuse.safetensors" >"$dir/$name-$fuse.out" 2>&1
}
# same NAME RANKS ARGS...: --fuse auto (which must fuse) and off give the same bits.
same() {
    name=$1 ranks=$2
    shift 2
    train "$name" "$ranks" auto "$@" && train "$name" "$ranks" off "$@" ||
        { dp_fail_case "$name: training" "$dir/$name-auto.out"; cat "$dir/$name-off.out" 2>/dev/null; return; }
    if ! grep -q "cuBLASLt epilogues: $epilogues;" "$dir/$name-auto.out" ||
        ! grep -q "no fused epilogues (turned off by --fuse off)" "$dir/$name-off.out"; then
        dp_fail_case "$name: the banners do not say fused and unfused" "$dir/$name-auto.out"
        return
    fi
    dp_check_same_bits "$name: --fuse auto equals --fuse off" "$dir/$name-auto.safetensors" "$dir/$name-off.safetensors"
}
# At bf16 the GEMMs read bf16 copies of their operands: the bias gradient (BGRADB would sum dY's
# copy) stays the unfused FP32 pass. There the fused hidden layers write bf16 activations, the
# same bits the unfused next layer rounds its FP32 input to, but for a bias: cuBLASLt adds a bf16
# copy of it (fakecuda-bf16.sh holds that to FP32's tolerance), so the bitwise MLP has none,
# and its hidden layers' output gradients are written in bf16 too (the bits of FP32 rounded).
for precision in fp32 tf32 bf16; do
    epilogues="bias, relu, relu_mask, drelu, bias_grad"
    net=$mlp
    [ "$precision" = bf16 ] && epilogues="bias, relu, relu_mask, drelu" &&
        net="--model linear(16,bias=0),relu,linear(16,bias=0),relu,linear(3)"
    same "mlp-$precision-w1" 1 $net --precision "$precision"
    same "mixed-$precision-w2" 2 "--model" "linear(16),relu,dropout(0.2),linear(16,bias=0),relu,linear(3)" --accum 2 \
        --precision "$precision"
done
epilogues="bias, relu, relu_mask, drelu, bias_grad"
same "mlp-zero2-w2" 2 $mlp --zero 2 --bucket-mb 0.001

# A checkpoint records --fuse off in its compute: on a GPU the kernels add in another order.
# shellcheck disable=SC2086
FAKECUDA_DEVICES=fakeA dp_mpirun 120 1 "$fake/dp_worker" $data $mlp --steps 6 --checkpoint-dir "$dir/ck" >"$dir/ck.out" 2>&1 ||
    dp_fail_case "6 fused steps with a checkpoint" "$dir/ck.out"
# shellcheck disable=SC2086
FAKECUDA_DEVICES=fakeA dp_mpirun 120 1 "$fake/dp_worker" $data $mlp --resume "$dir/ck" --fuse off >"$dir/resume" 2>&1
dp_check_outcome "a --fuse off resume of a fused run" ok $? "$dir/resume" "not bit-exactly, because these settings changed: compute cuda -> cuda, --fuse off"

# shellcheck disable=SC2086
dp_mpirun 60 1 "$fake/dp_worker" $data $mlp --fuse sometimes >"$dir/bad" 2>&1
dp_check_outcome "--fuse sometimes" fail $? "$dir/bad" "--fuse"
cpu_data=$(echo "$data" | sed 's/--device cuda/--device cpu/')
# shellcheck disable=SC2086
dp_mpirun 60 1 "$fake/dp_worker" $cpu_data $mlp --fuse off >"$dir/cpu" 2>&1
dp_check_outcome "--fuse off on the CPU" fail $? "$dir/cpu" "--fuse off applies to GPUs, but --device is cpu"

# dp_gemm_bench times the fused GEMMs too: a step's 5 GEMMs, as on the CPU, 2 with an epilogue.
FAKECUDA_DEVICES=fakeA dp_mpirun 60 1 "$fake/dp_gemm_bench" --device cuda --layers 64,48,16 --batch 40 --repeat 2 >"$dir/bench" 2>&1
shapes=$(awk '$1 ~ /^[0-9]+$/ { printf "%s %s %s %s %s;", $2, $3, $4, $5, $6 }' "$dir/bench")
fused=$(grep -c '^  [0-9].*  + ' "$dir/bench")
cases=$((cases + 1))
if [ "$shapes" = "N T 40 48 64;N T 40 16 48;T N 16 48 40;N N 40 48 16;T N 48 64 40;" ] && [ "$fused" -ge 2 ]; then
    echo "ok   dp_gemm_bench on a GPU times the fused GEMMs ($fused of 5 with an epilogue)"
else
    dp_fail_case "dp_gemm_bench's GEMMs on a GPU: '$shapes', $fused fused" "$dir/bench"
fi
echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
