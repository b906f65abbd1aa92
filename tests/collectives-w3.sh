# Every collective against MPI's own on 3 ranks (oversubscribed where there are fewer cores); a hang fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 120 3 "$top_builddir/tests/test_collectives"
