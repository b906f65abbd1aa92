#!/bin/sh
# Plots dp_bench output as a PNG: in-place bus bandwidth and time per call against message
# size, one line per all-reduce algorithm (gnuplot, Debian package gnuplot-nox).
#
#   scripts/plot-bench.sh [SAVED_OUTPUT]
#
# With SAVED_OUTPUT, plots that dp_bench output. Without, builds (scripts/build.sh), runs
# `dp_bench -a all` on RANKS ranks (default 2; extra dp_bench options in BENCH_ARGS) and
# saves its output to bench/busbw-wRANKS.txt first. DP_BENCH names another dp_bench binary
# (then nothing is built). The PNG goes to PNG (default: bench/busbw-wW.png, W from the output).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh" gnuplot-nox

if [ $# -ge 1 ]; then
    input=$1
else
    if [ -z "${DP_BENCH:-}" ]; then
        "$top/scripts/build.sh"
        DP_BENCH=$top/build/dp_bench
    fi
    . "$top/scripts/mpi-env.sh"
    ranks=${RANKS:-2}
    input=$top/bench/busbw-w$ranks.txt
    # shellcheck disable=SC2086
    mpirun -np "$ranks" "$DP_BENCH" -a all ${BENCH_ARGS:-} >"$input"
fi

world=$(sed -n 's/^# dp_bench .*float32 sum, \([0-9]*\) ranks.*/\1/p' "$input")
[ -n "$world" ] || { echo "plot-bench: $input is not dp_bench output (no header line)" >&2; exit 1; }
png=${PNG:-$top/bench/busbw-w$world.png}
title=$(sed -n 's/^# dp_bench [^:]*: \(.*\)/\1/p' "$input")
data=$(mktemp -d "${TMPDIR:-/tmp}/plot-bench-XXXXXX")
trap 'rm -rf "$data"' EXIT

# One file per algorithm: size (B), bus bandwidth (GB/s) and time (us) of the in-place call.
# Bandwidth comes from the time, which keeps more digits than the table's GB/s column.
awk -v dir="$data" -v w="$world" '
    /^# Algorithm: / { name = $3; order[++n] = name; next }
    !/^#/ && NF == 12 && name != "" { printf "%s %.9g %s\n", $1, $1 / ($9 * 1e3) * 2 * (w - 1) / w, $9 > (dir "/" name) }
    END { for (i = 1; i <= n; i++) print order[i] > (dir "/order") }' "$input"

plots_of() { # COLUMN: the gnuplot plot list, one line per algorithm
    sep=""
    while read -r name; do
        printf "%s'%s' using 1:%s with linespoints title '%s' noenhanced" "$sep" "$data/$name" "$1" "$name"
        sep=", "
    done <"$data/order"
}

gnuplot <<EOF
set terminal pngcairo size 1400,560 font ",11"
set output '$png'
set multiplot layout 1,2 title "dp_bench: $title" noenhanced
set logscale x 2
set xtics ("4 B" 4, "64 B" 64, "1 KiB" 1024, "16 KiB" 16384, "256 KiB" 262144, "4 MiB" 4194304, \
           "64 MiB" 67108864, "1 GiB" 1073741824)
set xlabel "message size (bytes)"
set grid
set key top left
set logscale y
set ylabel "bus bandwidth, in place (GB/s)"
plot $(plots_of 2)
set ylabel "time per call, in place (us)"
set format y "%g"
plot $(plots_of 3)
unset multiplot
EOF
echo "plot-bench: wrote $png from $input"
