# Every algorithm's requests against MPI's collectives on 6 rank(s) (oversubscribed beyond the cores); a hang fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 300 6 "$top_builddir/tests/test_requests"
