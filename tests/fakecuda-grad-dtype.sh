# --grad-dtype bf16 through the CUDA backend on the fake CUDA runtime, two ranks with a fake GPU
# each: the host algorithms on gradients staged through page-locked memory, and nccl on device
# memory (rounded by the conversion kernels, summed by the fake NCCL's ncclBfloat16, each
# reduction step rounded to bf16 as NCCL's), with buckets and ZeRO 1-3 through both: within 1e-2
# of FP32 reductions, replicas bitwise (test_mpi_train's grad-dtype case). Exits 77 where not built.
. "$srcdir/tests/common.sh"
fake="$top_builddir/tests/fakecuda"
[ -x "$fake/test_mpi_train" ] || { echo "fake CUDA tests not built"; exit 77; }
export DP_TEST_DEVICE=cuda FAKECUDA_CHECK_LEAKS=1 CK_RUN_CASE=grad-dtype
dp_mpirun 300 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0"' "$fake/test_mpi_train"
