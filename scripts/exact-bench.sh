#!/bin/sh
# --exact against the ordinary step: the default model on Fashion-MNIST, W ranks on the CPU,
# each --exact-shard in turn, alternating with the normal run, ROUNDS times (bench/RESULTS.md).
# Usage: scripts/exact-bench.sh [extra dp_worker options]; RANKS (2), STEPS (300), ROUNDS (3),
# SHARDS ("16 32 64") from the environment.
set -e
cd "$(dirname "$0")/.."
. scripts/mpi-env.sh
ranks=${RANKS:-2} steps=${STEPS:-300} rounds=${ROUNDS:-3} shards=${SHARDS:-16 32 64}
run() {
    mpirun -np "$ranks" --map-by slot:PE=1 --bind-to core build/dp_worker --device cpu --threads 1 \
        --steps "$steps" --log-every 0 "$@" | sed -n 's/^summary: .* = \([0-9]*\) samples\/s; \([0-9.]*\) ms\/step.*/\1 \2/p'
}
round=1
while [ "$round" -le "$rounds" ]; do
    echo "round $round normal: $(run "$@") (samples/s, ms/step)"
    for s in $shards; do
        echo "round $round exact-shard $s: $(run --exact --exact-shard "$s" "$@")"
    done
    round=$((round + 1))
done
