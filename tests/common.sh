# Sourced by the shell tests: how to start W ranks so that a hang fails instead of blocking.
# make check exports srcdir, top_builddir and MPIRUN; defaults let a test run by hand too.
: "${srcdir:=.}" "${top_builddir:=.}" "${MPIRUN:=mpirun}"
. "$srcdir/scripts/mpi-env.sh"
# Oversubscribed ranks pinned to the same core would take turns; Check must not fork after MPI_Init.
export OMPI_MCA_hwloc_base_binding_policy=none CK_FORK=no

# dp_mpirun SECONDS NP PROGRAM [ARGS...]: PROGRAM on NP ranks, killed after SECONDS.
dp_mpirun() {
    limit=$1 np=$2
    shift 2
    timeout --kill-after=5 "$limit" "$MPIRUN" -np "$np" "$@"
}
