# The strategy through its hooks against MPI_Allreduce, and bucket hooks, on 2 rank(s); a hang fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 120 2 "$top_builddir/tests/test_strategy"
