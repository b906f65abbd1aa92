#!/bin/bash
# make check-multihost, second part: --allreduce hier across 2 "hosts" made of network
# namespaces with 2 + 2 and 1 + 3 ranks (nodes of different sizes), ranks of a host on shared
# memory, hosts on TCP. tests/test_hier's real-nodes case (every inner algorithm against
# MPI's collectives, and training) runs across them; dp_worker --allreduce hier trains like
# one rank (relative error <= 1e-5) with each inner algorithm; on 2 + 2 its gradients put
# fewer bytes on the link between the hosts than the flat ring's. The namespaces are removed
# on exit, also on failure. Needs root (network namespaces).
. "${srcdir:-.}/tests/multihost/common.sh"
require_root check-hier "it creates network namespaces"
"$srcdir/scripts/install-deps.sh" iproute2 || exit 1
build=$(cd "$top_builddir" && pwd)
export DP_NETNS_PREFIX=dph$$ CK_RUN_CASE=real-nodes CK_FORK=no
work=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-hier-XXXXXX")
trap 'netns_down "$DP_NETNS_PREFIX" 2; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM HUP
failures=0
fail() { # MESSAGE [FILE]
    echo "FAIL $1"
    [ -n "${2:-}" ] && sed 's/^/    /' "$2"
    failures=$((failures + 1))
}

# across SLOTS1 SLOTS2 PROGRAM [ARGS...]: SLOTS1 ranks on the first host, SLOTS2 on the
# second; mpirun runs on the first (the daemons connect back to it over eth0).
across() {
    local slots1=$1 slots2=$2
    shift 2
    printf '%s slots=%s\n' "$(netns_address 1)" "$slots1" "$(netns_address 2)" "$slots2" >"$work/hostfile"
    (netns_run "$DP_NETNS_PREFIX-h1" timeout 600 mpirun --allow-run-as-root -np $((slots1 + slots2)) \
        --hostfile "$work/hostfile" --map-by slot --bind-to none --mca mpi_yield_when_idle 1 \
        --mca plm_rsh_agent "$srcdir/tests/multihost/netns-rsh.sh" -x CK_RUN_CASE -x CK_FORK \
        --mca oob_tcp_if_include eth0 --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 "$@")
}

netns_up "$DP_NETNS_PREFIX" 2 || exit 1

for layout in "2 2" "1 3"; do
    if across $layout "$build/tests/test_hier" >"$work/out" 2>&1 && grep -q "^100%: Checks: 2, Failures: 0" "$work/out"; then
        echo "ok   test_hier real-nodes on hosts of ${layout/ / + } ranks"
    else
        fail "test_hier real-nodes on hosts of ${layout/ / + } ranks" "$work/out"
    fi
done

# 301k parameters (1.2 MB of gradient per step), 30 steps, on one BLAS thread per rank.
options=(--data synthetic:4000,64,10 --layers 64,512,512,10 --steps 30 --batch 128 --device cpu
    --threads 1 --log-every 0)
timeout 300 mpirun --allow-run-as-root -np 1 --bind-to none "$DP_WORKER" "${options[@]}" \
    --save "$work/one.safetensors" >"$work/out" 2>&1 || { fail "the one-rank reference" "$work/out"; exit 1; }

# train SLOTS1 SLOTS2 NAME [dp_worker options]: trains across the hosts into $work/NAME.safetensors;
# sets $received, the bytes the second host received meanwhile.
train() {
    local slots1=$1 slots2=$2 name=$3
    shift 3
    local before
    before=$(netns_rx_bytes "$DP_NETNS_PREFIX-h2")
    across "$slots1" "$slots2" "$DP_WORKER" "${options[@]}" --save "$work/$name.safetensors" "$@" >"$work/out" 2>&1
    local status=$?
    received=$(($(netns_rx_bytes "$DP_NETNS_PREFIX-h2") - before))
    if [ "$status" -ne 0 ] || ! grep -q "^dptrain .*: 4 ranks ($slots1 on this node)" "$work/out"; then
        fail "$name: exit $status, or not $slots1 ranks on the first host" "$work/out"
        return 1
    fi
}

for layout in "2 2" "1 3"; do
    for inner in ring rhd mpi; do
        name="hier-${layout/ /-}-$inner"
        train $layout "$name" --allreduce hier --hier-inner "$inner" || continue
        if verdict=$(python3 "$srcdir/tests/params_close.py" "$work/$name.safetensors" "$work/one.safetensors" 1e-5); then
            echo "ok   hier on ${layout/ / + } ranks, inner $inner, against 1 rank: $verdict; second host received $((received / 1000)) kB"
        else
            fail "hier on ${layout/ / + } ranks, inner $inner, against 1 rank: $verdict"
        fi
        [ "$layout $inner" = "2 2 ring" ] && hier_bytes=$received
    done
done

# The flat ring on 2 + 2 crosses between the hosts twice per pass, 3/2 of the gradient each
# way per step; hier's two leaders exchange it once: 2/3 of the ring's bytes.
if train 2 2 ring --allreduce ring; then
    ring_bytes=$received
    if [ -n "${hier_bytes:-}" ] && [ $((hier_bytes * 10)) -lt $((ring_bytes * 8)) ]; then
        echo "ok   bytes into the second host, 2 + 2 ranks: hier $((hier_bytes / 1000)) kB, flat ring $((ring_bytes / 1000)) kB"
    else
        fail "want hier's bytes into the second host below 0.8 x the flat ring's: hier ${hier_bytes:-none}, ring $ring_bytes"
    fi
fi
[ "$failures" -eq 0 ] && echo "check-hier: ok"
[ "$failures" -eq 0 ]
