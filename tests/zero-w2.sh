# The ZeRO stages on 2 ranks: against DDP and one rank, bitwise ring DDP, checkpoints across
# stages and world sizes, the replica and non-finite checks (tests/test_zero.c).
. "$srcdir/tests/common.sh"
dp_mpirun 300 2 "$top_builddir/tests/test_zero"
