# Rank groups and --allreduce hier on simulated node layouts, every inner algorithm, against MPI's collectives on 3 rank(s) (oversubscribed beyond the cores); a hang fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 300 3 "$top_builddir/tests/test_hier"
