#!/usr/bin/env bash
# The main job (`make demo`, root, about a minute once built): two hosts (network
# namespaces joined by veth) exchange messages of every size from 0 B to 4 MiB over raw
# Ethernet frames with omx_perf, data checked once, then timed in PASSES passes whose
# per-length median is printed beside the raw-frame floor measured in the same run
# (bare AF_PACKET frames, no protocol: bench/run.sh's raw_pingpong and raw_stream), with
# a legend. Tears the hosts down at the end.
#   MTU=9000  link MTU      PASSES=3  timed passes      ITER=200  round trips per length
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
MTU=${MTU:-9000}
ITER=${ITER:-200}
PASSES=${PASSES:-3}
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxdemo}
H=scripts/hosts.sh

if [ "$(id -u)" -ne 0 ]; then
  echo "demo: needs root (network namespaces and raw packet sockets)" >&2
  exit 1
fi
for b in omx_perf examples/raw_pingpong examples/raw_stream; do
  [ -x "$BIN/$b" ] || { echo "demo: $BIN/$b missing: run make demo" >&2; exit 1; }
done
work=$(mktemp -d /tmp/omx-demo.XXXXXX)
# Every program runs with a private state directory: nothing from other runs shows up.
export OMX_STATE_DIR=$work/state
mkdir -p "$OMX_STATE_DIR"
bg=()
cleanup() {
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
  $H down >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. scripts/progress.sh
progress_start demo $((2 + 3 * PASSES))
T0=$SECONDS
say() { progress "$@"; }
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }

# Starts "$@" in h0 in the background, and returns once it has opened its packet socket
# (EtherType 0x86DF listed in h0's /proc/net/packet), so no timing guess is needed.
start_in_h0() {
  local before
  before=$($H exec 0 grep -ci ' 86df ' /proc/net/packet || true)
  $H exec 0 "$@" >"$work/h0.out" 2>&1 &
  bg=($!)
  local until=$((SECONDS + 30))
  while [ "$($H exec 0 grep -ci ' 86df ' /proc/net/packet || true)" -le "$before" ]; do
    kill -0 "${bg[0]}" 2>/dev/null || { cat "$work/h0.out" >&2; return 1; }
    [ $SECONDS -lt $until ] || { echo "demo: $1 did not start in h0" >&2; return 1; }
    sleep 0.05
  done
}
wait_h0() { wait "${bg[0]}" 2>/dev/null || true; bg=(); }

say "starting hosts h0 and h1 (network namespaces joined by veth, MTU $MTU)"
$H down >/dev/null 2>&1 || true
$H up 2 "$MTU" >/dev/null
export OMX_MTU=$MTU

say "data check: omx_perf -c, every length 0 B to 4 MiB, h1 -> h0 and back"
start_in_h0 "$BIN/omx_perf"
$H exec 1 "$BIN/omx_perf" -d h0:0 -N 20 -W 2 -P 0 -c >/dev/null
wait_h0
echo "           every length delivered byte-identical both ways"

for p in $(seq "$PASSES"); do
  say "omx_perf pass $p of $PASSES: 0 B to 4 MiB, $ITER round trips per length"
  start_in_h0 "$BIN/omx_perf"
  $H exec 1 "$BIN/omx_perf" -d h0:0 -N "$ITER" -P 0 |
    awk '$1 ~ /^[0-9]+$/ {print $1, $2, $3, $4}' >"$work/omx.$p"
  wait_h0
  say "raw-frame floor pass $p of $PASSES: 8 B ping-pong (raw_pingpong)"
  start_in_h0 "$BIN/examples/raw_pingpong" pong omx0 8 20000 spin
  $H exec 1 "$BIN/examples/raw_pingpong" ping omx0 8 20000 spin |
    sed -n 's/.*median \([0-9.]*\).*/\1/p' >>"$work/raw_lat"
  wait_h0
  say "raw-frame floor pass $p of $PASSES: one-way stream of $((MTU + 14)) B frames (raw_stream)"
  start_in_h0 "$BIN/examples/raw_stream" recv omx0 $((MTU + 14)) 200000
  $H exec 1 "$BIN/examples/raw_stream" send omx0 $((MTU + 14)) 200000 >/dev/null
  wait_h0
  sed -n 's/.* frames, \([0-9.]*\) GB\/s.*/\1/p' "$work/h0.out" | awk '{printf "%.0f\n", $1 * 1000}' >>"$work/raw_bw"
done

# Per length: the median of the passes' latencies (bandwidth follows from it).
for f in "$work"/omx.*; do cat "$f"; done | awk '{print $1}' | sort -nu >"$work/lengths"
echo
echo "omx_perf h1 -> h0 over veth, MTU $MTU: median of $PASSES passes, each pass the mean of $ITER round trips"
printf '%9s %9s %9s %9s\n' length "lat(us)" "MB/s" "MiB/s"
while read -r len; do
  lat=$(awk -v l="$len" '$1 == l {print $2}' "$work"/omx.* | median)
  awk -v l="$len" -v t="$lat" 'BEGIN {
    bw = (t > 0) ? l / t : 0
    printf "%9d %9.3f %9.2f %9.2f\n", l, t, bw, bw * 1e6 / 1048576 }'
done <"$work/lengths"
lat8=$(awk '$1 == 8 {print $2}' "$work"/omx.* | median)
bw4m=$(awk '$1 == 4194304 {print $3}' "$work"/omx.* | median)
raw_lat=$(median <"$work/raw_lat")
raw_bw=$(median <"$work/raw_bw")
echo
echo "raw-frame floor, same link, same run (bare AF_PACKET frames, no omx; median of $PASSES passes):"
printf '  8 B one-way latency %8s us    (raw_pingpong: spinning receiver, median of 20000 round trips, halved)\n' "${raw_lat:-?}"
printf '  bandwidth           %8s MB/s  (raw_stream: MTU-size frames one way, no flow control, as received)\n' "${raw_bw:-?}"
echo
echo "legend:"
echo "  lat(us)  one-way latency in microseconds: half a round trip of omx_perf's ping-pong"
echo "  MB/s     length / lat(us) = 10^6 bytes per second moved one way; MiB/s the same in 2^20 bytes"
echo "  floor    what bare frames do on this link with no matching, reliability, flow control or"
echo "           data placement: omx cannot go below its latency; its streaming rate is a rough ceiling"
echo "  figures vary 10-15% from run to run on an idle machine, far more while other work runs;"
echo "  make bench compares omx with more peers (TCP, libfabric, UCX)"
echo
echo "summary: 8 B one-way latency ${lat8:-?} us (floor ${raw_lat:-?} us), 4 MiB ping-pong bandwidth ${bw4m:-?} MB/s (raw stream ${raw_bw:-?} MB/s); $((SECONDS - T0)) s"
