# --grad-dtype bf16's reductions, every host algorithm, against MPI_Allreduce of the bf16-rounded inputs on 3 ranks; a hang fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 300 3 "$top_builddir/tests/test_bf16_comm"
