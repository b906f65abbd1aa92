#!/bin/sh
# A 2-rank training run under valgrind memcheck (in build/, or BUILD_DIR): synthetic data,
# the ring all-reduce, replica checks, periodic checkpoints and a final save, then a resume
# from the checkpoint. Fails on any memcheck error or definite leak outside Open MPI's own
# libraries, which tests/valgrind-mpi.supp names.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh" valgrind
"$top/scripts/build.sh"
. "$top/scripts/mpi-env.sh"
# Plugins stay loaded, so stacks through them name their library and match the suppressions.
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_mca_base_component_disable_dlclose=1 \
    PMIX_MCA_mca_base_component_disable_dlclose=1
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-valgrind-XXXXXX")
trap 'rm -rf "$dir"' EXIT

# memcheck NAME [dp_worker options...]: one 2-rank run; its errors go to NAME.RANK.log.
memcheck() {
    name=$1
    shift
    status=0
    timeout --kill-after=5 600 mpirun -np 2 valgrind -q --error-exitcode=99 \
        --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
        --num-callers=40 --suppressions="$top/tests/valgrind-mpi.supp" \
        --log-file="$dir/$name.%q{OMPI_COMM_WORLD_RANK}.log" \
        "$top/${BUILD_DIR:-build}/dp_worker" --quiet --data synthetic:600,20,4 --layers 20,16,4 --batch 64 \
        --allreduce ring --check-replicas 2 "$@" >"$dir/$name.out" 2>&1 || status=$?
    if [ "$status" -ne 0 ] || [ -n "$(cat "$dir/$name".*.log)" ]; then
        echo "valgrind $name: FAILED (exit status $status)"
        cat "$dir/$name.out" "$dir/$name".*.log | head -n 200
        exit 1
    fi
    echo "valgrind $name: clean ($(tail -n 1 "$dir/$name.out"))"
}

memcheck train --steps 6 --checkpoint-dir "$dir/checkpoints" --checkpoint-every 3 \
    --save "$dir/final.safetensors"
memcheck resume --steps 9 --resume "$dir/checkpoints"
