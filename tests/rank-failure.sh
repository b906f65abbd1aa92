# A rank that dies (kill -9) or freezes (SIGSTOP) never leaves the job hanging: a dead rank
# ends the 3-rank job within 15 s, and its last complete checkpoint resumes to the same bytes
# as an uninterrupted run; a frozen rank ends the job through the watchdog within
# --timeout + 15 s (a fractional --timeout, reported as given). Rank 0 names the frozen rank when it froze before starting the
# all-reduce (likely: the model makes each step mostly compute); frozen inside it, every rank
# has arrived and the watchdog says so. A frozen rank 0 is named by rank 1. A rank frozen
# where the only collective is the preemption agreement is named there.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-rank-failure-XXXXXX")
trap 'kill -9 $(job_pids) 2>/dev/null; rm -rf "$dir"' EXIT
run="--data synthetic:6000,64,10 --layers 64,1024,1024,10 --batch 384 --steps 100 --seed 5 --quiet"
failures=0

fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# The dp_worker processes of this test: those whose command line names its directory.
job_pids() {
    for pid in $(pgrep -x dp_worker); do
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$dir" && echo "$pid"
    done
}
rank_pid() { # the pid of MPI rank $1 of this test's job
    for pid in $(job_pids); do
        tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo "$pid"
    done
}
wait_for_checkpoint() { # in $1, for at most 60 s
    for _ in $(seq 600); do
        ls "$1"/step-*.safetensors >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}
# start_job NAME EXTRA...: dp_worker on 3 ranks in the background; sets job
start_job() {
    name=$1
    shift
    # shellcheck disable=SC2086
    dp_mpirun 300 3 "$worker" $run --checkpoint-dir "$dir/$name" --checkpoint-every 10 "$@" \
        >"$dir/$name.out" 2>&1 &
    job=$!
}
# finish_within SECONDS: waits for the job; sets status and elapsed
finish_within() {
    started=$(date +%s)
    for _ in $(seq $(($1 * 10))); do
        kill -0 "$job" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$job" 2>/dev/null; then
        status=hung
        kill -9 "$job" $(job_pids) 2>/dev/null
    else
        wait "$job"
        status=$?
    fi
    elapsed=$(($(date +%s) - started))
}

# shellcheck disable=SC2086
dp_mpirun 300 3 "$worker" $run --save "$dir/uninterrupted.safetensors" >"$dir/reference.out" 2>&1 ||
    fail "the uninterrupted reference run: $(tail -n 3 "$dir/reference.out")"

start_job killed
wait_for_checkpoint "$dir/killed" || fail "no checkpoint appeared"
kill -9 "$(rank_pid 1)"
finish_within 15
if [ "$status" = hung ] || [ "$status" -eq 0 ]; then
    fail "after kill -9 of rank 1 the job ended with '$status' after ${elapsed}s (want non-zero within 15 s)"
else
    echo "ok   kill -9 of rank 1 ended the job in ${elapsed}s with status $status"
fi
# shellcheck disable=SC2086
dp_mpirun 300 3 "$worker" $run --resume "$dir/killed" --save "$dir/resumed.safetensors" >"$dir/resume.out" 2>&1 ||
    fail "resume after the kill: $(tail -n 3 "$dir/resume.out")"
if cmp -s "$dir/uninterrupted.safetensors" "$dir/resumed.safetensors"; then
    echo "ok   resumed from $(ls "$dir/killed" | tail -n 1): final parameters identical to the uninterrupted run"
else
    fail "the resumed run's parameters differ from the uninterrupted run's"
fi

# freeze NAME RANK PATTERN [options]: SIGSTOP of that rank of a fresh job (with options), which
# must end through the watchdog within --timeout 3.5 + 15 s (a fractional --timeout, reported as
# given), the report naming RANK (rank 0's report, or rank 1's a grace period later when rank 0
# is the frozen one) in an operation PATTERN matches.
freeze() {
    name=$1 rank=$2 what=$3
    shift 3
    start_job "$name" --timeout 3.5 "$@"
    wait_for_checkpoint "$dir/$name" || fail "no checkpoint appeared"
    frozen=$(rank_pid "$rank")
    kill -STOP "$frozen"
    finish_within 19
    kill -9 "$frozen" 2>/dev/null
    if [ "$status" = hung ] || [ "$status" -eq 0 ]; then
        fail "after SIGSTOP of rank $rank ($name) the job ended with '$status' after ${elapsed}s (want non-zero within 3.5 + 15 s)"
    elif ! grep -Eq "watchdog: step [0-9]+: ($what) has not completed after [0-9.]+ s \(--timeout 3.5\).*ranks that have not arrived: ($rank|none .*)$" "$dir/$name.out"; then
        fail "the watchdog did not report rank $rank ($name):"
        sed 's/^/    /' "$dir/$name.out"
    else
        echo "ok   SIGSTOP of rank $rank ($name) ended the job in ${elapsed}s: $(grep -m1 watchdog "$dir/$name.out")"
    fi
}
# Training: the gradient's all-reduce or, when the freeze lands just before a log step, the
# metrics' one.
training="the all-reduce of (the gradient|bucket [0-9]+) \(.*\)|a metrics all-reduce"
freeze frozen-2 2 "$training"
freeze frozen-0 0 "$training"
# Local SGD between its averagings (every 2000 steps; the first checkpoint at 2000, the epoch's
# end, with its evaluation of a 30-row test set, at 4166): the preemption agreement at each
# step's end is the only collective, so the ranks left wait there for the frozen one.
freeze agreement-2 2 "the preemption agreement \(.*\)" --data synthetic:200000,64,10 --test-data synthetic:30,64,10 \
    --layers 64,64,10 --batch 48 --average-every 2000 --checkpoint-every 2000 --steps 100000

echo "rank failure: $((5 - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
