#!/usr/bin/env bash
# memcpy_async.sh - omx_memcpy_async on the process's copy thread and on omx_copyd,
# free and pinned (application on vCPU 0, the copy engine on vCPU 1). Needs make lib
# and cargo build --release -p omx-tools --bin omx_copyd. REPS (5) runs per size.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'kill "${copyd:-}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
gcc -std=c99 -O2 -Wall -Werror -I"$root/include" "$root/bench/memcpy_async.c" -o "$tmp/bench" \
  -L"$root/build/lib" -lmyriexpress -Wl,-rpath,"$root/build/lib"
export OMX_STATE_DIR=$tmp
REPS=${REPS:-5}
echo "== copy thread, free"
OMX_COPY_SERVICE=0 "$tmp/bench" "$REPS"
echo "== copy thread on vCPU 1, application on vCPU 0"
OMX_COPY_SERVICE=0 OMX_COPY_CPU=1 taskset -c 0 "$tmp/bench" "$REPS"
"$root/target/release/omx_copyd" --socket "$tmp/copyd.sock" --cpu 1 &
copyd=$!
for _ in $(seq 100); do [ -S "$tmp/copyd.sock" ] && break; sleep 0.1; done
echo "== omx_copyd on vCPU 1, application on vCPU 0"
OMX_COPY_SERVICE=$tmp/copyd.sock taskset -c 0 "$tmp/bench" "$REPS"
echo "== omx_copyd on vCPU 1, application free"
OMX_COPY_SERVICE=$tmp/copyd.sock "$tmp/bench" "$REPS"
