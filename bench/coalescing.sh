#!/usr/bin/env bash
# Wake-up coalescing benchmark, in the shape of the tables of the Open-MX interrupt
# coalescing paper (Goglin, "Finding a tradeoff between host interrupt load and MPI
# latency over Ethernet"), with sleeping threads in place of interrupts:
#   Table I   message rate (msg/s) and receiver wake-ups per message at 0 B, 32 KiB, 1 MiB
#   Table II  234 KiB (239616 B) message: transfer time and wake-ups
#   latency   8 B ping-pong, half round trip
# for each OMX_COALESCING policy (off, timer, marked, stream), with OMX_WAITSPIN_US=0 and
# blocking waits on both sides (omx_msgrate --sleep, omx_perf -w), MTU 1500 as the paper.
# Each point runs RUNS times (3); summary.md and coalescing.png show medians.
#
# Usage: bench/coalescing.sh   (root; about 80 s with RUNS=3 and the build cached, 190 s with RUNS=7)
#   RUNS=3              repetitions of every point
#   POLICIES="off timer marked stream"
#   OMX_COALESCING_US   the policies' timer (runtime default 50 us when unset)
#   OUT=dir             result folder (default bench/results/coalescing-<date-time>)
#
# Outputs (in OUT): msgrate.csv (Table I and the 234 KiB one-way transfer, one row per
# run, both sides' wake-ups), pingpong.csv (omx_perf runs: 8 B and 234 KiB -U),
# medians.csv, summary.md, coalescing.png, machine.txt, logs/ (every program's output).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
POLICIES=${POLICIES:-off timer marked stream}
MTU=1500
BIN=target/release
H=scripts/hosts.sh
export OMX_NS_PREFIX=omxcoal
OUT=${OUT:-bench/results/coalescing-$(date +%Y%m%d-%H%M%S)}
T0=$(date +%s)
say() { echo "coalescing: $*" >&2; }
. scripts/progress.sh

[ "$(id -u)" = 0 ] || { say "needs root (network namespaces)"; exit 1; }
python3 -c 'import matplotlib' 2>/dev/null || say "python3 lacks matplotlib: no PNG (pip install matplotlib)"

say "building omx_perf and omx_msgrate (release)"
cargo build --release -q -p omx-tools -p omx-bench

# ---- private state, hosts, cleanup of what we started ----
STATE=$(mktemp -d /tmp/omx-coal.XXXXXX)
export OMX_STATE_DIR="$STATE"
export OMX_MTU=$MTU OMX_WAITSPIN_US=0
unset OMX_WAITSPIN OMX_BUNDLE OMX_PROGRESS_THREAD 2>/dev/null || true
mkdir -p "$OUT/logs"
server_pid=""
stop_server() {
  [ -n "$server_pid" ] || return 0
  local i
  for ((i = 0; i < 50; i++)); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$server_pid" 2>/dev/null; then
    say "server $server_pid still running: killing it"
    kill "$server_pid" 2>/dev/null || true
    sleep 0.2
    kill -9 "$server_pid" 2>/dev/null || true
  fi
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
cleanup() {
  # Only the server we started (its pid is the program itself: hosts.sh execs into it).
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  $H down >/dev/null 2>&1 || true
  rm -rf "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
$H up 2 $MTU >/dev/null

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "cores: $(nproc)"
  echo "kernel: $(uname -r)"
  echo "mtu: $MTU"
  echo "runs: $RUNS"
  echo "policies: $POLICIES"
  echo "OMX_WAITSPIN_US: $OMX_WAITSPIN_US"
  echo "OMX_COALESCING_US: ${OMX_COALESCING_US:-50 (default)}"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "uncommitted under crates/ and bench/omx-bench/: $(git status --short -- crates bench/omx-bench 2>/dev/null | awk '{printf "%s ", $2}')"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/machine.txt"

MR="$OUT/msgrate.csv"
PP="$OUT/pingpong.csv"
echo "test,policy,size,run,status,msgs,seconds,msgs_per_s,MBps,rx_msgs,rx_sleeps,rx_io,rx_timer,rx_wakeups_per_msg,tx_sleeps,tx_io,tx_timer,tx_wakeups_per_msg" > "$MR"
echo "test,policy,size,run,status,latency_us,MBps,tx_sleeps_per_iter,tx_io_per_iter,tx_timer_per_iter" > "$PP"

start_server() { # log cmd...
  local log="$1"; shift
  $H exec 0 "$@" > "$log" 2>&1 &
  server_pid=$!
  sleep 0.4
}

# msgrate TEST POLICY SIZE RUN N SECONDS CLIENT_WINDOW SERVER_WINDOW
msgrate() {
  local test=$1 pol=$2 size=$3 run=$4 n=$5 secs=$6 cw=$7 sw=$8
  local tag="$test-$pol-$size-$run" st=ok c s
  progress "$tag (omx_msgrate)"
  start_server "$OUT/logs/$tag.server" env OMX_COALESCING="$pol" "$BIN/omx_msgrate" --sleep --csv -s "$size" -w "$sw"
  if ! timeout 30 $H exec 1 env OMX_COALESCING="$pol" "$BIN/omx_msgrate" --sleep --csv -d h0:0 \
      -s "$size" -n "$n" -t "$secs" -w "$cw" > "$OUT/logs/$tag.client" 2>&1; then
    st=failed
  fi
  stop_server
  c=$(awk -F, '$1=="client"' "$OUT/logs/$tag.client")
  s=$(awk -F, '$1=="server"' "$OUT/logs/$tag.server")
  [ -n "$c" ] && [ -n "$s" ] || st=failed
  if [ "$st" != ok ]; then
    say "$tag FAILED (see $OUT/logs/$tag.*)"
    echo "$test,$pol,$size,$run,failed,,,,,,,,,,,,," >> "$MR"
    return 0
  fi
  # client: role,size,msgs,seconds,msgs_per_s,MBps,sleeps,io,timer,per_msg
  local IFS=,
  # shellcheck disable=SC2086
  set -- $c; local cm=$3 csec=$4 crate=$5 cmb=$6 csl=$7 cio=$8 cti=$9 cpm=${10}
  # shellcheck disable=SC2086
  set -- $s; local sm=$3 ssl=$7 sio=$8 sti=$9 spm=${10}
  echo "$test,$pol,$size,$run,ok,$cm,$csec,$crate,$cmb,$sm,$ssl,$sio,$sti,$spm,$csl,$cio,$cti,$cpm" >> "$MR"
  say "$(printf '%-8s %-6s %8s B run %s: %10.0f msg/s, receiver %.3f wake-ups/msg' "$test" "$pol" "$size" "$run" "$crate" "$spm")"
}

# perf TEST POLICY SIZE RUN omx_perf-client-args...
perf() {
  local test=$1 pol=$2 size=$3 run=$4; shift 4
  local tag="$test-$pol-$size-$run" st=ok line
  progress "$tag (omx_perf)"
  start_server "$OUT/logs/$tag.server" env OMX_COALESCING="$pol" "$BIN/omx_perf" -w
  if ! timeout 30 $H exec 1 env OMX_COALESCING="$pol" "$BIN/omx_perf" -d h0:0 -w -v -P 0 "$@" \
      > "$OUT/logs/$tag.client" 2>&1; then
    st=failed
  fi
  stop_server
  # length latency MB/s MiB/s sleeps io timer (per iteration, client side)
  line=$(awk -v s="$size" '$1==s && NF>=7 {print $2","$3","$5","$6","$7}' "$OUT/logs/$tag.client")
  [ -n "$line" ] || st=failed
  if [ "$st" != ok ]; then
    say "$tag FAILED (see $OUT/logs/$tag.*)"
    echo "$test,$pol,$size,$run,failed,,,,," >> "$PP"
    return 0
  fi
  echo "$test,$pol,$size,$run,ok,$line" >> "$PP"
  say "$(printf '%-8s %-6s %8s B run %s: %s us, client wake-ups %s' "$test" "$pol" "$size" "$run" "${line%%,*}" "$(echo "$line" | cut -d, -f3)")"
}

# Runs outermost, policies innermost: slow drifts of the (shared) machine spread over
# every policy instead of landing on one.
progress_start coalescing $((RUNS * $(wc -w <<<"$POLICIES") * 6))
for run in $(seq 1 "$RUNS"); do
  for pol in $POLICIES; do
    # Table I: one-direction message rate, receiver wake-ups per message.
    msgrate rate "$pol" 0 "$run" 300000 1.0 128 256
    msgrate rate "$pol" 32768 "$run" 30000 1.0 64 128
    msgrate rate "$pol" 1048576 "$run" 600 1.0 8 16
    # Table II: 234 KiB message. One-way: a window of one message (each send completes
    # with the receiver's notify before the next starts): transfer time = 1 / rate,
    # receiver wake-ups per message from omx_msgrate's server.
    msgrate xfer234 "$pol" 239616 "$run" 2000 0.7 1 4
    # ... and omx_perf -U (234 KiB out, 0 B back; the time printed is the whole round
    # trip), wake-ups of the sender side (omx_perf reports the client's only).
    perf uni234 "$pol" 239616 "$run" -U -S 239616 -E 239617 -N 300 -W 10
    # 8 B ping-pong latency (half round trip), wake-ups of one side per iteration.
    perf lat8 "$pol" 8 "$run" -S 8 -E 9 -N 2000 -W 100
  done
done

echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
echo "elapsed: $(( $(date +%s) - T0 )) s" >> "$OUT/machine.txt"
if python3 -c 'import matplotlib' 2>/dev/null; then
  python3 bench/plot_coalescing.py "$OUT"
else
  python3 bench/plot_coalescing.py --no-plot "$OUT"
fi
say "done in $(( $(date +%s) - T0 )) s: $OUT"
