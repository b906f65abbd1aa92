#!/bin/sh
# Draws a dp_worker --metrics file (JSON lines) as a PNG: the training loss and the throughput
# (samples/s) against the step, one above the other. gnuplot (Debian's gnuplot-nox) draws;
# python3's json module reads the file.
#   scripts/plot-metrics.sh METRICS.jsonl OUT.png
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 2 ] || { echo "usage: $0 METRICS.jsonl OUT.png" >&2; exit 2; }
"$top/scripts/install-deps.sh" gnuplot-nox python3
metrics=$1 png=$2
data=$(mktemp "${TMPDIR:-/tmp}/plot-metrics-XXXXXX")
trap 'rm -f "$data"' EXIT
python3 - "$metrics" "$data" <<'PYTHON'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
steps = [r for r in rows if "step" in r]
if not steps:
    sys.exit(f"plot-metrics: {sys.argv[1]} has no step objects")
with open(sys.argv[2], "w") as f:
    for r in steps:
        f.write(f"{r['step']} {r['loss']} {r['samples_per_s']}\n")
PYTHON
gnuplot <<GNUPLOT
set terminal pngcairo size 1000,700 font ",10"
set output "$png"
set multiplot layout 2,1 title "$(basename "$metrics")"
set grid
set ylabel "training loss"
unset xlabel
plot "$data" using 1:2 with lines lw 2 lc rgb "#4c72b0" notitle
set xlabel "step"
set ylabel "samples/s"
plot "$data" using 1:3 with lines lw 2 lc rgb "#55a868" notitle
unset multiplot
GNUPLOT
echo "wrote $png"
