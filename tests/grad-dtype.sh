# --grad-dtype bf16 end to end on 2 ranks: the banner says so, the replicas stay equal (replica
# checks), the parameters differ from float32 reductions' (the rounding happened), a resume in
# bf16 is bitwise an uninterrupted run, a resume in fp32 says it is not. (nccl's bf16 on fake
# GPUs: tests/fakecuda-grad-dtype.sh.)
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-grad-dtype-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
# The device and BLAS threads pinned: the bits depend on them.
base="--data synthetic:300,8,3 --model linear(16),relu,linear(3) --batch 30 --seed 5 --device cpu --threads $dp_threads --allreduce ring"

# run NAME WANT PHRASE [options]: 2 ranks with options.
run() {
    name=$1 want=$2 phrase=$3
    shift 3
    # shellcheck disable=SC2086
    dp_mpirun 60 2 "$worker" $base "$@" >"$dir/out" 2>&1
    dp_check_outcome "$name" "$want" $? "$dir/out" "$phrase"
}

run "bf16 gradients, replicas checked" ok "in host memory, reduced in bf16 (--grad-dtype)" \
    --grad-dtype bf16 --steps 20 --check-replicas 5 --save "$dir/straight.safetensors"
run "fp32 gradients" ok "summary:" --steps 20 --save "$dir/fp32.safetensors"
cases=$((cases + 1))
if cmp -s "$dir/straight.safetensors" "$dir/fp32.safetensors"; then
    dp_fail_case "bf16 and fp32 reductions trained the same bits: nothing was rounded"
else
    echo "ok   bf16 reductions change the parameters"
fi
run "10 steps in bf16 to a checkpoint" ok "summary:" --grad-dtype bf16 --steps 10 --checkpoint-dir "$dir/ckpt"
run "resumed in bf16" ok "continuing bit-exactly" --grad-dtype bf16 --steps 20 --resume "$dir/ckpt" \
    --save "$dir/resumed.safetensors"
cases=$((cases + 1))
if cmp -s "$dir/straight.safetensors" "$dir/resumed.safetensors"; then
    echo "ok   the bf16 resume equals the uninterrupted run bitwise"
else
    dp_fail_case "the bf16 resume differs from the uninterrupted run"
fi
run "resumed in fp32" ok "not bit-exactly, because these settings changed: grad_dtype bf16 -> fp32" \
    --steps 20 --resume "$dir/ckpt"

echo "grad-dtype: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
