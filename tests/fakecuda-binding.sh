# Binding ranks to GPUs by identity, through dp_worker on the fake CUDA runtime with two ranks
# on one node: each rank seeing one different GPU (srun --gpus-per-task=1) trains on CUDA with
# each rank on its own GPU; both seeing the same single GPU fall back to the CPU with --device
# auto, fail naming the shared GPU with --device cuda, and share it with --share-gpu; both
# seeing two GPUs take one each; the banner names the binding. Exits 77 where not built.
. "$srcdir/tests/common.sh"
worker="$top_builddir/tests/fakecuda/dp_worker"
[ -x "$worker" ] || { echo "fake CUDA tests not built"; exit 77; }
export FAKECUDA_CHECK_LEAKS=1
out=$(mktemp -d) && trap 'rm -rf "$out"' EXIT
cases=0 failures=0
train="--data synthetic:256,8,3 --layers 8,16,3 --batch 32 --steps 3 --log-every 1"

# run NAME WANT PHRASE DEVICES_OF_RANK0 DEVICES_OF_RANK1 [dp_worker options]
run() {
    name=$1 want=$2 phrase=$3 gpus0=$4 gpus1=$5
    shift 5
    GPUS0=$gpus0 GPUS1=$gpus1 dp_mpirun 60 2 sh -c \
        'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then FAKECUDA_DEVICES=$GPUS0; else FAKECUDA_DEVICES=$GPUS1; fi; export FAKECUDA_DEVICES; exec "$0" "$@"' \
        "$worker" $train "$@" >"$out/$name" 2>&1
    dp_check_outcome "$name" "$want" $? "$out/$name" "$phrase"
}

run per-task-gpus ok "this node's 2 ranks on 2 distinct GPUs (local rank 0: GPU-67707541, local rank 1: GPU-67707542)" gpuA gpuB
grep -q "backend cuda: GPU 0 of 1 visible (GPU-67707541" "$out/per-task-gpus" || { echo "FAIL per-task-gpus: banner"; failures=$((failures + 1)); }
run same-list ok "local rank 0: GPU-67707541, local rank 1: GPU-67707542" gpuA,gpuB gpuA,gpuB
run reversed-lists ok "local rank 0: GPU-67707542, local rank 1: GPU-67707541" gpuB,gpuA gpuB,gpuA
run one-shared-auto ok "backend cpu" gpuA gpuA
run one-shared-cuda fail "can reach only 1 distinct GPU, so ranks would share one" gpuA gpuA --device cuda
grep -q -- "--share-gpu" "$out/one-shared-cuda" || { echo "FAIL one-shared-cuda: no --share-gpu advice"; failures=$((failures + 1)); }
run one-shared-share ok "backend cuda" gpuA gpuA --device cuda --share-gpu
run rank1-without-gpu-auto ok "backend cpu" gpuA ""
# Rank 1 also finds it sees no GPU, but ranks other than 0 wait for rank 0's report.
run rank1-without-gpu-cuda fail "(local rank 0: GPU-67707541, local rank 1: no GPU)" gpuA "" --device cuda
echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
