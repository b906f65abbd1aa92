#!/bin/sh
# Training throughput of dp_worker and PyTorch on the same cores, measured in the same run:
# for each model in MODELS, W=1 using every core (one rank bound to all of them, one BLAS
# thread per core) and W=2 (two ranks bound to half the cores each); PyTorch as one process
# with as many threads, and as DDP over gloo with the same binding (scripts/torch-cpu-
# baseline.py, Debian's python3-torch; left out when it is missing); and the GEMMs of one W=1
# step alone (dp_gemm_bench with as many threads). Runs alternate so machine noise hits every
# configuration alike; each cell is the median of REPEATS runs of STEPS steps (batch 256, plain
# SGD lr 0.01, synthetic data, short batches dropped as PyTorch's loop drops them). The GEMM
# share is the GEMMs' median time over dp_worker's median W=1 step time. Each run notes the
# 1-minute load average before it (other processes on the machine), printed as the range over
# the model's runs. Prints a markdown table for bench/RESULTS.md.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/build.sh"
. "$top/scripts/mpi-env.sh"
repeats=${REPEATS:-3} steps=${STEPS:-100} models=${MODELS:-"784,1024,1024,10 784,256,256,10"}
cores=$(nproc)
half=$((cores / 2 > 0 ? cores / 2 : 1))
results=$(mktemp)
trap 'rm -f "$results"' EXIT
python=""
for candidate in python3 /usr/bin/python3; do
    "$candidate" -c 'import torch' 2>/dev/null && { python=$candidate; break; }
done

load() { cut -d' ' -f1 /proc/loadavg; }
dptrain() { # ranks layers: samples/s and ms/step of dp_worker's summary
    inputs=${2%%,*} classes=${2##*,}
    "$top/scripts/launch.sh" -n "$1" -- --quiet --data "synthetic:20000,$inputs,$classes" --layers "$2" \
        --batch 256 --lr 0.01 --momentum 0 --drop-last --steps "$steps" 2>/dev/null |
        sed -n 's/^summary: .* = \([0-9]*\) samples\/s; \([0-9.]*\) ms\/step.*/\1 \2/p'
}
pytorch() { # world threads layers
    "$python" "$top/scripts/torch-cpu-baseline.py" --world "$1" --threads "$2" --layers "$3" --batch 256 \
        --lr 0.01 --steps "$steps" 2>/dev/null | sed -n 's/^torch_ms_per_step=\([0-9.]*\) torch_samples_per_s=\([0-9.]*\)/\2 \1/p'
}
gemms() { # layers: the ms of one step's GEMMs alone
    "$top/build/dp_gemm_bench" --device cpu --layers "$1" --batch 256 --threads "$cores" |
        sed -n 's/^gemm_ms_per_step=\([0-9.]*\).*/\1 \1/p'
}
record() { # model config command...: one run's line in the results
    model=$1 config=$2
    shift 2
    before=$(load)
    echo "$model $config $("$@") $before" >>"$results"
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
cell() { awk -v m="$1" -v c="$2" -v f="${3:-3}" '$1 == m && $2 == c && NF == 5 {print $f}' "$results" | median; }
loads() { awk -v m="$1" '$1 == m {print $NF}' "$results" | sort -n | sed -n '1p;$p' | paste -sd- -; }

for i in $(seq "$repeats"); do
    for model in $models; do
        record "$model" dp1 dptrain 1 "$model"
        record "$model" dp2 dptrain 2 "$model"
        record "$model" gemm gemms "$model"
        [ -z "$python" ] || record "$model" pt1 pytorch 1 "$cores" "$model"
        [ -z "$python" ] || record "$model" pt2 pytorch 2 "$half" "$model"
    done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a && b) printf "%.2f", a / b; else printf "n/a"}'; }
echo "| date | machine | model | dp_worker W=1 | dp_worker W=2 | W=2 / W=1 | PyTorch W=1 | dp / PyTorch W=1 | PyTorch DDP W=2 | dp / PyTorch W=2 | GEMMs alone (ms) / W=1 step (ms) | load (1 min) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for model in $models; do
    dp1=$(cell "$model" dp1) dp2=$(cell "$model" dp2) pt1=$(cell "$model" pt1) pt2=$(cell "$model" pt2)
    gemm_ms=$(cell "$model" gemm) step_ms=$(cell "$model" dp1 4)
    echo "| $(date +%F) | $cores cores, $(lscpu | sed -n 's/^Model name: *//p') | $model | $dp1 | $dp2 | $(ratio "$dp2" "$dp1") | ${pt1:-n/a} | $(ratio "$dp1" "$pt1") | ${pt2:-n/a} | $(ratio "$dp2" "$pt2") | $gemm_ms / $step_ms = $(ratio "$gemm_ms" "$step_ms") | $(loads "$model") |"
done
echo "(samples/s, medians of $repeats alternating runs of $steps steps, batch 256; W=1: 1 rank x $cores threads; W=2: 2 ranks x $half thread(s), each bound to its own cores)"
