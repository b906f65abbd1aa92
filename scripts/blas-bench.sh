#!/bin/sh
# OpenBLAS against BLIS on this machine, measured in the same run (configure --with-blas): the
# GEMMs of one training step alone (dp_gemm_bench) on 1 thread and on every core, and
# dp_worker's training throughput with W=1 (every core) and W=2 (half each), through
# scripts/launch.sh's binding. BLIS is built in build-blis/ (scripts/build.sh with
# --with-blas=blis). Runs alternate between the libraries so machine noise hits both alike;
# each cell is the median of REPEATS runs. Prints a markdown table for bench/RESULTS.md.
#   scripts/blas-bench.sh            REPEATS=5 STEPS=60 GEMM_MODELS=... TRAIN_MODELS=...
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/build.sh"
BUILD_DIR=build-blis CONFIGURE_FLAGS="--with-blas=blis --without-cuda" "$top/scripts/build.sh"
. "$top/scripts/mpi-env.sh"
repeats=${REPEATS:-5} steps=${STEPS:-60}
gemm_models=${GEMM_MODELS:-"784,1024,1024,10:2048 784,4096,4096,10:256"}
train_models=${TRAIN_MODELS:-"784,1024,1024,10:256 784,1024,1024,10:2048"}
cores=$(nproc)
half=$((cores / 2 > 0 ? cores / 2 : 1))
results=$(mktemp)
trap 'rm -f "$results"' EXIT
trap 'exit 1' INT TERM

gemm() { # build layers batch threads: ms of one step's GEMMs
    "$top/$1/dp_gemm_bench" --device cpu --layers "$2" --batch "$3" --threads "$4" --repeat 5 |
        sed -n 's/^gemm_ms_per_step=\([0-9.]*\).*/\1/p'
}
train() { # build ranks layers batch: samples/s
    inputs=${3%%,*} classes=${3##*,}
    DP_WORKER="$top/$1/dp_worker" "$top/scripts/launch.sh" -n "$2" -- --quiet --device cpu \
        --data "synthetic:20000,$inputs,$classes" --layers "$3" --batch "$4" --lr 0.01 --momentum 0 \
        --drop-last --steps "$steps" 2>/dev/null | sed -n 's/^summary: .* = \([0-9]*\) samples\/s.*/\1/p'
}
for i in $(seq "$repeats"); do
    for build in build build-blis; do
        for m in $gemm_models; do
            echo "$build gemm:$m:1 $(gemm "$build" "${m%%:*}" "${m##*:}" 1)" >>"$results"
            echo "$build gemm:$m:$cores $(gemm "$build" "${m%%:*}" "${m##*:}" "$cores")" >>"$results"
        done
        for m in $train_models; do
            echo "$build train:$m:1 $(train "$build" 1 "${m%%:*}" "${m##*:}")" >>"$results"
            echo "$build train:$m:2 $(train "$build" 2 "${m%%:*}" "${m##*:}")" >>"$results"
        done
    done
done

median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
cell() { awk -v b="$1" -v k="$2" '$1 == b && $2 == k && NF == 3 {print $3}' "$results" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a && b) printf "%.2f", a / b; else printf "n/a"}'; }
blas() { "$top/$1/dp_gemm_bench" --device cpu --layers 8,8 --batch 8 --threads 1 --repeat 1 | sed -n '1s/.*; \(.*\)); each.*/\1/p'; }
echo "OpenBLAS: $(blas build); BLIS: $(blas build-blis); $cores cores, $(lscpu | sed -n 's/^Model name: *//p'); $(date +%F)"
echo
echo "| measure | model, batch | threads / ranks | OpenBLAS | BLIS | BLIS / OpenBLAS |"
echo "|---|---|---|---|---|---|"
for m in $gemm_models; do
    for t in 1 "$cores"; do
        o=$(cell build "gemm:$m:$t") b=$(cell build-blis "gemm:$m:$t")
        echo "| GEMMs of one step (ms, lower is better) | ${m%%:*}, ${m##*:} | $t thread(s) | $o | $b | $(ratio "$b" "$o") |"
    done
done
for m in $train_models; do
    for w in 1 2; do
        o=$(cell build "train:$m:$w") b=$(cell build-blis "train:$m:$w")
        label="W=1 x $cores threads"
        [ "$w" = 1 ] || label="W=2 x $half thread(s)"
        echo "| training (samples/s, higher is better) | ${m%%:*}, ${m##*:} | $label | $o | $b | $(ratio "$b" "$o") |"
    done
done
echo "(medians of $repeats alternating runs; dp_gemm_bench --repeat 5; training $steps steps of synthetic data, plain SGD)"
