# Checkpoints, resume (also on fewer ranks), replica and non-finite checks on 3 ranks.
. "$srcdir/tests/common.sh"
dp_mpirun 300 3 "$top_builddir/tests/test_reliability"
