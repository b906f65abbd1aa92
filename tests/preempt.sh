# Preemption (--preempt-signal) on 3 ranks under mpirun: SIGUSR1 (or SIGTERM) sent to ONE
# rank mid-run stops every rank after the same step (else the job would hang or abort in
# mismatched collectives), writes that step's checkpoint, writes no --save, exits 75; the
# same command with --resume auto then finishes with bitwise the parameters of an
# uninterrupted run (which itself started with --resume auto on an empty directory). A signal
# arriving while rank 0 writes a checkpoint loses nothing: that checkpoint completes and
# resumes bit-exactly. --resume auto passes over a corrupt newest checkpoint. Under local SGD
# the stop waits for the next averaging.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-preempt-XXXXXX")
trap 'kill -9 $(job_pids) 2>/dev/null; rm -rf "$dir"' EXIT
run="--data synthetic:6000,64,10 --layers 64,512,512,10 --batch 384 --steps 60 --seed 5 --threads $dp_threads --device cpu --log-every 0"
cases=0 failures=0

fail() {
    echo "FAIL $*"
    failures=$((failures + 1))
}

# The dp_worker processes of this test: those whose command line names its directory.
job_pids() {
    for pid in $(pgrep -x dp_worker); do
        { tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$dir" && echo "$pid"; } 2>/dev/null
    done
}
rank_pid() { # the pid of MPI rank $1 of this test's job
    for pid in $(job_pids); do
        { tr '\0' '\n' <"/proc/$pid/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo "$pid"; } 2>/dev/null
    done
}
wait_for() { # PATTERN: until a file matches it (its name in $found) while the job runs
    while kill -0 "$job" 2>/dev/null; do
        found=$(compgen -G "$1" | head -n 1)
        [ -z "$found" ] || return 0
        sleep 0.002
    done
    return 1
}
# train NAME EXTRA...: 3 ranks with checkpoints in $dir/NAME and --save $dir/NAME.safetensors, in
# the background; sets job
train() {
    local name=$1
    shift
    # shellcheck disable=SC2086
    dp_mpirun 300 3 "$worker" $run --checkpoint-dir "$dir/$name" --save "$dir/$name.safetensors" "$@" \
        >"$dir/$name.out" 2>&1 &
    job=$!
}
finish() { # sets status: the job's exit status
    wait "$job"
    status=$?
}
# expect_preempted NAME SIGNAL: exit 75, the preemption line, no --save, no temporaries, and
# the newest checkpoint is of the step the line names, before the last.
expect_preempted() {
    local name=$1 signal=$2 step newest
    cases=$((cases + 1))
    step=$(sed -n "s/^preempted: $signal reached a rank; every rank stopped after step \([0-9]*\) of 60 .*/\1/p" "$dir/$name.out")
    newest=$(find "$dir/$name" -name 'step-*.safetensors' | sort | tail -n 1)
    if [ "$status" -ne 75 ] || [ -z "$step" ]; then
        fail "$name: exit $status (want 75) or no preemption line for $signal"
        sed 's/^/    /' "$dir/$name.out"
    elif [ "$step" -ge 60 ] || [ "$newest" != "$(printf '%s/step-%09d.safetensors' "$dir/$name" "$step")" ]; then
        fail "$name: stopped after step $step, newest checkpoint $newest"
    elif [ -e "$dir/$name.safetensors" ] || compgen -G "$dir/$name/*.tmp.*" >/dev/null; then
        fail "$name: a preempted run left --save or a temporary: $(ls "$dir" "$dir/$name")"
    else
        echo "ok   $name: exit 75 after step $step: $(grep -m1 '^preempted:' "$dir/$name.out")"
    fi
}
# resume_matches NAME [EXTRA...]: the same command with --resume auto (or EXTRA) finishes, and its
# --save equals the uninterrupted run's bit for bit.
resume_matches() {
    local name=$1
    shift
    train "$name" --resume "${@:-auto}"
    finish
    dp_check_outcome "$name: resumed" ok "$status" "$dir/$name.out" "continuing bit-exactly"
    dp_check_same_bits "$name: resumed parameters equal the uninterrupted run's" \
        "$dir/reference.safetensors" "$dir/$name.safetensors"
}

# The uninterrupted run: --resume auto on a missing directory starts afresh.
train reference --resume auto
finish
dp_check_outcome "uninterrupted run, --resume auto on an empty --checkpoint-dir" ok "$status" \
    "$dir/reference.out" "resume: auto: no complete checkpoint in $dir/reference: starting afresh"

# SIGUSR1 to rank 2 only, once it is past a checkpoint: every rank stops, checkpoint, exit 75.
train usr1 --checkpoint-every 10
wait_for "$dir/usr1/step-*.safetensors"
kill -USR1 "$(rank_pid 2)"
finish
expect_preempted usr1 SIGUSR1
resume_matches usr1

# SIGTERM to rank 1 only, as SLURM's preemption sends it (srun delivers it to every task).
train term --checkpoint-every 10
wait_for "$dir/term/step-*.safetensors"
kill -TERM "$(rank_pid 1)"
finish
expect_preempted term SIGTERM
resume_matches term

# During a checkpoint write: rank 0 is stopped while its temporary exists (its name ends in
# the writer's pid), signalled (USR1 to it, TERM to rank 1) and continued; the interrupted
# write must complete and resume bit-exactly, and the run stops after a later step.
# Each write lasts about a millisecond, so on a loaded machine the look can miss all 60: the run
# is then repeated (up to 5 times) until one is caught; a caught write must still pass.
for attempt in 1 2 3 4 5; do
    rm -rf "$dir/during-write" "$dir/during-write.safetensors"
    train during-write --checkpoint-every 1 --keep 4
    interrupted=
    while [ -z "$interrupted" ] && wait_for "$dir/during-write/step-*.safetensors.tmp.*"; do
        writer=${found##*.}
        kill -STOP "$writer"
        # The write may have finished between the look and the stop: then catch the next one.
        if [ -e "$found" ]; then interrupted=${found%%.tmp.*}; else kill -CONT "$writer"; fi
    done
    [ -z "$interrupted" ] || break
    finish
    echo "note during-write: attempt $attempt caught no write in progress; again"
done
kill -USR1 "$writer"
kill -TERM "$(rank_pid 1)"
kill -CONT "$writer"
finish
expect_preempted during-write 'SIG[A-Z0-9]*'
cases=$((cases + 1))
if [ -n "$interrupted" ] && [ -f "$interrupted" ]; then
    echo "ok   during-write: the checkpoint being written when the signals came, $(basename "$interrupted"), is complete"
    mv "$dir/during-write" "$dir/during-write.all"
    mkdir "$dir/during-write"
    cp "$dir/during-write.all/$(basename "$interrupted")" "$dir/during-write/"
    resume_matches during-write
else
    fail "during-write: the interrupted checkpoint '$interrupted' is missing: $(ls "$dir/during-write")"
fi

# A corrupt newest checkpoint (one flipped byte) is passed over by --resume auto.
train corrupt --checkpoint-every 10
wait_for "$dir/corrupt/step-000000020.safetensors"
kill -USR1 "$(rank_pid 0)"
finish
expect_preempted corrupt SIGUSR1
newest=$(find "$dir/corrupt" -name 'step-*.safetensors' | sort | tail -n 1)
size=$(stat -c %s "$newest")
printf '\377' | dd of="$newest" bs=1 seek=$((size - 3)) conv=notrunc status=none
resume_matches corrupt
dp_check_outcome "corrupt: --resume auto warns of the checkpoint it passed over" ok 0 "$dir/corrupt.out" \
    "passed over incomplete checkpoints in $dir/corrupt: $(basename "$newest")"

# Local SGD (--average-every 4): the replicas are one model only after an averaging, so every
# rank goes on to the next multiple of 4 before the checkpoint; the resume is still bit-exact.
train reference-lsgd --average-every 4 --resume auto
finish
dp_check_outcome "local SGD: uninterrupted run" ok "$status" "$dir/reference-lsgd.out" "summary:"
train lsgd --average-every 4 --checkpoint-every 8
wait_for "$dir/lsgd/step-*.safetensors"
kill -USR1 "$(rank_pid 1)"
finish
expect_preempted lsgd SIGUSR1
cases=$((cases + 1))
stop=$(sed -n 's/^preempted: .* stopped after step \([0-9]*\) .*/\1/p' "$dir/lsgd.out")
if [ -n "$stop" ] && [ $((stop % 4)) -eq 0 ]; then
    echo "ok   lsgd: stopped after step $stop, an averaging step"
else
    fail "lsgd: stopped after step '$stop', not a multiple of --average-every 4"
fi
train lsgd --average-every 4 --checkpoint-every 8 --resume auto
finish
dp_check_outcome "lsgd: resumed" ok "$status" "$dir/lsgd.out" "continuing bit-exactly"
dp_check_same_bits "lsgd: resumed parameters equal the uninterrupted local SGD run's" \
    "$dir/reference-lsgd.safetensors" "$dir/lsgd.safetensors"

# Options refused before any training.
# shellcheck disable=SC2086
dp_mpirun 60 2 "$worker" $run --preempt-signal USR1,KILL --checkpoint-dir "$dir/x" >"$dir/bad1.out" 2>&1
dp_check_outcome "--preempt-signal USR1,KILL" fail $? "$dir/bad1.out" \
    "--preempt-signal 'USR1,KILL': 'KILL' is not a signal it handles"
# shellcheck disable=SC2086
dp_mpirun 60 2 "$worker" $run --preempt-signal TERM >"$dir/bad2.out" 2>&1
dp_check_outcome "--preempt-signal without --checkpoint-dir" fail $? "$dir/bad2.out" \
    "--preempt-signal TERM applies to --checkpoint-dir, but --checkpoint-dir is not given"
# shellcheck disable=SC2086
dp_mpirun 60 2 "$worker" $run --resume auto >"$dir/bad3.out" 2>&1
dp_check_outcome "--resume auto without --checkpoint-dir" fail $? "$dir/bad3.out" \
    "--resume auto applies to --checkpoint-dir, but --checkpoint-dir is not given"

echo "preempt: $((cases - failures)) of $cases passed"
[ "$failures" -eq 0 ]
