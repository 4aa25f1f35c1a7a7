#!/usr/bin/env bash
# run.sh - application-transparent asynchronous memcpy (libomx_memcpy.so, docs/COPY.md):
# programs run with and without the preload must print the same bytes, and the
# preloaded runs must really have copied asynchronously (OMX_MEMCPY_STATS=1), or, on a
# CPU without protection keys, report that copies stay synchronous.
#
#   tests/memcpy/run.sh     (target/release built, or OMX_MEMCPY_BIN; python3, gzip, sort)
#
# Each check runs on the process's copy thread (OMX_COPY_SERVICE=off) and on
# omx_copyd. Prints "PASS name" / "FAIL name" per check, then "N passed, M failed, K skipped".
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
TEST_TIMEOUT=${TEST_TIMEOUT:-300}
hosts=true # no test hosts here
bin="${OMX_MEMCPY_BIN:-$root/target/release}"
# shellcheck source=tests/runner.sh
. "$root/tests/runner.sh"
runner_start memcpy
all=(random own-handler python sort gzip)

for f in omx_memcpy libomx_memcpy.so omx_copyd; do
  [ -e "$bin/$f" ] || skip_all "$bin/$f not built (cargo build --release -p omx-memcpy -p omx-tools)"
done
# Without protection keys (a CPU or VM without PKU) the preload keeps every copy
# synchronous: each check then asserts that the library says so and that the programs
# still print the same bytes (the fallback), instead of counting asynchronous copies.
sync_only=false
if ! grep -qw pku /proc/cpuinfo; then
  sync_only=true
  echo "memcpy: no protection keys on this CPU: checking the synchronous fallback"
fi
log="$tmp/log"
CC=${CC:-cc}
$CC -std=gnu11 -O2 -Wall -Wextra -Werror -pthread -o "$tmp/bin/random" "$here/random.c" || {
  report build 1
  summary
  exit 1
}
$CC -std=gnu11 -O2 -Wall -Wextra -Werror -o "$tmp/bin/handler" "$here/handler.c"

export OMX_STATE_DIR="$tmp/state"
mkdir -p "$OMX_STATE_DIR"
"$bin/omx_copyd" --socket "$tmp/copyd.sock" 2>"$log/copyd.err" &
bgpids+=($!)
for _ in $(seq 100); do [ -S "$tmp/copyd.sock" ] && break; sleep 0.1; done

# Small copies too (64 KiB), so that many of them are in flight at once.
export OMX_MEMCPY_MIN=65536 OMX_MEMCPY_STATS=1

# check NAME MIN_ASYNC CMD...: CMD's stdout without the preload, then preloaded on the
# copy thread and on the service: the same bytes, and at least MIN_ASYNC asynchronous
# copies in each preloaded run.
check() {
  local name=$1 min=$2 st=0 engine n
  shift 2
  $sync_only && min=0
  timeout "$TEST_TIMEOUT" "$@" >"$log/$name.plain" 2>"$log/$name.plain.err" || st=1
  for engine in off "$tmp/copyd.sock"; do
    OMX_COPY_SERVICE=$engine timeout "$TEST_TIMEOUT" "$bin/omx_memcpy" "$@" \
      >"$log/$name.pre" 2>"$log/$name.pre.err" || { st=1; echo "exit status $? ($engine)" >>"$log/$name.why"; }
    cmp "$log/$name.plain" "$log/$name.pre" >>"$log/$name.why" 2>&1 || st=1
    # One line per process (a launcher script may run several): their sum.
    n=$(sed -n 's/^omx_memcpy: \([0-9]*\) asynchronous.*/\1/p' "$log/$name.pre.err" | awk '{ s += $1 } END { print s + 0 }')
    echo "$engine: ${n:-no} asynchronous copies" >>"$log/$name.why"
    [ "${n:-0}" -ge "$min" ] || st=1
    if $sync_only && ! grep -q 'no protection keys.*copies stay synchronous' "$log/$name.pre.err"; then
      echo "the fallback was not reported ($engine)" >>"$log/$name.why"
      st=1
    fi
  done
  report "$name" "$st" "$log/$name.why" "$log/$name.pre.err"
}

want random && check random 100 "$tmp/bin/random" 27 4 400 "$tmp"
want own-handler && check own-handler 20 "$tmp/bin/handler"
if want python; then
  if command -v python3 >/dev/null; then
    check python 10 "$(python3 -c 'import sys; print(sys.executable)')" "$here/copies.py" 5
  else skip python "python3 not installed"; fi
fi
python3 -c 'import random; r = random.Random(3); print("\n".join(str(r.getrandbits(40)) for _ in range(1500000)))' >"$tmp/lines"
if want sort; then
  if command -v sort >/dev/null; then
    check sort 0 sort -S 64M "$tmp/lines"
  else skip sort "sort not installed"; fi
fi
if want gzip; then
  if command -v gzip >/dev/null; then
    check gzip 0 gzip -c -6 "$tmp/lines"
  else skip gzip "gzip not installed"; fi
fi
summary
