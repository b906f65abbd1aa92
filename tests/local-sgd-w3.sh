# Local SGD (--average-every) on 3 ranks: K = 1 as DDP, replicas one model only after each
# averaging, resume at an averaging, the divergence by hand (tests/test_local_sgd.c); a hang
# fails by timeout.
. "$srcdir/tests/common.sh"
dp_mpirun 300 3 "$top_builddir/tests/test_local_sgd"
