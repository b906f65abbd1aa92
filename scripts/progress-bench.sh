#!/bin/sh
# dp_overlap_bench across two "hosts" made of network namespaces, one rank each, MPI over TCP
# on their virtual link, optionally limited to RATE (scripts/two-hosts.sh). The question it
# answers: does a request move while its rank computes, when moving is the wire's work and
# not the CPU's? Needs root. Usage:
#   scripts/progress-bench.sh [--rate RATE] [-- dp_overlap_bench options]
# DP_OVERLAP_BENCH names another program to run so (default build/dp_overlap_bench).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
rate=
if [ "${1:-}" = --rate ]; then
    rate="--rate $2"
    shift 2
fi
[ "${1:-}" = -- ] && shift
bench=${DP_OVERLAP_BENCH:-$top/build/dp_overlap_bench}
[ -x "$bench" ] || { echo "progress-bench.sh: no $bench (run scripts/build.sh)" >&2; exit 1; }
export DP_NETNS_PREFIX=${DP_NETNS_PREFIX:-dpprog$$}
# shellcheck disable=SC2086
exec "$top/scripts/two-hosts.sh" $rate -- "$bench" "$@"
