#!/usr/bin/env bash
# Sockets over omx (libomx_sockets.so, docs/SOCKETS.md) against kernel TCP, side by side
# in one run between the same two namespace hosts, at each MTU:
#   latency    sockperf ping-pong, median one-way latency per size, omx (both ends
#              preloaded) vs kernel TCP, and omx_perf (sleeping waits, -w) of the same
#              size as the floor of the omx path
#   bandwidth  iperf3 single stream, omx vs TCP, omx_perf 4 MiB (the omx floor) and
#              raw full-MTU frames one way (raw_stream: the link's floor, no protocol)
#   connrate   connect/accept/close per second (bench/sockets_connrate.c), omx vs TCP
#   syscalls   (not in the default PARTS) iperf3 with each end under `strace -c -f`:
#              system calls per MiB moved, per side and per call, into syscalls.csv
#              (strace slows both ends: read the counts, not the rate; they do not
#              depend on the machine's load as rates do)
# and the CPU time both processes used (from /proc), per message and per byte.
#
# Usage: bench/sockets.sh   (root; sockperf, iperf3, cc; builds target/release)
#   MTUS="9000 65535"      link MTUs
#   SIZES="16 64 256 1024 4096 16384 65000"   ping-pong sizes (bytes; sockperf takes
#                          messages up to 65000 B or so, not 64 KiB)
#   PARTS="latency bandwidth connrate"
#   SECS=3                 seconds per sockperf / iperf3 / connrate run
#   RUNS=1                 repetitions of every point
#   OUT=dir                result folder (default bench/results/sockets-<date-time>)
#   BEFORE_LIB=path        another libomx_sockets.so (an older build) measured beside the
#                          current one in the same run, as transport omx_before
# Outputs (in OUT): sockets.csv (one row per run: part, mtu, tool, transport, size,
# latency_us, bandwidth_MBps, msgs_per_s, cpu_s, cpu_us_per_msg, cpu_ns_per_byte),
# summary.md and sockets.png (bench/plot_sockets.py), machine.txt, logs/; with the
# syscalls part, syscalls.csv (mtu, run, transport, side, MiB, calls per MiB, call,
# calls of it per MiB; call "all" is the total).
# Not a test: it asserts nothing; numbers on this shared 2-core machine move with load
# (machine.txt records the load average at start and end).
set -euo pipefail
cd "$(dirname "$0")/.."
MTUS=${MTUS:-9000 65535}
SIZES=${SIZES:-16 64 256 1024 4096 16384 65000}
PARTS=${PARTS:-latency bandwidth connrate}
SECS=${SECS:-3}
RUNS=${RUNS:-1}
BIN=$PWD/target/release
H=scripts/hosts.sh
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxsockbench}
OUT=${OUT:-bench/results/sockets-$(date +%Y%m%d-%H%M%S)}
say() { echo "sockets: $*" >&2; }
. scripts/progress.sh

[ "$(id -u)" = 0 ] || { say "needs root (network namespaces)"; exit 1; }
for t in sockperf iperf3 cc; do
  command -v $t >/dev/null || { say "$t not installed"; exit 1; }
done
if [ -z "${NO_BUILD:-}" ]; then
  say "building omx-sockets and omx_perf (release)"
  cargo build --release -q -p omx-sockets -p omx-tools
  cargo build --release -q -p omx-transport --example raw_stream
fi
mkdir -p "$OUT/logs" "$OUT/bin"
cc -Wall -Werror -O2 -o "$OUT/bin/connrate" bench/sockets_connrate.c

STATE=$(mktemp -d /tmp/omx-sockbench.XXXXXX)
export OMX_STATE_DIR="$STATE"
server_pid=""
# Descendants of a pid (hosts.sh may run the program as a child of a wrapper).
tree() {
  local c
  echo "$1"
  for c in $(pgrep -P "$1"); do tree "$c"; done
}
# CPU seconds (user + system) used so far by a pid and its descendants.
tree_cpu() {
  local p t=0 tck
  tck=$(getconf CLK_TCK)
  for p in $(tree "$1"); do
    [ -r "/proc/$p/stat" ] || continue
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  awk -v t="$t" -v k="$tck" 'BEGIN {printf "%.3f", t / k}'
}
stop_server() {
  [ -n "$server_pid" ] || return 0
  local p
  for p in $(tree "$server_pid" | tac); do kill "$p" 2>/dev/null || true; done
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
cleanup() {
  stop_server
  $H down >/dev/null 2>&1 || true
  rm -rf "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "cores: $(nproc)"
  echo "kernel: $(uname -r)"
  echo "mtus: $MTUS"
  echo "sizes: $SIZES"
  echo "seconds per run: $SECS, runs: $RUNS"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/machine.txt"
CSV="$OUT/sockets.csv"
echo "part,mtu,run,tool,transport,size,latency_us,bandwidth_MBps,msgs_per_s,cpu_s,cpu_us_per_msg,cpu_ns_per_byte" >"$CSV"

# The launcher for PRELOAD (yes: this build's library; before: BEFORE_LIB; no: none).
preload() {
  case $1 in
    yes) echo "$BIN/omx_sockets" ;;
    before) echo env "OMX_SOCKETS_LIB=$BEFORE_LIB" "$BIN/omx_sockets" ;;
  esac
}
# start_server LOG PRELOAD CMD...: in h0, with the library or not.
start_server() {
  local log=$1 pre
  read -ra pre <<<"$(preload "$2")"
  shift 2
  $H exec 0 "${pre[@]}" "$@" >"$log" 2>&1 &
  server_pid=$!
  sleep 0.7
}
# client LOG PRELOAD CMD...: in h1; prints the client's CPU seconds (its children's
# times, as the shell's `times` reports them once it waited for them).
client() {
  local log=$1 pre
  read -ra pre <<<"$(preload "$2")"
  shift 2
  bash -c '"$@" >"$0" 2>&1; rc=$?; times >"$0.times"; exit $rc' "$log" \
    $H exec 1 "${pre[@]}" "$@" || return 1
  sed -n 2p "$log.times" | awk '{
    n = split($0, f, " "); t = 0
    for (i = 1; i <= n; i++) { split(f[i], ms, /[ms]/); t += ms[1] * 60 + ms[2] }
    printf "%.3f", t }'
}
row() { echo "$*" >>"$CSV"; }
transport_of() { case $1 in yes) echo omx ;; before) echo omx_before ;; *) echo tcp ;; esac; }

sockperf_pp() { # MTU RUN PRELOAD SIZE PORT
  local mtu=$1 run=$2 pre=$3 size=$4 port=$5 tag ccpu scpu0 scpu lat msgs
  tag="pp-$mtu-$(transport_of "$pre")-$size-$run"
  progress "$tag (sockperf ping-pong)"
  start_server "$OUT/logs/$tag.server" "$pre" sockperf sr --tcp -i 10.99.0.1 -p "$port"
  scpu0=$(tree_cpu "$server_pid")
  if ! ccpu=$(client "$OUT/logs/$tag.client" "$pre" sockperf pp --tcp -i 10.99.0.1 -p "$port" \
      -m "$size" -t "$SECS"); then
    say "$tag FAILED (see $OUT/logs/$tag.*)"; stop_server; return 0
  fi
  scpu=$(tree_cpu "$server_pid")
  stop_server
  lat=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$OUT/logs/$tag.client")
  msgs=$(sed -n 's/.*\[Total Run\].*SentMessages=\([0-9]*\).*/\1/p' "$OUT/logs/$tag.client")
  [ -n "$lat" ] && [ -n "$msgs" ] || { say "$tag: no result"; return 0; }
  # Per message: both processes' CPU over the round trips (two messages each).
  row "$(awk -v m="$mtu" -v r="$run" -v t="$(transport_of "$pre")" -v s="$size" -v l="$lat" \
    -v n="$msgs" -v c="$ccpu" -v s0="$scpu0" -v s1="$scpu" -v secs="$SECS" 'BEGIN {
      cpu = c + s1 - s0
      printf "latency,%s,%s,sockperf,%s,%s,%s,,%.0f,%.3f,%.2f,\n", m, r, t, s, l, 2 * n / secs, cpu, cpu * 1e6 / (2 * n) }')"
  say "$tag: median $lat us"
}

omx_perf_lat() { # MTU RUN: one omx_perf run over every size
  local mtu=$1 run=$2 tag="perf-$1-$2" s args=()
  progress "$tag (omx_perf -w)"
  start_server "$OUT/logs/$tag.server" no "$BIN/omx_perf" -w -s
  for s in $SIZES; do
    timeout 60 $H exec 1 "$BIN/omx_perf" -d h0:0 -w -L -S "$s" -E $((s + 1)) -N 3000 -W 200 \
      >>"$OUT/logs/$tag.client" 2>&1 || say "$tag $s B FAILED"
  done
  stop_server
  # length mean MB/s MiB/s p50 p99 max: the median, as sockperf's
  for s in $SIZES; do
    args=$(awk -v s="$s" '$1 == s && NF >= 7 {print $5}' "$OUT/logs/$tag.client" | tail -1)
    [ -n "$args" ] && row "latency,$mtu,$run,omx_perf,omx_raw,$s,$args,,,,,"
  done
}

iperf() { # MTU RUN PRELOAD PORT
  local mtu=$1 run=$2 pre=$3 port=$4 tag ccpu scpu0 scpu bits
  tag="iperf3-$mtu-$(transport_of "$pre")-$run"
  progress "$tag"
  start_server "$OUT/logs/$tag.server" "$pre" iperf3 -s -p "$port"
  scpu0=$(tree_cpu "$server_pid")
  if ! ccpu=$(client "$OUT/logs/$tag.client" "$pre" iperf3 -c 10.99.0.1 -p "$port" -t "$SECS"); then
    say "$tag FAILED (see $OUT/logs/$tag.*)"; stop_server; return 0
  fi
  scpu=$(tree_cpu "$server_pid")
  stop_server
  # The receiver's line: bits per second.
  bits=$(awk '/receiver/ {for (i = 1; i <= NF; i++) if ($i ~ /bits\/sec/) {v = $(i-1); u = $i}}
    END {m = (u ~ /^G/) ? 1e9 : (u ~ /^M/) ? 1e6 : (u ~ /^K/) ? 1e3 : 1; printf "%.0f", v * m}' \
    "$OUT/logs/$tag.client")
  row "$(awk -v m="$mtu" -v r="$run" -v t="$(transport_of "$pre")" -v b="$bits" -v c="$ccpu" \
    -v s0="$scpu0" -v s1="$scpu" -v secs="$SECS" 'BEGIN {
      cpu = c + s1 - s0; bytes = b / 8 * secs
      printf "bandwidth,%s,%s,iperf3,%s,131072,,%.1f,,%.3f,,%.3f\n", m, r, t, b / 8e6, cpu, cpu * 1e9 / bytes }')"
  say "$tag: $((bits / 1000000)) Mbit/s"
}

# strace_counts FILE MIB: "call per_MiB" lines of an `strace -c` summary, the total as
# "all" first.
strace_counts() {
  awk -v mib="$2" '$NF == "total" {printf "all %.2f\n", $4 / mib; next}
    $1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "syscall" {printf "%s %.2f\n", $NF, $4 / mib}' "$1" |
    sort -k2,2nr
}

iperf_syscalls() { # MTU RUN PRELOAD PORT
  local mtu=$1 run=$2 pre=$3 port=$4 tag mib side call per
  tag="syscalls-$mtu-$(transport_of "$pre")-$run"
  progress "$tag (iperf3 under strace -c)"
  start_server "$OUT/logs/$tag.server" "$pre" strace -c -f -o "$OUT/logs/$tag.server.strace" \
    iperf3 -s -1 -p "$port"
  if ! client "$OUT/logs/$tag.client" "$pre" strace -c -f -o "$OUT/logs/$tag.client.strace" \
      iperf3 -c 10.99.0.1 -p "$port" -t "$SECS" >/dev/null; then
    say "$tag FAILED (see $OUT/logs/$tag.*)"; stop_server; return 0
  fi
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  # The receiver's line: what it received (iperf3's byte units are binary).
  mib=$(awk '/receiver/ {for (i = 1; i <= NF; i++) if ($i ~ /Bytes$/) {v = $(i-1); u = $i}}
    END {m = (u ~ /^G/) ? 1024 : (u ~ /^M/) ? 1 : (u ~ /^K/) ? 1 / 1024 : 1 / 1048576
      printf "%.1f", v * m}' "$OUT/logs/$tag.client")
  [ "${mib%.*}" -gt 0 ] || { say "$tag: nothing moved"; return 0; }
  for side in server client; do
    [ -r "$OUT/logs/$tag.$side.strace" ] || continue
    strace_counts "$OUT/logs/$tag.$side.strace" "$mib" | while read -r call per; do
      echo "$mtu,$run,$(transport_of "$pre"),$side,$mib,$call,$per" >>"$SYSCSV"
    done
  done
  say "$tag: $(awk -F, -v m="$mtu" -v r="$run" -v t="$(transport_of "$pre")" \
    '$1 == m && $2 == r && $3 == t && $6 == "all" {printf "%s %s/MiB ", $4, $7}' "$SYSCSV")"
}

omx_perf_bw() { # MTU RUN
  local mtu=$1 run=$2 tag="perf-bw-$1-$2" mbs
  progress "$tag (omx_perf 4 MiB)"
  start_server "$OUT/logs/$tag.server" no "$BIN/omx_perf" -w
  timeout 60 $H exec 1 "$BIN/omx_perf" -d h0:0 -w -S 4194304 -E 4194305 -N 50 -W 5 \
    >"$OUT/logs/$tag.client" 2>&1 || say "$tag FAILED"
  stop_server
  mbs=$(awk '$1 == 4194304 {print $3}' "$OUT/logs/$tag.client" | tail -1)
  [ -n "$mbs" ] && row "bandwidth,$mtu,$run,omx_perf,omx_raw,4194304,,$mbs,,,,"
}

raw_floor() { # MTU RUN: raw full-MTU frames one way, no protocol (what the receiver saw)
  local mtu=$1 run=$2 tag="raw-bw-$1-$2" frames gbs
  progress "$tag (raw frames)"
  frames=$((2000000000 / mtu)) # about 2 GB
  $H exec 0 "$BIN/examples/raw_stream" recv omx0 $((mtu + 14)) "$frames" >"$OUT/logs/$tag.recv" 2>&1 &
  server_pid=$!
  sleep 0.4
  timeout 60 $H exec 1 "$BIN/examples/raw_stream" send omx0 $((mtu + 14)) "$frames" \
    >"$OUT/logs/$tag.send" 2>&1 || say "$tag FAILED"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  gbs=$(sed -n 's/.*frames, \([0-9.]*\) GB\/s.*/\1/p' "$OUT/logs/$tag.recv")
  [ -n "$gbs" ] && row "bandwidth,$mtu,$run,raw_stream,raw,$((mtu + 14)),,$(awk -v g="$gbs" 'BEGIN {printf "%.1f", g * 1000}'),,,,"
}

connrate() { # MTU RUN PRELOAD PORT
  local mtu=$1 run=$2 pre=$3 port=$4 tag ccpu scpu0 scpu line
  tag="connrate-$mtu-$(transport_of "$pre")-$run"
  progress "$tag"
  # Fresh hosts: the tens of thousands of TIME_WAIT sockets a previous run leaves make
  # the kernel's search for a free local port the cost of every connect (both stacks
  # set connections up through kernel TCP). Same MACs: the peers file stays right.
  $H down >/dev/null 2>&1 || true
  $H up 2 "$mtu" >/dev/null
  start_server "$OUT/logs/$tag.server" "$pre" "$OUT/bin/connrate" server "$port"
  scpu0=$(tree_cpu "$server_pid")
  if ! ccpu=$(client "$OUT/logs/$tag.client" "$pre" "$OUT/bin/connrate" client 10.99.0.1 "$port" "$SECS"); then
    say "$tag FAILED (see $OUT/logs/$tag.*)"; stop_server; return 0
  fi
  scpu=$(tree_cpu "$server_pid")
  stop_server
  line=$(grep '^connections' "$OUT/logs/$tag.client" || true)
  [ -n "$line" ] || { say "$tag: no result"; return 0; }
  row "$(echo "$line" | awk -v m="$mtu" -v r="$run" -v t="$(transport_of "$pre")" -v c="$ccpu" \
    -v s0="$scpu0" -v s1="$scpu" '{
      cpu = c + s1 - s0
      printf "connrate,%s,%s,connrate,%s,1,,,%s,%.3f,%.2f,\n", m, r, t, $6, cpu, cpu * 1e6 / $2 }')"
  say "$tag: $(echo "$line" | awk '{print $6}') connections/s"
}

has() { [[ " $PARTS " == *" $1 "* ]]; }
# The omx variants measured: this build, and BEFORE_LIB's beside it.
omx_pre=(yes)
if [ -n "${BEFORE_LIB:-}" ]; then
  [ -r "$BEFORE_LIB" ] || { say "BEFORE_LIB $BEFORE_LIB not readable"; exit 1; }
  omx_pre+=(before)
  echo "before: $BEFORE_LIB" >>"$OUT/machine.txt"
fi
variants=$((${#omx_pre[@]} + 1))
steps=0
has latency && steps=$((steps + $(wc -w <<<"$SIZES") * variants + 1))
has bandwidth && steps=$((steps + variants + 2))
has connrate && steps=$((steps + variants))
has syscalls && steps=$((steps + variants))
SYSCSV="$OUT/syscalls.csv"
if has syscalls; then
  command -v strace >/dev/null || { say "strace not installed"; exit 1; }
  echo "mtu,run,transport,side,MiB,call,per_MiB" >"$SYSCSV"
fi
progress_start sockets $((steps * RUNS * $(wc -w <<<"$MTUS")))
port=7100
for mtu in $MTUS; do
  $H down >/dev/null 2>&1 || true
  $H up 2 "$mtu" >/dev/null
  mac=$(ip netns exec "$OMX_NS_PREFIX-h0" cat /sys/class/net/omx0/address | cut -d: -f5)
  # Static peers: the first omx contact is quick (docs/SOCKETS.md, "Not yet").
  printf '02:00:00:00:%s:01 h0:0\n02:00:00:00:%s:02 h1:0\n' "$mac" "$mac" >"$STATE/peers"
  export OMX_PEERS_FILE="$STATE/peers" OMX_MTU=$mtu
  for run in $(seq 1 "$RUNS"); do
    if has latency; then
      for size in $SIZES; do
        # omx and TCP alternate so that drifts of the shared machine hit both.
        for pre in "${omx_pre[@]}" no; do
          sockperf_pp "$mtu" "$run" "$pre" "$size" $((port++))
        done
      done
      omx_perf_lat "$mtu" "$run"
    fi
    if has bandwidth; then
      for pre in "${omx_pre[@]}" no; do
        iperf "$mtu" "$run" "$pre" $((port++))
      done
      omx_perf_bw "$mtu" "$run"
      raw_floor "$mtu" "$run"
    fi
    if has connrate; then
      for pre in "${omx_pre[@]}" no; do
        connrate "$mtu" "$run" "$pre" $((port++))
      done
    fi
    if has syscalls; then
      for pre in "${omx_pre[@]}" no; do
        iperf_syscalls "$mtu" "$run" "$pre" $((port++))
      done
    fi
  done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
if python3 -c 'import matplotlib' 2>/dev/null; then
  python3 bench/plot_sockets.py "$OUT"
else
  python3 bench/plot_sockets.py --no-plot "$OUT"
fi
say "done: $OUT"
