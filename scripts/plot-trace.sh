#!/bin/sh
# Renders a dp_worker --trace file as a PNG timeline: two lanes per rank (compute, and the
# collectives in flight), spans coloured by kind (forward, backward, collective, optimizer,
# the batch gather, evaluation). gnuplot (Debian's gnuplot-nox) draws; python3's
# json module reads the trace.
#   scripts/plot-trace.sh TRACE.json OUT.png [FROM_MS TO_MS]
# Without a window, draws steps 2 to 4 (the first is warm-up): from rank 0's first optimizer
# span's end to its fourth's end. ZeRO's gathers and reduce-scatters are collectives too.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 2 ] || [ $# -eq 4 ] || { echo "usage: $0 TRACE.json OUT.png [FROM_MS TO_MS]" >&2; exit 2; }
"$top/scripts/install-deps.sh" gnuplot-nox python3
trace=$1 png=$2
data=$(mktemp -d "${TMPDIR:-/tmp}/plot-trace-XXXXXX")
trap 'rm -rf "$data"' EXIT

# spans.dat: lane (y), begin and end (ms), colour index; window: "from to ranks".
python3 - "$trace" "$data" "${3:-}" "${4:-}" <<'PYTHON'
import json, sys
trace, out, first, last = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
kinds = ["forward", "backward", "collective", "optimizer", "data", "evaluate"]
spans = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
if not spans:
    sys.exit(f"plot-trace: {trace} has no spans")
ranks = max(e["pid"] for e in spans) + 1
if first == "":
    ends = sorted(e["ts"] + e["dur"] for e in spans if e["pid"] == 0 and e["cat"] == "optimizer")
    first, last = (ends[0], ends[min(3, len(ends) - 1)]) if len(ends) > 1 else (0, max(e["ts"] + e["dur"] for e in spans))
    first, last = first / 1e3, last / 1e3
first, last = float(first), float(last)
with open(f"{out}/spans.dat", "w") as f:
    for e in spans:
        begin, end = e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3
        if end < first or begin > last:
            continue
        kind = next((i for i, k in enumerate(kinds) if e["cat"].startswith(k)), len(kinds))
        lane = (ranks - 1 - e["pid"]) * 2 + (1 - e["tid"])  # rank 0 on top, compute above communication
        f.write(f"{lane} {max(begin, first):.4f} {min(end, last):.4f} {kind}\n")
with open(f"{out}/window", "w") as f:
    f.write(f"{first:.4f} {last:.4f} {ranks}\n")
PYTHON
read -r from to ranks <"$data/window"
labels=""
for r in $(seq 0 $((ranks - 1))); do
    lane=$(((ranks - 1 - r) * 2))
    labels="$labels\"rank $r compute\" $((lane + 1)), \"rank $r collectives\" $lane, "
done
gnuplot <<GNUPLOT
set terminal pngcairo size 1400,$((160 + 90 * ranks)) font ",10"
set output "$png"
set title "$(basename "$trace"): ${from} to ${to} ms"
set xlabel "ms"
set xrange [$from:$to]
set yrange [-0.6:$((2 * ranks)) - 0.4]
set ytics (${labels%, })
set grid xtics
set style fill solid 0.9 border -1
set key outside right
colours = "#4c72b0 #55a868 #c44e52 #dd8452 #8c8c8c #8172b3 #000000"
plot for [k = 0:6] "$data/spans.dat" using ((\$4 == k) ? (\$2 + \$3) / 2 : 1/0):1:2:3:(\$1 - 0.38):(\$1 + 0.38) \
    with boxxyerror lc rgb word(colours, k + 1) title word("forward backward collective optimizer data evaluate other", k + 1)
GNUPLOT
echo "wrote $png"
