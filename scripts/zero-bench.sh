#!/bin/sh
# The ZeRO stages side by side: each --zero stage's throughput relative to --zero 0, measured
# in the same run with the stages taking turns round after round (on a shared machine only
# same-run ratios mean anything), and each stage's peak memory per rank and bytes sent per
# step per rank, from dp_worker's summary. Prints a Markdown table.
# Usage: scripts/zero-bench.sh [-n RANKS] [-r ROUNDS] [-- dp_worker options]
# ZERO_BENCH_RUN replaces "mpirun -np RANKS build/dp_worker" (e.g. "scripts/two-hosts.sh --rate
# 1gbit -- build/dp_worker --threads 1": two namespace hosts on a 1 Gbit/s link, as root).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
ranks=2 rounds=3
while [ $# -gt 0 ]; do
    case $1 in
    -n) ranks=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [-n RANKS] [-r ROUNDS] [-- dp_worker options]" >&2; exit 2 ;;
    esac
done
. "$top/scripts/mpi-env.sh"
run=${ZERO_BENCH_RUN:-mpirun --oversubscribe -np $ranks ${DP_WORKER:-$top/build/dp_worker}}
work=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-zero-bench-XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "# zero-bench.sh: $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $run --zero K $* (stages in turn, $rounds rounds)"
for round in $(seq "$rounds"); do
    for stage in 0 1 2 3; do
        # shellcheck disable=SC2086
        $run "$@" --log-every 0 --zero "$stage" >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
        rate=$(sed -n 's/^summary: .* = \([0-9.]*\) samples\/s;.*/\1/p' "$work/out")
        echo "$round $stage $rate" >>"$work/rates"
        grep '^memory and communication' "$work/out" >"$work/summary-$stage"
    done
done
echo
echo "| --zero | samples/s (median) | vs --zero 0: median of same-round ratios (lowest - highest) | peak MiB per rank | MiB sent per step per rank | in Psi |"
echo "|---|---|---|---|---|---|"
for stage in 0 1 2 3; do
    median=$(awk -v s="$stage" '$2 == s { print $3 }' "$work/rates" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    ratio=$(awk -v s="$stage" '$2 == 0 { base[$1] = $3 } $2 == s { mine[$1] = $3 } END { for (r in mine) print mine[r] / base[r] }' \
        "$work/rates" | sort -g | awk '{ v[NR] = $1 } END { printf "%.3f (%.3f - %.3f)", v[int((NR + 1) / 2)], v[1], v[NR] }')
    peak=$(sed -n 's/.*: peak \([0-9.]*\) MiB.*/\1/p' "$work/summary-$stage")
    sent=$(sed -n 's/.*; sent \([0-9.]*\) MiB per step.*/\1/p' "$work/summary-$stage")
    psi=$(sed -n 's/.*; \([0-9.]*\) Psi in the ZeRO.*/\1/p' "$work/summary-$stage")
    echo "| $stage | $median | $ratio | $peak | $sent | $psi |"
done
