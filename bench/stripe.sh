#!/usr/bin/env bash
# Striping one stream over several links (root): two namespaces joined by one, two and
# three veth links (scripts/hosts.sh up 2 9000 LINKS, prefix omxstripe), one endpoint
# pair on board 0 of each host, with OMX_STRIPE=0 and =1 alternately. Per run:
#   - omx_stream (receiver on h0, sender on h1, 4 MiB messages, COUNT per timed pass):
#     MB/s and its CPU profile (receiver's application and progress threads, % of one
#     CPU; the machine's busy % from /proc/stat, which includes other users of a shared
#     machine and the kernel's packet work);
#   - omx_perf 4 MiB ping-pong (ITERS iterations): MB/s;
#   - the bytes each link of the receiver received during the stream (its kernel
#     counter), to show where the data went.
# Prints one CSV line per run; a benchmark, not a test: nothing is asserted.
#
#   BIN=dir    binaries from dir (default target/release, built if missing)
#   REPS=2     runs per link count and setting
#   COUNT=100  omx_stream messages per timed pass; ITERS=100 omx_perf iterations
set -euo pipefail
cd "$(dirname "$0")/.."
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxstripe}
H=scripts/hosts.sh
REPS=${REPS:-2}
COUNT=${COUNT:-100}
ITERS=${ITERS:-100}
BIN=${BIN:-target/release}
[ "$(id -u)" = 0 ] || { echo "stripe: needs root" >&2; exit 1; }
[ -x "$BIN/omx_stream" ] && [ -x "$BIN/omx_perf" ] || cargo build --release -q -p omx-tools
tmp=$(mktemp -d)
export OMX_STATE_DIR=$tmp/state
trap '"$H" down; rm -rf "$tmp"' EXIT

# Column of the last CSV line of $1 by header name.
col() { python3 -c 'import sys,csv; r=list(csv.DictReader(open(sys.argv[1]))); print(r[-1][sys.argv[2]])' "$1" "$2"; }
# Bytes received so far by each link of host 0, slash-separated.
rx() {
  local k out=()
  for ((k = 0; k < $1; k++)); do
    out+=("$(ip netns exec "$OMX_NS_PREFIX-h0" cat "/sys/class/net/omx$k/statistics/rx_bytes")")
  done
  echo "${out[*]}"
}
# MB received per link between two rx readings.
delta() { python3 -c 'import sys; a=sys.argv[1].split(); b=sys.argv[2].split(); print("/".join(str(round((int(y)-int(x))/1e6)) for x,y in zip(a,b)))' "$1" "$2"; }

echo "links,stripe,rep,stream_MBps,recv_app_pct,recv_progress_pct,machine_busy_pct,MB_per_link,perf_4MiB_MBps,load_avg"
for links in 1 2 3; do
  "$H" down >/dev/null 2>&1 || true
  rm -rf "$OMX_STATE_DIR"
  mkdir -p "$OMX_STATE_DIR"
  "$H" up 2 9000 "$links" >/dev/null
  for rep in $(seq 1 "$REPS"); do
    for stripe in 0 1; do
      export OMX_STRIPE=$stripe
      before=$(rx "$links")
      "$H" exec 0 "$BIN/omx_stream" -b 0 -e 0 -s 4M -N "$COUNT" --csv \
        >"$tmp/r.csv" 2>"$tmp/r.err" &
      recv=$!
      "$H" exec 1 "$BIN/omx_stream" -b 0 -d h0:0 >"$tmp/s.out" 2>&1
      wait "$recv"
      per=$(delta "$before" "$(rx "$links")")
      # omx_perf: the server ends after one client; its output line for 4 MiB is
      # `length latency_us MB/s ...`.
      "$H" exec 0 "$BIN/omx_perf" >"$tmp/ps.out" 2>&1 &
      server=$!
      sleep 0.5 # (the server's endpoint opens; a client connecting first is refused)
      perf=$("$H" exec 1 "$BIN/omx_perf" -d h0:0 -S 4194304 -E 4194305 -N "$ITERS" -W 5 \
        -P 0 | awk '$1 == 4194304 && NF == 4 {print $3}')
      wait "$server" || true
      echo "$links,$stripe,$rep,$(col "$tmp/r.csv" MBps),$(col "$tmp/r.csv" app_pct),$(col "$tmp/r.csv" progress_pct),$(col "$tmp/r.csv" machine_busy_pct),$per,$perf,$(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
