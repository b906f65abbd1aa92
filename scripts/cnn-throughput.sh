#!/bin/sh
# CPU training throughput of a CNN, dp_worker against PyTorch, measured in the same run:
#   scripts/cnn-throughput.sh [W ...]                      (default: W = 1 2)
# The README's Fashion-MNIST CNN with plain BatchNorm (PyTorch's SyncBatchNorm runs on GPUs only),
# AdamW, global batch BATCH (128), THREADS (1) threads per process, --device cpu. For each W:
# dp_worker with W ranks on fashion-mnist (its last progress line: the last third of STEPS steps,
# warm-up excluded), then PyTorch (scripts/torch-cpu-baseline.py: one process, or W DDP processes
# over gloo, on synthetic images of the same shape, WARMUP untimed steps first). Runs alternate
# REPEATS times so machine noise hits both; each cell is the median. The 1-minute load average
# before each run is printed (other processes on the machine). Prints a markdown table for
# bench/RESULTS.md. DP_WORKER names a built dp_worker, else scripts/build.sh builds the checkout.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
worlds=${*:-"1 2"}
if [ -z "${DP_WORKER:-}" ]; then
    "$top/scripts/build.sh"
    DP_WORKER=$top/build/dp_worker
fi
. "$top/scripts/mpi-env.sh"
repeats=${REPEATS:-3} steps=${STEPS:-30} warmup=${WARMUP:-5} batch=${BATCH:-128} threads=${THREADS:-1}
model="conv2d(32,3,padding=1,bias=0),batchnorm,relu,maxpool(2),conv2d(64,3,padding=1,bias=0),batchnorm,relu,maxpool(2),flatten,linear(128),relu,dropout(0.3),linear(10)"
python=""
for candidate in python3 /usr/bin/python3; do
    "$candidate" -c 'import torch' 2>/dev/null && { python=$candidate; break; }
done
[ -n "$python" ] || { echo "cnn-throughput.sh: needs python3 with torch for the comparison" >&2; exit 77; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
load() { cut -d' ' -f1 /proc/loadavg; }
echo "| W | threads per process | batch | dptrain samples/s | PyTorch samples/s | dptrain / PyTorch | load before runs |"
echo "|---|---|---|---|---|---|---|"
for w in $worlds; do
    dp_rates="" torch_rates="" loads=""
    for r in $(seq "$repeats"); do
        loads="$loads $(load)"
        mpirun -np "$w" --oversubscribe "$DP_WORKER" --data fashion-mnist --device cpu --threads "$threads" \
            --model "$model" --batch "$batch" --optimizer adamw --steps "$steps" --log-every $((steps / 3)) >"$log" 2>&1 ||
            { tail -n 20 "$log" >&2; exit 1; }
        dp_rates="$dp_rates $(awk '/^step / { for (i = 1; i < NF; i++) if ($(i + 1) == "samples/s") r = $i } END { print r }' "$log")"
        loads="$loads $(load)"
        "$python" "$top/scripts/torch-cpu-baseline.py" --model "$model" --image 1,28,28 --world "$w" --threads "$threads" \
            --batch "$batch" --optimizer adamw --lr 0.002 --samples 2048 --steps "$steps" --warmup "$warmup" >"$log" 2>&1 ||
            { tail -n 20 "$log" >&2; exit 1; }
        torch_rates="$torch_rates $(sed -n 's/.*torch_samples_per_s=\([0-9.]*\).*/\1/p' "$log")"
    done
    dp=$(echo $dp_rates | tr ' ' '\n' | median) torch=$(echo $torch_rates | tr ' ' '\n' | median)
    range=$(echo $loads | tr ' ' '\n' | sort -n | sed -n '1p;$p' | paste -sd- -)
    awk -v w="$w" -v t="$threads" -v b="$batch" -v d="$dp" -v p="$torch" -v l="$range" 'BEGIN {
        printf "| %d | %d | %d | %.0f | %.0f | %.2fx %s | %s |\n", w, t, b, d, p, d / p, (d >= p ? "(met)" : "(NOT met)"), l }'
done
