#!/usr/bin/env bash
# run.sh - builds and runs the MX API test programs of tests/c/api against
# libmyriexpress.so.0.
#
#   tests/c/api/run.sh            every test
#   tests/c/api/run.sh NAME...    only these tests (file names without .c)
#
# Single-host tests run inside host h0 with OMX_IFACES=lo (every endpoint of
# the host on the loopback interface, board name "localhost"); two-host tests
# (twohost, pingpong2) run a server in h0 and a client in h1, joined by veth;
# rails (last) does the same over three veth links (three boards per host).
# self_veth runs in h0 on its veth interface instead of lo.
# intranode_fallback, intranode_network, intranode_veth, intranode_kill_fallback
# and intranode_kill_network rerun intranode_sizes / intranode_kill in h0
# under other settings (see below).
# setting_* rerun data-checking programs under the settings no other test
# sets, each with a non-default value (see "settings" below).
# abi_compat runs a program built without rpath through LD_LIBRARY_PATH,
# abi_static the same program linked with libmyriexpress.a, symbols checks
# the library's exported symbols (symbols.sh).
# The hosts are network namespaces made by scripts/hosts.sh under the prefix
# $OMX_NS_PREFIX (default omxcapi) and removed on exit; omx's host state goes
# to a private temporary OMX_STATE_DIR.
#
# Prints "PASS name", "FAIL name" (the log of a failed test shown indented)
# or "SKIP name: reason" per test, then "N passed, M failed, K skipped";
# exits non-zero on any failure. Needs root (network namespaces, raw packet
# sockets); otherwise every test is skipped, which is a failure under CI=true
# or OMX_TEST_STRICT=1 (tests/runner.sh). Environment: CC (gcc),
# TEST_TIMEOUT (120 s per test), TEST_TIME_FACTOR (1; the programs' upper
# time limits are multiplied by it on a loaded machine).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)

CC=${CC:-gcc}
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxcapi}
libdir="$root/build/lib"
hosts="$root/scripts/hosts.sh"
cflags=(-std=c99 -Wall -Wextra -Werror -pedantic -O1 -g -I"$root/include" -I"$here")

# shellcheck source=tests/runner.sh
. "$root/tests/runner.sh"
runner_start capi

# compile NAME [EXTRA ARGS...]: tests/c/api/NAME.c -> $tmp/bin/NAME (rpath to build/lib).
compile() {
  local name=$1
  shift
  "$CC" "${cflags[@]}" "$here/$name.c" -o "$tmp/bin/$name" -L"$libdir" -lmyriexpress \
    -Wl,-rpath,"$libdir" -lpthread "$@" >"$tmp/log/$name.cc" 2>&1
}

# Single-host tests: every NAME.c but the special ones below.
special=" pingpong twohost abi_compat self_veth raw intranode_kill rails "
single=()
for f in "$here"/*.c; do
  n=$(basename "$f" .c)
  [[ "$special" == *" $n "* ]] || single+=("$n")
done
# Settings no other test sets, each run under a non-default value with a program
# that checks its data: sendrecv (every size class, to itself too), many (1000
# requests in flight), intranode_sizes (between processes of the host), info (the
# thresholds as MX_COPY_SEND_MAX reports them). Most take the network path on lo
# (OMX_DISABLE_SHARED=1), where the setting applies. OMX_IGNORE_MX_ENV is in init.c;
# OMX_PROGRESS_THREAD=0 runs pingpong between two processes (setting_progress_thread
# below: without the thread an endpoint answers connects only while its process is in
# an MX call, so two endpoints of one blocked process cannot meet).
net=(OMX_IFACES=lo OMX_DISABLE_SHARED=1)
settings=(
  "setting_disable_self sendrecv OMX_IFACES=lo OMX_DISABLE_SELF=1"
  "setting_zombie_send many ${net[*]} OMX_ZOMBIE_SEND=0"
  "setting_notacked_max many ${net[*]} OMX_NOTACKED_MAX=1"
  "setting_pull_blocks sendrecv ${net[*]} OMX_PULL_BLOCKS=1"
  "setting_bundle many ${net[*]} OMX_BUNDLE=0"
  "setting_coalescing_us sendrecv ${net[*]} OMX_COALESCING=timer OMX_COALESCING_US=500"
  "setting_copy sendrecv ${net[*]} OMX_COPY_OFFLOAD=on OMX_COPY_MIN_MSG=0 OMX_COPY_MIN_FRAG=0 OMX_COPY_SYNC_MIN=0 OMX_COPY_CPU=0"
  "setting_rndv_threshold sendrecv ${net[*]} OMX_RNDV_THRESHOLD=1024"
  "setting_rndv_threshold_info info OMX_IFACES=lo OMX_RNDV_THRESHOLD=1024"
  "setting_shared_ring intranode_sizes OMX_IFACES=lo OMX_SHARED_RING_KB=64"
  "setting_shared_rndv_threshold intranode_sizes OMX_IFACES=lo OMX_SHARED_RNDV_THRESHOLD=65536"
  "setting_shared_rndv_threshold_info info OMX_IFACES=lo OMX_SHARED_RNDV_THRESHOLD=65536"
)
setting_names=()
for x in "${settings[@]}"; do setting_names+=("${x%% *}"); done

all=("${single[@]}" self_veth intranode_kill intranode_fallback intranode_network intranode_veth
  intranode_kill_fallback intranode_kill_network "${setting_names[@]}" memcpy_service abi_compat abi_static symbols
  pingpong_lo pingpong2 setting_progress_thread twohost raw rails)
select_tests "$@"

[ "$(id -u)" -eq 0 ] || skip_all "needs root (network namespaces, raw packet sockets)"
if [ ! -e "$libdir/libmyriexpress.so.0" ]; then
  echo "building the library (make lib)..."
  make -C "$root" lib >"$tmp/make.log" 2>&1 || {
    cat "$tmp/make.log"
    report build 1
    summary
    exit 1
  }
fi

export OMX_STATE_DIR="$tmp/state"
mkdir -p "$OMX_STATE_DIR"
unset OMX_IFACES OMX_RNDV_THRESHOLD OMX_RESENDS_MAX OMX_FATAL_ERRORS MX_ERRORS_ARE_FATAL || true

hosts_up 2 9000

for n in "${single[@]}"; do
  want "$n" || continue
  if ! compile "$n"; then
    report "$n" 1 "$tmp/log/$n.cc"
    continue
  fi
  st=0
  in_host 0 env OMX_IFACES=lo "$tmp/bin/$n" >"$tmp/log/$n" 2>&1 || st=$?
  [ "$st" -eq 124 ] && echo "timed out after ${TEST_TIMEOUT}s" >>"$tmp/log/$n"
  report "$n" "$st" "$tmp/log/$n"
done

# One endpoint talking to itself on h0's veth interface (no OMX_IFACES).
if want self_veth; then
  if compile self_veth; then
    st=0
    in_host 0 "$tmp/bin/self_veth" >"$tmp/log/self_veth" 2>&1 || st=$?
    report self_veth "$st" "$tmp/log/self_veth"
  else
    report self_veth 1 "$tmp/log/self_veth.cc"
  fi
fi

# Intra-node tests. intranode_kill runs four scenarios in a row, each bounded
# on its own (a hung request is reported after 30 s), so it gets three times
# TEST_TIMEOUT. Variants (the other intranode_* programs run above, on lo):
# intranode_sizes on the pipelined two-copy fallback (OMX_SHARED_CMA=0; with
# OMX_VERBOSE=1 its stderr must mention "two-copy"), on the network path
# between processes of one host (OMX_DISABLE_SHARED=1), and on h0's veth
# interface (no OMX_IFACES), where two processes of one host can only meet
# through shared memory (frames to one's own MAC never come back); and
# intranode_kill on the two-copy fallback and on the network path.
stale_lib_note() {
  if ! grep -q OMX_SHARED_CMA "$libdir/libmyriexpress.so.0"; then
    echo "note: $libdir/libmyriexpress.so.0 predates the intra-node runtime (make lib)"
  fi
}
# variant NAME PROGRAM ENV... : PROGRAM in h0 under env ENV...
variant() {
  local name=$1 prog=$2 st=0
  shift 2
  if [ ! -x "$tmp/bin/$prog" ] && ! compile "$prog"; then
    report "$name" 1 "$tmp/log/$prog.cc"
    return 0
  fi
  in_host 0 env "$@" "$tmp/bin/$prog" >"$tmp/log/$name" 2>"$tmp/log/$name.err" || st=$?
  [ "$st" -eq 124 ] && echo "timed out after ${TEST_TIMEOUT}s" >>"$tmp/log/$name.err"
  if [ "$name" = intranode_fallback ] && ! grep -qi 'two-copy' "$tmp/log/$name.err"; then
    {
      echo "OMX_SHARED_CMA=0 OMX_VERBOSE=1: no line mentioning \"two-copy\" on stderr"
      stale_lib_note
    } >>"$tmp/log/$name.err"
    [ "$st" -eq 0 ] && st=1
  fi
  [ "$st" -ne 0 ] && stale_lib_note >>"$tmp/log/$name.err"
  report "$name" "$st" "$tmp/log/$name" "$tmp/log/$name.err"
}
if want intranode_kill; then
  TEST_TIMEOUT=$((TEST_TIMEOUT * 3)) variant intranode_kill intranode_kill OMX_IFACES=lo
fi
if want intranode_fallback; then
  variant intranode_fallback intranode_sizes OMX_IFACES=lo OMX_SHARED_CMA=0 OMX_VERBOSE=1
fi
if want intranode_network; then
  variant intranode_network intranode_sizes OMX_IFACES=lo OMX_DISABLE_SHARED=1
fi
if want intranode_veth; then
  variant intranode_veth intranode_sizes OMX_HOSTNAME=h0
fi
if want intranode_kill_fallback; then
  TEST_TIMEOUT=$((TEST_TIMEOUT * 3)) variant intranode_kill_fallback intranode_kill \
    OMX_IFACES=lo OMX_SHARED_CMA=0
fi
if want intranode_kill_network; then
  TEST_TIMEOUT=$((TEST_TIMEOUT * 3)) variant intranode_kill_network intranode_kill \
    OMX_IFACES=lo OMX_DISABLE_SHARED=1
fi

for x in "${settings[@]}"; do
  read -r -a words <<<"$x"
  want "${words[0]}" && variant "${words[@]}"
done

# memcpy on the host's copy service (omx_copyd, target/release): the program
# must have been served by it (its verbose log names the client).
if want memcpy_service; then
  copyd="$root/target/release/omx_copyd"
  if [ ! -x "$copyd" ]; then
    echo "$copyd missing (cargo build --release -p omx-tools)" >"$tmp/log/memcpy_service"
    report memcpy_service 1 "$tmp/log/memcpy_service"
  else
    "$copyd" -v --socket "$tmp/copyd.sock" 2>"$tmp/log/copyd.err" &
    copyd_pid=$!
    for _ in $(seq 100); do [ -S "$tmp/copyd.sock" ] && break; sleep 0.1; done
    variant memcpy_service memcpy OMX_COPY_SERVICE="$tmp/copyd.sock"
    kill "$copyd_pid" 2>/dev/null || true
    wait "$copyd_pid" 2>/dev/null || true
    if ! grep -q 'client pid' "$tmp/log/copyd.err"; then
      echo "omx_copyd served no client" >"$tmp/log/memcpy_service"
      report memcpy_service_served 1 "$tmp/log/memcpy_service" "$tmp/log/copyd.err"
    fi
  fi
fi

# Binary compatibility: compiled once without rpath, run through LD_LIBRARY_PATH
# from a directory holding only the soname, eagerly bound.
if want abi_compat; then
  st=0
  "$CC" "${cflags[@]}" "$here/abi_compat.c" -o "$tmp/bin/abi_compat" -L"$libdir" \
    -lmyriexpress -lpthread >"$tmp/log/abi_compat.cc" 2>&1 || st=$?
  if [ "$st" -eq 0 ]; then
    mkdir -p "$tmp/sodir"
    cp "$libdir/libmyriexpress.so.0" "$tmp/sodir/"
    {
      # Only the soname is needed, and the versioned references were recorded.
      readelf -d "$tmp/bin/abi_compat" | grep 'NEEDED.*\[libmyriexpress\.so\.0\]' >/dev/null ||
        { echo "abi_compat does not need libmyriexpress.so.0"; st=1; }
      if readelf -d "$tmp/bin/abi_compat" | grep -E 'RPATH|RUNPATH' >/dev/null; then
        echo "abi_compat has an rpath"
        st=1
      fi
      "$here/symbols.sh" -r "$tmp/bin/abi_compat" || st=1
      # Without LD_LIBRARY_PATH the library is not found (unless installed).
      if ! ldconfig -p 2>/dev/null | grep 'libmyriexpress\.so\.0' >/dev/null &&
        in_host 0 env -u LD_LIBRARY_PATH "$tmp/bin/abi_compat" >/dev/null 2>&1; then
        echo "abi_compat ran without the library on the search path"
        st=1
      fi
      in_host 0 env OMX_IFACES=lo LD_LIBRARY_PATH="$tmp/sodir" LD_BIND_NOW=1 \
        "$tmp/bin/abi_compat" || st=1
    } >"$tmp/log/abi_compat" 2>&1
  else
    cp "$tmp/log/abi_compat.cc" "$tmp/log/abi_compat"
  fi
  report abi_compat "$st" "$tmp/log/abi_compat"
fi

# The static archive: the same program linked with libmyriexpress.a.
if want abi_static; then
  st=0
  "$CC" "${cflags[@]}" "$here/abi_compat.c" -o "$tmp/bin/abi_static" "$libdir/libmyriexpress.a" \
    -lpthread -ldl -lm >"$tmp/log/abi_static" 2>&1 || st=$?
  if [ "$st" -eq 0 ]; then
    {
      if readelf -d "$tmp/bin/abi_static" | grep 'NEEDED.*libmyriexpress' >/dev/null; then
        echo "abi_static still needs libmyriexpress"
        st=1
      fi
      in_host 0 env OMX_IFACES=lo "$tmp/bin/abi_static" || st=1
    } >>"$tmp/log/abi_static" 2>&1
  fi
  report abi_static "$st" "$tmp/log/abi_static"
fi

if want symbols; then
  st=0
  "$here/symbols.sh" "$libdir" >"$tmp/log/symbols" 2>&1 || st=$?
  report symbols "$st" "$tmp/log/symbols"
fi

# The ping-pong of pingpong.c: on lo inside h0, then h1 -> h0 over veth.
if want pingpong_lo || want pingpong2 || want setting_progress_thread; then
  compile pingpong || true
fi
# pair NAME SERVER_HOST CLIENT_HOST SERVER_CMD... -- CLIENT_CMD...
pair() {
  local name=$1 sh=$2 ch=$3 scmd=() ccmd=() st=0 spid
  shift 3
  while [ "$1" != "--" ]; do
    scmd+=("$1")
    shift
  done
  shift
  ccmd=("$@")
  # timeout itself in the background, so that $! is its pid (cleanup kills it,
  # and it passes the signal on to the server).
  timeout -k 5 "$TEST_TIMEOUT" "$hosts" exec "$sh" "${scmd[@]}" >"$tmp/log/$name.server" 2>&1 &
  spid=$!
  bgpids+=("$spid")
  in_host "$ch" "${ccmd[@]}" >"$tmp/log/$name.client" 2>&1 || st=$?
  wait "$spid" || st=$((st ? st : $?))
  report "$name" "$st" "$tmp/log/$name.server" "$tmp/log/$name.client"
}
if want pingpong_lo; then
  if [ -x "$tmp/bin/pingpong" ]; then
    pair pingpong_lo 0 0 env OMX_IFACES=lo "$tmp/bin/pingpong" -- \
      env OMX_IFACES=lo "$tmp/bin/pingpong" localhost
  else
    report pingpong_lo 1 "$tmp/log/pingpong.cc"
  fi
fi
if want pingpong2; then
  if [ -x "$tmp/bin/pingpong" ]; then
    pair pingpong2 0 1 "$tmp/bin/pingpong" -- "$tmp/bin/pingpong" h0:0
  else
    report pingpong2 1 "$tmp/log/pingpong.cc"
  fi
fi
if want setting_progress_thread; then
  if [ -x "$tmp/bin/pingpong" ]; then
    pair setting_progress_thread 0 0 env "${net[@]}" OMX_PROGRESS_THREAD=0 "$tmp/bin/pingpong" -- \
      env "${net[@]}" OMX_PROGRESS_THREAD=0 "$tmp/bin/pingpong" localhost
  else
    report setting_progress_thread 1 "$tmp/log/pingpong.cc"
  fi
fi
if want twohost; then
  if compile twohost; then
    pair twohost 0 1 "$tmp/bin/twohost" server -- "$tmp/bin/twohost" client
  else
    report twohost 1 "$tmp/log/twohost.cc"
  fi
fi
if want raw; then
  if compile raw; then
    pair raw 1 0 "$tmp/bin/raw" recv -- "$tmp/bin/raw" send
  else
    report raw 1 "$tmp/log/raw.cc"
  fi
fi
# Last: the hosts again, now joined by three links (boards omx0..omx2), with a
# state of their own (raw renames boards, whose MACs the new hosts reuse).
if want rails; then
  if compile rails; then
    hosts_up 2 9000 3
    export OMX_STATE_DIR="$tmp/state-rails"
    mkdir -p "$OMX_STATE_DIR"
    pair rails 0 1 "$tmp/bin/rails" server -- "$tmp/bin/rails" client
  else
    report rails 1 "$tmp/log/rails.cc"
  fi
fi

summary
