#!/usr/bin/env bash
# run.sh - sockets over omx (libomx_sockets.so, docs/SOCKETS.md): unmodified programs
# between two namespace hosts, preloaded with omx_sockets or not; asserts the bytes
# arrive intact and whether the stream was carried on omx or stayed on TCP.
#
#   tests/sockets/run.sh     (root; python3; target/release built, or OMX_SOCKETS_BIN)
#
# Prints "PASS name" / "FAIL name" per check, then "N passed, M failed, K skipped".
# Environment: OMX_NS_PREFIX (namespaces, default omxsock), TEST_TIMEOUT (120 s per step).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxsock}
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
hosts="$root/scripts/hosts.sh"
bin="${OMX_SOCKETS_BIN:-$root/target/release}"
# shellcheck source=tests/runner.sh
. "$root/tests/runner.sh"
runner_start sockets
all=(carried-both-ways plain-server plain-client)

if [ "$(id -u)" -ne 0 ]; then skip_all "needs root (namespaces, packet sockets)"; fi
command -v python3 >/dev/null || skip_all "python3 not installed"
for f in omx_sockets libomx_sockets.so; do
  [ -e "$bin/$f" ] || skip_all "$bin/$f not built (cargo build --release -p omx-sockets)"
done
export OMX_STATE_DIR="$tmp/state"
mkdir -p "$OMX_STATE_DIR"
hosts_up 2 9000
log="$tmp/log"
mac_byte=$(ip netns exec "$OMX_NS_PREFIX-h0" cat /sys/class/net/omx0/address | cut -d: -f5)
# Static peers: the first omx contact between two fresh processes is then quick, so the
# client sees the server's hello before its first write (OMX_SOCKETS_HELLO_WAIT_MS).
printf '02:00:00:00:%s:01 h0:0\n02:00:00:00:%s:02 h1:0\n' "$mac_byte" "$mac_byte" >"$tmp/peers"
export OMX_PEERS_FILE="$tmp/peers" OMX_SOCKETS_VERBOSE=1
launch="$bin/omx_sockets"

# stream NAME SERVER_PRELOAD CLIENT_PRELOAD BYTES: one checked stream h1 -> h0.
stream() {
  local name=$1 sp=$2 cp=$3 size=$4 pre0=() pre1=() p0
  [ "$sp" = yes ] && pre0=("$launch")
  [ "$cp" = yes ] && pre1=("$launch")
  in_host 0 "${pre0[@]}" python3 "$here/stream.py" server >"$log/$name.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5556 "$p0" || return 1
  in_host 1 "${pre1[@]}" python3 "$here/stream.py" client "$(host_ip 0)" "$size" >"$log/$name.client" 2>&1 &&
    wait "$p0"
}

if want carried-both-ways; then
  # The client waits for the hello as long as it takes (an event, not a time: a loaded
  # machine may take seconds); the fallback cases keep the default wait, as a client
  # cannot tell a server without the library from a slow one.
  OMX_SOCKETS_HELLO_WAIT_MS=120000 stream carried-both-ways yes yes $((64 << 20)) &&
    grep -q 'accepted on omx' "$log/carried-both-ways.server" &&
    grep -q 'carried on omx .* 0 bytes before' "$log/carried-both-ways.client"
  report carried-both-ways $? "$log/carried-both-ways.server" "$log/carried-both-ways.client"
fi
if want plain-server; then
  stream plain-server no yes $((8 << 20)) && ! grep -q 'on omx' "$log/plain-server.client"
  report plain-server $? "$log/plain-server.server" "$log/plain-server.client"
fi
if want plain-client; then
  stream plain-client yes no $((8 << 20)) && ! grep -q 'on omx' "$log/plain-client.server"
  report plain-client $? "$log/plain-client.server" "$log/plain-client.client"
fi
summary
