#!/usr/bin/env bash
# Virtual Open-MX hosts on one machine: network namespaces joined by veth
# links, each host with an Ethernet interface named omx0.
#
#   scripts/hosts.sh up N [MTU] [LINKS]  create hosts h0..h{N-1} (MTU default
#                                        9000), each with LINKS interfaces (1)
#   scripts/hosts.sh down                remove them
#   scripts/hosts.sh exec I CMD...       run CMD in host I with OMX_HOSTNAME=hI
#   scripts/hosts.sh list                print the namespaces
#   scripts/hosts.sh ipv6                give omx0 of every host the IPv6 address
#                                        fd99::<i+1>/64 as well (no DAD, no RA)
#
# Each host gets omx0..omx{LINKS-1}, one per network (board), so link k of
# every host is on network k: several boards per host, the original's rails.
# N=2 joins h0 and h1 by one veth pair per link. N>2 adds a bridge br<k> per
# link in namespace ${prefix}-br with one veth leg per host and link.
# Namespaces are named ${OMX_NS_PREFIX:-omx}-h<i> (and -br), so concurrent
# users (tests) pick their own prefix. Every link is created directly inside
# its namespaces, so no interface name is ever taken in the root namespace.
# Interface omx<k> of host i has MAC 02:00:00:<k>:<prefix hash>:<i+1> and IPv4
# address 10.99.<k>.<i+1>/24; IPv6 stays off (a quiet link) unless `ipv6` turns it on.
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for `ip netns`).

set -euo pipefail

prefix="${OMX_NS_PREFIX:-omx}"

usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
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

# Configure omx<k> of host $1 (index $2) with MTU $3 (k = $4, default 0),
# then bring it up.
setup_host_link() {
    local ns="$1" i="$2" mtu="$3" k="${4:-0}"
    nsx "$ns" sysctl -qw "net.ipv6.conf.omx$k.disable_ipv6=1" 2>/dev/null || true
    nsx "$ns" ip link set "omx$k" mtu "$mtu"
    nsx "$ns" ip link set "omx$k" address \
        "02:00:00:$(printf '%02x' "$k"):$(prefix_byte):$(printf '%02x' $((i + 1)))"
    # IPv4 for programs that speak TCP/IP between hosts (sockets over omx, libfabric
    # by address): link k of hI is 10.99.k.(I+1); namespaces are private, so every
    # prefix may use the same subnets.
    nsx "$ns" ip addr add "10.99.$k.$((i + 1))/24" dev "omx$k"
    nsx "$ns" ip link set "omx$k" up
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
    local n="${1:-}" mtu="${2:-9000}" links="${3:-1}" i k br bridge leg
    if ! [[ "$n" =~ ^[0-9]+$ ]] || ((n < 1 || n > 250)); then
        die "N must be 1..250"
    fi
    if ! [[ "$mtu" =~ ^[0-9]+$ ]] || ((mtu < 68 || mtu > 65535)); then
        die "MTU must be 68..65535"
    fi
    if ! [[ "$links" =~ ^[0-9]+$ ]] || ((links < 1 || links > 8)); then
        die "LINKS must be 1..8"
    fi
    command -v ip >/dev/null || die "iproute2 (ip) not found"
    down
    for ((i = 0; i < n; i++)); do
        new_ns "$prefix-h$i"
    done
    if ((n == 1)); then
        # A lone host still gets its interfaces (veths whose peers are left down
        # in the same namespace), so tools find them.
        for ((k = 0; k < links; k++)); do
            nsx "$prefix-h0" ip link add "omx$k" type veth peer name "omx${k}p"
            setup_host_link "$prefix-h0" 0 "$mtu" "$k"
        done
    elif ((n == 2)); then
        for ((k = 0; k < links; k++)); do
            ip link add "omx$k" netns "$prefix-h0" type veth peer name "omx$k" netns "$prefix-h1"
            setup_host_link "$prefix-h0" 0 "$mtu" "$k"
            setup_host_link "$prefix-h1" 1 "$mtu" "$k"
        done
        for ((k = 0; k < links; k++)); do
            wait_link_up "$prefix-h0" "omx$k"
            wait_link_up "$prefix-h1" "omx$k"
        done
    else
        br="$prefix-br"
        new_ns "$br"
        for ((k = 0; k < links; k++)); do
            # Link 0 keeps the one-link names (br0, legs h<i>).
            bridge="br$k"
            nsx "$br" ip link add "$bridge" type bridge stp_state 0 forward_delay 0
            nsx "$br" ip link set "$bridge" mtu "$mtu"
            for ((i = 0; i < n; i++)); do
                leg="h$i"
                ((k == 0)) || leg="h$i-$k"
                nsx "$br" ip link add "$leg" type veth peer name "omx$k" netns "$prefix-h$i"
                nsx "$br" ip link set "$leg" mtu "$mtu"
                nsx "$br" ip link set "$leg" master "$bridge"
                nsx "$br" ip link set "$leg" up
                setup_host_link "$prefix-h$i" "$i" "$mtu" "$k"
            done
            nsx "$br" ip link set "$bridge" mtu "$mtu"
            nsx "$br" ip link set "$bridge" up
        done
        for ((k = 0; k < links; k++)); do
            wait_link_up "$br" "br$k"
            for ((i = 0; i < n; i++)); do
                leg="h$i"
                ((k == 0)) || leg="h$i-$k"
                wait_link_up "$br" "$leg"
                wait_link_up "$prefix-h$i" "omx$k"
            done
        done
    fi
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
up)
    [[ $# -ge 1 && $# -le 3 ]] || usage
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
ipv6)
    [[ $# -eq 0 ]] || usage
    for ns in $(our_namespaces); do
        [[ "$ns" =~ -h([0-9]+)$ ]] || continue
        i="${BASH_REMATCH[1]}"
        # No link-local address, router solicitation or DAD: the address is usable
        # at once and the link carries no IPv6 chatter of its own.
        nsx "$ns" ip link set omx0 addrgenmode none
        nsx "$ns" sysctl -qw net.ipv6.conf.omx0.accept_ra=0
        nsx "$ns" sysctl -qw net.ipv6.conf.omx0.disable_ipv6=0
        nsx "$ns" ip -6 addr replace "fd99::$((i + 1))/64" dev omx0 nodad
    done
    ;;
*)
    usage
    ;;
esac
