# Frame loss injected outside omx, sourced by bench/loss.sh and bench/mpi_pingpong.sh: an
# nftables netdev ingress chain on omx0 of hosts h0 and h1 (namespaces $OMX_NS_PREFIX-h0,
# -h1) drops every arriving frame, whatever its EtherType (omx, TCP, ARP), with the same
# independent probability. (This kernel has neither netem nor tc classifiers; veth counts
# a frame in rx_packets before the ingress hook, so rx_packets includes the dropped ones.)
#   lossy_setup        create the chains (installs nftables with apt when nft is missing)
#   set_loss PERCENT   drop PERCENT% of the frames from now on (resolution 0.01%)
#   lossy_frames       "received dropped": frames that reached omx0 and frames the rules
#                      dropped, summed over both hosts

lossy_nsx() { local i=$1; shift; ip netns exec "$OMX_NS_PREFIX-h$i" "$@"; }

lossy_setup() {
  local i
  if ! command -v nft >/dev/null 2>&1; then
    echo "lossy: installing nftables with apt" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null
  fi
  for i in 0 1; do
    lossy_nsx $i nft add table netdev lossy
    lossy_nsx $i nft add chain netdev lossy in '{ type filter hook ingress device omx0 priority 0; }'
  done
}

set_loss() {
  local n i
  n=$(awk -v p="$1" 'BEGIN { printf "%d", p * 100 + 0.5 }')
  for i in 0 1; do
    lossy_nsx $i nft flush chain netdev lossy in
    lossy_nsx $i nft add rule netdev lossy in numgen random mod 10000 '<' "$n" counter drop
  done
}

lossy_frames() {
  local i rx=0 dr=0 r d
  for i in 0 1; do
    r=$(lossy_nsx $i cat /sys/class/net/omx0/statistics/rx_packets)
    d=$(lossy_nsx $i nft list chain netdev lossy in | sed -n 's/.*counter packets \([0-9]*\).*/\1/p')
    rx=$((rx + r)); dr=$((dr + ${d:-0}))
  done
  echo "$rx $dr"
}
