#!/usr/bin/env bash
# run.sh - tests of the libfabric provider "omx" (build/lib/libfabric/libomx-fi.so).
#
#   tests/ofi/run.sh            every test
#   tests/ofi/run.sh NAME...    only these tests
#
# fi_info        fi_info -p omx (and -v) lists the provider with exactly the
#                supported capabilities (RMA when asked); atomics find nothing
# ofi_api        tests/ofi/ofi_api.c in h0 on lo (shared-memory path between
#                the endpoints of the process)
# ofi_api_net    the same on the network path (OMX_DISABLE_SHARED=1), with the
#                domain opened FI_THREAD_DOMAIN (the provider takes no lock)
# ofi_control    tests/ofi/ofi_control.c in h0 on lo
# ofi_threads    tests/ofi/ofi_threads.c (FI_THREAD_SAFE) in h0 on lo
# ofi_addr       tests/ofi/ofi_addr.c in h0 on lo: IP/host-name nodes, port
#                services, FI_SOURCE binding a port, insertsvc/insertsym
# ofi_wait(_net) tests/ofi/ofi_wait.c in h0 on lo (shared memory, network
#                path): FI_WAIT_FD CQs and counters, poll/epoll, fi_trywait,
#                poll sets (fi_poll)
# ofi_shared_av  tests/ofi/ofi_shared_av.c in h0 on lo: a named AV created by
#                one process, opened FI_READ and used by a forked one
# ofi_multi(_net) tests/ofi/ofi_multi.c in h0 on lo (shared memory, network
#                path): FI_MULTI_RECV buffers, FI_DELIVERY_COMPLETE as op flag
# ofi_rma(_net)  tests/ofi/ofi_rma.c in h0 on lo: RMA write/read, provider keys
#                (shared memory) and the application's (network path), refusals
# ofi_atomic(_net) tests/ofi/ofi_atomic.c in h0 on lo (shared memory, network
#                path): every FI_ATOMIC op and type, refusals, two initiators
# ports_lo/_2h   tests/ofi/ofi_ports.c: servers on two ports of h0, clients in
#                h0 / h1 naming them by IPv4, IPv6, host name, OMX_IPMAP
# twoproc_*      tests/ofi/ofi_twoproc.c, a server and a client process that
#                exchange names through files: both in h0 on lo, and h0/h1
# pp_*           fi_pingpong -e rdm -c (data checked) server and client: on lo
#                in h0 (shared memory, and network path), and from h1 to h0 over
#                the veth link, tagged and msg, every default size plus 0 B,
#                1 B and 8 MiB
#
# Hosts are network namespaces from scripts/hosts.sh (prefix $OMX_NS_PREFIX,
# default omxofi), removed on exit; fi_pingpong's out-of-band TCP socket uses
# addresses this script gives the veth interfaces. omx's host state goes to a
# private OMX_STATE_DIR. Prints "PASS name"/"FAIL name" per test (a failed
# test's log indented), then "N passed, M failed, K skipped"; exits non-zero
# on failure. Every test is skipped (SKIP name: reason) when not root or when
# libfabric (headers, fi_info, fi_pingpong) is missing; a failure under
# CI=true or OMX_TEST_STRICT=1 (tests/runner.sh). Environment: CC (gcc),
# TEST_TIMEOUT (120 s).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

CC=${CC:-gcc}
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxofi}
hosts="$root/scripts/hosts.sh"
provdir="$root/build/lib/libfabric"
cflags=(-std=c11 -Wall -Wextra -Werror -O1 -g -I"$here" -I"$root/include")

# shellcheck source=tests/runner.sh
. "$root/tests/runner.sh"
runner_start ofi

export OMX_STATE_DIR="$tmp/state"
export FI_PROVIDER_PATH="$provdir"
mkdir -p "$OMX_STATE_DIR"
unset OMX_IFACES OMX_DISABLE_SHARED OMX_RNDV_THRESHOLD FI_PROVIDER FI_LOG_LEVEL || true

all=(fi_info ofi_api ofi_api_net ofi_control ofi_threads ofi_addr ofi_wait ofi_wait_net ofi_shared_av ofi_multi ofi_multi_net ofi_rma ofi_rma_net ofi_atomic ofi_atomic_net twoproc_lo twoproc_2h ports_lo ports_2h
  pp_lo_tagged pp_lo_msg pp_lo_net_tagged pp_2h_tagged pp_2h_msg pp_2h_sizes)
select_tests "$@"

[ "$(id -u)" -eq 0 ] || skip_all "needs root (network namespaces, raw packet sockets)"
missing=()
echo '#include <rdma/providers/fi_prov.h>' | "$CC" -E - >/dev/null 2>&1 || missing+=("libfabric headers (libfabric-dev)")
for t in fi_info fi_pingpong; do
  command -v "$t" >/dev/null || missing+=("$t (libfabric-bin)")
done
[ ${#missing[@]} -eq 0 ] || skip_all "libfabric missing: $(printf '%s, ' "${missing[@]}" | sed 's/, $//')"
if [ ! -e "$provdir/libomx-fi.so" ]; then
  echo "building the provider (make provider)..."
  make -C "$root" provider >"$tmp/make.log" 2>&1 || {
    cat "$tmp/make.log"
    report build 1
    summary
    exit 1
  }
fi

hosts_up 2 9000
# fi_pingpong exchanges addresses over TCP, and OFI nodes are IP addresses:
# give the veth ends IPv4 and IPv6 addresses. h0 also has an address on lo,
# an interface omx does not use there (h1 reaches it through OMX_IPMAP).
for i in 0 1; do
  ns="$OMX_NS_PREFIX-h$i"
  ip netns exec "$ns" ip addr add "10.213.7.$((i + 1))/24" dev omx0
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.omx0.disable_ipv6=0
  ip netns exec "$ns" ip addr add "fd00:213::$((i + 1))/64" dev omx0 nodad
done
ip netns exec "$OMX_NS_PREFIX-h0" ip addr add 10.214.0.1/32 dev lo


# fi_info: the provider is listed with its capabilities, and only those.
if want fi_info; then
  st=0
  {
    in_host 0 env OMX_IFACES=lo fi_info -p omx >"$tmp/log/fi_info.out" 2>&1 || st=1
    cat "$tmp/log/fi_info.out"
    grep -q '^provider: omx' "$tmp/log/fi_info.out" || { echo "no provider line"; st=1; }
    grep -q 'type: FI_EP_RDM' "$tmp/log/fi_info.out" || { echo "not RDM"; st=1; }
    in_host 0 env OMX_IFACES=lo fi_info -p omx -v >"$tmp/log/fi_info.v" 2>&1 || st=1
    caps=$(grep -m1 '^    caps:' "$tmp/log/fi_info.v" || true)
    echo "$caps"
    for c in FI_MSG FI_TAGGED FI_SEND FI_RECV FI_LOCAL_COMM FI_REMOTE_COMM \
      FI_DIRECTED_RECV FI_SOURCE FI_REMOTE_CQ_DATA FI_MULTI_RECV; do
      [[ "$caps" == *"$c,"* || "$caps" == *"$c ]"* ]] || { echo "missing $c"; st=1; }
    done
    for c in FI_RMA FI_ATOMIC FI_READ FI_WRITE FI_HMEM FI_COLLECTIVE \
      FI_MULTICAST FI_RMA_EVENT FI_NAMED_RX_CTX FI_TRIGGER FI_FENCE; do
      [[ "$caps" == *"$c"* ]] && { echo "advertises $c"; st=1; }
    done
    for k in 'msg_order: \[ FI_ORDER_SAS \]' 'cq_data_size: 4' \
      'mem_tag_format: 0x00007fffffffffff' 'threading: FI_THREAD_SAFE' \
      'mr_mode: \[  \]' 'inject_size: 4096' 'iov_limit: 255'; do
      grep -q "$k" "$tmp/log/fi_info.v" || { echo "missing '$k'"; st=1; }
    done
    # RMA and atomics only when asked for; capabilities we lack find no provider.
    in_host 0 env OMX_IFACES=lo fi_info -p omx -c FI_RMA -v >"$tmp/log/fi_info.rma" 2>&1 || st=1
    grep -q 'FI_RMA' "$tmp/log/fi_info.rma" || { echo "fi_info -c FI_RMA: no RMA"; st=1; }
    grep -q 'rma_iov_limit: 1' "$tmp/log/fi_info.rma" || { echo "rma_iov_limit not 1"; st=1; }
    in_host 0 env OMX_IFACES=lo fi_info -p omx -c FI_ATOMIC -v >"$tmp/log/fi_info.atomic" 2>&1 || st=1
    grep -q 'FI_ATOMIC' "$tmp/log/fi_info.atomic" || { echo "fi_info -c FI_ATOMIC: no atomics"; st=1; }
    for c in FI_HMEM FI_COLLECTIVE; do
      if in_host 0 env OMX_IFACES=lo fi_info -p omx -c "$c" >/dev/null 2>&1; then
        echo "fi_info -c $c found omx"
        st=1
      fi
    done
    if in_host 0 env OMX_IFACES=lo fi_info -p omx -t FI_EP_MSG >/dev/null 2>&1; then
      echo "fi_info -t FI_EP_MSG found omx"
      st=1
    fi
  } >"$tmp/log/fi_info" 2>&1
  report fi_info "$st" "$tmp/log/fi_info"
fi

# compile NAME: tests/ofi/NAME.c -> $tmp/bin/NAME
compile() {
  "$CC" "${cflags[@]}" "$here/$1.c" -o "$tmp/bin/$1" -lfabric -lpthread \
    -L"$root/build/lib" -Wl,-rpath,"$root/build/lib" -l:libmyriexpress.so.0 >"$tmp/log/$1.cc" 2>&1
}
single() { # single NAME PROGRAM ENV...
  local name=$1 prog=$2 st=0
  shift 2
  if [ ! -x "$tmp/bin/$prog" ] && ! compile "$prog"; then
    report "$name" 1 "$tmp/log/$prog.cc"
    return 0
  fi
  in_host 0 env "$@" "$tmp/bin/$prog" >"$tmp/log/$name" 2>&1 || st=$?
  [ "$st" -eq 124 ] && echo "timed out after ${TEST_TIMEOUT}s" >>"$tmp/log/$name"
  report "$name" "$st" "$tmp/log/$name"
}
want ofi_api && single ofi_api ofi_api OMX_IFACES=lo
want ofi_api_net && single ofi_api_net ofi_api OMX_IFACES=lo OMX_DISABLE_SHARED=1 \
  OFX_TEST_THREADING=domain
want ofi_control && single ofi_control ofi_control OMX_IFACES=lo
want ofi_threads && single ofi_threads ofi_threads OMX_IFACES=lo
want ofi_addr && single ofi_addr ofi_addr OMX_IFACES=lo OFX_TEST_IP=10.213.7.1
want ofi_wait && single ofi_wait ofi_wait OMX_IFACES=lo
want ofi_wait_net && single ofi_wait_net ofi_wait OMX_IFACES=lo OMX_DISABLE_SHARED=1
want ofi_shared_av && single ofi_shared_av ofi_shared_av OMX_IFACES=lo
want ofi_multi && single ofi_multi ofi_multi OMX_IFACES=lo
want ofi_multi_net && single ofi_multi_net ofi_multi OMX_IFACES=lo OMX_DISABLE_SHARED=1
want ofi_rma && single ofi_rma ofi_rma OMX_IFACES=lo OFX_TEST_KEYS=prov
want ofi_rma_net && single ofi_rma_net ofi_rma OMX_IFACES=lo OMX_DISABLE_SHARED=1 OFX_TEST_KEYS=user
want ofi_atomic && single ofi_atomic ofi_atomic OMX_IFACES=lo
want ofi_atomic_net && single ofi_atomic_net ofi_atomic OMX_IFACES=lo OMX_DISABLE_SHARED=1

# twoproc NAME SERVER_HOST CLIENT_HOST "ENV...": ofi_twoproc server and client.
twoproc() {
  local name=$1 sh=$2 ch=$3 envs=$4 st=0 spid dir="$tmp/$1"
  if [ ! -x "$tmp/bin/ofi_twoproc" ] && ! compile ofi_twoproc; then
    report "$name" 1 "$tmp/log/ofi_twoproc.cc"
    return 0
  fi
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  timeout -k 5 "$TEST_TIMEOUT" "$hosts" exec "$sh" env $envs "$tmp/bin/ofi_twoproc" server "$dir" \
    >"$tmp/log/$name.server" 2>&1 &
  spid=$!
  bgpids+=("$spid")
  # shellcheck disable=SC2086
  in_host "$ch" env $envs "$tmp/bin/ofi_twoproc" client "$dir" >"$tmp/log/$name.client" 2>&1 || st=$?
  wait "$spid" || st=$((st ? st : $?))
  report "$name" "$st" "$tmp/log/$name.server" "$tmp/log/$name.client"
}
want twoproc_lo && twoproc twoproc_lo 0 0 "OMX_IFACES=lo"
want twoproc_2h && twoproc twoproc_2h 0 1 ""

# ports NAME SERVER_HOST "PORT:CLIENTS..." "CLIENT_HOST:PORT:NODE..." ENV...:
# ofi_ports servers (one per port, in one host) and clients naming them by
# node (IP address or host name) and port; every process must pass.
ports() {
  local name=$1 sh=$2 servers=$3 clients=$4 st=0 pids=() logs=() s c ch p node
  shift 4
  if [ ! -x "$tmp/bin/ofi_ports" ] && ! compile ofi_ports; then
    report "$name" 1 "$tmp/log/ofi_ports.cc"
    return 0
  fi
  local dir="$tmp/$name"
  mkdir -p "$dir"
  for s in $servers; do
    timeout -k 5 "$TEST_TIMEOUT" "$hosts" exec "$sh" env "$@" "$tmp/bin/ofi_ports" server \
      "${s%%:*}" "$dir" "${s#*:}" >"$tmp/log/$name.server.${s%%:*}" 2>&1 &
    pids+=($!)
    bgpids+=($!)
    logs+=("$tmp/log/$name.server.${s%%:*}")
  done
  for c in $clients; do
    ch=${c%%:*} p=${c#*:} node=${c#*:*:}
    p=${p%%:*}
    timeout -k 5 "$TEST_TIMEOUT" "$hosts" exec "$ch" env "$@" "$tmp/bin/ofi_ports" client \
      "$p" "$dir" "$node" >"$tmp/log/$name.client.$p.$node" 2>&1 &
    pids+=($!)
    bgpids+=($!)
    logs+=("$tmp/log/$name.client.$p.$node")
  done
  for p in "${pids[@]}"; do
    wait "$p" || st=1
  done
  report "$name" "$st" "${logs[@]}"
}
# Two servers on different ports of h0, clients in h0 naming them by
# loopback, interface address and omx host name.
want ports_lo && ports ports_lo 0 "9228:3 9229:2" \
  "0:9228:127.0.0.1 0:9228:10.213.7.1 0:9228:h0 0:9229:localhost 0:9229:::1"
# Clients in h1 naming h0's ports by IPv4 and IPv6 address (neighbour
# table), by omx host name, and by an address of an interface omx does not
# use (OMX_IPMAP).
echo "10.214.0.1 h0" >"$tmp/ipmap"
want ports_2h && ports ports_2h 0 "9228:3 9229:2" \
  "1:9228:10.213.7.1 1:9228:fd00:213::1 1:9228:h0 1:9229:10.214.0.1 1:9229:[fd00:213::1]" \
  OMX_IPMAP="$tmp/ipmap"

# pp_run NAME SERVER_HOST CLIENT_HOST SERVER_ADDR "ENV..." ARGS...: an
# fi_pingpong server and client, data checked (-c); sets pp_st to 0 when both
# succeed and the client printed result rows. Logs in $tmp/log/NAME.*.
port=47700
pp_st=0
pp_run() {
  local name=$1 sh=$2 ch=$3 addr=$4 envs=$5 st=0 spid rows
  shift 5
  port=$((port + 1))
  # shellcheck disable=SC2086
  timeout -k 5 "$TEST_TIMEOUT" "$hosts" exec "$sh" env $envs fi_pingpong -p omx -e rdm -c \
    -B "$port" "$@" >"$tmp/log/$name.server" 2>&1 &
  spid=$!
  bgpids+=("$spid")
  # The client's out-of-band connect does not retry: start it once the server listens.
  if wait_listening "$sh" "$port" "$spid"; then
    # shellcheck disable=SC2086
    in_host "$ch" env $envs fi_pingpong -p omx -e rdm -c -P "$port" "$@" "$addr" \
      >"$tmp/log/$name.client" 2>&1 || st=$?
  else
    echo "the server never listened on port $port" >"$tmp/log/$name.client"
    st=1
  fi
  wait "$spid" || st=$((st ? st : $?))
  rows=$(grep -cE '^[0-9]+[kmg]?[[:space:]]+[0-9]+[kmg]?[[:space:]]+=' "$tmp/log/$name.client" || true)
  if [ "$st" -eq 0 ] && [ "$rows" -lt 1 ]; then
    echo "no result rows" >>"$tmp/log/$name.client"
    st=1
  fi
  pp_st=$st
}
pingpong() { # pingpong NAME (as pp_run): one test
  pp_run "$@"
  report "$1" "$pp_st" "$tmp/log/$1.server" "$tmp/log/$1.client"
}
sizes_run() { # sizes_run NAME SH CH ADDR ENVS MODE: 0 B, 1 B and 8 MiB, one test
  local name=$1 sh=$2 ch=$3 addr=$4 envs=$5 mode=$6 s st=0 logs=()
  for s in 0 1 8388608; do
    pp_run "$name-$s" "$sh" "$ch" "$addr" "$envs" -m "$mode" -S "$s" -I 5
    [ "$pp_st" -ne 0 ] && st=1
    logs+=("$tmp/log/$name-$s.server" "$tmp/log/$name-$s.client")
  done
  report "$name" "$st" "${logs[@]}"
}
want pp_lo_tagged && pingpong pp_lo_tagged 0 0 127.0.0.1 "OMX_IFACES=lo" -m tagged -S all
want pp_lo_msg && pingpong pp_lo_msg 0 0 127.0.0.1 "OMX_IFACES=lo" -m msg -S all
want pp_lo_net_tagged &&
  pingpong pp_lo_net_tagged 0 0 127.0.0.1 "OMX_IFACES=lo OMX_DISABLE_SHARED=1" -m tagged -S all
want pp_2h_tagged && pingpong pp_2h_tagged 0 1 10.213.7.1 "" -m tagged -S all
want pp_2h_msg && pingpong pp_2h_msg 0 1 10.213.7.1 "" -m msg -S all
want pp_2h_sizes && sizes_run pp_2h_sizes 0 1 10.213.7.1 "" tagged

summary
