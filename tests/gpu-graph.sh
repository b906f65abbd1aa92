# --cuda-graph on a real GPU: one rank trains to the same bits with its full steps replayed from
# a CUDA graph as issued kernel by kernel (SGD, and AdamW on a cosine schedule, whose learning
# rate and step reach the replays through device memory), an MLP and the README recipe's shape
# (BatchNorm finished on the device, dropout keyed by the step number in device memory), the
# epochs' shorter last batches run eagerly between replays, and steps of three micro-batches
# (--accum 3) with the data uploaded and held on the GPU; then 2 ranks sharing the GPU with
# --allreduce nccl, the buckets' all-reduces inside the graph (--share-gpu: NCCL refuses two
# ranks on one GPU of one host, so each rank gets its own NCCL_HOSTID and NCCL moves the data
# over loopback sockets, as in tests/gpu-train-w2.sh; with a GPU per rank, drop --share-gpu).
# Exits 77 (skip) without a GPU. tests/fakecuda-graph.sh and tests/fakecuda-graph-nccl.sh are
# the same checks, and more, on the fake CUDA runtime.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-gpu-graph-XXXXXX")
trap 'rm -rf "$dir"' EXIT
dp_mpirun 120 1 "$worker" --device cuda --data synthetic:64,8,3 --layers 8,16,3 --steps 1 --quiet >"$dir/probe" 2>&1 ||
    { grep -q "no CUDA GPU\|without the CUDA backend" "$dir/probe" && exit 77; cat "$dir/probe"; exit 1; }
cases=0 failures=0
base="--device cuda --data synthetic:3100,64,10 --batch 300 --epochs 3 --log-every 7"
recipe="--model linear(256,bias=0),batchnorm,relu,dropout(0.2),linear(128,bias=0),batchnorm(sync=1),relu,dropout(0.2),linear(10)"

# compare NAME ARGS...: trained with and without the graph on $np ranks (1 unless set), the same bits.
compare() {
    name=$1
    shift
    for graph in off on; do
        # shellcheck disable=SC2086
        dp_mpirun 300 "${np:-1}" sh -c 'NCCL_HOSTID="dptrain-graph-rank-$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' \
            "$worker" $base "$@" --cuda-graph $graph --save "$dir/$name-$graph.safetensors" >"$dir/$name-$graph" 2>&1 ||
            { echo "FAIL $name --cuda-graph $graph:"; sed 's/^/    /' "$dir/$name-$graph"; exit 1; }
    done
    grep -q '^cuda graph: on: ' "$dir/$name-on" || dp_fail_case "$name: the banner does not say the graph is on" "$dir/$name-on"
    dp_check_same_bits "$name: the same parameters with and without the graph" \
        "$dir/$name-off.safetensors" "$dir/$name-on.safetensors"
}

for model in "mlp:--layers 64,256,256,10" "recipe:$recipe"; do
    for optimizer in "sgd" "adamw --lr-schedule cosine"; do
        # shellcheck disable=SC2086
        compare "${model%%:*}-${optimizer%% *}" ${model#*:} --optimizer $optimizer
    done
done
# --accum 3: steps of 900 rows, three micro-batches in one graph, each from its own buffers;
# each epoch's last step (300 and 100 rows) eagerly; the rows uploaded and held on the GPU.
for placement in off on; do
    # shellcheck disable=SC2086
    compare "accum3-data-$placement" $recipe --optimizer adamw --lr-schedule cosine --accum 3 --data-on-device $placement
done
# W = 2 with nccl: buckets of 0.1 MiB (several all-reduces a step, forked onto NCCL's stream and
# joined back by events inside the graph), and --accum 3 with AdamW.
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
w2="--share-gpu --allreduce nccl --layers 64,256,256,10 --bucket-mb 0.1"
# shellcheck disable=SC2086
np=2 compare "w2-nccl-sgd" $w2
# shellcheck disable=SC2086
np=2 compare "w2-nccl-accum3" $w2 --optimizer adamw --lr-schedule cosine --accum 3
echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
