#!/usr/bin/env bash
# The AF_XDP data path against packet sockets, side by side in one run (issue 23 B.4):
# 8 B one-way latency, 4 MiB ping-pong bandwidth with the client's CPU time, and 8 B
# message rate, at MTU 1500, 3498 (native XDP's limit on veth) and 9000 (beyond a
# page: xdp falls back to packet sockets, shown as "-"), between two namespaces joined
# by veth. Medians of RUNS runs. Then (RELAYED=1, the default) the unprivileged path at
# MTU 1500: omx_perf run as an ordinary user through omxd, the daemon relaying over
# packet sockets or over its AF_XDP socket (OMX_TRANSPORT in the daemon's environment).
# Usage: bench/xdp.sh   (root)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
BIN=target/release
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxxdp}
H=scripts/hosts.sh
cargo build --release -q -p omx-tools -p omx-bench

pids=()
stop_bg() {
  for ns in "$OMX_NS_PREFIX-h0" "$OMX_NS_PREFIX-h1"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
  done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
T=$(mktemp -d /tmp/xdp-bench.XXXXXX)
cleanup() { stop_bg; $H down >/dev/null 2>&1 || true; rm -rf "$T"; }
trap cleanup EXIT
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else print a[int((NR+1)/2)]}'; }
bg0() { $H exec 0 "$@" >/dev/null 2>&1 & pids+=($!); sleep 0.4; }

lat() {
  for _ in $(seq "$RUNS"); do
    bg0 "$BIN/omx_perf"
    $H exec 1 "$BIN/omx_perf" -d h0:0 -S 8 -E 9 -N 20000 -W 1000 -P 0 | awk '$1==8 {print $2}'
    stop_bg
  done | median
}
# "MB/s cpu_s": bandwidth and the client's CPU seconds (user + system) for the run.
bw() {
  for _ in $(seq "$RUNS"); do
    bg0 "$BIN/omx_perf"
    out=$( { TIMEFORMAT='%U %S'; time $H exec 1 "$BIN/omx_perf" -d h0:0 -S 4194304 -E 4194305 -N 200 -W 10 -P 0; } 2>&1 )
    mbs=$(awk '$1==4194304 {print $3}' <<<"$out")
    cpu=$(tail -1 <<<"$out" | awk '{print $1 + $2}')
    echo "$mbs $cpu"
    stop_bg
  done | sort -g | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'
}
rate() {
  for _ in $(seq "$RUNS"); do
    bg0 "$BIN/omx_msgrate" -s 8 -w 256
    $H exec 1 "$BIN/omx_msgrate" -d h0:0 -s 8 -n 1000000 -w 128 | awk '{print $2}'
    stop_bg
  done | median
}
# Whether endpoints really run over AF_XDP with the current settings.
uses_xdp() {
  bg0 "$BIN/omx_perf"
  local log
  log=$(OMX_VERBOSE=1 $H exec 1 "$BIN/omx_perf" -d h0:0 -S 8 -E 9 -N 10 -P 0 2>&1 || true)
  stop_bg
  grep -q "uses AF_XDP" <<<"$log"
}

echo "| MTU | transport | 8 B one-way (us) | 4 MiB (MB/s) | client CPU for 4 MiB run (s) | 8 B rate (msg/s) |"
echo "|---|---|---|---|---|---|"
for mtu in ${MTUS:-1500 3498 9000}; do
  $H up 2 "$mtu" >/dev/null
  export OMX_MTU=$mtu
  for t in packet xdp; do
    export OMX_TRANSPORT=$t
    if [ "$t" = xdp ] && ! uses_xdp; then
      echo "| $mtu | xdp | - (falls back to packet) | - | - | - |"
      continue
    fi
    l=$(lat); read -r b c <<<"$(bw)"; r=$(rate)
    echo "| $mtu | $t | $l | $b | $c | $r |"
  done
  $H down >/dev/null
done

[ "${RELAYED:-1}" = 1 ] || exit 0
# The unprivileged path: an ordinary user's omx_perf through each host's omxd.
USER_NAME=omxbench
id "$USER_NAME" >/dev/null 2>&1 ||
  useradd --system --no-create-home --shell /usr/sbin/nologin "$USER_NAME"
chmod 755 "$T"
mkdir -p "$T/bin" "$T/state"
cp "$BIN/omx_perf" "$BIN/omxd" "$T/bin/"
chmod 755 "$T/bin"/*
export OMX_STATE_DIR=$T/state OMX_MTU=1500
as_user=(setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --clear-groups)
$H up 2 1500 >/dev/null
echo
echo "| MTU | omxd relays over | 8 B one-way (us) | 4 MiB (MB/s) |"
echo "|---|---|---|---|"
for t in packet xdp; do
  for i in 0 1; do
    OMX_TRANSPORT=$t OMX_DAEMON_SOCKET=$T/omxd$i.sock $H exec $i "$T/bin/omxd" -v -s "$T/omxd$i.sock" \
      >"$T/omxd$i.log" 2>&1 &
    pids+=($!)
  done
  sleep 1
  if [ "$t" = xdp ] && ! grep -q "relays over AF_XDP" "$T/omxd0.log"; then
    echo "| 1500 | xdp | - (omxd falls back to packet sockets) | - |"
    stop_bg
    continue
  fi
  ls=() bs=()
  for _ in $(seq "$RUNS"); do
    OMX_DAEMON_SOCKET=$T/omxd0.sock $H exec 0 "${as_user[@]}" "$T/bin/omx_perf" >/dev/null 2>&1 &
    srv=$!
    sleep 0.5
    out=$(OMX_DAEMON_SOCKET=$T/omxd1.sock $H exec 1 "${as_user[@]}" timeout 120 "$T/bin/omx_perf" \
      -d h0:0 -S 8 -E 4194305 -M 524288 -N 300 -W 20 -P 0 2>/dev/null || true)
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    ls+=("$(awk '$1 == 8 {print $2}' <<<"$out")")
    bs+=("$(awk '$1 == 4194304 {print $3}' <<<"$out")")
  done
  l=$(printf '%s\n' "${ls[@]}" | median)
  b=$(printf '%s\n' "${bs[@]}" | median)
  echo "| 1500 | $t | $l | $b |"
  stop_bg
done
