# Sourced by train.sbatch and bench.sbatch ($script: the submitted file): checks that this is
# a SLURM job, sets and prints the rendezvous variables, finds the program and launches one
# MPI rank per task.
# The variables mirror the usual PyTorch-style setup; MPI does its own rendezvous (PMIx
# under srun, Open MPI's daemons under mpirun), and dp_worker checks WORLD_SIZE against it.
job_script=$(basename "$script")
if [ -z "${SLURM_JOB_ID:-}" ]; then
    echo "$job_script: not inside a SLURM job (SLURM_JOB_ID is unset): submit it with sbatch, e.g. sbatch slurm/$job_script" >&2
    exit 2
fi
job_dir=$(cd "$(dirname "$script")" && pwd)

# The first node of the allocation; its address when the name does not resolve.
job_master_addr() {
    local first
    first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    if getent hosts "$first" >/dev/null; then
        echo "$first"
    else
        scontrol show node "$first" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2
    fi
}

export MASTER_ADDR=${MASTER_ADDR:-$(job_master_addr)}
# A port per job, so two jobs sharing a first node do not collide.
export MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 40000))}
export WORLD_SIZE=$SLURM_NTASKS
echo "$job_script: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT WORLD_SIZE=$WORLD_SIZE ($SLURM_NTASKS tasks on $SLURM_JOB_NUM_NODES node(s))"

# job_program NAME VARIABLE: the file $VARIABLE names, else NAME in ../build, else NAME on
# the PATH; exits the job with the reason when that is not an executable file.
job_program() {
    job_program_path=${!2:-}
    if [ -z "$job_program_path" ]; then
        job_program_path=$job_dir/../build/$1
        [ -x "$job_program_path" ] || job_program_path=$(command -v "$1" || echo "$job_program_path")
    fi
    if [ ! -f "$job_program_path" ] || [ ! -x "$job_program_path" ]; then
        echo "$job_script: no $1 binary at '$job_program_path': build it (scripts/build.sh) or set $2 to its path" >&2
        exit 2
    fi
}

# job_srun_mpi: the MPI plugin srun starts the ranks with: DP_SRUN_MPI when set (e.g. pmi2, for
# an MPI built with PMI-2), else pmix where `srun --mpi=list` has it; prints nothing where
# neither, and job_launch then uses mpirun (Debian's Open MPI fails under --mpi=pmi2 and none).
job_srun_mpi() {
    if [ -n "${DP_SRUN_MPI:-}" ]; then
        echo "$DP_SRUN_MPI"
    elif srun --mpi=list 2>&1 | grep -qw pmix; then
        echo pmix
    fi
}

# job_launch NAME VARIABLE ARGS...: the program (see job_program) on one rank per task, with
# srun (PMIx; the cluster's task plugin binds each task to its --cpus-per-task cores), or with
# mpirun when DP_LAUNCHER=mpirun or srun has no PMIx (Open MPI reads the allocation itself;
# bound here). GPUs: each rank takes its own of those the job was given (dp_worker binds by
# local rank among the GPUs its node's ranks see). dp_worker
# runs as many BLAS threads as the cores its rank is bound to. The launcher runs in the
# background so that a signal SLURM sends this batch shell (sbatch --signal=B:USR1@120,
# scancel --batch --signal=USR1) reaches the ranks: SIGUSR1 and SIGTERM are passed on to the
# launcher as SIGUSR1, which srun forwards to every task and mpirun to every rank (mpirun
# would end the job on SIGTERM instead). Returns the launcher's exit status.
job_launch() {
    local line status launcher=${DP_LAUNCHER:-srun} plugin
    job_program "$1" "$2"
    shift 2
    if [ "$launcher" = srun ]; then
        plugin=$(job_srun_mpi)
        if [ -z "$plugin" ]; then
            echo "$job_script: srun --mpi=list has no pmix: launching with mpirun, which reads the allocation itself (DP_SRUN_MPI=NAME picks another srun plugin)"
            launcher=mpirun
        fi
    fi
    [ "${SLURM_GPUS_ON_NODE:-0}" = 0 ] ||
        echo "$job_script: $SLURM_GPUS_ON_NODE GPU(s) on this node (${SLURM_JOB_GPUS:+GPUs $SLURM_JOB_GPUS, }${SLURM_GPUS_PER_TASK:+$SLURM_GPUS_PER_TASK per task}): one per rank"
    case $launcher in
        srun) line=(srun --mpi="$plugin" --kill-on-bad-exit=1) ;;
        mpirun)
            # Each rank on its own --cpus-per-task cores, where dp_worker runs that many BLAS threads.
            line=(mpirun -np "$SLURM_NTASKS" --map-by "slot:PE=${SLURM_CPUS_PER_TASK:-1}" --bind-to core)
            [ "$(id -u)" -ne 0 ] || line+=(--allow-run-as-root)
            ;;
        *)
            echo "$job_script: DP_LAUNCHER='$DP_LAUNCHER': use srun (the default) or mpirun" >&2
            exit 2
            ;;
    esac
    line+=("$job_program_path" "$@")
    echo "$job_script: $(printf '%q ' "${line[@]}")"
    trap 'job_forward USR1' USR1
    trap 'job_forward TERM' TERM
    "${line[@]}" &
    job_launcher=$!
    # wait returns early (above 128) when a trapped signal arrives; the launcher still runs.
    while :; do
        status=0
        wait "$job_launcher" || status=$?
        [ "$status" -gt 128 ] && kill -0 "$job_launcher" 2>/dev/null || break
    done
    trap - USR1 TERM
    return "$status"
}

job_forward() { # SIGNAL: what this shell received
    echo "$job_script: SIG$1 received: passing SIGUSR1 to the ranks"
    kill -USR1 "$job_launcher" 2>/dev/null || true
}
