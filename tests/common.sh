# Sourced by the shell tests: how to start W ranks so that a hang fails instead of blocking.
# make check exports srcdir, top_builddir and MPIRUN; defaults let a test run by hand too.
: "${srcdir:=.}" "${top_builddir:=.}" "${MPIRUN:=mpirun}"
. "$srcdir/scripts/mpi-env.sh"
# Oversubscribed ranks pinned to the same core would take turns; Check must not fork after MPI_Init.
export OMPI_MCA_hwloc_base_binding_policy=none CK_FORK=no
# BLAS threads per rank where a test's bits depend on them: the BLAS-core matrix sets
# DP_TEST_THREADS (scripts/check-blas-cores.sh); 1 otherwise, whatever the machine's cores.
dp_threads=${DP_TEST_THREADS:-1}

# dp_mpirun SECONDS NP PROGRAM [ARGS...]: PROGRAM on NP ranks, killed after SECONDS.
dp_mpirun() {
    limit=$1 np=$2
    shift 2
    timeout --kill-after=5 "$limit" "$MPIRUN" -np "$np" "$@"
}

# dp_check_outcome NAME WANT STATUS OUTPUT PHRASE: WANT is ok (exit 0) or fail (non-zero,
# and not a timeout's 124 or above); the file OUTPUT must contain PHRASE. Prints one line
# and counts into the caller's cases and failures.
dp_check_outcome() {
    cases=$((cases + 1))
    if { [ "$2" = ok ] && [ "$3" -ne 0 ]; } || { [ "$2" = fail ] && { [ "$3" -eq 0 ] || [ "$3" -ge 124 ]; }; }; then
        echo "FAIL $1: exit status $3 (want $2, promptly)"
        sed 's/^/    /' "$4"
        failures=$((failures + 1))
    elif ! grep -F -q -- "$5" "$4"; then
        echo "FAIL $1: output lacks '$5':"
        sed 's/^/    /' "$4"
        failures=$((failures + 1))
    else
        echo "ok   $1 (exit $3): $(grep -F -m1 -- "$5" "$4")"
    fi
}

# dp_fail_case NAME [OUTPUT]: prints a failed case (and OUTPUT, indented, when it exists) and
# counts it into the caller's failures.
dp_fail_case() {
    echo "FAIL $1"
    [ -f "${2:-}" ] && sed 's/^/    /' "$2"
    failures=$((failures + 1))
}

# dp_check_same_bits NAME A B: the files A and B must be equal byte for byte. Prints one line
# and counts into the caller's cases and failures.
dp_check_same_bits() {
    cases=$((cases + 1))
    if cmp -s "$2" "$3"; then
        echo "ok   $1"
    else
        echo "FAIL $1: $2 and $3 differ"
        failures=$((failures + 1))
    fi
}
