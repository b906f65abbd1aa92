#!/bin/sh
# Local SGD against DDP at equal samples seen: the same epochs of Fashion-MNIST with DDP
# (--average-every off) and --average-every K for each K, on RANKS ranks (default 2), the
# demo's model and optimizer unless options after -- say otherwise. For each: the last epoch's
# training loss, test loss and accuracy, the divergence the averagings found (mean and largest),
# and the bytes all-reduced per epoch per rank (dp_worker's --metrics summary) against DDP's.
# Prints a Markdown table.
# Usage: bench/local-sgd.sh [-n RANKS] [-e EPOCHS] [-k "1 4 16 64"] [-- dp_worker options]
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
ranks=2 epochs=3 ks="1 4 16 64"
while [ $# -gt 0 ]; do
    case $1 in
    -n) ranks=$2; shift 2 ;;
    -e) epochs=$2; shift 2 ;;
    -k) ks=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [-n RANKS] [-e EPOCHS] [-k \"1 4 16 64\"] [-- dp_worker options]" >&2; exit 2 ;;
    esac
done
. "$top/scripts/mpi-env.sh"
run="mpirun -np $ranks ${DP_WORKER:-$top/build/dp_worker} --data fashion-mnist --device cpu --threads 1"
work=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-local-sgd-XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "# local-sgd.sh: $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $run --epochs $epochs --log-every 0 $* [--average-every K]"
echo
echo "| sync | train loss (last epoch) | test loss | test accuracy | test accuracy per epoch | divergence at averagings: mean (max) | MiB all-reduced per epoch per rank | x DDP's |"
echo "|---|---|---|---|---|---|---|---|"
for k in 0 $ks; do
    flag=""
    [ "$k" -eq 0 ] || flag="--average-every $k"
    # shellcheck disable=SC2086
    $run --epochs "$epochs" --log-every 0 --metrics "$work/$k.jsonl" "$@" $flag >"$work/out" 2>&1 ||
        { cat "$work/out" >&2; exit 1; }
    last=$(grep '^epoch ' "$work/out" | tail -1)
    train=$(echo "$last" | sed -n 's/.*train loss \([0-9.]*\).*/\1/p')
    test_loss=$(echo "$last" | sed -n 's/.*test loss \([0-9.]*\).*/\1/p')
    accuracy=$(echo "$last" | sed -n 's/.*test loss [0-9.]* acc \([0-9.]*%\).*/\1/p')
    per_epoch=$(sed -n 's/^epoch .*test loss [0-9.]* acc \([0-9.]*\)%.*/\1/p' "$work/out" | paste -sd/ -)
    python3 - "$work/$k.jsonl" "$epochs" "$k" "$work/ddp-bytes" >"$work/row" <<'PYTHON'
import json, sys
path, epochs, k, ddp_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
lines = [json.loads(line) for line in open(path)]
divergences = [line["average"]["divergence"] for line in lines if "average" in line]
per_epoch = lines[-1]["summary"]["sent_bytes"] / epochs / 2**20
if k == 0:
    open(ddp_file, "w").write(repr(per_epoch))
ddp = float(open(ddp_file).read())
drift = f"{sum(divergences) / len(divergences):.2e} ({max(divergences):.2e})" if divergences else "-"
print(f"{drift} | {per_epoch:.2f} | {per_epoch / ddp:.3f}" if k else f"- | {per_epoch:.2f} | 1")
PYTHON
    name="DDP"
    [ "$k" -eq 0 ] || name="--average-every $k"
    echo "| $name | $train | $test_loss | $accuracy | $per_epoch | $(cat "$work/row") |"
done
