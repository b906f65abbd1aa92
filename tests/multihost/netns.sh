# Sourced: "hosts" made of network namespaces, for multi-host tests on one machine.
# netns_up PREFIX N creates namespaces PREFIX-h1..N with eth0 = 10.99.0.(10+i)/24, joined by
# a bridge inside a further namespace PREFIX-sw. The root namespace gets no address and no
# route on that network, so test traffic cannot leave it. netns_down PREFIX N removes them.
# netns_run HOST CMD... replaces the calling (sub)shell with CMD on HOST: in its network
# namespace (nsenter keeps the mounts, which slurmd's cgroup check needs) and its own UTS
# namespace named HOST.

netns_address() { # INDEX
    echo "10.99.0.$((10 + $1))"
}

netns_up() { # PREFIX N
    ip netns add "$1-sw"
    ip netns exec "$1-sw" ip link add br0 type bridge
    ip netns exec "$1-sw" ip link set br0 up
    for i in $(seq "$2"); do
        ip netns add "$1-h$i"
        ip link add "$1t$i" type veth peer name "$1p$i"
        ip link set "$1t$i" netns "$1-h$i"
        ip link set "$1p$i" netns "$1-sw"
        ip netns exec "$1-sw" ip link set "$1p$i" master br0 up
        ip netns exec "$1-h$i" ip link set "$1t$i" name eth0
        ip netns exec "$1-h$i" ip addr add "$(netns_address "$i")/24" dev eth0
        ip netns exec "$1-h$i" ip link set eth0 up
        ip netns exec "$1-h$i" ip link set lo up
    done
}

netns_down() { # PREFIX N
    for i in $(seq "$2"); do
        ip netns delete "$1-h$i" 2>/dev/null || true
    done
    ip netns delete "$1-sw" 2>/dev/null || true
}

netns_rx_bytes() { # HOST: bytes received on its eth0 (ip netns exec mounts its own /sys)
    ip netns exec "$1" cat /sys/class/net/eth0/statistics/rx_bytes
}

netns_run() { # HOST CMD...
    exec nsenter --net="/run/netns/$1" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$@"
}
