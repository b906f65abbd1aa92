# Every collective against MPI's own on 2 ranks; a hang fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 120 2 "$top_builddir/tests/test_collectives"
