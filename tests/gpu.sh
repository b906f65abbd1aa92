# The CUDA backend against the CPU backend on one rank, then its fused GEMMs (cuBLASLt
# epilogues); exits 77 (skip) without a GPU.
. "$srcdir/tests/common.sh"
dp_mpirun 600 1 "$top_builddir/tests/test_gpu" && dp_mpirun 300 1 "$top_builddir/tests/test_epilogues"
