#!/usr/bin/env bash
# Sequential write on an omxfs mount between two namespace hosts (root; not a test):
# `dd bs=1M` of MIB MiB with conv=fsync, then without (the server's page cache: the
# close waits for the writes behind), then with again; prints MB/s of each. Alternate
# builds in one session to compare them (the machine's load swings between runs):
#
#   bench/fs_write.sh BIN [MIB]      (BIN holds omxfs and omxfsd; MIB 512 by default)
#   for b in old new old new; do bench/fs_write.sh /tmp/$b 512; done
set -euo pipefail
cd "$(dirname "$0")/.."
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxfswrite}
BIN=$1
MIB=${2:-512}
H=scripts/hosts.sh
[ "$(id -u)" = 0 ] || { echo "fs_write.sh: needs root" >&2; exit 1; }
tmp=$(mktemp -d /tmp/omx-fs-write.XXXXXX)
export OMX_STATE_DIR=$tmp/state
mkdir -p "$OMX_STATE_DIR" "$tmp/export/data" "$tmp/m"
pids=()
cleanup() {
  [ -n "${cpid:-}" ] && nsenter -t "$cpid" -m fusermount3 -u -z "$tmp/m" 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$H" down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$H" up 2 9000 >/dev/null
"$H" exec 0 "$BIN/omxfsd" "$tmp/export/data" >"$tmp/server.log" 2>&1 &
pids+=($!)
"$H" exec 1 "$BIN/omxfs" h0:data "$tmp/m" -f >"$tmp/client.log" 2>&1 &
cpid=$!
pids+=("$cpid")
until nsenter -t "$cpid" -m findmnt -n "$tmp/m" >/dev/null 2>&1; do sleep 0.1; done
for mode in fsync nofsync fsync; do
  conv=
  [ $mode = fsync ] && conv=conv=fsync
  t0=$(date +%s.%N)
  nsenter -t "$cpid" -m dd if=/dev/zero of="$tmp/m/f" bs=1M count="$MIB" $conv status=none
  t1=$(date +%s.%N)
  python3 -c "import sys; print(sys.argv[1], sys.argv[2], round($MIB * 1.048576 / ($t1 - $t0)), 'MB/s')" "$BIN" $mode
  nsenter -t "$cpid" -m rm -f "$tmp/m/f"
done
