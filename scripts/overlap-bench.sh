#!/bin/sh
# Overlapped buckets against --no-overlap, the same training in the same run (issue 13's
# proof): for each MODEL (layers@global batch), ROUNDS rounds of a --no-overlap run and an
# overlapped run taking turns, W = 2, synthetic data, plain SGD. The --no-overlap run gives F,
# B and the optimizer's time alone (nothing moves while they compute) and C, the whole
# gradient's all-reduce alone; backward can hide at most min(C, B) of it, so the target for
# the overlapped step's exposed communication (its step - F - B - optimizer) is
# max(0, C - B) + 0.2 min(C, B). Prints a Markdown table of medians (ratios: median of
# same-round ratios, lowest - highest).
#   scripts/overlap-bench.sh [--rate RATE | --local] [-r ROUNDS] [-s STEPS] [-- dp_worker options]
# --rate RATE: two namespace hosts joined by a link of RATE (scripts/two-hosts.sh; root), one
# BLAS thread per rank as both share this machine's cores. --local (the default): one host,
# shared memory, scripts/launch.sh's binding. MODELS (default "784,1024,1024,10@256
# 784,1024,1024,10@2304": 7.5 MB of gradients, then a batch large enough that compute and the
# 1 Gbit/s link's communication are about equal).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
rate="" rounds=5 steps=40
while [ $# -gt 0 ]; do
    case $1 in
    --rate) rate=$2; shift 2 ;;
    --local) rate=""; shift ;;
    -r) rounds=$2; shift 2 ;;
    -s) steps=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--rate RATE | --local] [-r ROUNDS] [-s STEPS] [-- dp_worker options]" >&2; exit 2 ;;
    esac
done
models=${MODELS:-"784,1024,1024,10@256 784,1024,1024,10@2304"}
. "$top/scripts/mpi-env.sh"
worker=${DP_WORKER:-$top/build/dp_worker}
[ -x "$worker" ] || { echo "overlap-bench.sh: no $worker (run scripts/build.sh)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-overlap-bench-XXXXXX")
trap 'rm -rf "$work"' EXIT
where="one host, W = 2, shared memory (scripts/launch.sh -n 2)"
[ -z "$rate" ] || where="two namespace hosts, W = 2, TCP on a $rate link (scripts/two-hosts.sh --rate $rate)"
echo "# overlap-bench.sh: $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $where; $rounds rounds of $steps steps; extra options: ${*:-none}"

train() { # label layers batch [options...]: appends "label step F B E O C hidden" to the runs
    label=$1 layers=$2 batch=$3
    shift 3
    inputs=${layers%%,*} classes=${layers##*,}
    set -- --data "synthetic:20000,$inputs,$classes" --layers "$layers" --batch "$batch" --lr 0.01 \
        --momentum 0 --steps "$steps" --log-every 0 "$@"
    if [ -n "$rate" ]; then
        "$top/scripts/two-hosts.sh" --rate "$rate" -- "$worker" --threads 1 "$@"
    else
        DP_WORKER=$worker "$top/scripts/launch.sh" -n 2 -- "$@"
    fi >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
    fields=$(sed -n 's/^summary: .* \([0-9.]*\) ms\/step = forward \([0-9.]*\), backward \([0-9.]*\), exposed comm \([0-9.]*\), optimizer \([0-9.]*\); comm \([0-9.]*\), \([0-9]*\)% hidden.*/\1 \2 \3 \4 \5 \6 \7/p' \
        "$work/out")
    [ -n "$fields" ] || { cat "$work/out" >&2; echo "overlap-bench.sh: no summary line above" >&2; exit 1; }
    echo "$label $fields" >>"$work/runs"
}

# train_whole label layers batch [options...]: train with --no-overlap, which reduces no buckets
# (dp_worker refuses --bucket-mb with it): the options but --bucket-mb and its value.
train_whole() {
    label=$1 layers=$2 batch=$3
    shift 3
    n=$#
    while [ "$n" -gt 0 ]; do
        [ "$1" = --bucket-mb ] && { shift 2; n=$((n - 2)); continue; }
        set -- "$@" "$1"
        shift
        n=$((n - 1))
    done
    train "$label" "$layers" "$batch" --no-overlap "$@"
}

echo
echo "| model @ batch | F | B | optimizer | C | --no-overlap step | overlapped step | overlapped / --no-overlap | exposed (target) | hidden |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for model in $models; do
    layers=${model%@*} batch=${model#*@}
    : >"$work/runs"
    for round in $(seq "$rounds"); do
        train_whole "$round no" "$layers" "$batch" "$@"
        train "$round ov" "$layers" "$batch" "$@"
    done
    awk -v model="$model" '
        function median(list, n,   i, j, t, v) {
            n = split(list, v, " ")
            for (i = 2; i <= n; i++)
                for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
            return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        }
        NF == 9 { for (f = 3; f <= 9; f++) col[$2, f] = col[$2, f] " " $f; step[$2, $1] = $3 }
        END {
            for (r in step) { split(r, k, SUBSEP); if (k[1] == "ov" && ("no", k[2]) in step) ratios = ratios " " step[r] / step["no", k[2]] }
            n = split(ratios, sorted, " "); lo = 1e9; hi = 0
            for (i = 1; i <= n; i++) { lo = sorted[i] < lo ? sorted[i] : lo; hi = sorted[i] > hi ? sorted[i] : hi }
            F = median(col["no", 4]); B = median(col["no", 5]); O = median(col["no", 7]); C = median(col["no", 8])
            no = median(col["no", 3]); ov = median(col["ov", 3])
            exposed = ov - F - B - O
            target = (C > B ? C - B : 0) + 0.2 * (C < B ? C : B)
            printf "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f (%.3f - %.3f) | %.2f (%.2f, %s) | %s%% |\n", \
                model, F, B, O, C, no, ov, median(ratios), lo, hi, exposed, target, exposed <= target ? "met" : "missed", \
                median(col["ov", 9])
        }' "$work/runs"
done
echo
echo "Times in ms per step (medians). exposed = overlapped step - F - B - optimizer, F, B and the optimizer"
echo "from the --no-overlap runs; hidden = the overlapped runs' own hidden / total communication."
