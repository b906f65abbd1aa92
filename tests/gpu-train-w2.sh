# The equivalence test on 2 ranks sharing one GPU (--share-gpu), every all-reduce algorithm
# including nccl, then the ZeRO stages (tests/test_zero.c); exits 77 (skip) without a GPU.
# NCCL refuses two ranks on one GPU of one host, so each rank gets its own NCCL_HOSTID: NCCL
# then treats them as two hosts and moves the data over loopback sockets.
. "$srcdir/tests/common.sh"
export DP_TEST_DEVICE=cuda NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
dp_mpirun 900 2 sh -c 'NCCL_HOSTID="dptrain-test-rank-$OMPI_COMM_WORLD_RANK" exec "$0"' \
    "$top_builddir/tests/test_mpi_train" || exit $?
dp_mpirun 600 2 sh -c 'NCCL_HOSTID="dptrain-test-rank-$OMPI_COMM_WORLD_RANK" exec "$0"' \
    "$top_builddir/tests/test_zero"
