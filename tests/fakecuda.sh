# The CUDA backend on the fake CUDA runtime (tests/fakecuda/, configure --enable-fake-cuda):
# the runtime's own rules and the backend's error paths, then the whole GPU suite (every
# operation against the CPU backend, training against the CPU) on one rank and on two ranks
# with a fake GPU each. Leaks of device memory fail the run. Exits 77 where not built.
. "$srcdir/tests/common.sh"
fake="$top_builddir/tests/fakecuda"
[ -x "$fake/test_gpu" ] || { echo "fake CUDA tests not built (configure --enable-fake-cuda needs the CUDA headers)"; exit 77; }
status=0
# Check forks a child per test here (no MPI): the crash test needs it, and needs the SIGSEGV
# itself, not AddressSanitizer's report of it (configure --enable-sanitizers).
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0" CK_FORK=yes FAKECUDA_DEVICES=fakeA "$fake/test_fakecuda" || status=1
export FAKECUDA_CHECK_LEAKS=1
# The backend test table with the fake GPU beside the CPU.
FAKECUDA_DEVICES=fakeA "$fake/test_backend_ops" || status=1
FAKECUDA_DEVICES=fakeA dp_mpirun 300 1 "$fake/test_gpu" || status=1
dp_mpirun 300 2 sh -c 'FAKECUDA_DEVICES="fake$OMPI_COMM_WORLD_RANK" exec "$0"' "$fake/test_gpu" || status=1
# The device-choice suite with one fake GPU visible: the branches a GPU machine takes.
FAKECUDA_DEVICES=fakeA dp_mpirun 120 1 "$fake/test_device" || status=1
exit $status
