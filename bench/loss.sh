#!/usr/bin/env bash
# Loss benchmark (`make bench-loss`): omx against kernel TCP under the same injected frame
# loss, side by side in one run, between two namespace hosts (scripts/hosts.sh) at MTU 9000.
# Loss is injected by nftables on the ingress of omx0 in both hosts (bench/lossy.sh):
# every frame arriving on either host, omx or TCP, is dropped with the same independent
# probability, outside omx. At each loss rate:
#   omx_bw   4 MiB omx_perf ping-pong, MB/s (length / half round trip)
#   tcp_bw   4 MiB qperf tcp_bw (one-way stream of 4 MiB messages), MB/s
#   tcp_ppbw 4 MiB bench/tcp_pingpong.c ping-pong (the shape of omx_bw), MB/s
#   omx_lat  8 B omx_perf -L ping-pong: mean, median, p99, max of the half round trip
#   tcp_lat  8 B tcp_pingpong -L (TCP_NODELAY), the same columns
#
# Usage: bench/loss.sh   (root; installs nftables and qperf with apt when missing)
#   LOSSES="0 0.1 1 2 5"   loss rates in percent (resolution 0.01%)
#   RUNS=1                 runs of the whole set (medians in the summary)
#   LAT_ITERS=3000         timed 8 B round trips per point
#   BW_ITERS=20            timed 4 MiB round trips per omx/TCP ping-pong point
#   TCP_SECONDS=3          qperf tcp_bw duration
#   STEP_TIMEOUT=240       seconds before a point is recorded as failed
#   OMX_PERF_FLAGS=        extra omx_perf flags on both sides, e.g. -w (sleep in waits
#                          instead of busy polling: kinder to a loaded machine)
#   OUT=dir                result folder (default bench/results/loss-<date-time>)
# Outputs (in OUT): loss.csv (one row per point and run, with the frames each host received
# and the rule dropped during the point), summary.md (table, targets), loss.png,
# machine.txt (uptime at start and end), logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
MTU=9000
LOSSES=${LOSSES:-0 0.1 1 2 5}
RUNS=${RUNS:-1}
LAT_ITERS=${LAT_ITERS:-3000}
BW_ITERS=${BW_ITERS:-20}
TCP_SECONDS=${TCP_SECONDS:-3}
STEP_TIMEOUT=${STEP_TIMEOUT:-240}
read -r -a PERF_FLAGS <<<"${OMX_PERF_FLAGS:-}"
BIN=target/release
H=scripts/hosts.sh
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxloss}
# The addresses scripts/hosts.sh gives h0 and h1 (one per host: Open MPI and others
# are confused by a second one on the interface).
IP0=10.99.0.1
IP1=10.99.0.2
OUT=${OUT:-bench/results/loss-$(date +%Y%m%d-%H%M%S)}
T0=$(date +%s)
say() { echo "loss: $*" >&2; }
. scripts/progress.sh

[ "$(id -u)" = 0 ] || { say "needs root (network namespaces, nftables)"; exit 1; }
need=()
for t in nft:nftables qperf:qperf; do
  command -v "${t%%:*}" >/dev/null 2>&1 || need+=("${t#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]} with apt (first run only)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
python3 -c 'import matplotlib' 2>/dev/null || say "python3 lacks matplotlib: no PNG (pip install matplotlib)"

say "building omx_perf (release) and tcp_pingpong"
cargo build --release -q -p omx-tools --bin omx_perf
TCPPP=target/bench/tcp_pingpong
mkdir -p target/bench
${CC:-cc} -O2 -Wall -Wextra -Werror -o "$TCPPP" bench/tcp_pingpong.c

# ---- private state, hosts, cleanup of what we started ----
STATE=$(mktemp -d /tmp/omx-loss.XXXXXX)
export OMX_STATE_DIR="$STATE"
unset OMX_FAULTS OMX_MTU 2>/dev/null || true
mkdir -p "$OUT/logs"
server_pid=""
server_stays=0 # qperf serves until killed; the others exit after their client
stop_server() {
  [ -n "$server_pid" ] || return 0
  local i
  for ((i = 0; i < 30 && server_stays == 0; i++)); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
cleanup() {
  # Only the server we started (hosts.sh execs into the program: its pid is ours).
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  $H down >/dev/null 2>&1 || true
  rm -rf "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
$H up 2 $MTU >/dev/null

# ---- loss injection (bench/lossy.sh) ----
. bench/lossy.sh
lossy_setup

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "cores: $(nproc)"
  echo "kernel: $(uname -r)"
  echo "mtu: $MTU"
  echo "losses (%): $LOSSES"
  echo "omx_perf flags: -v on both sides, -L on the client, OMX_PERF_FLAGS: ${OMX_PERF_FLAGS:-none}"
  echo "runs: $RUNS, 8 B round trips: $LAT_ITERS, 4 MiB round trips: $BW_ITERS, qperf: ${TCP_SECONDS}s"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "uncommitted under crates/ and bench/: $(git status --short -- crates bench 2>/dev/null | awk '{printf "%s ", $2}')"
  echo "uptime at start: $(uptime)"
} > "$OUT/machine.txt"

CSV="$OUT/loss.csv"
echo "loss_pct,test,tool,transport,size,run,status,seconds,latency_us,p50_us,p99_us,max_us,bandwidth_MBps,frames_rx,frames_dropped" > "$CSV"

start_server() { # log cmd...
  local log="$1"; shift
  $H exec 0 "$@" > "$log" 2>&1 &
  server_pid=$!
  server_stays=0
  [ "$(basename "$1")" != qperf ] || server_stays=1
  sleep 0.4
}

# point LOSS TEST TOOL TRANSPORT SIZE RUN PARSER CLIENT_CMD...: runs the client in h1
# (the server, if any, is already up), parses its output into
# "latency p50 p99 max bandwidth" (empty fields allowed) and appends a row.
point() {
  local loss=$1 test=$2 tool=$3 tr=$4 size=$5 run=$6 parser=$7; shift 7
  local tag="$test-$loss-$run" st=ok before after t1 vals
  before=$(lossy_frames); t1=$(date +%s.%N)
  if ! timeout "$STEP_TIMEOUT" $H exec 1 "$@" > "$OUT/logs/$tag.client" 2>&1; then st=failed; fi
  stop_server
  after=$(lossy_frames)
  vals=$($parser < "$OUT/logs/$tag.client" || true)
  [ -n "$vals" ] || st=failed
  [ "$st" = ok ] || vals=",,,,"
  local secs rx dr
  secs=$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  read -r rx dr <<<"$(awk -v b="$before" -v a="$after" 'BEGIN { split(b, x, " "); split(a, y, " "); print y[1] - x[1], y[2] - x[2] }')"
  echo "$loss,$test,$tool,$tr,$size,$run,$st,$secs,$vals,$rx,$dr" >> "$CSV"
  say "$(printf '%4s%% %-8s %-7s %s  (%ss, %s of %s frames dropped)' "$loss" "$test" "$st" "$vals" "$secs" "$dr" "$rx")"
}

# omx_perf client rows: by header name, so -v's extra columns do not matter.
parse_omx() {
  awk -v want="$1" '
    /length/ && /lat\(us\)/ { for (i = 1; i <= NF; i++) col[$i] = i; next }
    col["length"] && $1 == want {
      p = col["p50(us)"] ? $col["p50(us)"] : ""; q = col["p99(us)"] ? $col["p99(us)"] : ""
      m = col["max(us)"] ? $col["max(us)"] : ""
      print $col["lat(us)"] "," p "," q "," m "," $col["MB/s"] }'
}
parse_omx_bw() { parse_omx 4194304; }
parse_omx_lat() { parse_omx 8; }
# tcp_pingpong: size lat MB/s [p50 p99 max]
parse_tcppp() { awk 'NF >= 3 { print $2 "," $4 "," $5 "," $6 "," $3 }'; }
# qperf -v tcp_bw: "bw = 583 MB/sec"
parse_qperf() {
  awk '$1 == "bw" && $2 == "=" { v = $3; u = $4; gsub(",", "", v)
         if (u == "GB/sec") v *= 1000; if (u == "KB/sec") v /= 1000; if (u == "bytes/sec") v /= 1e6
         print ",,,," v }'
}

omx_server=("$BIN/omx_perf" -v "${PERF_FLAGS[@]}")
omx_client=("$BIN/omx_perf" -d h0:0 -P 0 -v "${PERF_FLAGS[@]}")
progress_start loss $((RUNS * $(wc -w <<<"$LOSSES") * 5))
for run in $(seq 1 "$RUNS"); do
  for loss in $LOSSES; do
    set_loss "$loss"
    progress "$loss% run $run: omx 4 MiB"
    start_server "$OUT/logs/omx_bw-$loss-$run.server" "${omx_server[@]}"
    point "$loss" omx_bw omx_perf omx 4194304 "$run" parse_omx_bw \
      "${omx_client[@]}" -S 4194304 -E 4194305 -N "$BW_ITERS" -W 2 -L
    progress "$loss% run $run: TCP 4 MiB (qperf tcp_bw)"
    start_server "$OUT/logs/tcp_bw-$loss-$run.server" qperf
    point "$loss" tcp_bw qperf tcp 4194304 "$run" parse_qperf \
      qperf -v -t "$TCP_SECONDS" $IP0 -m 4194304 tcp_bw
    progress "$loss% run $run: TCP 4 MiB ping-pong"
    start_server "$OUT/logs/tcp_ppbw-$loss-$run.server" "$TCPPP" server 13338
    # tcp_pingpong runs ITERS/50 round trips at 1 MiB and more.
    point "$loss" tcp_ppbw tcp_pingpong tcp 4194304 "$run" parse_tcppp \
      "$TCPPP" client $IP0 13338 4194304 4194304 $((BW_ITERS * 50)) -L
    progress "$loss% run $run: omx 8 B"
    start_server "$OUT/logs/omx_lat-$loss-$run.server" "${omx_server[@]}"
    point "$loss" omx_lat omx_perf omx 8 "$run" parse_omx_lat \
      "${omx_client[@]}" -S 8 -E 9 -N "$LAT_ITERS" -W 100 -L
    progress "$loss% run $run: TCP 8 B"
    start_server "$OUT/logs/tcp_lat-$loss-$run.server" "$TCPPP" server 13338
    point "$loss" tcp_lat tcp_pingpong tcp 8 "$run" parse_tcppp \
      "$TCPPP" client $IP0 13338 8 8 "$LAT_ITERS" -L
  done
done

echo "uptime at end: $(uptime)" >> "$OUT/machine.txt"
echo "elapsed: $(( $(date +%s) - T0 )) s" >> "$OUT/machine.txt"
if python3 -c 'import matplotlib' 2>/dev/null; then
  python3 bench/plot_loss.py "$OUT"
else
  python3 bench/plot_loss.py --no-plot "$OUT"
fi
say "done in $(( $(date +%s) - T0 )) s: $OUT"
