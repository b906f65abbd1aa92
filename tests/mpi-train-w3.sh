# The equivalence test on 3 ranks (oversubscribed where there are fewer cores).
. "$srcdir/tests/common.sh"
dp_mpirun 300 3 "$top_builddir/tests/test_mpi_train"
