# The equivalence test on 2 ranks (oversubscribed where there are fewer cores).
. "$srcdir/tests/common.sh"
dp_mpirun 300 2 "$top_builddir/tests/test_mpi_train"
