# The strategy added in one file (src/strategy/bf16_compress.c, a row in registry.c): DDP whose
# bucket hook all-reduces in bfloat16. On 2 and 3 ranks it saves the bytes of DDP with
# --grad-dtype bf16 (the same reduction reached another way), not those of DDP in FP32, and
# --help and the banner name it.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-bf16-compress-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
base="--data synthetic:300,8,3 --model linear(16),relu,linear(3) --batch 30 --steps 12 --seed 5 --device cpu --threads $dp_threads --bucket-mb 0.001"
for np in 2 3; do
    dp_mpirun 60 "$np" "$worker" $base --strategy bf16-compress --save "$dir/hook-$np.safetensors" >"$dir/out" 2>&1
    dp_check_outcome "--strategy bf16-compress on $np ranks" ok $? "$dir/out" "bf16-compress, "
    dp_mpirun 60 "$np" "$worker" $base --grad-dtype bf16 --save "$dir/dtype-$np.safetensors" >"$dir/out" 2>&1
    dp_check_outcome "DDP with --grad-dtype bf16 on $np ranks" ok $? "$dir/out" "summary:"
    dp_mpirun 60 "$np" "$worker" $base --save "$dir/fp32-$np.safetensors" >"$dir/out" 2>&1
    dp_check_outcome "DDP in FP32 on $np ranks" ok $? "$dir/out" "summary:"
    dp_check_same_bits "the hook's bytes are --grad-dtype bf16's ($np ranks)" "$dir/hook-$np.safetensors" \
        "$dir/dtype-$np.safetensors"
    cases=$((cases + 1))
    if cmp -s "$dir/hook-$np.safetensors" "$dir/fp32-$np.safetensors"; then
        echo "FAIL the hook changed nothing: its bytes are FP32 DDP's ($np ranks)"
        failures=$((failures + 1))
    else
        echo "ok   the hook's bytes differ from FP32 DDP's ($np ranks)"
    fi
done
"$worker" --help >"$dir/help" 2>&1
dp_check_outcome "--help lists it" ok $? "$dir/help" "bf16-compress"
echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
