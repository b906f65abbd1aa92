#!/bin/bash
# make check-multihost: the workstation path across hosts without SLURM. scripts/launch.sh
# starts dp_worker with a hostfile over 2 "hosts" made of network namespaces (Open MPI's
# launch agent is netns-rsh.sh instead of ssh, MPI traffic takes the TCP transport over their
# virtual network). Training must give exactly the accuracy of the same 2 ranks on one host,
# and the second host must have received the gradients' traffic. The namespaces are removed
# on exit, also on failure. Needs root (network namespaces).
. "${srcdir:-.}/tests/multihost/common.sh"
require_root check-multihost "it creates network namespaces"
"$srcdir/scripts/install-deps.sh" iproute2 || exit 1
export DP_NETNS_PREFIX=dpm$$
work=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-multihost-XXXXXX")
trap 'netns_down "$DP_NETNS_PREFIX" 2; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM HUP

echo "--- reference: 2 ranks on this host"
timeout 300 "$srcdir/scripts/launch.sh" -n 2 -- "${train_options[@]}" >"$work/one-host.out" 2>&1
reference=$(accuracy_of "$work/one-host.out")
[ -n "$reference" ] || { echo "FAIL the one-host run did not finish:"; cat "$work/one-host.out"; exit 1; }
head -n 1 "$work/one-host.out"
echo "accuracy $reference%"

echo "--- 2 ranks on 2 namespace hosts"
netns_up "$DP_NETNS_PREFIX" 2 || exit 1
printf '%s slots=1\n' "$(netns_address 1)" "$(netns_address 2)" >"$work/hostfile"
received=$(netns_rx_bytes "$DP_NETNS_PREFIX-h2")
# mpirun runs on the first host: the daemons it starts connect back to it over eth0.
(netns_run "$DP_NETNS_PREFIX-h1" timeout 300 "$srcdir/scripts/launch.sh" -n 2 \
    --hostfile "$work/hostfile" --map-by node --bind-to none \
    --mca plm_rsh_agent "$srcdir/tests/multihost/netns-rsh.sh" \
    --mca oob_tcp_if_include eth0 --mca btl tcp,self --mca btl_tcp_if_include eth0 \
    -- "${train_options[@]}") >"$work/two-hosts.out" 2>&1
status=$?
received=$(($(netns_rx_bytes "$DP_NETNS_PREFIX-h2") - received))
head -n 2 "$work/two-hosts.out"
accuracy=$(accuracy_of "$work/two-hosts.out")
echo "accuracy ${accuracy:-none}%, exit $status, second host received $((received / 1000000)) MB"

if [ "$status" -ne 0 ] || ! grep -qF "2 ranks (1 on this node)" "$work/two-hosts.out"; then
    echo "FAIL the run across hosts did not run one rank per host:"
    cat "$work/two-hosts.out"
    exit 1
fi
# Each step all-reduces the 1 MiB gradient: 470 steps move hundreds of MB between hosts.
if [ "$accuracy" != "$reference" ] || [ "$received" -lt 100000000 ]; then
    echo "FAIL want accuracy $reference% and > 100 MB received by the second host"
    exit 1
fi
echo "check-multihost: ok"
