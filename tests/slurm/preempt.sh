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
    for phrase in "SIGUSR1 received: passing SIGUSR1 to the ranks" "preempted: SIGUSR1 reached a rank" \
        "requeueing job $id" "restart 1, checkpoints in dptrain-$id.ckpt" "continuing bit-exactly" "summary:"; do
        grep -qF -- "$phrase" "$out" || { fail "$name: job $id ($state, $restarts restarts): output lacks '$phrase'"; show "$out"; return; }
    done
    if [ "$state" != COMPLETED ] || [ "$restarts" != 1 ]; then
        fail "$name: job $id ended $state after $restarts restarts (want COMPLETED after 1)"
        show "$out"
    elif ! cmp -s "$reference" "$cluster/jobs/$name.safetensors"; then
        fail "$name: the resumed job's parameters differ from the uninterrupted job's ($reference)"
    else
        pass "$name: job $id: every rank stopped after step $(sed -n "s/^preempted: .* stopped after step \([0-9]*\) .*/\1/p" "$out"); requeued, resumed at $(sed -n 's/^resume: .* at step \([0-9]*\):.*/\1/p' "$out"), COMPLETED with parameters bitwise the uninterrupted job's"
    fi
}
