#!/usr/bin/env bash
# Several links between two hosts (root): one, two and three veth links between two
# namespaces (scripts/hosts.sh up 2 9000 3, prefix omxrails), one omx_stream pair per
# link used at once (receiver on board k of h0, sender on board k of h1: the original's
# rails, one endpoint per board), 4 MiB messages. Prints one CSV line per run and link
# count: links, rep, each link's MB/s, their sum, and the receivers' CPU figures from
# omx_stream (application and progress threads, % of one CPU, summed over the links;
# the machine's busy % over the run, which includes other users of a shared machine).
#
#   BIN=dir   omx_stream from dir (default target/release, built if missing)
#   REPS=3    runs per link count
#   SIZE=4M   message size; COUNT=100 messages per timed pass
set -euo pipefail
cd "$(dirname "$0")/.."
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxrails}
H=scripts/hosts.sh
REPS=${REPS:-3}
SIZE=${SIZE:-4M}
COUNT=${COUNT:-100}
BIN=${BIN:-target/release}
[ "$(id -u)" = 0 ] || { echo "rails: needs root" >&2; exit 1; }
[ -x "$BIN/omx_stream" ] || cargo build --release -q -p omx-tools
tmp=$(mktemp -d)
export OMX_STATE_DIR=$tmp/state
mkdir -p "$OMX_STATE_DIR"
trap '"$H" down; rm -rf "$tmp"' EXIT
"$H" up 2 9000 3 >/dev/null

# Column of a CSV line by header name.
col() { python3 -c 'import sys,csv; r=list(csv.DictReader(open(sys.argv[1]))); print(r[-1][sys.argv[2]])' "$1" "$2"; }

echo "links,rep,MBps_per_link,MBps_sum,recv_app_pct,recv_progress_pct,machine_busy_pct"
for rep in $(seq 1 "$REPS"); do
  for links in 1 2 3; do
    pids=()
    for ((k = 0; k < links; k++)); do
      "$H" exec 0 "$BIN/omx_stream" -b "$k" -e 0 -s "$SIZE" -N "$COUNT" --csv \
        >"$tmp/r$k.csv" 2>"$tmp/r$k.err" &
      pids+=($!)
    done
    for ((k = 0; k < links; k++)); do
      "$H" exec 1 "$BIN/omx_stream" -b "$k" -d "h0:$k" >"$tmp/s$k.out" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    per=() sum=0 app=0 prog=0 busy=0
    for ((k = 0; k < links; k++)); do
      mb=$(col "$tmp/r$k.csv" MBps)
      per+=("$mb")
      sum=$(python3 -c "print(round($sum + $mb, 1))")
      app=$(python3 -c "print(round($app + $(col "$tmp/r$k.csv" app_pct), 1))")
      prog=$(python3 -c "print(round($prog + $(col "$tmp/r$k.csv" progress_pct), 1))")
      busy=$(col "$tmp/r$k.csv" machine_busy_pct)
    done
    echo "$links,$rep,$(IFS=/; echo "${per[*]}"),$sum,$app,$prog,$busy"
  done
done
