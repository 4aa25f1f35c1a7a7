#!/usr/bin/env bash
# One-command benchmark suite (`make bench`): omx and its peers on two network namespaces
# joined by veth, results in bench/results/<date-time>/ (CSV per test, PNG plots,
# summary.md). Usage: bench/run.sh [MTU]   (root; installs missing peers with apt once)
#   RUNS=3        runs of the headline points (8 B latency, 4 MiB bandwidth, 8 B msg rate)
#   SWEEP_RUNS=1  runs of the full size sweeps of the peers (omx sweeps every run: cheap)
#   OUT=dir       result folder (default bench/results/<date-time>)
set -euo pipefail
cd "$(dirname "$0")/.."
MTU=${1:-${MTU:-9000}}
RUNS=${RUNS:-3}
SWEEP_RUNS=${SWEEP_RUNS:-1}
BIN=target/release
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxbench}
H=scripts/hosts.sh
# The addresses scripts/hosts.sh gives h0 and h1 (one per host: Open MPI and others
# are confused by a second one on the interface).
IP0=10.99.0.1
IP1=10.99.0.2
OUT=${OUT:-bench/results/$(date +%Y%m%d-%H%M%S)}
PEER_SIZES="1 8 64 512 4096 32768 262144 1048576 4194304 16777216"
FI_SIZES="8 4096 65536 1048576 4194304"
RATE_SIZES="8 64 512 4096"
T0=$(date +%s)

say() { echo "bench: $*" >&2; }

# ---- dependencies (first run only) ----
need=()
for t in qperf:qperf ucx_perftest:ucx-utils fi_pingpong:libfabric-bin; do
  command -v "${t%%:*}" >/dev/null 2>&1 || need+=("${t#*:}")
done
python3 -c 'import matplotlib' 2>/dev/null || need+=(python3-matplotlib)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]} with apt (first run only)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  if ! python3 -c 'import matplotlib' 2>/dev/null; then
    say "python3 ($(command -v python3)) still lacks matplotlib: pip install matplotlib"
    python3 -m pip install -q matplotlib
  fi
fi
say "building omx (release)"
cargo build --release -q -p omx-tools -p omx-bench
cargo build --release -q -p omx-transport --examples
TCPPP=target/bench/tcp_pingpong
mkdir -p target/bench
${CC:-cc} -O2 -Wall -Wextra -Werror -o "$TCPPP" bench/tcp_pingpong.c
make -s lib
PAUSEDPP=target/bench/paused_pingpong
${CC:-cc} -O2 -Wall -Wextra -Werror -Iinclude -o "$PAUSEDPP" bench/paused_pingpong.c \
  -Lbuild/lib -lmyriexpress -Wl,-rpath,"$PWD/build/lib"

# ---- hosts ----
mkdir -p "$OUT"
pids=()
stop_bg() {
  for ns in "$OMX_NS_PREFIX-h0" "$OMX_NS_PREFIX-h1"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pids=(); sleep 0.2
}
cleanup() { stop_bg; $H down >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
$H down >/dev/null 2>&1 || true
$H up 2 "$MTU" >/dev/null
if [ "$MTU" != 9000 ]; then export OMX_MTU=$MTU; fi

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "cores: $(nproc)"
  echo "kernel: $(uname -r)"
  echo "mtu: $MTU"
  echo "runs: $RUNS (headline points), $SWEEP_RUNS (peer sweeps)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "$OUT/machine.txt"

# row FILE TOOL TRANSPORT SIZE LAT_US BW_MBPS MSGS RUN   (empty value = not measured)
row() {
  local f="$OUT/$1.csv"; shift
  [ -f "$f" ] || echo "tool,transport,size,latency_us,bandwidth_MBps,msgs_per_s,run" > "$f"
  local IFS=,; echo "$*" >> "$f"
}
bg0() { $H exec 0 "$@" >/dev/null 2>&1 & pids+=($!); sleep "${WAIT:-0.4}"; }
c1() { timeout 90 $H exec 1 "$@"; }   # client in h1
ucx_iters() { if [ "$1" -ge 1048576 ]; then echo 100; elif [ "$1" -ge 32768 ]; then echo 1000; else echo 10000; fi; }

# ---- tests (each prints nothing; appends CSV rows) ----
t_omx_pp() { # run
  bg0 "$BIN/omx_perf" -s
  { c1 "$BIN/omx_perf" -d h0:0 -S 0 -E 65537 -M 2 -N 3000 -W 100 -P 0
    c1 "$BIN/omx_perf" -d h0:0 -S 131072 -E 16777217 -M 2 -N 30 -W 3 -P 0; } 2>/dev/null |
    awk '$1 ~ /^[0-9]+$/ && NF>=4 {print $1, $2, $3}' |
    while read -r s l b; do row omx_pingpong omx_perf omx "$s" "$l" "$b" "" "$1"; done
  stop_bg
}
t_omx_local() { # run: both ends in h0, through shared memory (the intra-node path)
  bg0 "$BIN/omx_perf" -s -e 0
  { c0 "$BIN/omx_perf" -d h0:0 -e 1 -S 0 -E 65537 -M 2 -N 3000 -W 100 -P 0
    c0 "$BIN/omx_perf" -d h0:0 -e 1 -S 131072 -E 16777217 -M 2 -N 30 -W 3 -P 0; } 2>/dev/null |
    awk '$1 ~ /^[0-9]+$/ && NF>=4 {print $1, $2, $3}' |
    while read -r s l b; do row omx_local_pingpong omx_perf shm "$s" "$l" "$b" "" "$1"; done
  stop_bg
}
t_omx_rate() { # size run
  local n=1000000; [ "$1" -ge 4096 ] && n=300000
  bg0 "$BIN/omx_msgrate" -s "$1" -w 256
  c1 "$BIN/omx_msgrate" -d h0:0 -s "$1" -n "$n" -w 128 2>/dev/null | awk 'NF>=4 && $1 ~ /^[0-9]+$/ {print $2, $4}' |
    while read -r r b; do row omx_msgrate omx_msgrate omx "$1" "" "$b" "$r" "$2"; done
  stop_bg
}
t_raw_pp() { # size run
  bg0 "$BIN/examples/raw_pingpong" pong omx0 "$1" 20000 spin
  c1 "$BIN/examples/raw_pingpong" ping omx0 "$1" 20000 spin 2>/dev/null | sed -n 's/.*median \([0-9.]*\).*/\1/p' |
    while read -r l; do row raw_pingpong raw_pingpong af_packet "$1" "$l" "$(awk -v s="$1" -v l="$l" 'BEGIN{printf "%.2f", s/l}')" "" "$2"; done
  stop_bg
}
t_raw_stream() { # run
  local fr=$(( MTU + 14 ))
  $H exec 0 "$BIN/examples/raw_stream" recv omx0 "$fr" 200000 >/dev/null 2>&1 & pids+=($!); sleep 0.4
  c1 "$BIN/examples/raw_stream" send omx0 "$fr" 200000 2>/dev/null | sed -n 's/.*= \([0-9.]*\) GB\/s.*/\1/p' |
    while read -r g; do row raw_stream raw_stream af_packet "$MTU" "" "$(awk -v g="$g" 'BEGIN{printf "%.1f", g*1000}')" "" "$1"; done
  sleep 0.3; stop_bg
}
t_qperf() { # run "sizes"
  local args=() s
  for s in $2; do args+=(-m "$s" tcp_lat -m "$s" tcp_bw); done
  bg0 qperf
  c1 qperf -vu -t 1 $IP0 "${args[@]}" 2>/dev/null | awk '
    /^tcp_lat:/ {t="lat"} /^tcp_bw:/ {t="bw"}
    $1=="latency" && $2=="=" {v=$3; u=$4; if (u=="ms") v*=1000; if (u=="ns") v/=1000}
    $1=="bw" && $2=="=" {v=$3; u=$4; if (u=="GB/sec") v*=1000; if (u=="KB/sec") v/=1000; if (u=="bytes/sec") v/=1e6}
    $1=="msg_size" { if (match($0, /\(([0-9,]+)\)/)) { s=substr($0, RSTART+1, RLENGTH-2); gsub(",", "", s) } else s=$3;
                     print t, s, v }' |
    while read -r t s v; do
      if [ "$t" = lat ]; then row qperf_tcp_lat qperf tcp "$s" "$v" "" "" "$1"
      else row qperf_tcp_bw qperf tcp "$s" "" "$v" "$(awk -v v="$v" -v s="$s" 'BEGIN{printf "%.0f", v*1e6/s}')" "$1"; fi
    done
  stop_bg
}
t_tcp_pp() { # run: our TCP_NODELAY ping-pong over the same sizes as omx_perf
  bg0 "$TCPPP" server 13338
  c1 "$TCPPP" client $IP0 13338 1 16777216 2000 2>/dev/null |
    while read -r s l b; do row tcp_pingpong tcp_pingpong tcp "$s" "$l" "$b" "" "$1"; done
  stop_bg
}
t_fi() { # provider-tag size run
  local prov="tcp;ofi_rxm" n=2000; [ "$1" = udp ] && prov="udp;ofi_rxd"
  [ "$2" -ge 1048576 ] && n=100
  bg0 fi_pingpong -p "$prov" -e rdm -I "$n" -S "$2"
  # columns: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec (usec/xfer = one way)
  c1 fi_pingpong -p "$prov" -e rdm -I "$n" -S "$2" $IP0 2>/dev/null | awk 'NF==8 && $1 !~ /bytes/ {print $6, $7}' |
    while read -r b l; do row "fi_pingpong_$1" fi_pingpong "$prov" "$2" "$l" "$b" "" "$3"; done
  stop_bg
}
# ucx TLS test size run: Final: iters, lat typical/avg/overall (us), bw avg/overall (MiB/s), rate avg/overall
t_ucx() {
  local tls=$1 test=$2 s=$3 run=$4 n; n=$(ucx_iters "$s")
  [ "$test" = tag_bw ] && [ "$s" -le 64 ] && n=1000000
  local env=(env UCX_TLS=tcp UCX_NET_DEVICES=omx0) dst=$IP0 cl=c1 file=ucx_tcp_$test
  if [ "$tls" = sm ]; then env=(env UCX_TLS=sm,self); dst=127.0.0.1; cl=c0; file=ucx_sm_$test; fi
  bg0 "${env[@]}" ucx_perftest -p 13337
  $cl "${env[@]}" ucx_perftest $dst -p 13337 -t "$test" -s "$s" -n "$n" 2>/dev/null | awk '$1=="Final:" {print $4, $7*1.048576, $9}' |
    while read -r l b r; do
      if [ "$test" = tag_lat ]; then row "$file" ucx_perftest "$tls" "$s" "$l" "" "" "$run"
      else row "$file" ucx_perftest "$tls" "$s" "" "$b" "$r" "$run"; fi
    done
  stop_bg
}
t_paused() { # run: 8 B ping-pong whose client pauses (usleep) before each round
  local f="$OUT/paused.csv" p
  [ -f "$f" ] || echo "pause_us,mode,median_oneway_us,p90_oneway_us,run" > "$f"
  bg0 "$PAUSEDPP"
  for p in 0 10 30 100; do
    c1 "$PAUSEDPP" h0:0 "$p" 2000 sleep 2>/dev/null | awk -v r="$1" 'NF==4 {print $1 "," $2 "," $3 "," $4 "," r}' >> "$f"
  done
  stop_bg
}
c0() { timeout 90 $H exec 0 "$@"; }

# ---- plan: build the list of steps first so progress can show what is left ----
plan=()
for r in $(seq "$RUNS"); do
  sweep=0; [ "$r" -le "$SWEEP_RUNS" ] && sweep=1
  plan+=("t_omx_pp $r" "t_omx_local $r" "t_paused $r")
  if [ $sweep = 1 ]; then rs=$RATE_SIZES; else rs=8; fi
  for s in $rs; do plan+=("t_omx_rate $s $r"); done
  for s in 8 $( [ $sweep = 1 ] && echo "64 1024 $((MTU - 64))" ); do plan+=("t_raw_pp $s $r"); done
  plan+=("t_raw_stream $r")
  if [ $sweep = 1 ]; then ps=$PEER_SIZES; fs=$FI_SIZES; else ps="8 4194304"; fs="8 4194304"; fi
  plan+=("t_qperf $r '$ps'" "t_tcp_pp $r")
  for s in $fs; do plan+=("t_fi tcp $s $r" "t_fi udp $s $r"); done
  for s in $ps; do plan+=("t_ucx tcp tag_lat $s $r" "t_ucx tcp tag_bw $s $r"); done
  for s in $ps; do plan+=("t_ucx sm tag_lat $s $r" "t_ucx sm tag_bw $s $r"); done
done
# Rough cost of each step in seconds, for the time-left estimate.
cost() { case $1 in t_omx_pp|t_omx_local) echo 5;; t_paused) echo 3;; t_tcp_pp) echo 6;; t_qperf) echo $(( $(wc -w <<<"$3") * 2 + 1 ));; t_omx_rate) echo 2;; *) echo 1.5;; esac; }
total=0; for p in "${plan[@]}"; do eval "set -- $p"; c=$(cost "$@"); total=$(awk -v a=$total -v b=$c 'BEGIN{print a+b}'); done
done_cost=0; i=0; T1=$(date +%s)
say "MTU $MTU, ${#plan[@]} steps, results in $OUT"
for p in "${plan[@]}"; do
  i=$((i + 1)); eval "set -- $p"
  el=$(( $(date +%s) - T1 ))
  left=$(awk -v e=$el -v d=$done_cost -v t=$total 'BEGIN{ if (d>0) printf "%d", e/d*(t-d); else print "?" }')
  say "[$i/${#plan[@]}] ${p//\'/} (elapsed ${el}s, ~${left}s left)"
  eval "$p" || say "  step failed: $p"
  done_cost=$(awk -v a=$done_cost -v b="$(cost "$@")" 'BEGIN{print a+b}')
done
stop_bg

say "plots and summary"
python3 bench/plot.py "$OUT"
python3 bench/summary.py "$OUT" > "$OUT/summary.md"
cat "$OUT/summary.md"
say "done in $(( $(date +%s) - T0 ))s: $OUT"
