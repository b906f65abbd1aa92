# The equivalence test through the whole CUDA backend on the fake CUDA runtime: two ranks, a
# fake GPU each, every all-reduce algorithm (staged through page-locked host memory, or nccl
# on device memory), against one rank; then the ZeRO stages (tests/test_zero.c): their shards,
# buckets and gathered parameters in device memory, staged or on nccl; then local SGD
# (tests/test_local_sgd.c), its averaging staged or on nccl. Device memory is
# unreadable from the host, so an algorithm or a staging step that touched it directly would
# crash. Exits 77 where not built.
. "$srcdir/tests/common.sh"
fake="$top_builddir/tests/fakecuda"
[ -x "$fake/test_mpi_train" ] || { echo "fake CUDA tests not built"; exit 77; }
export DP_TEST_DEVICE=cuda FAKECUDA_CHECK_LEAKS=1
dp_mpirun 600 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0"' "$fake/test_mpi_train" || exit 1
dp_mpirun 300 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0"' "$fake/test_zero" || exit 1
dp_mpirun 300 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0"' "$fake/test_local_sgd"
