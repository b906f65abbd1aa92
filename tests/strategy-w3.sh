# The strategy through its hooks against MPI_Allreduce, and bucket hooks, on 3 rank(s); a hang fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 120 3 "$top_builddir/tests/test_strategy"
