#!/usr/bin/env bash
# Side-by-side figures of omx and its peers on two namespaces joined by veth (issue 3's
# performance table): raw AF_PACKET frames (the floor), omx, UCX over TCP, qperf/iperf3
# TCP. Medians of RUNS runs. Usage: bench/peers.sh [MTU]   (root; installs peers via apt)
set -euo pipefail
cd "$(dirname "$0")/.."
MTU=${1:-${MTU:-9000}}
RUNS=${RUNS:-3}
BIN=target/release
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxbench}
H=scripts/hosts.sh
# The addresses scripts/hosts.sh gives h0 and h1 (one per host: Open MPI and others
# are confused by a second one on the interface).
IP0=10.99.0.1
IP1=10.99.0.2

need=()
for t in qperf:qperf iperf3:iperf3 ucx_perftest:ucx-utils; do
  command -v "${t%%:*}" >/dev/null 2>&1 || need+=("${t#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "bench: installing ${need[*]} (first run only)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
cargo build --release -q -p omx-tools -p omx-bench
cargo build --release -q -p omx-transport --examples

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; $H down >/dev/null 2>&1 || true; }
trap cleanup EXIT
$H up 2 "$MTU" >/dev/null
export OMX_MTU=$MTU

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else print a[int((NR+1)/2)]}'; }
bg0() { $H exec 0 "$@" >/dev/null 2>&1 & pids+=($!); sleep 0.4; }
# Stops what this script started: every process inside its own two namespaces.
stop_bg() {
  for ns in "$OMX_NS_PREFIX-h0" "$OMX_NS_PREFIX-h1"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pids=(); sleep 0.2
}
. scripts/progress.sh
progress_start "peers [MTU $MTU]" 7

raw_lat() { # $1 = spin|block
  for _ in $(seq "$RUNS"); do
    bg0 "$BIN/examples/raw_pingpong" pong omx0 8 20000 "$1"
    $H exec 1 "$BIN/examples/raw_pingpong" ping omx0 8 20000 "$1" | sed -n 's/.*median \([0-9.]*\).*/\1/p'
    stop_bg
  done | median
}
omx_lat() { # $@ = extra omx_perf flags
  for _ in $(seq "$RUNS"); do
    bg0 "$BIN/omx_perf" "$@"
    $H exec 1 "$BIN/omx_perf" -d h0:0 -S 8 -E 9 -N 20000 -W 1000 -P 0 "$@" | awk '$1==8 {print $2}'
    stop_bg
  done | median
}
omx_bw() {
  for _ in $(seq "$RUNS"); do
    bg0 "$BIN/omx_perf"
    $H exec 1 "$BIN/omx_perf" -d h0:0 -S 4194304 -E 4194305 -N 200 -W 10 -P 0 | awk '$1==4194304 {print $3}'
    stop_bg
  done | median
}
omx_rate() {
  for _ in $(seq "$RUNS"); do
    bg0 "$BIN/omx_msgrate" -s 8 -w 256
    $H exec 1 "$BIN/omx_msgrate" -d h0:0 -s 8 -n 1000000 -w 128 | awk '{print $2}'
    stop_bg
  done | median
}
ucx() { # $1 = test, $2 = size; prints latency us (tag_lat) or MB/s (tag_bw)
  for _ in $(seq "$RUNS"); do
    bg0 env UCX_TLS=tcp UCX_NET_DEVICES=omx0 ucx_perftest -p 13337
    out=$($H exec 1 env UCX_TLS=tcp UCX_NET_DEVICES=omx0 ucx_perftest $IP0 -p 13337 -t "$1" -s "$2" -n "$3" 2>/dev/null | grep -E '^ *Final:' || true)
    # Final: iters, then latency typical/avg/overall (us), bandwidth avg/overall (MB/s, 2^20), msg rate.
    if [ "$1" = tag_lat ]; then echo "$out" | awk '{print $4}'; else echo "$out" | awk '{printf "%.1f\n", $7*1.048576}'; fi
    stop_bg
  done | median
}
qperf_run() { # $1 = field (latency|bw), then qperf test args; prints us or MB/s
  local want=$1; shift
  for _ in $(seq "$RUNS"); do
    bg0 qperf
    $H exec 1 qperf -vu $IP0 "$@" 2>/dev/null | awk -v want="$want" '$1==want && $2=="=" {v=$3; u=$4; if (u=="ms") v*=1000; if (u=="ns") v/=1000; if (u=="GB/sec") v*=1000; if (u=="KB/sec") v/=1000; print v}'
    stop_bg
  done | median
}
iperf() {
  for _ in $(seq "$RUNS"); do
    bg0 iperf3 -s -1
    $H exec 1 iperf3 -c $IP0 -t 3 -J 2>/dev/null | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e6,1))'
    stop_bg
  done | median
}
raw_stream() {
  for _ in $(seq "$RUNS"); do
    fr=$(( MTU + 14 ))
    $H exec 0 "$BIN/examples/raw_stream" recv omx0 "$fr" 200000 > /tmp/omxbench-rs.$$ 2>&1 & pids+=($!); sleep 0.4
    $H exec 1 "$BIN/examples/raw_stream" send omx0 "$fr" 200000 | sed -n 's/.*= \([0-9.]*\) GB\/s.*/\1/p' | awk '{print $1*1000}'
    sleep 0.5; stop_bg
  done | median
}

progress "raw AF_PACKET ping-pong"; RAW_SPIN=$(raw_lat spin); RAW_BLOCK=$(raw_lat block)
progress "omx_perf latency"; OMX_POLL=$(omx_lat); OMX_WAIT=$(omx_lat -w)
progress "omx_perf 4 MiB"; OMX_BW=$(omx_bw)
progress "omx message rate"; OMX_RATE=$(omx_rate)
progress "UCX over TCP"; UCX_LAT=$(ucx tag_lat 8 20000); UCX_BW=$(ucx tag_bw 4194304 200)
progress "qperf"; QPERF_LAT=$(qperf_run latency -m 8 tcp_lat); QPERF_BW=$(qperf_run bw -m 4M tcp_bw); QPERF_RATE=$(qperf_run bw -m 8 tcp_bw)
progress "iperf3"; IPERF_BW=$(iperf)
progress "raw frame stream"; RAW_STREAM=$(raw_stream)

ratio() { python3 -c "import sys; a,b=float('$1'),float('$2'); print('%.2f' % (a/b) if b else 'nan')" 2>/dev/null || echo nan; }
best_tcp=$(printf '%s\n%s\n%s\n' "$QPERF_BW" "$IPERF_BW" "$UCX_BW" | sort -g | tail -1)
cat <<EOF2
## Peers at MTU $MTU (medians of $RUNS runs, one-way latency, MB = 10^6 B)

| metric | omx | peer | peer value | omx / peer |
|---|---|---|---|---|
| 8 B latency, polling (us) | $OMX_POLL | raw AF_PACKET busy-poll (ring, median) | $RAW_SPIN | $(ratio "$OMX_POLL" "$RAW_SPIN") |
| 8 B latency, polling (us) | $OMX_POLL | UCX tag_lat over TCP | $UCX_LAT | $(ratio "$OMX_POLL" "$UCX_LAT") |
| 8 B latency, blocking -w (us) | $OMX_WAIT | raw AF_PACKET blocking (median) | $RAW_BLOCK | $(ratio "$OMX_WAIT" "$RAW_BLOCK") |
| 8 B latency, blocking -w (us) | $OMX_WAIT | qperf tcp_lat (blocking) | $QPERF_LAT | $(ratio "$OMX_WAIT" "$QPERF_LAT") |
| 4 MiB ping-pong (MB/s) | $OMX_BW | best TCP stream (qperf $QPERF_BW, iperf3 $IPERF_BW, UCX tag_bw $UCX_BW) | $best_tcp | $(ratio "$OMX_BW" "$best_tcp") |
| 4 MiB ping-pong (MB/s) | $OMX_BW | raw full-MTU frame stream (no flow control) | $RAW_STREAM | $(ratio "$OMX_BW" "$RAW_STREAM") |
| 8 B message rate (msg/s) | $OMX_RATE | qperf tcp_bw -m 8 (bytes/8) | $(python3 -c "print(int(float('$QPERF_RATE')*1e6/8))" 2>/dev/null || echo nan) | $(ratio "$OMX_RATE" "$(python3 -c "print(float('$QPERF_RATE')*1e6/8)" 2>/dev/null || echo 0)") |
EOF2
