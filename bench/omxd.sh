#!/usr/bin/env bash
# Cost of the unprivileged path: omx_perf between two namespace hosts (veth, MTU 9000)
# run as root (own packet sockets) and as an ordinary user through omxd, side by side
# in one run, busy-polling and sleeping waits (-w), and omxd with and without spinning.
# Prints a markdown table (medians of RUNS) of 8 B latency and 4 MiB bandwidth.
#
# Usage: bench/omxd.sh   (root; about a minute)
#   RUNS=3   repetitions of every point
#   OUT=dir  result folder (default bench/results/omxd-<date-time>)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
H=scripts/hosts.sh
export OMX_NS_PREFIX=omxbd
OUT=${OUT:-bench/results/omxd-$(date +%Y%m%d-%H%M%S)}
USER_NAME=omxbench
say() { echo "omxd-bench: $*" >&2; }
. scripts/progress.sh

[ "$(id -u)" = 0 ] || { say "needs root (namespaces, a test user)"; exit 1; }
id "$USER_NAME" >/dev/null 2>&1 ||
  useradd --system --no-create-home --shell /usr/sbin/nologin "$USER_NAME"
cargo build --release -q -p omx-tools

T=$(mktemp -d /tmp/omxd-bench.XXXXXX)
chmod 755 "$T"
mkdir -p "$T/bin" "$T/state" "$OUT"
cp target/release/omx_perf target/release/omxd "$T/bin/"
chmod 755 "$T/bin"/*
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$H" down >/dev/null 2>&1 || true
  rm -rf "$T"
}
trap cleanup EXIT
"$H" up 2 9000 >/dev/null
export OMX_STATE_DIR=$T/state

start_daemons() { # spin_us
  local i
  for i in 0 1; do
    OMX_DAEMON_SOCKET=$T/omxd$i.sock "$H" exec $i "$T/bin/omxd" --spin-us "$1" -s "$T/omxd$i.sock" \
      >"$T/omxd$i.log" 2>&1 &
    pids+=($!)
  done
  sleep 1
}
stop_daemons() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pids=()
  sleep 0.5
}

# run MODE WAITFLAG: prints "lat_8B bw_4MiB" of one run
run() {
  local mode=$1 wait=$2 pre=() srv out
  if [ "$mode" = user ]; then pre=(setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --clear-groups); fi
  OMX_DAEMON_SOCKET=$T/omxd0.sock "$H" exec 0 "${pre[@]}" "$T/bin/omx_perf" $wait >"$T/srv.log" 2>&1 &
  srv=$!
  sleep 0.5
  out=$(OMX_DAEMON_SOCKET=$T/omxd1.sock "$H" exec 1 "${pre[@]}" timeout 120 "$T/bin/omx_perf" -d h0:0 \
    $wait -S 8 -E 4194305 -M 524288 -N 300 -W 20 -P 0 2>/dev/null || true)
  kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  awk '$1 == 8 {l = $2} $1 == 4194304 {b = $3} END {print l, b}' <<<"$out"
}

median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

echo "| path | wait | 8 B latency (us) | 4 MiB (MB/s) |" >"$OUT/summary.md"
echo "|---|---|---|---|" >>"$OUT/summary.md"
configs=("root:-:0" "user:-:0" "user:-:50" "root:-w:0" "user:-w:0")
progress_start omxd-bench $((${#configs[@]} * RUNS))
for cfg in "${configs[@]}"; do
  IFS=: read -r mode wait spin <<<"$cfg"
  [ "$wait" = - ] && wait=""
  start_daemons "$spin"
  lats=() bws=()
  for r in $(seq "$RUNS"); do
    progress "$mode ${wait:-busy} (spin ${spin} us) run $r of $RUNS"
    read -r l b < <(run "$mode" "$wait")
    lats+=("$l") bws+=("$b")
  done
  stop_daemons
  path="root (own packet socket)"
  [ "$mode" = user ] && path="user via omxd (spin ${spin} us)"
  lm=$(printf '%s\n' "${lats[@]}" | median)
  bm=$(printf '%s\n' "${bws[@]}" | median)
  say "$path ${wait:-busy}: $lm us, $bm MB/s (runs: ${lats[*]} / ${bws[*]})"
  echo "| $path | ${wait:-busy poll} | $lm | $bm |" >>"$OUT/summary.md"
done
cat "$OUT/summary.md"
