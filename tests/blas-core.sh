# OpenBLAS's generic fallback corrected (issue 20), on any CPU with AVX2: a shim makes
# openblas_get_corename() answer "Prescott" as on a CPU OpenBLAS does not know. The run must
# name the corrected core and train to the same parameters as a run given that core by hand;
# a user's own OPENBLAS_CORETYPE is left alone; a library that keeps saying Prescott after the
# correction does not make dp_worker run itself again forever.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
shim="$top_builddir/tests/openblas_corename_shim.so"
grep -q '^#define DP_BLAS_OPENBLAS 1' "$top_builddir/config.h" || { echo "SKIP: the BLAS is not OpenBLAS"; exit 77; }
grep -q -w avx2 /proc/cpuinfo || { echo "SKIP: no AVX2 on this CPU, so nothing to correct"; exit 77; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-blas-core-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
# A sanitizer build's runtime must otherwise come first among the preloaded libraries.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
unset OPENBLAS_CORETYPE DPTRAIN_OPENBLAS_CORE_WAS DP_SHIM_ALWAYS_PRESCOTT
run="--device cpu --threads 1 --data synthetic:600,64,5 --layers 64,96,96,5 --batch 60 --steps 20 --seed 3"

# shellcheck disable=SC2086
dp_mpirun 60 2 -x LD_PRELOAD="$shim" "$worker" $run --save "$dir/corrected.safetensors" >"$dir/out" 2>&1
dp_check_outcome "generic Prescott corrected" ok $? "$dir/out" "(set by dptrain: OpenBLAS chose the generic Prescott"
core=$(sed -n 's/.*OpenBLAS [^,]*, core \([A-Za-z0-9]*\) (set by dptrain.*/\1/p' "$dir/out" | head -n 1)

# shellcheck disable=SC2086
OPENBLAS_CORETYPE=${core:-none} dp_mpirun 60 2 "$worker" $run --save "$dir/by-hand.safetensors" >"$dir/out" 2>&1
dp_check_outcome "the core set by hand" ok $? "$dir/out" "core ${core:-none} (OPENBLAS_CORETYPE=${core:-none})"
dp_check_same_bits "the corrected run's parameters are those of OPENBLAS_CORETYPE=${core:-none}" \
    "$dir/corrected.safetensors" "$dir/by-hand.safetensors"

# shellcheck disable=SC2086
OPENBLAS_CORETYPE=Prescott dp_mpirun 60 2 -x LD_PRELOAD="$shim" "$worker" $run >"$dir/out" 2>&1
dp_check_outcome "the user's OPENBLAS_CORETYPE wins" ok $? "$dir/out" "core Prescott (OPENBLAS_CORETYPE=Prescott)"

# shellcheck disable=SC2086
DP_SHIM_ALWAYS_PRESCOTT=1 dp_mpirun 60 2 -x LD_PRELOAD="$shim" "$worker" $run >"$dir/out" 2>&1
dp_check_outcome "corrected once, never again" ok $? "$dir/out" "core Prescott (set by dptrain: OpenBLAS chose the generic Prescott"

echo "blas core: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
