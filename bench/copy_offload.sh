#!/usr/bin/env bash
# Receive-copy offload benchmark (root): the shape of the Open-MX I/OAT paper's
# "Figure 11" (CPU usage per thread role of a process receiving a stream of large
# messages) and an overlap benchmark, with OMX_COPY_OFFLOAD=0 and =1.
#
# Two network namespaces joined by veth (scripts/hosts.sh, prefix omxcopy, MTU 9000):
# omx_stream receives in h0, sends from h1. For each size (32 KiB .. 16 MiB) and mode,
# REPS runs of a one-way stream (about BYTES per run); then REPS runs of the overlap
# benchmark (16 MiB, one receive at a time, computation as long as one transfer alone,
# measured once by a probe run without offload), and one run per mode and computation
# time of SWEEP_MS (how long a computation must be for background progress). Results in
# bench/results/copy-offload-<date-time>/: stream.csv, overlap.csv, overlap_sweep.csv (omx_stream's
# columns plus rep and the machine's background load before the run), machine.txt,
# summary.md and PNG plots (bench/plot_copy_offload.py).
#
#   BIN=dir      use the omx_stream in dir instead of building target/release
#   REPS=3       runs per point (interleaved off/on; medians reported)
#   SIZES="32768 131072 524288 2097152 16777216"
#   BYTES=402653184   bytes per stream run (count = BYTES / size, at least 16)
#   OVERLAP_N=30 messages per overlap pass
#   SWEEP_MS="2 4 8 12 16 32"  computation times of the overlap sweep (empty: none)
#   OUT=dir      result folder
#   NOTE=text    a line for machine.txt (what was built, from where)
#   PIN=1        the receiver on vCPU 0 and its copy thread on vCPU 1 (OMX_COPY_CPU=1):
#                what a host with a spare core gets
#   SERVICE=1    offload on the host's copy service: an omx_copyd (on vCPU 1 with PIN=1)
#                serves both processes (OMX_COPY_STACK=on); "offload 1" then means the
#                copies ran on the service (checked: its copy_service counter). Its CPU
#                is not the processes': the ELSEWHERE_MAX retry is off, and its total
#                CPU time goes to machine.txt.
#
# The machine is usually shared: before each run the script waits (at most QUIET_MAX
# seconds, 8) for the other processes to use less than a quarter of a CPU, and records
# what they used (background_pct) next to the run; a run during which more than
# ELSEWHERE_MAX (40) % of a CPU went to neither omx_stream process (other processes,
# kernel threads) is run again, up to ATTEMPTS (3) times, and its attempt recorded.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxcopy}
H=scripts/hosts.sh
REPS=${REPS:-3}
SIZES=${SIZES:-"32768 131072 524288 2097152 16777216"}
BYTES=${BYTES:-402653184}
OVERLAP_N=${OVERLAP_N:-30}
SWEEP_MS=${SWEEP_MS-"2 4 8 12 16 32"}
QUIET_MAX=${QUIET_MAX:-8}
ELSEWHERE_MAX=${ELSEWHERE_MAX:-40}
ATTEMPTS=${ATTEMPTS:-3}
OUT=${OUT:-bench/results/copy-offload-$(date +%Y%m%d-%H%M%S)}
T0=$(date +%s)
RPIN=()
if [ "${PIN:-0}" = 1 ]; then RPIN=(taskset -c 0); export OMX_COPY_CPU=1; fi
if [ "${SERVICE:-0}" = 1 ]; then ELSEWHERE_MAX=100000; export OMX_COPY_STACK=on; fi

say() { echo "copy_offload: $*" >&2; }
. scripts/progress.sh
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (network namespaces, packet sockets)"
python3 -c 'import matplotlib' 2>/dev/null || die "python3 lacks matplotlib (apt-get install python3-matplotlib)"
if [ -z "${BIN:-}" ]; then
  say "building omx_stream (release)"
  cargo build --release -q -p omx-tools
  BIN=target/release
fi
[ -x "$BIN/omx_stream" ] || die "no $BIN/omx_stream"

STATE=$(mktemp -d /tmp/omxcopy-state.XXXXXX)
TMP=$STATE/tmp
mkdir -p "$TMP" "$OUT"
# A private copy: every run uses the same binary even if the tree is rebuilt meanwhile.
ST=$STATE/omx_stream
cp "$BIN/omx_stream" "$ST"
export OMX_STATE_DIR=$STATE
rpid=""
dpid=""
cleanup() {
  # Only the receiver and the service this script started, by their pids.
  if [ -n "$rpid" ] && kill -0 "$rpid" 2>/dev/null; then kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; fi
  if [ -n "$dpid" ] && kill -0 "$dpid" 2>/dev/null; then kill "$dpid" 2>/dev/null || true; wait "$dpid" 2>/dev/null || true; fi
  $H down >/dev/null 2>&1 || true
  rm -rf "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
$H up 2 9000 >/dev/null
if [ "${SERVICE:-0}" = 1 ]; then
  [ -x "$BIN/omx_copyd" ] || die "no $BIN/omx_copyd"
  # One service for the machine (its socket is in the shared state directory).
  "$BIN/omx_copyd" -v 2>"$STATE/copyd.err" &
  dpid=$!
  for _ in $(seq 200); do grep -q "serving on CPU" "$STATE/copyd.err" 2>/dev/null && break; sleep 0.02; done
  grep -q "serving on CPU" "$STATE/copyd.err" || die "omx_copyd did not start: $(cat "$STATE/copyd.err")"
fi

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "cores: $(nproc)"
  echo "kernel: $(uname -r)"
  echo "mtu: 9000 (veth between two namespaces)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' (crates/ has uncommitted changes)')"
  echo "binary: $BIN/omx_stream (sha256 $(sha256sum "$ST" | cut -c1-16))"
  [ -z "${NOTE:-}" ] || echo "note: $NOTE"
  echo "reps: $REPS, bytes per stream run: $BYTES, overlap messages per pass: $OVERLAP_N"
  echo "environment: OMX_COALESCING=${OMX_COALESCING:-default} OMX_COPY_MIN_FRAG=${OMX_COPY_MIN_FRAG:-default} OMX_COPY_MIN_MSG=${OMX_COPY_MIN_MSG:-default} OMX_COPY_CPU=${OMX_COPY_CPU:-none}"
  [ -z "$dpid" ] || echo "copy service: omx_copyd pid $dpid, $(head -1 "$STATE/copyd.err")"
} > "$OUT/machine.txt"

# Busy CPUs of the whole machine over 0.3 s, in % of one CPU (nothing of ours runs then).
busy_pct() {
  local a b
  a=$(head -1 /proc/stat); sleep 0.3; b=$(head -1 /proc/stat)
  awk -v a="$a" -v b="$b" -v n="$(nproc)" 'BEGIN {
    split(a, x); split(b, y); t = 0
    for (i = 2; i <= 9; i++) t += y[i] - x[i]
    idle = (y[5] - x[5]) + (y[6] - x[6])
    printf "%.0f\n", (t > 0 ? (t - idle) / t * n * 100 : 0) }'
}
BG=0
wait_quiet() {
  local until=$(( $(date +%s) + QUIET_MAX ))
  BG=$(busy_pct)
  while [ "$BG" -gt 25 ] && [ "$(date +%s)" -lt "$until" ]; do
    sleep 0.5; BG=$(busy_pct)
  done
}

# CPU (% of one CPU) the machine spent outside both processes during the receiver's
# first timed pass: machine busy - receiver threads - sender threads.
elsewhere() {
  awk -F, 'NR == FNR && FNR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    function tot() { return $(c["app_pct"]) + $(c["progress_pct"]) + $(c["copy_pct"]) + $(c["other_pct"]) }
    NR == FNR && FNR == 2 { busy = $(c["machine_busy_pct"]); r = tot(); next }
    FNR == 2 { s = tot() }
    END { printf "%.0f\n", busy - r - s }' "$TMP/r.out" "$TMP/s.out"
}

# run FILE MODE REP RECEIVER-ARGS...: one receiver/sender pair (again while the machine
# was busy elsewhere, see ELSEWHERE_MAX); appends the receiver's and the sender's CSV
# lines to $OUT/FILE.csv, prefixed with rep, attempt, background load and CPU used
# elsewhere; the receiver's first line is left in $TMP/last.
run() {
  local a ew
  progress "$1 offload $2 rep $3"
  for a in $(seq "$ATTEMPTS"); do
    run_once "$@" || return 1
    ew=$(elsewhere); ew=${ew:-0}
    if [ "$ew" -le "$ELSEWHERE_MAX" ] || [ "$a" = "$ATTEMPTS" ]; then break; fi
    say "  ${ew}% of a CPU went elsewhere during the run: again"
  done
  local rep=$3 f="$OUT/$1.csv"
  [ -f "$f" ] || { printf 'rep,attempt,background_pct,elsewhere_pct,'; head -1 "$TMP/r.out"; } > "$f"
  tail -n +2 "$TMP/r.out" | sed "s/^/$rep,$a,$BG,$ew,/" >> "$f"
  tail -n +2 "$TMP/s.out" | sed "s/^/$rep,$a,$BG,$ew,/" >> "$f"
  tail -n +2 "$TMP/r.out" | head -1 > "$TMP/last"
}

run_once() {
  local mode=$2; shift 3
  wait_quiet
  OMX_COPY_OFFLOAD=$mode $H exec 0 timeout 120 "${RPIN[@]}" "$ST" --csv "$@" -v >"$TMP/r.out" 2>"$TMP/r.err" &
  rpid=$!
  for _ in $(seq 200); do
    grep -q "Successfully attached" "$TMP/r.err" 2>/dev/null && break
    kill -0 "$rpid" 2>/dev/null || break
    sleep 0.02
  done
  if ! OMX_COPY_OFFLOAD=$mode timeout 120 $H exec 1 "$ST" -d h0:0 -W "$WINDOW" --csv >"$TMP/s.out" 2>"$TMP/s.err"; then
    say "sender failed (mode $mode, $*):"; cat "$TMP/s.err" >&2
    kill "$rpid" 2>/dev/null || true
  fi
  if ! wait "$rpid"; then
    say "receiver failed (mode $mode, $*):"; cat "$TMP/r.err" >&2
    rpid=""; return 1
  fi
  rpid=""
  if [ -n "$dpid" ] && [ "$mode" = 1 ] && ! grep -Eq "copy_service +[1-9]" "$TMP/r.err"; then
    say "offload did not run on the service (mode $mode, $*):"; cat "$TMP/r.err" >&2
    return 1
  fi
}

count_for() { local n=$(( BYTES / $1 )); [ "$n" -lt 16 ] && n=16; echo "$n"; }
# Receives in flight: at most 4 from 2 MiB up, so that the frames their pulls request
# at once (8 blocks of 32 frames each, native mode) stay below the receive ring's 1792
# slots (OMX_RX_RING_KB=16384): a frame lost to a full ring costs a 1 s pull re-request
# delay, which would measure a stall instead of the copy path.
window_for() { if [ "$1" -ge 2097152 ]; then echo 4; else echo 8; fi; }

# ---- stream: the Figure 11 shape ----
nsz=$(wc -w <<<"$SIZES")
progress_start copy_offload $((REPS * nsz * 2 + 1 + REPS * 2 + $(wc -w <<<"${SWEEP_MS:-}") * 2))
say "stream: $nsz sizes x 2 modes x $REPS reps, results in $OUT"
for rep in $(seq "$REPS"); do
  for s in $SIZES; do
    # Alternate which mode goes first, so slow drifts of the machine hit both.
    if [ $((rep % 2)) = 1 ]; then modes="0 1"; else modes="1 0"; fi
    for m in $modes; do
      WINDOW=$(window_for "$s")
      run stream "$m" "$rep" -s "$s" -N "$(count_for "$s")" -W "$WINDOW" || continue
      say "rep $rep size $s offload $m: $(cut -d, -f10 "$TMP/last") MB/s (background ${BG}%)"
    done
  done
done

# ---- overlap: 16 MiB, computation as long as one transfer alone ----
WINDOW=4
say "overlap: probe of the transfer time (offload off)"
run overlap_probe 0 0 -s 16777216 -N 10 --overlap auto || die "overlap probe failed"
# Column transfer_alone_ms of the probe's base pass (by name, not position).
OVL_MS=$(python3 - "$OUT/overlap_probe.csv" <<'EOF'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r["side"] == "recv" and r["pass"] == "base":
        print(f'{float(r["transfer_alone_ms"]):.2f}'); break
EOF
)
say "overlap: compute ${OVL_MS} ms per 16 MiB message, $REPS reps x 2 modes"
for rep in $(seq "$REPS"); do
  if [ $((rep % 2)) = 1 ]; then modes="0 1"; else modes="1 0"; fi
  for m in $modes; do
    run overlap "$m" "$rep" -s 16777216 -N "$OVERLAP_N" --overlap "$OVL_MS" || continue
    r=$(awk -F, -v rep="$rep" -v m="$m" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i }
        NR > 1 && $1 == rep && $(c["offload"]) == m && $(c["side"]) == "recv" && $(c["pass"]) == "overlap" {
          print $(c["total_ms"]), $(c["overlap_ratio"]) }' "$OUT/overlap.csv" | tail -1)
    say "rep $rep offload $m: total ${r% *} ms per message, overlap ratio ${r#* } (background ${BG}%)"
  done
done

# ---- overlap sweep: computation time against background progress ----
if [ -n "$SWEEP_MS" ]; then
  say "overlap sweep: compute $SWEEP_MS ms, offload off and on"
  for ms in $SWEEP_MS; do
    for m in 0 1; do
      run overlap_sweep "$m" 1 -s 16777216 -N 20 --overlap "$ms" || continue
      r=$(awk -F, -v ms="$ms" -v m="$m" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i }
          NR > 1 && $(c["offload"]) == m && $(c["side"]) == "recv" && $(c["pass"]) == "overlap" {
            print $(c["overlap_ratio"]), $(c["progress_pct"]) }' "$OUT/overlap_sweep.csv" | tail -1)
      say "compute $ms ms offload $m: overlap ratio ${r% *}, progress thread ${r#* }% (background ${BG}%)"
    done
  done
fi

if [ -n "$dpid" ]; then
  # utime + stime of the service over the whole benchmark, in seconds.
  echo "copy service CPU: $(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f s", ($14 + $15) / hz }' "/proc/$dpid/stat")" >> "$OUT/machine.txt"
fi
say "plots and summary"
python3 bench/plot_copy_offload.py "$OUT"
cat "$OUT/summary.md"
say "done in $(( $(date +%s) - T0 ))s: $OUT"
