# dp_gemm_bench on the CPU backend: one line per GEMM of a training step (2 forward, 2 weight
# gradients, 1 input gradient for 2 layers, in the model's order) and the per-step sum.
. "$srcdir/tests/common.sh"
out=$(mktemp "${TMPDIR:-/tmp}/dptrain-gemm-bench-XXXXXX")
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL $*"; sed 's/^/    /' "$out"; exit 1; }
dp_mpirun 60 1 "$top_builddir/dp_gemm_bench" --device cpu --layers 64,48,16 --batch 40 --repeat 3 >"$out" 2>&1 ||
    fail "dp_gemm_bench exited non-zero"
shapes=$(awk '$1 ~ /^[0-9]+$/ { printf "%s %s %s %s %s;", $2, $3, $4, $5, $6 }' "$out")
[ "$shapes" = "N T 40 48 64;N T 40 16 48;T N 16 48 40;N N 40 48 16;T N 48 64 40;" ] ||
    fail "GEMM shapes '$shapes' are not one step's (forward, then backward last layer first)"
# 2 * 40 rows * (64*48 + 48*16 forward, the same for the weight gradients, 48*16 input gradient)
grep -q '^gemm_ms_per_step=[0-9.]* gemm_gflop_per_step=0.000676$' "$out" ||
    fail "no per-step total of 675840 FLOP"
dp_mpirun 60 1 "$top_builddir/dp_gemm_bench" --device cpu --layers 64,16 >"$out" 2>&1 && fail "no --batch accepted"
grep -q -- "--batch are required" "$out" || fail "missing --batch not named"
echo "ok   dp_gemm_bench: the step's 5 GEMM shapes and their total"
