#!/bin/sh
# Training throughput of the default model on Fashion-MNIST for 1 and 2 ranks, and the
# scaling efficiency W=2 / (2 x W=1). Runs alternate so machine noise hits both alike;
# each row is the median of REPEATS runs of EPOCHS epochs. Extra arguments go to dp_worker.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/build.sh"
. "$top/scripts/mpi-env.sh"
repeats=${REPEATS:-3} epochs=${EPOCHS:-2}
results=$(mktemp)
trap 'rm -f "$results"' EXIT

samples_per_second() { # ranks, then dp_worker options
    n=$1
    shift
    mpirun -np "$n" "$top/build/dp_worker" --quiet --epochs "$epochs" "$@" |
        sed -n 's/^summary: .* = \([0-9]*\) samples\/s;.*/\1/p'
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

for i in $(seq "$repeats"); do
    echo "1 $(samples_per_second 1 "$@")" >>"$results"
    echo "2 $(samples_per_second 2 "$@")" >>"$results"
done
w1=$(awk '$1 == 1 {print $2}' "$results" | median)
w2=$(awk '$1 == 2 {print $2}' "$results" | median)
echo "| date | machine | W=1 samples/s | W=2 samples/s | scaling efficiency |"
echo "|---|---|---|---|---|"
echo "| $(date +%F) | $(nproc) cores, $(lscpu | sed -n "s/^Model name: *//p") | $w1 | $w2 | $(awk -v a="$w1" -v b="$w2" 'BEGIN {printf "%.2f", b / (2 * a)}') |"
