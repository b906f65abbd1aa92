# The kernels (every .cu file of src/backend) as the GPU will run them, where nvcc exists (exit
# 77 elsewhere): compiled with ptxas's spill warnings and every nvcc and host-compiler warning
# as an error, and their PTX read for each target: no fused multiply-add (fma.rn.f32),
# flush-to-zero or approximate division, reciprocal, square root, exp2 or log2 in single
# precision anywhere, so elementwise results equal the CPU backend's (double division's
# rcp.approx.ftz.f64 seed is part of its correctly rounded algorithm); and no double-precision
# FMA in kernels that call no libm function (their sums are emulated on the host exactly,
# tests/fakecuda/kernels.c). --exact's kernels (cuda_exact_kernels.cu) more strictly: no FMA of
# any width, since each step of theirs is an exact addition or a rounding of its own
# (src/backend/exact_math.h), as the host loops'.
. "$srcdir/tests/common.sh"
[ -n "${NVCC:-}" ] || { echo "no nvcc: the CUDA backend is not built"; exit 77; }
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
sources=$(ls "$srcdir"/src/backend/*.cu)
for source in $sources; do
    # shellcheck disable=SC2086
    $NVCC $DP_NVCC_GENCODE $DP_NVCC_CHECK_FLAGS -Xptxas -warn-spills,-warn-lmem-usage,-Werror -Werror all-warnings \
        -Xcompiler -Werror -c "$source" -o "$work/kernels.o" || { echo "FAIL: $source does not build warning-free"; exit 1; }
done
status=0
for arch in $(printf '%s\n' $DP_NVCC_GENCODE | sed -n 's/^arch=compute_\([0-9a-z]*\),.*/\1/p' | sort -u); do
    : >"$work/bodies"
    for source in $sources; do
        # shellcheck disable=SC2086
        $NVCC -arch=compute_$arch $DP_NVCC_CHECK_FLAGS -ptx "$source" -o "$work/kernels.ptx" || exit 1
        # Each kernel's body: from its .entry line to the closing brace at column 0.
        awk '/\.entry[ \t]/ { name = $NF; sub(/\(.*/, "", name) } name { print name "\t" $0 } /^}/ { name = "" }' \
            "$work/kernels.ptx" >>"$work/bodies"
    done
    kernels=$(cut -f1 "$work/bodies" | sort -u | wc -l)
    [ "$kernels" -ge 9 ] || { echo "FAIL sm_$arch: found $kernels kernels in the PTX"; status=1; }
    if grep -E 'fma\.rn\.f32|\.ftz\.f32|(div|rcp|sqrt)\.(approx|full)(\.ftz)?\.f32|(ex2|lg2)\.approx' "$work/bodies"; then
        echo "FAIL sm_$arch: contraction, flush-to-zero or approximate division in a kernel (above)"
        status=1
    fi
    if grep -E '(mse|count_nonfinite|bias_grad|column_sums|sgd_step|adamw_step|add_partials|bias_act|relu_forward|relu_backward|multiply|accumulate|dropout|bn_[a-z_]*|inverse_std)_kernel.*fma\.rn\.f64' "$work/bodies"; then
        echo "FAIL sm_$arch: a double FMA in a kernel whose sums the host emulates exactly (above)"
        status=1
    fi
    echo "sm_$arch: $kernels kernels, $(grep -c 'fma\.rn\.f64' "$work/bodies") double FMAs (inside exp and log only)"
done
exact="$srcdir/src/backend/cuda_exact_kernels.cu"
for arch in $(printf '%s\n' $DP_NVCC_GENCODE | sed -n 's/^arch=compute_\([0-9a-z]*\),.*/\1/p' | sort -u); do
    # shellcheck disable=SC2086
    $NVCC -arch=compute_$arch $DP_NVCC_CHECK_FLAGS -ptx "$exact" -o "$work/exact.ptx" || exit 1
    kernels=$(grep -c '\.entry' "$work/exact.ptx")
    [ "$kernels" -eq 4 ] || { echo "FAIL sm_$arch: found $kernels of --exact's 4 kernels in the PTX"; status=1; }
    if grep -E 'fma\.|\.ftz\.|\.approx' "$work/exact.ptx"; then
        echo "FAIL sm_$arch: an FMA, flush-to-zero or approximation in --exact's kernels (above)"
        status=1
    fi
    echo "sm_$arch: --exact's $kernels kernels, no FMA"
done
exit $status
