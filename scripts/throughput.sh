#!/bin/sh
# Training throughput of dp_worker and PyTorch on the same cores, measured in the same run:
#   scripts/throughput.sh [--cores N] [--batch B] [W ...]        (default: every core, 256, W = 1 2)
# Everything runs on the first N cores (taskset). For each model in MODELS and each W: dp_worker
# with W ranks through scripts/launch.sh, which binds each rank to its N / W cores, where it
# runs as many BLAS threads; PyTorch (whichever python3 imports torch: pip or Debian's
# python3-torch; left out when none does) as one process with N threads for W=1, and as W
# DDP processes over gloo with N / W threads each, bound alike (scripts/torch-cpu-baseline.py);
# and the GEMMs of one W=1 step alone (dp_gemm_bench on N threads). Runs alternate so machine
# noise hits every configuration alike; each cell is the median of REPEATS runs of STEPS steps
# (plain SGD lr 0.01, synthetic data, short batches dropped as PyTorch's loop drops them,
# --device cpu). Each run notes the 1-minute load average before it (other processes on the
# machine), printed as the range over the model's runs. Prints a markdown table for
# bench/RESULTS.md. PYTHON names the command that runs PyTorch; DP_WORKER names a built
# dp_worker (its folder's dp_gemm_bench is used too), else scripts/build.sh builds the checkout.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: scripts/throughput.sh [--cores N] [--batch B] [W ...]"
cores=$(nproc) batch=256
while [ $# -gt 0 ]; do
    case $1 in
    --cores) cores=${2-}; shift 2 ;;
    --batch) batch=${2-}; shift 2 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) break ;;
    esac
done
worlds=${*:-"1 2"}
positive() { case $1 in '' | *[!0-9]* | 0*) return 1 ;; esac; }
positive "$cores" && [ "$cores" -le "$(nproc)" ] ||
    { echo "throughput.sh: --cores '$cores': a whole number from 1 to the $(nproc) cores this process may use" >&2; exit 2; }
positive "$batch" || { echo "throughput.sh: --batch '$batch': a positive whole number" >&2; exit 2; }
for w in $worlds; do
    positive "$w" && [ "$w" -le "$cores" ] || { echo "throughput.sh: W '$w': a whole number from 1 to --cores ($cores)" >&2; exit 2; }
done
if [ -z "${DP_WORKER:-}" ]; then
    "$top/scripts/build.sh"
    DP_WORKER=$top/build/dp_worker
fi
export DP_WORKER
gemm_bench=$(dirname "$DP_WORKER")/dp_gemm_bench
. "$top/scripts/mpi-env.sh"
repeats=${REPEATS:-3} steps=${STEPS:-100} models=${MODELS:-"784,1024,1024,10 784,256,256,10"}
pin="taskset -c 0-$((cores - 1))"
results=$(mktemp)
trap 'rm -f "$results"' EXIT
trap 'exit 1' INT TERM
# PYTHON: the command that runs PyTorch (words allowed: "env LD_LIBRARY_PATH= python3").
python=""
if [ -n "${PYTHON:-}" ]; then
    $PYTHON -c 'import torch' 2>/dev/null && python=$PYTHON
else
    for candidate in python3 /usr/bin/python3; do
        "$candidate" -c 'import torch' 2>/dev/null && { python=$candidate; break; }
    done
fi

load() { cut -d' ' -f1 /proc/loadavg; }
dptrain() { # ranks layers: samples/s and ms/step of dp_worker's summary
    inputs=${2%%,*} classes=${2##*,}
    $pin "$top/scripts/launch.sh" -n "$1" -- --quiet --device cpu --data "synthetic:20000,$inputs,$classes" \
        --layers "$2" --batch "$batch" --lr 0.01 --momentum 0 --drop-last --steps "$steps" 2>/dev/null |
        sed -n 's/^summary: .* = \([0-9]*\) samples\/s; \([0-9.]*\) ms\/step.*/\1 \2/p'
}
pytorch() { # world threads layers
    $pin $python "$top/scripts/torch-cpu-baseline.py" --world "$1" --threads "$2" --layers "$3" --batch "$batch" \
        --lr 0.01 --steps "$steps" 2>/dev/null | sed -n 's/^torch_ms_per_step=\([0-9.]*\) torch_samples_per_s=\([0-9.]*\)/\2 \1/p'
}
gemms() { # layers: the ms of one step's GEMMs alone
    $pin "$gemm_bench" --device cpu --layers "$1" --batch "$batch" --threads "$cores" |
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
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a && b) printf "%.2f", a / b; else printf "n/a"}'; }
best() { for v in "$@"; do echo "${v:-0}"; done | sort -n | tail -n 1; }

for i in $(seq "$repeats"); do
    for model in $models; do
        record "$model" gemm gemms "$model"
        for w in $worlds; do
            record "$model" "dp$w" dptrain "$w" "$model"
            [ -z "$python" ] || record "$model" "pt$w" pytorch "$w" "$((cores / w))" "$model"
        done
    done
done

machine="$cores of $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
torch=$([ -z "$python" ] && echo "none (install PyTorch: pip, or Debian's python3-torch)" ||
    $python -c 'import torch; print("PyTorch", torch.__version__, "MKL" if torch.backends.mkl.is_available() else "no MKL")')
echo "$(date +%F), $machine; $("$gemm_bench" --device cpu --layers 8,8 --batch 8 --threads 1 --repeat 1 |
    sed -n '1s/.*; \(.*\)); each.*/\1/p'); $torch"
echo
echo "| model, batch | W x threads | dp_worker samples/s | / dp_worker W=1 | PyTorch samples/s | dp_worker / PyTorch | GEMMs alone / step (ms) | load (1 min) |"
echo "|---|---|---|---|---|---|---|---|"
for model in $models; do
    dp1=$(cell "$model" dp1) dp_best=0 pt_best=0
    for w in $worlds; do
        dp=$(cell "$model" "dp$w") pt=$(cell "$model" "pt$w")
        dp_best=$(best "$dp_best" "$dp") pt_best=$(best "$pt_best" "$pt")
        share=""
        [ "$w" != 1 ] || share="$(cell "$model" gemm) / $(cell "$model" dp1 4) = $(ratio "$(cell "$model" gemm)" "$(cell "$model" dp1 4)")"
        echo "| $model, $batch | $w x $((cores / w)) | $dp | $(ratio "$dp" "$dp1") | ${pt:-n/a} | $(ratio "$dp" "$pt") | $share | $(loads "$model") |"
    done
    echo "| $model, $batch | best W of each | $dp_best | | $pt_best | $(ratio "$dp_best" "$pt_best") | | |"
done
echo "(samples/s, medians of $repeats alternating runs of $steps steps; PyTorch W>1 is DDP over gloo; every rank bound to its own cores)"
