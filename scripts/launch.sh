#!/bin/bash
# Starts dp_worker on this machine with mpirun and sane defaults, printing the exact line:
#   scripts/launch.sh [-n RANKS] [mpirun options] -- [dp_worker options]
# RANKS defaults to one per GPU when GPUs are present, else one per core. Each rank is bound to
# its own cores (cores / RANKS of them: --map-by slot:PE=N --bind-to core), where dp_worker
# runs as many BLAS threads, unless the mpirun options place ranks themselves (--map-by,
# --bind-to, a hostfile or host list, a rankfile). More ranks than cores get --oversubscribe,
# --bind-to none and yielding ranks; root gets --allow-run-as-root.
# DP_WORKER names the binary (default: build/dp_worker, then dp_worker on the PATH).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)

die() {
    echo "launch.sh: $*" >&2
    exit 2
}

gpu_count() {
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
        nvidia-smi -L | grep -c '^GPU '
    elif [ -d /proc/driver/nvidia/gpus ]; then
        find /proc/driver/nvidia/gpus -mindepth 1 -maxdepth 1 | wc -l
    else
        echo 0
    fi
}

find_worker() {
    if [ -n "${DP_WORKER:-}" ]; then
        echo "$DP_WORKER"
    elif [ -x "$top/build/dp_worker" ]; then
        echo "$top/build/dp_worker"
    else
        command -v dp_worker || echo "$top/build/dp_worker"
    fi
}

cores=$(nproc)
gpus=$(gpu_count)
if [ "$gpus" -gt 0 ]; then ranks=$gpus; else ranks=$cores; fi
if [ "${1:-}" = "-n" ]; then
    [ $# -ge 2 ] || die "-n needs a rank count"
    ranks=$2
    shift 2
    case $ranks in '' | *[!0-9]* | 0*) die "-n '$ranks': the rank count must be a positive integer" ;; esac
fi

mpirun_options=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    mpirun_options+=("$1")
    shift
done
[ $# -eq 0 ] || shift

worker=$(find_worker)
[ -x "$worker" ] || die "no dp_worker binary at '$worker': build with scripts/build.sh or set DP_WORKER"

# 1 when the mpirun options already decide where ranks run (then their placement stands).
places_ranks() {
    for option in "${mpirun_options[@]}"; do
        case $option in
            --map-by | --bind-to | --hostfile | --machinefile | --host | -H | --rankfile | --cpus-per-proc | --cpu-set) return 0 ;;
        esac
    done
    return 1
}

line=(mpirun -np "$ranks")
[ "$(id -u)" -ne 0 ] || line+=(--allow-run-as-root)
if [ "$ranks" -gt "$cores" ]; then
    # Busy-polling ranks that share a core take turns by time slice: milliseconds per message.
    line+=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
elif ! places_ranks; then
    # Disjoint cores per rank: its BLAS threads never compete with another rank's.
    line+=(--map-by "slot:PE=$((cores / ranks))" --bind-to core)
fi
line+=("${mpirun_options[@]}" "$worker" "$@")

echo "launch.sh: $ranks rank(s) on $cores core(s) and $gpus GPU(s): $(printf '%q ' "${line[@]}")"
exec "${line[@]}"
