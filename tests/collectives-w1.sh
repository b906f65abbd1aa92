# Every collective against MPI's own on 1 rank; a hang fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 120 1 "$top_builddir/tests/test_collectives"
