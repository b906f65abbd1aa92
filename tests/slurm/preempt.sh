# Sourced by check-slurm.sh: preemption on the real cluster. expect_requeued_resume NAME CLUSTER
# REFERENCE SBATCH_ARGS... submits slurm/train.sbatch, waits until its first checkpoint, sends
# the batch shell SIGUSR1 as --signal=B:USR1@120 does before the time limit (scancel --batch
# --signal), and then the job must checkpoint, requeue itself, resume from the checkpoint and
# complete with a --save file ($work/CLUSTER/jobs/NAME.safetensors) equal to REFERENCE bit for
# bit. Uses check-slurm.sh's slurm, pass, fail and show.
expect_requeued_resume() {
    local name=$1 cluster=$work/$2 reference=$3 id out state restarts deadline
    shift 3
    mkdir -p "$cluster/jobs"
    id=$(slurm "$cluster" sbatch --parsable --chdir="$cluster/jobs" "$@" \
        --checkpoint-every 50 --save "$cluster/jobs/$name.safetensors") || { fail "$name: not submitted"; return; }
    out=$cluster/jobs/dptrain-$id.out
    deadline=$((SECONDS + 120))
    until compgen -G "$cluster/jobs/dptrain-$id.ckpt/step-*.safetensors" >/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ] || [ -z "$(slurm "$cluster" squeue -h -j "$id" 2>/dev/null)" ]; then
            fail "$name: job $id wrote no checkpoint in 120 s"
            show "$out"
            slurm "$cluster" scancel "$id"
            return
        fi
        sleep 0.2
    done
    slurm "$cluster" scancel --batch --signal=USR1 "$id"
    slurm_wait_job "$cluster" "$id" 300
    state=$(slurm_job_field "$cluster" "$id" JobState)
    restarts=$(slurm_job_field "$cluster" "$id" Restarts)
    expect_restarted_once "$name" "$cluster" "$id" "$reference" \
        "every rank stopped after step $(sed -n "s/^preempted: .* stopped after step \([0-9]*\) .*/\1/p" "$out")" \
        "SIGUSR1 received: passing SIGUSR1 to the ranks" "preempted: SIGUSR1 reached a rank" "requeueing job $id" \
        "restart 1, checkpoints in dptrain-$id.ckpt"
}

# expect_restarted_once NAME CLUSTER_DIR ID REFERENCE WHAT PHRASE...: job ID (its output holding
# every PHRASE) ended COMPLETED after one restart, continuing bit-exactly, with a --save file
# ($CLUSTER_DIR/jobs/NAME.safetensors) equal to REFERENCE; WHAT says what stopped it first.
expect_restarted_once() {
    local name=$1 cluster=$2 id=$3 reference=$4 what=$5 out=$2/jobs/dptrain-$3.out state restarts phrase
    shift 5
    state=$(slurm_job_field "$cluster" "$id" JobState)
    restarts=$(slurm_job_field "$cluster" "$id" Restarts)
    for phrase in "$@" "continuing bit-exactly" "summary:"; do
        grep -qF -- "$phrase" "$out" || { fail "$name: job $id ($state, $restarts restarts): output lacks '$phrase'"; show "$out"; return; }
    done
    if [ "$state" != COMPLETED ] || [ "$restarts" != 1 ]; then
        fail "$name: job $id ended $state after $restarts restarts (want COMPLETED after 1)"
        show "$out"
    elif ! cmp -s "$reference" "$cluster/jobs/$name.safetensors"; then
        fail "$name: the resumed job's parameters differ from the uninterrupted job's ($reference)"
    else
        pass "$name: job $id: $what; requeued, resumed at $(sed -n 's/^resume: .* at step \([0-9]*\):.*/\1/p' "$out"), COMPLETED with parameters bitwise the uninterrupted job's"
    fi
}

# A rank of job ID (a dp_worker process whose environment holds SLURM_JOB_ID=ID), or nothing.
job_rank_pid() { # ID
    local environ pid
    for environ in /proc/[0-9]*/environ; do
        pid=${environ#/proc/}
        pid=${pid%/environ}
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dp_worker ] || continue
        { tr '\0' '\n' <"$environ" | grep -qx "SLURM_JOB_ID=$1"; } 2>/dev/null && { echo "$pid"; return; }
    done
}

# expect_crash_restart NAME CLUSTER REFERENCE MAX SBATCH_ARGS...: submits slurm/train.sbatch with
# --max-restarts MAX, waits until its first checkpoint and kills one of its ranks (SIGKILL, as a
# crashed process or a lost node). With MAX > 0 the job must requeue itself once, resume from its
# checkpoint and complete with a --save file equal to REFERENCE bit for bit; with MAX 0 it must
# give up and end FAILED saying so.
expect_crash_restart() {
    local name=$1 cluster=$work/$2 reference=$3 max=$4 id out state restarts deadline pid
    shift 4
    mkdir -p "$cluster/jobs"
    id=$(slurm "$cluster" sbatch --parsable --chdir="$cluster/jobs" "$@" --max-restarts "$max" \
        --checkpoint-every 50 --save "$cluster/jobs/$name.safetensors") || { fail "$name: not submitted"; return; }
    out=$cluster/jobs/dptrain-$id.out
    deadline=$((SECONDS + 120))
    until compgen -G "$cluster/jobs/dptrain-$id.ckpt/step-*.safetensors" >/dev/null && pid=$(job_rank_pid "$id") &&
        [ -n "$pid" ]; do
        if [ "$SECONDS" -ge "$deadline" ] || [ -z "$(slurm "$cluster" squeue -h -j "$id" 2>/dev/null)" ]; then
            fail "$name: job $id wrote no checkpoint in 120 s, or no rank of it was found"
            show "$out"
            slurm "$cluster" scancel "$id"
            return
        fi
        sleep 0.2
    done
    kill -KILL "$pid"
    slurm_wait_job "$cluster" "$id" 300
    state=$(slurm_job_field "$cluster" "$id" JobState)
    restarts=$(slurm_job_field "$cluster" "$id" Restarts)
    if [ "$max" -eq 0 ]; then
        if [ "$state" = FAILED ] && [ "$restarts" = 0 ] && grep -qF "giving up (--max-restarts 0)" "$out"; then
            pass "$name: job $id: a rank killed, FAILED without a restart: $(grep -F -m1 'giving up' "$out" | cut -c1-140)"
        else
            fail "$name: job $id ended $state after $restarts restarts (want FAILED, 0, giving up)"
            show "$out"
        fi
        return
    fi
    expect_restarted_once "$name" "$cluster" "$id" "$reference" "rank $pid killed after the first checkpoint" \
        "requeueing job $id (restart 1 of --max-restarts $max after failures)" \
        "restart 1, checkpoints in dptrain-$id.ckpt (1 of --max-restarts $max"
}
