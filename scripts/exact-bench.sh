#!/bin/sh
# --exact against the ordinary step: the default model on Fashion-MNIST, W ranks on the CPU,
# each --exact-shard in turn, alternating with the normal run, ROUNDS times (bench/RESULTS.md).
# Usage: scripts/exact-bench.sh [extra dp_worker options]; RANKS (2), STEPS (300), ROUNDS (3),
# SHARDS ("16 32 64") from the environment; BASELINE=path/to/dp_worker also times another
# build's --exact in each round (an earlier version, for the change's gain in the same load).
# Last, each --exact's samples/s against its round's ordinary run: the median over the rounds;
# and against the fastest ordinary run of all, since a slow minute slows the ordinary step too
# (bench/RESULTS.md: its optimizer phase under Open MPI's single-copy transfers).
set -e
cd "$(dirname "$0")/.."
. scripts/mpi-env.sh
ranks=${RANKS:-2} steps=${STEPS:-300} rounds=${ROUNDS:-3} shards=${SHARDS:-16 32 64}
# run WORKER [options]: the summary's samples/s and ms/step
run() {
    worker=$1
    shift
    mpirun -np "$ranks" --map-by slot:PE=1 --bind-to core "$worker" --device cpu --threads 1 \
        --steps "$steps" --log-every 0 "$@" | sed -n 's/^summary: .* = \([0-9]*\) samples\/s; \([0-9.]*\) ms\/step.*/\1 \2/p'
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
round=1
while [ "$round" -le "$rounds" ]; do
    echo "round $round normal: $(run build/dp_worker "$@") (samples/s, ms/step)" | tee -a "$log"
    for s in $shards; do
        echo "round $round exact-shard $s: $(run build/dp_worker --exact --exact-shard "$s" "$@")" | tee -a "$log"
        [ -z "${BASELINE:-}" ] ||
            echo "round $round baseline exact-shard $s: $(run "$BASELINE" --exact --exact-shard "$s" "$@")" | tee -a "$log"
    done
    round=$((round + 1))
done
# summarise WHAT RATIOS: the median of the ratios (one a line) and their range.
summarise() {
    ratios=$(echo "$2" | sort -n)
    [ -n "$ratios" ] || return 0
    count=$(echo "$ratios" | wc -l)
    median=$(echo "$ratios" | awk -v n="$count" 'NR == int((n + 1) / 2) { a = $1 } NR == int(n / 2) + 1 { b = $1 } END { printf "%.2f", (a + b) / 2 }')
    echo "$1: median ${median}x over $count rounds ($(echo "$ratios" | head -1)-$(echo "$ratios" | tail -1))"
}
best=$(awk '/ normal: / && $4 > best { best = $4 } END { print best + 0 }' "$log")
# Each round's samples/s against that round's ordinary run, and against the fastest ordinary run.
for kind in "exact-shard" "baseline exact-shard"; do
    for s in $shards; do
        summarise "$kind $s against the ordinary step" "$(awk -v kind="round [0-9]+ $kind $s:" '
            / normal: / { normal[$2] = $4 }
            $0 ~ kind { if (normal[$2] > 0) printf "%.3f\n", $(NF - 1) / normal[$2] }' "$log")"
        summarise "$kind $s against the fastest ordinary run ($best samples/s)" "$(awk -v kind="round [0-9]+ $kind $s:" -v best="$best" '
            $0 ~ kind && best > 0 { printf "%.3f\n", $(NF - 1) / best }' "$log")"
    done
done
