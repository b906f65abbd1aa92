#!/bin/bash
# --allreduce hier against the flat ring across 2 hosts x 2 ranks (issue 22's target: hier's
# bus bandwidth >= 1.5x the ring's at 16-64 MiB over a 1 Gbit/s link). The hosts are network
# namespaces (tests/multihost/netns.sh) joined by a link of RATE (tc tbf on each host's eth0),
# ranks of a host on shared memory. Both placements of the ranks: by slot (ranks 0, 1 on the
# first host: the ring crosses between the hosts twice) and by node (0, 2 on the first: every
# hop of the ring crosses). Each algorithm runs alone in its own dp_bench, so the bytes the
# hosts sent on eth0 meanwhile (tx, both hosts) divided by its calls are its inter-host bytes
# per call. Prints a Markdown table. Needs root.
#   scripts/hier-bench.sh [--rate RATE] [-r ROUNDS] [--inner NAME] [ALGORITHM...]
# Defaults: 1gbit, 2 rounds, inner ring, algorithms ring hier.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
srcdir=$top
. "$top/tests/multihost/netns.sh"
rate=1gbit rounds=2 inner=ring
while [ $# -gt 0 ]; do
    case $1 in
    --rate) rate=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    --inner) inner=$2; shift 2 ;;
    -*) echo "usage: $0 [--rate RATE] [-r ROUNDS] [--inner NAME] [ALGORITHM...]" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || set -- ring hier
[ "$(id -u)" -eq 0 ] || { echo "hier-bench.sh: must run as root (network namespaces)" >&2; exit 1; }
bench=${DP_BENCH:-$top/build/dp_bench}
[ -x "$bench" ] || { echo "hier-bench.sh: no $bench (run scripts/build.sh)" >&2; exit 1; }
export DP_NETNS_PREFIX=${DP_NETNS_PREFIX:-dphb$$}
work=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-hier-bench-XXXXXX")
trap 'netns_down "$DP_NETNS_PREFIX" 2; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM HUP
netns_up "$DP_NETNS_PREFIX" 2 || exit 1
for i in 1 2; do
    ip netns exec "$DP_NETNS_PREFIX-h$i" tc qdisc replace dev eth0 root tbf rate "$rate" burst 256kb latency 50ms || exit 1
done
printf '%s slots=2\n' "$(netns_address 1)" "$(netns_address 2)" >"$work/hostfile"
warmup=1 iters=3
# dp_bench makes warmup + iters + 1 checked calls per size, out of place and in place.
calls_per_size=$((2 * (warmup + iters + 1) * rounds))

tx_bytes() { # both hosts' eth0 tx counters, summed
    local sum=0
    for i in 1 2; do
        sum=$((sum + $(ip netns exec "$DP_NETNS_PREFIX-h$i" cat /sys/class/net/eth0/statistics/tx_bytes)))
    done
    echo "$sum"
}

echo "# hier-bench.sh: $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# 2 namespace hosts x 2 ranks, link $rate (tbf), shared memory within a host; dp_bench -b 16M -e 64M -w $warmup -n $iters -r $rounds --hier-inner $inner"
echo
echo "| placement | algorithm | size (MiB) | time (ms) | busbw (GB/s) | inter-host bytes per call (MiB) | / size | busbw / ring's |"
echo "|---|---|---|---|---|---|---|---|"
for map in slot node; do
    for algorithm in "$@"; do
        before=$(tx_bytes)
        (netns_run "$DP_NETNS_PREFIX-h1" timeout 900 mpirun --allow-run-as-root -np 4 --hostfile "$work/hostfile" \
            --map-by "$map" --bind-to none --mca mpi_yield_when_idle 1 \
            --mca plm_rsh_agent "$top/tests/multihost/netns-rsh.sh" --mca oob_tcp_if_include eth0 \
            --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 \
            "$bench" -b 16M -e 64M -w "$warmup" -n "$iters" -r "$rounds" -a "$algorithm" --hier-inner "$inner") \
            >"$work/$map-$algorithm" 2>&1 || { cat "$work/$map-$algorithm" >&2; exit 1; }
        sent=$(($(tx_bytes) - before))
        grep -q '^# Out of bounds values : 0 OK$' "$work/$map-$algorithm" || { cat "$work/$map-$algorithm" >&2; exit 1; }
        # the in-place columns: time (us) and busbw; the bytes spread over the sizes' calls
        awk -v map="$map" -v a="$algorithm" -v sent="$sent" -v calls="$calls_per_size" '
            !/^#/ && NF == 12 { size[++n] = $1; time[n] = $9; total += $1 }
            END { for (i = 1; i <= n; i++) printf "%s %s %d %.1f %.4f %.1f %.2f\n", map, a, size[i] / 1048576,
                      time[i] / 1000, size[i] / (time[i] / 1e6) / 1e9 * 1.5, sent / calls * size[i] / total / 1048576,
                      sent / calls / total }' \
            "$work/$map-$algorithm" >>"$work/rows"
    done
done
awk '{ key = $1 " " $3; if ($2 == "ring") ring[key] = $5; row[NR] = $0 }
    END { for (i = 1; i <= NR; i++) { split(row[i], f, " "); key = f[1] " " f[3]
              printf "| by %s | %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], f[4], f[5], f[6], f[7],
                  ((key in ring) && ring[key] > 0) ? sprintf("%.2fx", f[5] / ring[key]) : "" } }' "$work/rows"
echo
echo "time: one in-place call, max over ranks, fastest round; busbw = size / time x 2(W-1)/W with W = 4."
echo "Inter-host bytes: both hosts' eth0 tx during the algorithm's dp_bench, per call, shared among the"
echo "sizes in proportion (the ring's model: 2 x 3/2 x size by slot, 2 x 3 x size by node; hier: 2 x size)."
