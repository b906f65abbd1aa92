# int64 reductions (--exact's digits), every host algorithm, against MPI_Allreduce on MPI_INT64_T on 2 ranks; a hang fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 300 2 "$top_builddir/tests/test_int64_comm"
