#!/usr/bin/env bash
# Cost of the end-to-end checksum (OMX_CHECKSUM): omx_perf ping-pong between two
# namespace hosts (veth, MTU 9000), 8 B latency (half round trip) and 4 MiB bandwidth,
# with OMX_CHECKSUM=0 and =1 alternately, RUNS times each (3); prints every run and the
# medians. Root; about a minute.
#
#   RUNS=3        repetitions of each setting
#   MTU=9000      interface and omx MTU
#   ITERS=20000   8 B ping-pong iterations per run (4 MiB: 200)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
MTU=${MTU:-9000}
ITERS=${ITERS:-20000}
BIN=target/release
H=scripts/hosts.sh
export OMX_NS_PREFIX=omxcsum
say() { echo "checksum: $*" >&2; }
. scripts/progress.sh

[ "$(id -u)" = 0 ] || { say "needs root (network namespaces)"; exit 1; }
cargo build --release -q -p omx-tools

STATE=$(mktemp -d /tmp/omx-csum.XXXXXX)
export OMX_STATE_DIR="$STATE" OMX_MTU="$MTU"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  "$H" down >/dev/null 2>&1 || true
  rm -rf "$STATE"
}
trap cleanup EXIT
"$H" up 2 "$MTU" >/dev/null

# One omx_perf run: prints the table line of length $2 (length, latency us, MB/s, ...).
run() {
  local csum=$1 len=$2 iters=$3
  OMX_CHECKSUM=$csum "$H" exec 0 "$BIN/omx_perf" >/dev/null 2>&1 &
  server_pid=$!
  sleep 0.3
  OMX_CHECKSUM=$csum "$H" exec 1 "$BIN/omx_perf" -d h0:0 -S "$len" -E $((len + 1)) \
    -N "$iters" -W 100 -P 0 | awk -v l="$len" '$1 == l && NF == 4'
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

declare -A lat bw
progress_start checksum $((RUNS * 2))
for ((r = 1; r <= RUNS; r++)); do
  for c in 0 1; do
    progress "run $r of $RUNS, OMX_CHECKSUM=$c: 8 B latency and 4 MiB bandwidth"
    l=$(run "$c" 8 "$ITERS")
    b=$(run "$c" 4194304 200)
    say "run $r OMX_CHECKSUM=$c: 8 B [$l] 4 MiB [$b]"
    lat[$c]+="$(awk '{print $2}' <<<"$l") "
    bw[$c]+="$(awk '{print $3}' <<<"$b") "
  done
done
# On a shared machine a run can be slowed by other work many times over: the best run
# is printed beside the median.
echo "| OMX_CHECKSUM | 8 B latency (us): median of $RUNS, best | 4 MiB bandwidth (MB/s): median of $RUNS, best | runs |"
echo "|---|---|---|---|"
for c in 0 1; do
  ml=$(tr ' ' '\n' <<<"${lat[$c]}" | grep . | median)
  bl=$(tr ' ' '\n' <<<"${lat[$c]}" | grep . | sort -g | head -1)
  mb=$(tr ' ' '\n' <<<"${bw[$c]}" | grep . | median)
  bb=$(tr ' ' '\n' <<<"${bw[$c]}" | grep . | sort -g | tail -1)
  echo "| $c | $ml, $bl | $mb, $bb | ${lat[$c]% }; ${bw[$c]% } |"
done
