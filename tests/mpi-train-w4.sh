# The equivalence test on 4 ranks (oversubscribed where there are fewer cores).
. "$srcdir/tests/common.sh"
dp_mpirun 300 4 "$top_builddir/tests/test_mpi_train"
