#!/usr/bin/env bash
# bench/intranode.sh - intra-node benchmark: two processes of one host, side by
# side in one run (root namespace, loopback interface, about 2-3 minutes):
#   omx       omx_perf ping-pong, 0 B to 64 MiB, shared memory (the default for
#             two endpoints of one host) and, for reference, the same-host
#             network path (OMX_DISABLE_SHARED=1: frames through lo);
#   UCX       ucx_perftest tag_lat (ping-pong) and tag_bw (stream), 1 B to
#             64 MiB, with UCX_TLS=sm and with UCX_TLS=posix,cma;
#   memcpy    single-threaded memcpy bandwidth (bench/memcpy_bw.c), 4 KiB to
#             64 MiB: the ceiling of a one-copy transfer.
# Results in bench/results/intranode-<date-time>/ (or $OUT): one CSV per series
# (columns of bench/run.sh, plus latency_p50_us for UCX and best_MBps for
# memcpy), machine.txt, intranode.png and summary.md (bench/plot_intranode.py).
#
# Usage: bench/intranode.sh   (root not needed; installs ucx-utils and
#        python3-matplotlib with apt when missing, which needs root)
#   RUNS=3        runs of every omx sweep and of the UCX headline points (8 B, 4 MiB)
#   SWEEP_RUNS=1  runs of the UCX size sweeps
#   OUT=dir       result folder (its CSVs are replaced)
# omx runs with OMX_IFACES=lo and a private OMX_STATE_DIR per server/client
# pair (removed at exit), so it neither sees nor disturbs other omx users of
# this host. Only processes this script started are ever stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
SWEEP_RUNS=${SWEEP_RUNS:-1}
OUT=${OUT:-bench/results/intranode-$(date +%Y%m%d-%H%M%S)}
BIN=target/release
UCX_SIZES="1 8 64 512 4096 32768 262144 1048576 4194304 16777216 67108864"
MEMCPY_SIZES="4096 65536 1048576 4194304 16777216 67108864"
T0=$(date +%s)

say() { echo "intranode: $*" >&2; }

# ---- dependencies ----
need=()
command -v ucx_perftest >/dev/null 2>&1 || need+=(ucx-utils)
# The plot needs matplotlib: apt installs it for the system python, which a python3
# earlier in PATH (pyenv, a venv) may not see.
PYTHON=python3
python3 -c 'import matplotlib' 2>/dev/null || PYTHON=/usr/bin/python3
"$PYTHON" -c 'import matplotlib' 2>/dev/null || need+=(python3-matplotlib)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]} with apt (first run only)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ ! -x "$BIN/omx_perf" ]; then
  say "building omx_perf (release)"
  cargo build --release -q -p omx-tools
fi
mkdir -p target/bench
MEMCPY=target/bench/memcpy_bw
if [ ! -x "$MEMCPY" ] || [ bench/memcpy_bw.c -nt "$MEMCPY" ]; then
  ${CC:-cc} -O2 -Wall -Wextra -Werror -o "$MEMCPY" bench/memcpy_bw.c
fi

# ---- output, private state, cleanup ----
mkdir -p "$OUT"
rm -f "$OUT"/*.csv "$OUT"/*.png "$OUT"/summary.md "$OUT"/machine.txt
LOGS=$OUT/logs
rm -rf "$LOGS"
mkdir -p "$LOGS"
STATE=$(mktemp -d "${TMPDIR:-/tmp}/omx-intranode.XXXXXX")
pids=()
stop_bg() {
  local p
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  pids=()
}
cleanup() {
  stop_bg
  rm -rf "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "cores: $(nproc)"
  echo "kernel: $(uname -r)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "ucx: $(ucx_info -v 2>/dev/null | sed -n 's/^# Version *//p' | head -1)"
  echo "ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 'n/a (no Yama)')"
  echo "runs: $RUNS (omx sweeps, UCX 8 B and 4 MiB), $SWEEP_RUNS (UCX sweeps)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' (+ uncommitted changes in crates/)')"
  echo "omx_perf: $(stat -c '%y' "$BIN/omx_perf" | cut -d. -f1)"
} >"$OUT/machine.txt"
load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" 'BEGIN { exit !(l > 0.7) }'; then
  say "warning: load average $load before the start: other processes compete for the CPUs"
fi

# row FILE TOOL TRANSPORT SIZE LAT_US BW_MBPS MSGS RUN [EXTRA_VALUE EXTRA_COLUMN]
row() {
  local f="$OUT/$1.csv" head="tool,transport,size,latency_us,bandwidth_MBps,msgs_per_s,run"
  shift
  local vals=("${@:1:7}")
  if [ $# -ge 9 ]; then
    head+=",$9"
    vals+=("$8")
  fi
  [ -f "$f" ] || echo "$head" >"$f"
  local IFS=,
  echo "${vals[*]}" >>"$f"
}

# ---- memcpy ----
t_memcpy() { # run
  # shellcheck disable=SC2086
  "$MEMCPY" $MEMCPY_SIZES 2>>"$LOGS/memcpy.err" | while read -r s best med _; do
    row memcpy memcpy_bw memcpy "$s" "" "$med" "" "$1" "$best" best_MBps
  done
}

# ---- omx ----
# omx_pp FILE TRANSPORT RUN ENV...: one server/client pair per sweep, each in
# a fresh state directory (endpoint 0 serves, endpoint 1 asks).
omx_pp() {
  local file=$1 transport=$2 run=$3 sweep st sp
  shift 3
  for sweep in "-S 0 -E 65537 -M 2 -N 5000 -W 200" "-S 131072 -E 4194305 -M 2 -N 200 -W 10" \
    "-S 8388608 -E 67108865 -M 2 -N 20 -W 2"; do
    st=$(mktemp -d "$STATE/pair.XXXXXX")
    env OMX_STATE_DIR="$st" OMX_IFACES=lo "$@" "$BIN/omx_perf" -e 0 \
      >>"$LOGS/$file.server" 2>&1 &
    sp=$!
    pids=("$sp")
    sleep 0.3
    # shellcheck disable=SC2086
    if ! env OMX_STATE_DIR="$st" OMX_IFACES=lo "$@" timeout 120 "$BIN/omx_perf" -d localhost \
      -e 1 $sweep -P 0 2>>"$LOGS/$file.client.err" | tee -a "$LOGS/$file.client" |
      awk '$1 ~ /^[0-9]+$/ && NF >= 4 {print $1, $2, $3}' |
      while read -r s l b; do row "$file" omx_perf "$transport" "$s" "$l" "$b" "" "$run"; done; then
      say "  omx_perf $transport ($sweep) failed: see $LOGS/$file.client.err"
    fi
    stop_bg
  done
}
t_omx_shm() { omx_pp omx_shm shm "$1"; }
t_omx_net() { omx_pp omx_net net_lo "$1" OMX_DISABLE_SHARED=1; }

# ---- UCX ----
port=13600
ucx_iters() { # test size
  if [ "$1" = tag_lat ]; then
    if [ "$2" -le 4096 ]; then echo 50000; elif [ "$2" -le 262144 ]; then echo 5000
    elif [ "$2" -le 4194304 ]; then echo 300; else echo 30; fi
  else
    if [ "$2" -le 4096 ]; then echo 300000; elif [ "$2" -le 262144 ]; then echo 20000
    elif [ "$2" -le 4194304 ]; then echo 500; else echo 40; fi
  fi
}
# t_ucx TLS test size run. Final: iters, latency p50/avg/overall (us),
# bandwidth avg/overall (MiB/s), rate avg/overall.
t_ucx() {
  local tls=$1 test=$2 s=$3 run=$4 n file sp tr=${1//,/+}
  n=$(ucx_iters "$test" "$s")
  file=ucx_${tls//,/_}_$test
  port=$((port + 1))
  UCX_TLS=$tls ucx_perftest -p "$port" >>"$LOGS/$file.server" 2>&1 &
  sp=$!
  pids=("$sp")
  sleep 0.3
  UCX_TLS=$tls timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$s" -n "$n" \
    2>>"$LOGS/$file.client.err" | tee -a "$LOGS/$file.client" |
    awk '$1 == "Final:" {print $3, $4, $7 * 1.048576, $9}' |
    while read -r p50 avg b r; do
      if [ "$test" = tag_lat ]; then
        row "$file" ucx_perftest "$tr" "$s" "$avg" \
          "$(awk -v s="$s" -v l="$avg" 'BEGIN { printf "%.2f", s / l }')" "" "$run" "$p50" latency_p50_us
      else
        row "$file" ucx_perftest "$tr" "$s" "" "$b" "$r" "$run" "" latency_p50_us
      fi
    done || say "  ucx_perftest $tls $test $s failed: see $LOGS/$file.client.err"
  stop_bg
}

# ---- plan ----
plan=()
for r in $(seq "$RUNS"); do
  plan+=("t_memcpy $r" "t_omx_shm $r" "t_omx_net $r")
  if [ "$r" -le "$SWEEP_RUNS" ]; then sizes=$UCX_SIZES; else sizes="8 4194304"; fi
  for tls in sm posix,cma; do
    for s in $sizes; do plan+=("t_ucx $tls tag_lat $s $r" "t_ucx $tls tag_bw $s $r"); done
  done
done
i=0
say "${#plan[@]} steps, results in $OUT"
for p in "${plan[@]}"; do
  i=$((i + 1))
  say "[$i/${#plan[@]}] $p (elapsed $(($(date +%s) - T0))s)"
  eval "$p" || say "  step failed: $p"
done

say "plot and summary"
"$PYTHON" bench/plot_intranode.py "$OUT"
cat "$OUT/summary.md"
say "done in $(($(date +%s) - T0))s: $OUT"
