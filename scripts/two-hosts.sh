#!/bin/bash
# Runs PROGRAM as a 2-rank MPI job across two "hosts" made of network namespaces
# (tests/multihost/netns.sh), one rank each, MPI over TCP on their virtual link, optionally
# limited to RATE with tc tbf (1gbit: a 1 Gbit/s Ethernet link; the kernel has no netem, tbf
# works). Both hosts share this machine's cores: give the program its threads (dp_worker
# --threads 1 on 2 cores). Needs root. Usage:
#   scripts/two-hosts.sh [--rate RATE] -- PROGRAM [ARGS...]
# DP_NETNS_PREFIX names the namespaces (default dp2h$$, at most 13 characters).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
srcdir=$top
. "$top/tests/multihost/netns.sh"
rate=
if [ "${1:-}" = --rate ]; then
    rate=$2
    shift 2
fi
[ "${1:-}" = -- ] && shift
[ $# -gt 0 ] || { echo "usage: $0 [--rate RATE] -- PROGRAM [ARGS...]" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "two-hosts.sh: must run as root (network namespaces)" >&2; exit 1; }
program=$(command -v "$1") || { echo "two-hosts.sh: no program $1" >&2; exit 1; }
shift
export DP_NETNS_PREFIX=${DP_NETNS_PREFIX:-dp2h$$}
work=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-two-hosts-XXXXXX")
trap 'netns_down "$DP_NETNS_PREFIX" 2; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM HUP
netns_up "$DP_NETNS_PREFIX" 2 || exit 1
if [ -n "$rate" ]; then
    for i in 1 2; do
        ip netns exec "$DP_NETNS_PREFIX-h$i" tc qdisc replace dev eth0 root tbf rate "$rate" burst 256kb latency 50ms || exit 1
    done
fi
printf '%s slots=1\n' "$(netns_address 1)" "$(netns_address 2)" >"$work/hostfile"
echo "# two-hosts.sh: 2 namespace hosts, TCP, link ${rate:-unlimited}"
(netns_run "$DP_NETNS_PREFIX-h1" timeout 600 mpirun --allow-run-as-root -np 2 --hostfile "$work/hostfile" \
    --map-by node --bind-to none --mca plm_rsh_agent "$top/tests/multihost/netns-rsh.sh" \
    --mca oob_tcp_if_include eth0 --mca btl tcp,self --mca btl_tcp_if_include eth0 "$program" "$@")
