# The equivalence test through the whole CUDA backend on the fake CUDA runtime: two ranks, a
# fake GPU each, every all-reduce algorithm (staged through page-locked host memory, or nccl
# on device memory), against one rank; then the ZeRO stages (tests/test_zero.c): their shards,
# buckets and gathered parameters in device memory, staged or on nccl; then local SGD
# (tests/test_local_sgd.c), its averaging staged or on nccl; then --exact. Device memory is
# unreadable from the host, so an algorithm or a staging step that touched it directly would
# crash. Last, --allreduce auto (the default) takes nccl on the fake GPUs where the build has
# it, and the host table for --exact, one rank and the CPU. Exits 77 where not built.
. "$srcdir/tests/common.sh"
fake="$top_builddir/tests/fakecuda"
[ -x "$fake/test_mpi_train" ] || { echo "fake CUDA tests not built"; exit 77; }
export DP_TEST_DEVICE=cuda FAKECUDA_CHECK_LEAKS=1
dp_mpirun 600 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0"' "$fake/test_mpi_train" || exit 1
dp_mpirun 300 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0"' "$fake/test_zero" || exit 1
dp_mpirun 300 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0"' "$fake/test_local_sgd" || exit 1
# --exact with its accumulator in device memory (tests/fakecuda-exact.sh has the rest): one fake
# GPU and two give the same bits, with the staged mpi and ring; nccl, which sums GPU memory
# only, is refused by name.
worker="$fake/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-fakecuda-exact-XXXXXX")
trap 'rm -rf "$dir"' EXIT
exact="--device cuda --data synthetic:500,12,3 --model linear(16,bias=0),batchnorm,relu,dropout(0.2),linear(3) --batch 42 --steps 30 --exact --exact-shard 8"
on_fake_gpus() {
    np=$1
    shift
    dp_mpirun 120 "$np" sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "$worker" "$@"
}
# shellcheck disable=SC2086
on_fake_gpus 1 $exact --save "$dir/w1.safetensors" >"$dir/out" 2>&1 || { cat "$dir/out"; exit 1; }
for algorithm in mpi ring; do
    # shellcheck disable=SC2086
    on_fake_gpus 2 $exact --allreduce "$algorithm" --save "$dir/w2.safetensors" >"$dir/out" 2>&1 || { cat "$dir/out"; exit 1; }
    cmp -s "$dir/w1.safetensors" "$dir/w2.safetensors" || { echo "FAIL --exact on fake GPUs: W=2 ($algorithm) differs from W=1"; exit 1; }
    echo "ok   --exact on fake GPUs: W=2 ($algorithm) bitwise W=1"
done
if dp_mpirun 60 1 "$worker" --data synthetic:50,4,2 --layers 4,2 --allreduce none 2>&1 | grep -q 'on GPU memory: nccl'; then
    # shellcheck disable=SC2086
    on_fake_gpus 2 $exact --allreduce nccl >"$dir/out" 2>&1 && { echo "FAIL --exact with nccl was not refused"; exit 1; }
    grep -q "error: --exact all-reduces its digits in host memory, which --allreduce nccl cannot sum" "$dir/out" ||
        { echo "FAIL --exact with nccl: unexpected output"; cat "$dir/out"; exit 1; }
    echo "ok   --exact with nccl refused"
fi
# --allreduce auto, the default: NCCL on 2 fake GPUs (saying why), the same parameters as naming
# nccl; --exact keeps the host table; one rank reduces nothing; the CPU takes the table.
plain="--device cuda --data synthetic:300,8,3 --layers 8,16,3 --batch 30 --steps 10 --log-every 0"
# auto_chose NAME PHRASE: the banner of $dir/NAME says PHRASE.
auto_chose() {
    grep -qF -- "$2" "$dir/$1" || { echo "FAIL --allreduce auto ($1): the banner lacks '$2'"; cat "$dir/$1"; exit 1; }
    echo "ok   --allreduce auto ($1): $2"
}
if dp_mpirun 60 1 "$worker" --data synthetic:50,4,2 --layers 4,2 --allreduce none 2>&1 | grep -q 'on GPU memory: nccl'; then
    # shellcheck disable=SC2086
    on_fake_gpus 2 $plain --save "$dir/auto.safetensors" >"$dir/auto" 2>&1 || { cat "$dir/auto"; exit 1; }
    auto_chose auto "all-reduce nccl (auto: every rank computes on a GPU and this build has NCCL)"
    grep -qF "all-reduce nccl directly on GPU memory" "$dir/auto" || { echo "FAIL auto's gradients not on nccl"; cat "$dir/auto"; exit 1; }
    # shellcheck disable=SC2086
    on_fake_gpus 2 $plain --allreduce nccl --save "$dir/nccl.safetensors" >"$dir/out" 2>&1 || { cat "$dir/out"; exit 1; }
    cmp -s "$dir/auto.safetensors" "$dir/nccl.safetensors" || { echo "FAIL auto on fake GPUs differs from nccl"; exit 1; }
    echo "ok   --allreduce auto on 2 fake GPUs: bitwise --allreduce nccl"
    # shellcheck disable=SC2086
    on_fake_gpus 2 $exact >"$dir/auto-exact" 2>&1 || { cat "$dir/auto-exact"; exit 1; }
    auto_chose auto-exact "all-reduce auto (the host table by world and message size: --exact all-reduces its int64 digits in host memory)"
else
    # shellcheck disable=SC2086
    on_fake_gpus 2 $plain >"$dir/auto" 2>&1 || { cat "$dir/auto"; exit 1; }
    auto_chose auto "all-reduce auto (the host table by world and message size: this build has no NCCL)"
fi
# shellcheck disable=SC2086
on_fake_gpus 1 $plain >"$dir/auto-w1" 2>&1 || { cat "$dir/auto-w1"; exit 1; }
auto_chose auto-w1 "all-reduce auto (the host table by world and message size: one rank reduces nothing)"
# shellcheck disable=SC2086
on_fake_gpus 2 $plain --device cpu >"$dir/auto-cpu" 2>&1 || { cat "$dir/auto-cpu"; exit 1; }
auto_chose auto-cpu "all-reduce auto (the host table by world and message size: the ranks compute on CPUs)"
