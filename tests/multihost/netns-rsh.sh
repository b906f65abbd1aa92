#!/bin/bash
# Open MPI's launch agent (--mca plm_rsh_agent) for namespace hosts, in place of ssh:
#   netns-rsh.sh HOST WORD...   runs the shell command WORD... on HOST (10.99.0.X or PREFIX-hI).
# DP_NETNS_PREFIX names the namespaces (tests/multihost/netns.sh).
set -eu
. "$(dirname "$0")/netns.sh"
host=$1
shift
case $host in
    10.99.0.*) host=$DP_NETNS_PREFIX-h$((${host##*.} - 10)) ;;
    "$DP_NETNS_PREFIX"-h*) ;;
    *) echo "netns-rsh.sh: '$host' is not a host of $DP_NETNS_PREFIX" >&2; exit 255 ;;
esac
netns_run "$host" sh -c "$*"
