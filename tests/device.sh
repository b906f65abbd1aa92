# The device choice (backend selection, GPU flags, gradient placement) on one rank, any machine.
. "$srcdir/tests/common.sh"
dp_mpirun 120 1 "$top_builddir/tests/test_device"
