# Rank groups and --allreduce hier on simulated node layouts, every inner algorithm, against MPI's collectives on 4 rank(s) (oversubscribed beyond the cores); a hang fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 300 4 "$top_builddir/tests/test_hier"
