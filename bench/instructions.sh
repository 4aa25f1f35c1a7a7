#!/usr/bin/env bash
# bench/instructions.sh - instructions per 8 B round trip, each side: the regression
# benchmark of the small-message path (issue 23). Time on this shared 2-core machine
# is noise; instruction counts are not, as long as nobody spins: every wait here
# sleeps in the kernel until its completion (OMX_WAITSPIN_US=0, the provider's
# fi_cq_sread), so a count is the work of the round trips alone.
#
#   net    bench/mx_rtt.c between two namespace hosts (h0 server, h1 client)
#   local  bench/mx_rtt.c, two processes of one host (shared memory)
#   ofi    bench/ofi_pingpong.c through the libfabric provider, two hosts
# Counter: `perf stat -e instructions:u,instructions:k` where the CPU exposes them: a
# path's cost per round trip is then (count of a run of N rounds - count of a run of
# 0) / N, per process, so start-up and tear-down cancel. Otherwise (a VM without a
# PMU, as this machine) valgrind's callgrind, which counts user space only (the kernel
# column reads "-"): what the application thread runs inside the programs'
# measured_rounds function (the timed loop), divided by N; start-up, connection
# discovery and the progress thread's naps (which follow time, not round trips) are
# left out by construction.
#
# Usage: bench/instructions.sh   (root: namespaces)
#   ROUNDS=2000      round trips of the measured runs
#   PATHS="net local ofi"
#   MODES="wait"     mx_rtt's completion styles for net/local (wait test any; test
#                    and any poll, so their counts include idle polls)
#   LIB=build/lib    the libmyriexpress (and libfabric/libomx-fi.so) to measure:
#                    another build's, to compare two commits with one script
#   COUNTER=perf|callgrind (default: perf when supported)
#   OUT=file.csv     (default bench/results/instructions-<date-time>.csv)
#   PROFILES=dir     keep the callgrind profiles there (PATH-MODE-N.SIDE.raw), for
#                    callgrind_annotate --inclusive=yes: where the instructions go
# Prints a table; the CSV has path,mode,side,user_per_rt,user_other_threads_per_rt,
# kernel_per_rt,rounds,counter.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-2000}
PATHS=${PATHS:-net local ofi}
MODES=${MODES:-wait}
LIB=$(realpath "${LIB:-build/lib}")
OUT=${OUT:-bench/results/instructions-$(date +%Y%m%d-%H%M%S).csv}
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxinstr}
H=scripts/hosts.sh
say() { echo "instructions: $*" >&2; }

if [ -z "${COUNTER:-}" ]; then
  if perf stat -x, -e instructions:u -- true 2>&1 | grep '^[0-9]' >/dev/null; then
    COUNTER=perf
  else
    COUNTER=callgrind
    say "no hardware instruction counter here: callgrind (user space only)"
  fi
fi

# ---- build ----
if [ "$LIB" = "$(realpath build/lib)" ]; then
  make -s lib >/dev/null
fi
mkdir -p target/bench "$(dirname "$OUT")"
RTT=target/bench/mx_rtt
${CC:-cc} -O2 -Wall -Wextra -Werror -Iinclude -o "$RTT" bench/mx_rtt.c -L"$LIB" -lmyriexpress
OFIPP=target/bench/ofi_pingpong
have_ofi=0
if [[ " $PATHS " == *" ofi "* ]]; then
  if echo '#include <rdma/providers/fi_prov.h>' | ${CC:-cc} -E - >/dev/null 2>&1; then
    [ "$LIB" = "$(realpath build/lib)" ] && make -s provider >/dev/null
    ${CC:-cc} -O2 -Wall -Wextra -Werror -o "$OFIPP" bench/ofi_pingpong.c -lfabric
    have_ofi=1
  else
    say "libfabric headers missing: the ofi path is skipped"
  fi
fi

# ---- hosts, private state ----
tmp=$(mktemp -d /tmp/omx-instructions.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  $H down >/dev/null 2>&1 || true
  if [ -n "${PROFILES:-}" ]; then
    mkdir -p "$PROFILES" && cp "$tmp"/*.raw "$PROFILES"/ 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
$H down >/dev/null 2>&1 || true
$H up 2 9000 >/dev/null
export OMX_STATE_DIR=$tmp/state
mkdir -p "$OMX_STATE_DIR"
# Waits sleep at once (no spin): no idle polls counted. The progress thread stays (it
# answers discovery while the server waits).
QUIET=(env OMX_WAITSPIN_US=0 OMX_WAITSPIN_MAX_US=0
  LD_LIBRARY_PATH="$LIB" FI_PROVIDER_PATH="$LIB/libfabric" OFI_PINGPONG_BLOCK=1)

# counted FILE CMD...: runs CMD; FILE gets its instruction counts, user and kernel
# (callgrind: the application thread inside measured_rounds, and "-").
counted() {
  local f=$1
  shift
  if [ "$COUNTER" = perf ]; then
    perf stat -x, -e instructions:u,instructions:k -o "$f.raw" -- "$@"
    awk -F, '/instructions:u/ {u=$1} /instructions:k/ {k=$1} END {print u, k}' "$f.raw" >"$f"
  else
    valgrind -q --tool=callgrind --toggle-collect='measured_rounds*' \
      --callgrind-out-file="$f.raw" -- "$@"
    awk '/^summary:/ {print $2, "-"}' "$f.raw" >"$f"
  fi
}

# run PATH MODE N: one server/client pair of N rounds; counts in $tmp/PATH-MODE-N.{server,client}
run() {
  local path=$1 mode=$2 n=$3 base=$tmp/$1-$2-$3 server_host=0 client_host=1 peer=h0:0
  [ "$path" = local ] && client_host=0
  if [ "$path" = ofi ]; then
    # ofi_pingpong runs at least one round after ITERS/20+1 warm-up ones: N=0 means 1.
    $H exec $server_host "${QUIET[@]}" bash -c "$(declare -f counted); COUNTER=$COUNTER; \
      counted $base.server $OFIPP server 8 $((n > 0 ? n : 1))" >"$base.name" &
    pids+=($!)
    local name=""
    for _ in $(seq 200); do
      name=$(head -c 32 "$base.name" 2>/dev/null || true)
      [ ${#name} -eq 32 ] && break
      sleep 0.1
    done
    $H exec $client_host "${QUIET[@]}" bash -c "$(declare -f counted); COUNTER=$COUNTER; \
      counted $base.client $OFIPP client $name 8 $((n > 0 ? n : 1))" >/dev/null
  else
    $H exec $server_host "${QUIET[@]}" bash -c "$(declare -f counted); COUNTER=$COUNTER; \
      counted $base.server $RTT server $n $mode" &
    pids+=($!)
    $H exec $client_host "${QUIET[@]}" bash -c "$(declare -f counted); COUNTER=$COUNTER; \
      counted $base.client $RTT client $peer $n $mode"
  fi
  wait "${pids[-1]}"
  unset 'pids[-1]'
}

# Round trips a run of N makes beyond a run of 0 (ofi_pingpong adds N/20 warm-up ones);
# N under callgrind, which counts the measured rounds alone.
extra_rounds() {
  local path=$1 n=$2
  if [ "$path" = ofi ] && [ "$COUNTER" = perf ]; then
    echo $(((n + n / 20 + 1) - (1 + 1 / 20 + 1)))
  else
    echo "$n"
  fi
}

echo "path,mode,side,user_per_rt,kernel_per_rt,rounds,counter" >"$OUT"
printf '%-6s %-5s %-7s %12s %12s\n' path mode side user/rt kernel/rt >&2
for path in $PATHS; do
  [ "$path" = ofi ] && [ $have_ofi = 0 ] && continue
  modes=$MODES
  [ "$path" = ofi ] && modes=sread
  for mode in $modes; do
    say "$path $mode: $ROUNDS rounds"
    run "$path" "$mode" "$ROUNDS"
    if [ "$COUNTER" = perf ]; then
      run "$path" "$mode" 0
    else
      echo "0 -" >"$tmp/$path-$mode-0.client"
      echo "0 -" >"$tmp/$path-$mode-0.server"
    fi
    d=$(extra_rounds "$path" "$ROUNDS")
    for side in client server; do
      read -r u1 k1 <"$tmp/$path-$mode-$ROUNDS.$side"
      read -r u0 k0 <"$tmp/$path-$mode-0.$side"
      u=$(((u1 - u0) / d))
      k=-
      [ "$k1" != - ] && k=$(((k1 - k0) / d))
      echo "$path,$mode,$side,$u,$k,$d,$COUNTER" >>"$OUT"
      printf '%-6s %-5s %-7s %12s %12s\n' "$path" "$mode" "$side" "$u" "$k" >&2
    done
  done
done
say "CSV: $OUT"
