# The equivalence test through the whole CUDA backend on the fake CUDA runtime: two ranks, a
# fake GPU each, every all-reduce algorithm (staged through page-locked host memory, or nccl
# on device memory), against one rank; then the ZeRO stages (tests/test_zero.c): their shards,
# buckets and gathered parameters in device memory, staged or on nccl; then local SGD
# (tests/test_local_sgd.c), its averaging staged or on nccl; then --exact. Device memory is
# unreadable from the host, so an algorithm or a staging step that touched it directly would
# crash. Exits 77 where not built.
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
