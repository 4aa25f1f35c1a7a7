#!/usr/bin/env bash
# Virtual Open-MX hosts on one machine: network namespaces joined by veth
# links, each host with an Ethernet interface named omx0.
#
#   scripts/hosts.sh up N [MTU]     create hosts h0..h{N-1} (MTU default 9000)
#   scripts/hosts.sh down           remove them
#   scripts/hosts.sh exec I CMD...  run CMD in host I with OMX_HOSTNAME=hI
#   scripts/hosts.sh list           print the namespaces
#
# Host hI has IPv4 address 10.99.0.(I+1)/24 on omx0.
# N=2 uses one veth pair straight between h0 and h1. N>2 adds a bridge in
# namespace ${prefix}-br with one veth leg per host. Namespaces are named
# ${OMX_NS_PREFIX:-omx}-h<i> (and -br), so concurrent users (tests) pick
# their own prefix. Every link is created directly inside its namespaces,
# so no interface name is ever taken in the root namespace.
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for `ip netns`).

set -euo pipefail

prefix="${OMX_NS_PREFIX:-omx}"

usage() {
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

die() {
    echo "hosts.sh: $*" >&2
    exit 1
}

# Namespaces belonging to this prefix: exactly ${prefix}-h<digits> and ${prefix}-br.
our_namespaces() {
    local ns rest
    while read -r ns _; do
        [[ -n "$ns" ]] || continue
        [[ "$ns" == "$prefix"-* ]] || continue
        rest="${ns#"$prefix"-}"
        if [[ "$rest" =~ ^h[0-9]+$ || "$rest" == br ]]; then
            echo "$ns"
        fi
    done < <(ip netns list 2>/dev/null || true)
}

down() {
    local ns
    while read -r ns; do
        [[ -n "$ns" ]] || continue
        ip netns delete "$ns" 2>/dev/null || true
    done < <(our_namespaces)
}

# Run a command inside namespace $1.
nsx() {
    local ns="$1"
    shift
    ip netns exec "$ns" "$@"
}

# Create namespace $1 with lo up and IPv6 off by default (no router
# solicitations or DAD chatter on our links).
new_ns() {
    local ns="$1"
    ip netns add "$ns"
    nsx "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
    nsx "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
    nsx "$ns" ip link set lo up
}

# Second-to-last MAC byte: a small hash of the prefix so that host sets of
# different prefixes never share addresses.
prefix_byte() {
    local sum
    sum="$(printf '%s' "$prefix" | cksum | cut -d' ' -f1)"
    printf '%02x' $((sum % 256))
}

# Configure omx0 of host $1 (index $2) with MTU $3, then bring it up.
setup_host_link() {
    local ns="$1" i="$2" mtu="$3"
    nsx "$ns" sysctl -qw net.ipv6.conf.omx0.disable_ipv6=1 2>/dev/null || true
    nsx "$ns" ip link set omx0 mtu "$mtu"
    nsx "$ns" ip link set omx0 address "02:00:00:00:$(prefix_byte):$(printf '%02x' $((i + 1)))"
    # IPv4 for programs that speak TCP/IP between hosts (sockets over omx): hI is
    # 10.99.0.(I+1); namespaces are private, so every prefix may use the same subnet.
    nsx "$ns" ip addr add "10.99.0.$((i + 1))/24" dev omx0
    nsx "$ns" ip link set omx0 up
}

# Wait until device $2 in namespace $1 is operationally up with its real
# qdisc attached. Both happen asynchronously (linkwatch, up to ~1 s after
# `ip link set up`); until then the device silently drops what it is given.
wait_link_up() {
    local ns="$1" dev="$2" out tries
    for ((tries = 0; tries < 400; tries++)); do
        out="$(nsx "$ns" ip -o link show dev "$dev")"
        if [[ "$out" == *"state UP"* && "$out" != *"qdisc noop"* ]]; then
            return 0
        fi
        sleep 0.01
    done
    die "$dev in $ns did not come up"
}

up() {
    local n="${1:-}" mtu="${2:-9000}" i br
    if ! [[ "$n" =~ ^[0-9]+$ ]] || ((n < 1 || n > 250)); then
        die "N must be 1..250"
    fi
    if ! [[ "$mtu" =~ ^[0-9]+$ ]] || ((mtu < 68 || mtu > 65535)); then
        die "MTU must be 68..65535"
    fi
    command -v ip >/dev/null || die "iproute2 (ip) not found"
    down
    for ((i = 0; i < n; i++)); do
        new_ns "$prefix-h$i"
    done
    if ((n == 1)); then
        # A lone host still gets an omx0 (a veth whose peer is left down in
        # the same namespace), so tools find their interface.
        nsx "$prefix-h0" ip link add omx0 type veth peer name omx0p
        setup_host_link "$prefix-h0" 0 "$mtu"
    elif ((n == 2)); then
        ip link add omx0 netns "$prefix-h0" type veth peer name omx0 netns "$prefix-h1"
        setup_host_link "$prefix-h0" 0 "$mtu"
        setup_host_link "$prefix-h1" 1 "$mtu"
        wait_link_up "$prefix-h0" omx0
        wait_link_up "$prefix-h1" omx0
    else
        br="$prefix-br"
        new_ns "$br"
        nsx "$br" ip link add br0 type bridge stp_state 0 forward_delay 0
        nsx "$br" ip link set br0 mtu "$mtu"
        for ((i = 0; i < n; i++)); do
            nsx "$br" ip link add "h$i" type veth peer name omx0 netns "$prefix-h$i"
            nsx "$br" ip link set "h$i" mtu "$mtu"
            nsx "$br" ip link set "h$i" master br0
            nsx "$br" ip link set "h$i" up
            setup_host_link "$prefix-h$i" "$i" "$mtu"
        done
        nsx "$br" ip link set br0 mtu "$mtu"
        nsx "$br" ip link set br0 up
        wait_link_up "$br" br0
        for ((i = 0; i < n; i++)); do
            wait_link_up "$br" "h$i"
            wait_link_up "$prefix-h$i" omx0
        done
    fi
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
up)
    [[ $# -ge 1 && $# -le 2 ]] || usage
    up "$@"
    ;;
down)
    [[ $# -eq 0 ]] || usage
    down
    ;;
exec)
    [[ $# -ge 2 ]] || usage
    i="$1"
    shift
    [[ "$i" =~ ^[0-9]+$ ]] || die "host index must be a number"
    [[ -e "/run/netns/$prefix-h$i" || -e "/var/run/netns/$prefix-h$i" ]] || die "no host h$i (prefix $prefix); run: $0 up N"
    exec ip netns exec "$prefix-h$i" env OMX_HOSTNAME="h$i" "$@"
    ;;
list)
    [[ $# -eq 0 ]] || usage
    our_namespaces
    ;;
*)
    usage
    ;;
esac
