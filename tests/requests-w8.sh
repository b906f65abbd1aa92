# Every algorithm's requests against MPI's collectives on 8 rank(s) (oversubscribed beyond the cores); a hang fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 300 8 "$top_builddir/tests/test_requests"
