# scripts/launch.sh prints and runs the mpirun line it promises (rank count, root and
# oversubscription flags, bad arguments refused), and dp_worker refuses a launcher
# environment that contradicts MPI (WORLD_SIZE, RANK, LOCAL_RANK) while printing
# MASTER_ADDR/MASTER_PORT when they agree. Every run is killed after 20 s.
. "$srcdir/tests/common.sh"
DP_WORKER=$(cd "$top_builddir" && pwd)/dp_worker
export DP_WORKER
out=$(mktemp "${TMPDIR:-/tmp}/dptrain-launch-XXXXXX")
trap 'rm -f "$out"' EXIT
failures=0 cases=0

# launch "NAME=VALUE ..." LAUNCH_ARGS...: scripts/launch.sh with those variables set (none:
# ""), its output in $out, killed after 20 s; sets status.
launch() {
    variables=$1
    shift
    # shellcheck disable=SC2086 # the variables are separate words
    timeout --kill-after=5 20 env $variables bash "$srcdir/scripts/launch.sh" "$@" >"$out" 2>&1
    status=$?
}

train_tiny() { # "NAME=VALUE ...": 2 ranks, 2 steps of a small synthetic problem
    launch "$1" -n 2 -- --steps 2 --data synthetic:64,4,3 --layers 4,3
}

# expect NAME STATUS PHRASE: the last launch exited with STATUS (ok: 0, fail: non-zero,
# promptly) and printed PHRASE.
expect() {
    dp_check_outcome "$1" "$2" "$status" "$out" "$3"
}

cores=$(nproc)
root_flag=""
[ "$(id -u)" -ne 0 ] || root_flag=" --allow-run-as-root"

train_tiny ""
if [ "$cores" -ge 2 ]; then
    expect "2 ranks train, each bound to its own cores" ok "mpirun -np 2$root_flag --map-by slot:PE=$((cores / 2)) --bind-to core $DP_WORKER --steps 2"
    expect "each rank runs a BLAS thread per core it holds" ok "BLAS thread"
else
    expect "2 ranks train" ok "mpirun -np 2$root_flag --oversubscribe"
fi
grep -q '^summary: 2 steps' "$out" || { echo "FAIL 2 ranks: no summary"; failures=$((failures + 1)); }
# /bin/true in place of dp_worker: these cases check the line, and the rank count can be large.
launch DP_WORKER=/bin/true -n $((cores + 1))
expect "more ranks than cores" ok "mpirun -np $((cores + 1))$root_flag --oversubscribe --bind-to none --mca mpi_yield_when_idle 1"
launch DP_WORKER=/bin/true
gpus=$(sed -n 's/^launch.sh: .* and \([0-9]*\) GPU(s).*/\1/p' "$out")
want=$cores
[ "${gpus:-0}" -eq 0 ] || want=$gpus
expect "default rank count: one per GPU, else per core" ok "mpirun -np $want$root_flag --map-by slot:PE=$((cores / want)) --bind-to core /bin/true"
launch DP_WORKER=/bin/true -n 1 --bind-to none
expect "the user's placement stands" ok "mpirun -np 1$root_flag --bind-to none /bin/true"
launch "" -n 0
expect "rank count 0" fail "-n '0': the rank count must be a positive integer"
launch DP_WORKER=/nonexistent/dp_worker -n 2
expect "missing binary" fail "no dp_worker binary at '/nonexistent/dp_worker'"

train_tiny WORLD_SIZE=3
expect "WORLD_SIZE contradicts MPI" fail "WORLD_SIZE=3 contradicts MPI's world size (MPI_Comm_size) 2"
train_tiny RANK=0
expect "RANK contradicts MPI on rank 1" fail "rank 1: error: environment variable RANK=0 contradicts MPI's rank (MPI_Comm_rank) 1"
train_tiny LOCAL_RANK=1
expect "LOCAL_RANK contradicts MPI on rank 0" fail "rank 0: error: environment variable LOCAL_RANK=1 contradicts"
train_tiny "WORLD_SIZE=2 MASTER_ADDR=10.1.2.3 MASTER_PORT=29500"
expect "agreeing WORLD_SIZE; banner shows the master" ok "launch: MASTER_ADDR=10.1.2.3 MASTER_PORT=29500"

echo "launch: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
