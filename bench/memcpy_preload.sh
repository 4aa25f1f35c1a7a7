#!/usr/bin/env bash
# memcpy_preload.sh - memcpy followed by computation, 64 KiB..64 MiB, without the
# preload, with libomx_memcpy.so on the copy thread and on omx_copyd; unpinned and
# pinned (application on vCPU 0, copy engine on vCPU 1). Not a test: prints a table.
#
#   bench/memcpy_preload.sh   (target/release: omx_memcpy, libomx_memcpy.so, omx_copyd)
#   REPS (best of, default 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/target/release}
reps=${REPS:-5}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/bench" "$root/bench/memcpy_preload.c"
export OMX_STATE_DIR=$tmp OMX_MEMCPY_MIN=65536
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
run() { # LABEL PIN CMD...
  local label=$1 pin=$2
  shift 2
  if [ "$pin" = 1 ]; then set -- taskset -c 0 "$@"; fi
  "$@" "$tmp/bench" "$reps" | sed "s/^/$label /"
}
for pin in 0 1; do
  cpu=(); [ "$pin" = 1 ] && cpu=(--cpu 1)
  "$bin/omx_copyd" --socket "$tmp/copyd.sock" "${cpu[@]}" 2>/dev/null &
  copyd=$!
  for _ in $(seq 100); do [ -S "$tmp/copyd.sock" ] && break; sleep 0.1; done
  run "pin=$pin memcpy" "$pin"
  OMX_COPY_CPU=$([ "$pin" = 1 ] && echo 1 || echo "") OMX_COPY_SERVICE=off run "pin=$pin thread" "$pin" "$bin/omx_memcpy"
  OMX_COPY_SERVICE="$tmp/copyd.sock" run "pin=$pin service" "$pin" "$bin/omx_memcpy"
  kill "$copyd"; wait "$copyd" 2>/dev/null || true
  rm -f "$tmp/copyd.sock"
done
