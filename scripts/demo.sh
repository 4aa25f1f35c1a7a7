#!/usr/bin/env bash
# The main job: two hosts (network namespaces joined by veth) exchange messages of every
# size from 0 B to 4 MiB over raw Ethernet frames with omx_perf; prints the table and a
# one-line summary, then tears the hosts down.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
MTU=${MTU:-9000}
ITER=${ITER:-200}
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxdemo}

if [ "$(id -u)" -ne 0 ]; then
  echo "demo: needs root (network namespaces and raw packet sockets)" >&2
  exit 1
fi
cleanup() {
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
  scripts/hosts.sh down >/dev/null 2>&1 || true
}
trap cleanup EXIT
scripts/hosts.sh up 2 "$MTU" >/dev/null
export OMX_MTU=$MTU
scripts/hosts.sh exec 0 "$BIN/omx_perf" >/tmp/omx-demo-server.$$ 2>&1 &
server_pid=$!
scripts/hosts.sh exec 1 "$BIN/omx_perf" -d h0:0 -N 20 -W 2 -P 0 -c >/dev/null
echo "data check: every length from 0 B to 4 MiB delivered byte-identical (omx_perf -c)"
wait "$server_pid" 2>/dev/null || true
scripts/hosts.sh exec 0 "$BIN/omx_perf" >/tmp/omx-demo-server.$$ 2>&1 &
server_pid=$!
out=$(scripts/hosts.sh exec 1 "$BIN/omx_perf" -d h0:0 -N "$ITER" -P 0)
echo "omx_perf h1 -> h0 over veth, MTU $MTU, $ITER round trips per length"
printf '%9s %9s %9s %9s\n' length "lat(us)" "MB/s" "MiB/s"
echo "$out" | tail -n +2
echo "$out" | awk '$1==8 {lat=$2} $1==4194304 {bw=$3} END {printf "summary: 8 B one-way latency %s us, 4 MiB ping-pong bandwidth %s MB/s\n", lat, bw}'
wait "$server_pid" 2>/dev/null || true
rm -f /tmp/omx-demo-server.$$
