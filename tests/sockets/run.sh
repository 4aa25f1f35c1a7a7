#!/usr/bin/env bash
# run.sh - sockets over omx (libomx_sockets.so, docs/SOCKETS.md): unmodified programs
# between two namespace hosts, preloaded with omx_sockets or not; asserts the bytes
# arrive intact and whether the stream was carried on omx or stayed on TCP.
#
#   tests/sockets/run.sh [TEST...]   (root; python3; target/release built, or OMX_SOCKETS_BIN)
#
# A C conformance suite (tests/sockets/conformance.c) runs over the kernel and over omx
# with the same assertions. Real programs, unchanged and preloaded on both ends: nc (256 MiB, SHA-256 compared),
# curl against python3 -m http.server (64 MiB compared), iperf3 (client and server),
# sockperf (ping-pong and throughput, messages on each side of the eager/rendezvous size).
# Daemons serving client processes in turn: tests/sockets/daemon.py, rsync --daemon, git
# daemon, openssl s_server (-WWW, to curl and s_client).
# Prints "PASS name" / "FAIL name" per check, then "N passed, M failed, K skipped".
# Environment: OMX_NS_PREFIX (namespaces, default omxsock), TEST_TIMEOUT (120 s per step).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxsock}
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
# The test programs import tests/sockets/common.py: no bytecode left in the tree.
export PYTHONDONTWRITEBYTECODE=1
hosts="$root/scripts/hosts.sh"
bin="${OMX_SOCKETS_BIN:-$root/target/release}"
# shellcheck source=tests/runner.sh
. "$root/tests/runner.sh"
runner_start sockets
all=(conformance-kernel conformance-omx fork-kernel fork-omx orphan-kernel orphan-omx exec-kernel exec-omx forkexec-kernel forkexec-omx execl-kernel execl-omx twochildren-kernel twochildren-omx carried-both-ways tcp-first-exchange hello-unread-close scrubbed-env second-client control-not-readable ipv6 plain-server plain-client nc-sha256 curl-http iperf3 sockperf-pingpong sockperf-throughput ssh-scp rsync-daemon git-daemon openssl-tls many-1000 faults peer-death)
select_tests "$@"

if [ "$(id -u)" -ne 0 ]; then skip_all "needs root (namespaces, packet sockets)"; fi
command -v python3 >/dev/null || skip_all "python3 not installed"
for f in omx_sockets libomx_sockets.so; do
  [ -e "$bin/$f" ] || skip_all "$bin/$f not built (cargo build --release -p omx-sockets)"
done
export OMX_STATE_DIR="$tmp/state"
mkdir -p "$OMX_STATE_DIR"
hosts_up 2 9000
log="$tmp/log"
mac_byte=$(ip netns exec "$OMX_NS_PREFIX-h0" cat /sys/class/net/omx0/address | cut -d: -f5)
# Static peers: the first omx contact between two fresh processes is then quick, so the
# client sees the server's hello before its first write (OMX_SOCKETS_HELLO_WAIT_MS).
printf '02:00:00:00:%s:01 h0:0\n02:00:00:00:%s:02 h1:0\n' "$mac_byte" "$mac_byte" >"$tmp/peers"
export OMX_PEERS_FILE="$tmp/peers" OMX_SOCKETS_VERBOSE=1
launch="$bin/omx_sockets"

# stream NAME SERVER_PRELOAD CLIENT_PRELOAD BYTES: one checked stream h1 -> h0.
# stream NAME SERVER-PRELOADED CLIENT-PRELOADED SIZE [DEST [SERVER-ARGS...]]
stream() {
  local name=$1 sp=$2 cp=$3 size=$4 dest=${5:-$(host_ip 0)} pre0=() pre1=() p0
  [ "$sp" = yes ] && pre0=("$launch")
  [ "$cp" = yes ] && pre1=("$launch")
  in_host 0 "${pre0[@]}" python3 "$here/stream.py" server "${@:6}" >"$log/$name.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5556 "$p0" || return 1
  in_host 1 "${pre1[@]}" python3 "$here/stream.py" client "$dest" "$size" >"$log/$name.client" 2>&1 &&
    wait "$p0"
}

# kill_tree PID: PID and its descendants (a background in_host is a subshell).
kill_tree() {
  local c
  for c in $(pgrep -P "$1"); do kill_tree "$c"; done
  kill "$1" 2>/dev/null || true
}

# interrupt NAME PID: SIGINT to the process called NAME among PID's descendants (the
# program itself, not the wrappers in_host puts around it).
interrupt() {
  local c
  for c in $(pgrep -P "$2"); do
    if [ "$(cat "/proc/$c/comm" 2>/dev/null)" = "$1" ]; then kill -INT "$c"; else interrupt "$1" "$c"; fi
  done
}

# wait_unconnected I PORT PID: returns once host I has no TCP connection on local PORT
# (each server end closed); non-zero if PID ends first or TEST_TIMEOUT passes.
wait_unconnected() {
  local ns="$OMX_NS_PREFIX-h$1" deadline=$((SECONDS + TEST_TIMEOUT))
  while ip netns exec "$ns" ss -Htn state connected "sport = :$2" | grep . >/dev/null; do
    kill -0 "$3" 2>/dev/null || return 1
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

# carried LOG...: each log shows a connection moved onto omx.
carried() {
  local f
  for f in "$@"; do grep -q 'on omx' "$f" || return 1; done
}

# conformance NAME PRELOAD: tests/sockets/conformance.c between h1 (client) and h0, with
# omx_sockets on both ends or on neither; the same assertions either way.
conformance() {
  local name=$1 pre=() p0
  [ "$2" = yes ] && pre=("$launch")
  in_host 0 "${pre[@]}" "$tmp/bin/conformance" server 5560 >"$log/$name.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5560 "$p0" &&
    in_host 1 "${pre[@]}" "$tmp/bin/conformance" client "$(host_ip 0)" 5560 \
      >"$log/$name.client" 2>&1 &&
    wait "$p0"
}
if cc -Wall -Werror -O2 -o "$tmp/bin/conformance" "$here/conformance.c" 2>"$log/cc"; then
  if want conformance-kernel; then
    conformance conformance-kernel no && ! grep -q 'on omx' "$log/conformance-kernel.client"
    report conformance-kernel $? "$log/conformance-kernel.client" "$log/conformance-kernel.server"
  fi
  if want conformance-omx; then
    # Direct writes (from the program's memory) are on by default with jumbo pull
    # replies only: turned on here at MTU 9000 so that large-writes goes through them.
    OMX_SOCKETS_HELLO_WAIT_MS=120000 OMX_SOCKETS_DIRECT_MIN=131072 \
      conformance conformance-omx yes &&
      carried "$log/conformance-omx.client" "$log/conformance-omx.server"
    report conformance-omx $? "$log/conformance-omx.client" "$log/conformance-omx.server"
  fi
else
  report conformance-kernel 1 "$log/cc"
  report conformance-omx 1 "$log/cc"
fi
# forkserver NAME PRELOAD: tests/sockets/forkserver.c (a connection used by the parent,
# then by a forked child) between h1 (client) and h0, over the kernel or omx.
forkserver() {
  local name=$1 pre=() p0
  [ "$2" = yes ] && pre=("$launch")
  in_host 0 "${pre[@]}" "$tmp/bin/forkserver" server 5561 >"$log/$name.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5561 "$p0" &&
    in_host 1 "${pre[@]}" "$tmp/bin/forkserver" client "$(host_ip 0)" 5561 \
      >"$log/$name.client" 2>&1 &&
    wait "$p0"
}
if cc -Wall -Werror -O2 -o "$tmp/bin/forkserver" "$here/forkserver.c" 2>"$log/cc-fork"; then
  if want fork-kernel; then
    forkserver fork-kernel no
    report fork-kernel $? "$log/fork-kernel.client" "$log/fork-kernel.server"
  fi
  if want fork-omx; then
    # Carried first (the parent uses it), then back on TCP for the child, both rounds.
    OMX_SOCKETS_HELLO_WAIT_MS=120000 forkserver fork-omx yes &&
      [ "$(grep -c 'accepted on omx' "$log/fork-omx.server")" -eq 2 ] &&
      [ "$(grep -c 'back on TCP for a forked child or exec' "$log/fork-omx.server")" -eq 2 ] &&
      [ "$(grep -c "peer's process went back to TCP" "$log/fork-omx.client")" -eq 2 ]
    report fork-omx $? "$log/fork-omx.client" "$log/fork-omx.server"
  fi
fi
# serve_once NAME PRELOAD MODE PORT ARG: forkserver.c MODE in h0 on PORT, one client
# round from h1, the server's own end awaited.
serve_once() {
  local name=$1 pre=() p0
  [ "$2" = yes ] && pre=("$launch")
  in_host 0 "${pre[@]}" "$tmp/bin/forkserver" "$3" "$4" "$5" >"$log/$name.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 "$4" "$p0" &&
    in_host 1 "${pre[@]}" "$tmp/bin/forkserver" client "$(host_ip 0)" "$4" 1 \
      >"$log/$name.client" 2>&1 &&
    wait "$p0"
}
# orphan NAME PRELOAD close|keep: forkserver.c's parent exits before its child first
# uses the connection (after closing its copy, or holding it); one client round.
orphan() {
  serve_once "$1" "$2" orphan 5566 "$3"
}
# orphan_omx NAME close|keep: carried while the parent reads, handed back to TCP by the
# parent (at its close, or at its exit) before the child's first use.
orphan_omx() {
  OMX_SOCKETS_HELLO_WAIT_MS=120000 orphan "$1" yes "$2" &&
    grep -q 'accepted on omx' "$log/$1.server" &&
    [ "$(grep -c 'back on TCP for a forked child or exec' "$log/$1.server")" -eq 1 ] &&
    [ "$(grep -c "peer's process went back to TCP" "$log/$1.client")" -eq 1 ]
}
if [ -x "$tmp/bin/forkserver" ]; then
  if want orphan-kernel; then
    orphan orphan-kernel-close no close && orphan orphan-kernel-keep no keep
    report orphan-kernel $? "$log"/orphan-kernel-*.client "$log"/orphan-kernel-*.server
  fi
  if want orphan-omx; then
    orphan_omx orphan-omx-close close && orphan_omx orphan-omx-keep keep
    report orphan-omx $? "$log"/orphan-omx-*.client "$log"/orphan-omx-*.server
  fi
  # execl NAME PRELOAD execl|execlp|execle: the carrying process replaces itself
  # through a list form of exec; the new image (execle's without the preload)
  # continues the stream both ways.
  execl() {
    serve_once "$1" "$2" execl 5569 "$3" &&
      grep -q "$3'd image reads the rest" "$log/$1.server"
  }
  if want execl-kernel; then
    execl execl-kernel-execl no execl && execl execl-kernel-execlp no execlp &&
      execl execl-kernel-execle no execle
    report execl-kernel $? "$log"/execl-kernel-*.client "$log"/execl-kernel-*.server
  fi
  if want execl-omx; then
    # Carried while the first image reads, back on TCP for the new one.
    ok=0
    for how in execl execlp execle; do
      OMX_SOCKETS_HELLO_WAIT_MS=120000 execl "execl-omx-$how" yes "$how" &&
        grep -q 'accepted on omx' "$log/execl-omx-$how.server" &&
        grep -q 'back on TCP for a forked child or exec' "$log/execl-omx-$how.server" &&
        grep -q "peer's process went back to TCP" "$log/execl-omx-$how.client" || ok=1
    done
    report execl-omx $ok "$log"/execl-omx-*.client "$log"/execl-omx-*.server
  fi
else
  report fork-kernel 1 "$log/cc-fork"
  report fork-omx 1 "$log/cc-fork"
  report orphan-kernel 1 "$log/cc-fork"
  report orphan-omx 1 "$log/cc-fork"
  report execl-kernel 1 "$log/cc-fork"
  report execl-omx 1 "$log/cc-fork"
fi
# execserver NAME PRELOADED exec|forkexec|twochildren [TRAILER]: a connection read by
# one process image and finished by the image it exec()s (itself, or a forked child's),
# or by two forked children.
execserver() {
  local name=$1 pre=() p0
  [ "$2" = yes ] && pre=("$launch")
  in_host 0 "${pre[@]}" python3 "$here/execserver.py" server "$3" >"$log/$name.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5558 "$p0" || return 1
  in_host 1 "${pre[@]}" python3 "$here/execserver.py" client "$(host_ip 0)" $((6 << 20)) \
    "${4:-}" >"$log/$name.client" 2>&1 &&
    wait "$p0"
}
for how in exec forkexec; do
  if want "$how-kernel"; then
    execserver "$how-kernel" no "$how"
    report "$how-kernel" $? "$log/$how-kernel.client" "$log/$how-kernel.server"
  fi
  if want "$how-omx"; then
    # Carried while the first image reads, back on TCP for the exec'd one.
    OMX_SOCKETS_HELLO_WAIT_MS=120000 execserver "$how-omx" yes "$how" &&
      grep -q 'accepted on omx' "$log/$how-omx.server" &&
      grep -q 'back on TCP for a forked child or exec' "$log/$how-omx.server" &&
      grep -q "peer's process went back to TCP" "$log/$how-omx.client"
    report "$how-omx" $? "$log/$how-omx.client" "$log/$how-omx.server"
  fi
done
# Two children forked before either used the connection: the first takes it back to
# TCP, the second finds it taken and uses the socket as it is (no second marker).
if want twochildren-kernel; then
  execserver twochildren-kernel no twochildren B
  report twochildren-kernel $? "$log/twochildren-kernel.client" "$log/twochildren-kernel.server"
fi
if want twochildren-omx; then
  OMX_SOCKETS_HELLO_WAIT_MS=120000 execserver twochildren-omx yes twochildren B &&
    grep -q 'accepted on omx' "$log/twochildren-omx.server" &&
    grep -q "peer's process went back to TCP" "$log/twochildren-omx.client"
  report twochildren-omx $? "$log/twochildren-omx.client" "$log/twochildren-omx.server"
fi
if want carried-both-ways; then
  # The client waits for the hello as long as it takes (an event, not a time: a loaded
  # machine may take seconds); the fallback cases keep the default wait, as a client
  # cannot tell a server without the library from a slow one.
  OMX_SOCKETS_HELLO_WAIT_MS=120000 stream carried-both-ways yes yes $((64 << 20)) &&
    grep -q 'accepted on omx' "$log/carried-both-ways.server" &&
    grep -q 'carried on omx .* 0 bytes before' "$log/carried-both-ways.client"
  report carried-both-ways $? "$log/carried-both-ways.server" "$log/carried-both-ways.client"
fi
if want tcp-first-exchange; then
  # The client's first 64 KiB go over TCP before the server's hello can exist (the
  # server touches its connection only once they are sent, told through a FIFO); then
  # both ends write 256 KiB before reading. The server's waiting writes once took those
  # TCP bytes for the client's probes and dropped them (ECONNRESET at its read).
  fifo="$tmp/tcpfirst.fifo"
  rm -f "$fifo" && mkfifo "$fifo"
  in_host 0 "$launch" python3 "$here/tcpfirst.py" server 5570 "$fifo" \
    >"$log/tcp-first-exchange.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5570 "$p0" &&
    OMX_SOCKETS_HELLO_WAIT_MS=0 in_host 1 "$launch" python3 "$here/tcpfirst.py" client \
      "$(host_ip 0)" 5570 "$fifo" >"$log/tcp-first-exchange.client" 2>&1 &&
    wait "$p0" &&
    grep -q 'accepted on omx' "$log/tcp-first-exchange.server" &&
    grep -q 'carried on omx .* [1-9][0-9]* bytes before' "$log/tcp-first-exchange.client" &&
    grep -q 'server ok' "$log/tcp-first-exchange.server" &&
    grep -q 'client ok' "$log/tcp-first-exchange.client"
  report tcp-first-exchange $? "$log/tcp-first-exchange.server" "$log/tcp-first-exchange.client"
fi
# hello_close NAME PRELOAD: tests/sockets/helloclose.py, a client whose first call is
# FIONREAD, then one that connects and closes without a read or a write, each once the
# server's hello (over omx) is in its kernel.
hello_close() {
  local name=$1 pre=() p0 fifo="$tmp/$1.fifo"
  [ "$2" = yes ] && pre=("$launch")
  rm -f "$fifo" && mkfifo "$fifo"
  in_host 0 "${pre[@]}" python3 "$here/helloclose.py" server 5571 "$fifo" \
    >"$log/$name.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5571 "$p0" &&
    in_host 1 "${pre[@]}" python3 "$here/helloclose.py" client "$(host_ip 0)" 5571 "$fifo" \
      >"$log/$name.client" 2>&1 &&
    wait "$p0" && grep -q 'server ok' "$log/$name.server"
}
if want hello-unread-close; then
  # FIONREAD counts the stream's bytes (it once counted the unread hello), and the
  # server's read sees end of file over the kernel and over omx: the client's close
  # once answered the unread hello with a reset (ECONNRESET at the server's read).
  hello_close hello-close-kernel no &&
    OMX_SOCKETS_HELLO_WAIT_MS=0 hello_close hello-close-omx yes &&
    [ "$(grep -c 'accepted on omx' "$log/hello-close-omx.server")" -eq 3 ]
  report hello-unread-close $? "$log"/hello-close-*.server "$log"/hello-close-*.client
fi
# daemon NAME MODE PORT N: tests/sockets/daemon.py MODE, a server in h0 serving N
# client processes from h1 in turn, every connection carried (both preloaded).
daemon() {
  local name=$1 p0 i
  in_host 0 "$launch" python3 "$here/daemon.py" server "$3" "$4" "$2" >"$log/$name.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 "$3" "$p0" || return 1
  for i in $(seq "$4"); do
    in_host 1 "$launch" python3 "$here/daemon.py" client "$(host_ip 0)" "$3" "$2" \
      >"$log/$name.client$i" 2>&1 && carried "$log/$name.client$i" || return 1
  done
  wait "$p0" && [ "$(grep -c 'accepted on omx' "$log/$name.server")" -eq "$4" ]
}
if want scrubbed-env; then
  # A server that clears its environment once started: the library keeps the variables
  # it was loaded with (the private state directory, the static peers, the verbose log
  # that says "on omx"), docs/SOCKETS.md.
  stream scrubbed-env yes yes 1000000 "$(host_ip 0)" scrub &&
    carried "$log/scrubbed-env.client" "$log/scrubbed-env.server"
  report scrubbed-env $? "$log/scrubbed-env.client" "$log/scrubbed-env.server"
fi
if want second-client; then
  # 8 MiB one way in 4 KiB writes to each of three client processes in turn: each
  # reuses the endpoint of the one before, whose explicit acks the server's endpoint
  # counted against the new one's and dropped (the stream stalled with 4 MiB under way).
  OMX_SOCKETS_HELLO_WAIT_MS=120000 daemon second-client stream 5572 3
  report second-client $? "$log"/second-client.*
fi
if want control-not-readable; then
  # A forking server whose child uses its connection non-blocking under select (rsync's
  # daemon): the client's control message alone once made it readable, and the read
  # after it failed with EAGAIN.
  OMX_SOCKETS_HELLO_WAIT_MS=120000 daemon control-not-readable select 5573 4
  report control-not-readable $? "$log"/control-not-readable.*
fi
if want ipv6; then
  # A real IPv6 destination (not IPv4-mapped): the client's SYN carries its offer in
  # an IPv6 destination option, read back by the server from the saved SYN.
  "$hosts" ipv6 &&
    OMX_SOCKETS_HELLO_WAIT_MS=120000 stream ipv6 yes yes $((16 << 20)) fd99::1 6 &&
    grep -q 'accepted on omx' "$log/ipv6.server" &&
    grep -q 'carried on omx .* 0 bytes before' "$log/ipv6.client"
  report ipv6 $? "$log/ipv6.server" "$log/ipv6.client"
fi
if want plain-server; then
  stream plain-server no yes $((8 << 20)) && ! grep -q 'on omx' "$log/plain-server.client"
  report plain-server $? "$log/plain-server.server" "$log/plain-server.client"
fi
if want plain-client; then
  stream plain-client yes no $((8 << 20)) && ! grep -q 'on omx' "$log/plain-client.server"
  report plain-client $? "$log/plain-client.server" "$log/plain-client.client"
fi

if want nc-sha256; then
  # 256 MiB of random bytes (1 GiB works too; kept smaller for a loaded CI machine).
  head -c $((256 << 20)) /dev/urandom >"$tmp/nc.in"
  in_host 0 "$launch" nc -l -N "$(host_ip 0)" 5557 >"$tmp/nc.out" 2>"$log/nc.server" &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5557 "$p0" &&
    in_host 1 "$launch" nc -N "$(host_ip 0)" 5557 <"$tmp/nc.in" 2>"$log/nc.client" &&
    wait "$p0" &&
    [ "$(sha256sum <"$tmp/nc.in")" = "$(sha256sum <"$tmp/nc.out")" ] &&
    carried "$log/nc.server" "$log/nc.client"
  report nc-sha256 $? "$log/nc.server" "$log/nc.client"
  rm -f "$tmp/nc.in" "$tmp/nc.out"
fi
if want curl-http; then
  command -v curl >/dev/null || skip curl-http "curl not installed"
fi
if want curl-http && command -v curl >/dev/null; then
  mkdir -p "$tmp/www"
  head -c $((64 << 20)) /dev/urandom >"$tmp/www/blob"
  in_host 0 "$launch" python3 -m http.server -d "$tmp/www" -b "$(host_ip 0)" 5558 \
    >"$log/http.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5558 "$p0" &&
    in_host 1 "$launch" curl -sSf -o "$tmp/blob.got" "http://$(host_ip 0):5558/blob" \
      2>"$log/curl.client" &&
    cmp "$tmp/www/blob" "$tmp/blob.got" &&
    carried "$log/http.server" "$log/curl.client"
  report curl-http $? "$log/http.server" "$log/curl.client"
  kill_tree "$p0"
fi
if want iperf3; then
  command -v iperf3 >/dev/null || skip iperf3 "iperf3 not installed"
fi
if want iperf3 && command -v iperf3 >/dev/null; then
  in_host 0 "$launch" iperf3 -s -1 -B "$(host_ip 0)" -p 5559 >"$log/iperf3.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  # Both ends count the same bytes (iperf3 compares them) and its control and data
  # connections are carried.
  wait_listening 0 5559 "$p0" &&
    in_host 1 "$launch" iperf3 -c "$(host_ip 0)" -p 5559 -t 2 >"$log/iperf3.client" 2>&1 &&
    wait "$p0" &&
    grep -q receiver "$log/iperf3.client" &&
    [ "$(grep -c 'accepted on omx' "$log/iperf3.server")" -ge 2 ]
  report iperf3 $? "$log/iperf3.server" "$log/iperf3.client"
fi
# sockperf_run NAME MODE PORT: a sockperf server in h0 and sockperf MODE (ping-pong or
# throughput) clients in h1, both preloaded, TCP, 1 s at 16 B, 4 KiB and 65000 B (eager
# and rendezvous omx messages; sockperf takes no more than about 65000 B). Each client
# exits 0 with every run carried; ping-pong reports no dropped, duplicated or reordered
# reply; the server, once every connection ended, received every message the clients
# sent (its total, printed when interrupted).
sockperf_run() {
  local name=$1 mode=$2 port=$3 p0 size sent=0 n got
  in_host 0 "$launch" sockperf sr --tcp -i "$(host_ip 0)" -p "$port" >"$log/$name.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 "$port" "$p0" || return 1
  for size in 16 4096 65000; do
    in_host 1 "$launch" sockperf "$mode" --tcp -i "$(host_ip 0)" -p "$port" -m "$size" -t 1 \
      >"$log/$name-$size.client" 2>&1 || return 1
    carried "$log/$name-$size.client" || return 1
    if [ "$mode" = ping-pong ]; then
      grep -q '# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0' \
        "$log/$name-$size.client" || return 1
      n=$(sed -n 's/.*\[Total Run\].*SentMessages=\([0-9]*\).*/\1/p' "$log/$name-$size.client")
    else
      n=$(sed -n 's/.*Total of \([0-9]*\) messages sent.*/\1/p' "$log/$name-$size.client")
    fi
    [ -n "$n" ] && [ "$n" -gt 0 ] || return 1
    sent=$((sent + n))
  done
  # The server read each stream to its end (then closed it) before it is asked its total.
  wait_unconnected 0 "$port" "$p0" && interrupt sockperf "$p0" && wait "$p0" &&
    [ "$(grep -c 'accepted on omx' "$log/$name.server")" -eq 3 ] || return 1
  got=$(sed -n 's/.*Total \([0-9]*\) messages received and handled.*/\1/p' "$log/$name.server")
  echo "sent $sent, server received ${got:-none}" >>"$log/$name.server"
  [ "$got" = "$sent" ]
}
# sockperf_case NAME MODE PORT: sockperf_run, or a counted skip without sockperf.
sockperf_case() {
  want "$1" || return 0
  command -v sockperf >/dev/null || {
    skip "$1" "sockperf not installed"
    return 0
  }
  OMX_SOCKETS_HELLO_WAIT_MS=120000 sockperf_run "$@"
  report "$1" $? "$log/$1.server" "$log/$1"-*.client
}
sockperf_case sockperf-pingpong ping-pong 5567
sockperf_case sockperf-throughput throughput 5568
if want ssh-scp; then
  for p in /usr/sbin/sshd ssh scp ssh-keygen; do
    command -v "$p" >/dev/null || { skip ssh-scp "$p not installed"; break; }
  done
fi
if want ssh-scp && command -v /usr/sbin/sshd ssh scp ssh-keygen >/dev/null; then
  # sshd (re-exec'd per connection, then privilege-separated children, the first under
  # a seccomp sandbox) with throwaway keys and a private configuration: the connection
  # is carried on omx for the banners, then handed back to TCP for sshd's child.
  k="$tmp/ssh"
  mkdir -p "$k" /run/sshd
  ssh-keygen -q -t ed25519 -N '' -f "$k/host_key" &&
    ssh-keygen -q -t ed25519 -N '' -f "$k/user_key" &&
    cp "$k/user_key.pub" "$k/authorized_keys"
  printf '%s\n' "Port 5562" "ListenAddress $(host_ip 0)" "HostKey $k/host_key" \
    "AuthorizedKeysFile $k/authorized_keys" "PermitRootLogin prohibit-password" \
    "PasswordAuthentication no" "KbdInteractiveAuthentication no" "UsePAM no" \
    "StrictModes no" "PidFile none" "Subsystem sftp internal-sftp" >"$k/sshd_config"
  ssh_opts=(-i "$k/user_key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
    -o BatchMode=yes)
  head -c $((64 << 20)) /dev/urandom >"$k/blob"
  export OMX_SOCKETS_HELLO_WAIT_MS=120000
  in_host 0 "$launch" /usr/sbin/sshd -D -e -f "$k/sshd_config" >"$log/sshd" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5562 "$p0" &&
    in_host 1 "$launch" ssh "${ssh_opts[@]}" -p 5562 "root@$(host_ip 0)" 'echo over-ssh' \
      >"$log/ssh.out" 2>"$log/ssh.client" &&
    [ "$(cat "$log/ssh.out")" = over-ssh ] &&
    in_host 1 "$launch" scp "${ssh_opts[@]}" -P 5562 "$k/blob" "root@$(host_ip 0):$k/blob.got" \
      2>"$log/scp.client" &&
    [ "$(sha256sum <"$k/blob")" = "$(sha256sum <"$k/blob.got")" ] &&
    carried "$log/ssh.client" "$log/scp.client" &&
    [ "$(grep -c 'back on TCP for a forked child or exec' "$log/sshd")" -eq 2 ]
  report ssh-scp $? "$log/sshd" "$log/ssh.client" "$log/scp.client"
  unset OMX_SOCKETS_HELLO_WAIT_MS
  kill_tree "$p0"
  rm -f "$k/blob" "$k/blob.got"
fi
# need NAME CMD...: true when every CMD is installed, else a counted skip of NAME.
need() {
  local name=$1 c
  shift
  for c in "$@"; do
    command -v "$c" >/dev/null || {
      skip "$name" "$c not installed"
      return 1
    }
  done
}
if want rsync-daemon && need rsync-daemon rsync; then
  # rsync's daemon forks per connection and its child runs the protocol non-blocking
  # under select (control-not-readable): two pulls by two client processes and a push,
  # the trees compared.
  r="$tmp/rsync"
  mkdir -p "$r/src/sub" "$r/up"
  for i in 1 2 3 4 5 6 7 8; do head -c $((i * 70000)) /dev/urandom >"$r/src/f$i"; done
  head -c $((8 << 20)) /dev/urandom >"$r/src/sub/big"
  printf '%s\n' '[m]' "path = $r/src" 'read only = false' 'use chroot = no' 'uid = root' \
    'gid = root' >"$r/rsyncd.conf"
  export OMX_SOCKETS_HELLO_WAIT_MS=120000
  in_host 0 "$launch" rsync --daemon --no-detach --config="$r/rsyncd.conf" \
    --address="$(host_ip 0)" --port=5574 --log-file="$log/rsyncd.log" >"$log/rsyncd" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5574 "$p0" &&
    in_host 1 "$launch" rsync -a "rsync://$(host_ip 0):5574/m/" "$r/pull1/" 2>"$log/rsync.pull1" &&
    diff -r "$r/src" "$r/pull1" &&
    in_host 1 "$launch" rsync -a "rsync://$(host_ip 0):5574/m/" "$r/pull2/" 2>"$log/rsync.pull2" &&
    diff -r "$r/src" "$r/pull2" &&
    head -c 3000000 /dev/urandom >"$r/up/new" &&
    in_host 1 "$launch" rsync -a "$r/up/" "rsync://$(host_ip 0):5574/m/" 2>"$log/rsync.push" &&
    cmp "$r/up/new" "$r/src/new" &&
    carried "$log/rsync.pull1" "$log/rsync.pull2" "$log/rsync.push"
  report rsync-daemon $? "$log/rsyncd" "$log/rsyncd.log" "$log"/rsync.p*
  unset OMX_SOCKETS_HELLO_WAIT_MS
  kill_tree "$p0"
  rm -rf "$r"
fi
if want git-daemon && need git-daemon git; then
  # git daemon forks and execs upload-pack/receive-pack per connection: two clones and
  # a push, the commits compared.
  g="$tmp/git"
  mkdir -p "$g/base" "$g/work"
  git init -q --bare "$g/base/r.git" &&
    git -C "$g/work" init -q &&
    for i in 1 2 3 4; do head -c 500000 /dev/urandom >"$g/work/f$i"; done &&
    git -C "$g/work" add . &&
    git -C "$g/work" -c user.email=t@t -c user.name=t commit -qm one &&
    git -C "$g/work" push -q "$g/base/r.git" HEAD:master 2>/dev/null
  export OMX_SOCKETS_HELLO_WAIT_MS=120000
  in_host 0 "$launch" git daemon --export-all --enable=receive-pack --base-path="$g/base" \
    --listen="$(host_ip 0)" --port=5575 --reuseaddr >"$log/git-daemon" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  want_head=$(git -C "$g/base/r.git" rev-parse master)
  wait_listening 0 5575 "$p0" &&
    in_host 1 "$launch" git clone -q "git://$(host_ip 0):5575/r.git" "$g/c1" 2>"$log/git.clone1" &&
    in_host 1 "$launch" git clone -q "git://$(host_ip 0):5575/r.git" "$g/c2" 2>"$log/git.clone2" &&
    [ "$(git -C "$g/c1" rev-parse HEAD)" = "$want_head" ] &&
    [ "$(git -C "$g/c2" rev-parse HEAD)" = "$want_head" ] &&
    head -c 700000 /dev/urandom >"$g/c1/new" &&
    git -C "$g/c1" add new &&
    git -C "$g/c1" -c user.email=t@t -c user.name=t commit -qm two &&
    (cd "$g/c1" && in_host 1 "$launch" git push -q origin HEAD:master 2>"$log/git.push") &&
    [ "$(git -C "$g/base/r.git" rev-parse master)" = "$(git -C "$g/c1" rev-parse HEAD)" ] &&
    carried "$log/git.clone1" "$log/git.clone2" "$log/git.push"
  report git-daemon $? "$log/git-daemon" "$log"/git.*
  unset OMX_SOCKETS_HELLO_WAIT_MS
  kill_tree "$p0"
  rm -rf "$g"
fi
if want openssl-tls && need openssl-tls openssl curl; then
  # TLS over a carried stream: openssl s_server -WWW serves 16 MiB to curl, then to
  # s_client (a second client process on the endpoint: second-client), compared.
  o="$tmp/tls"
  mkdir -p "$o"
  head -c $((16 << 20)) /dev/urandom >"$o/blob"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=h0 -keyout "$o/key.pem" -out "$o/cert.pem" >"$log/openssl.req" 2>&1
  export OMX_SOCKETS_HELLO_WAIT_MS=120000
  (cd "$o" && in_host 0 "$launch" openssl s_server -accept "$(host_ip 0):5576" \
    -cert cert.pem -key key.pem -WWW -naccept 2 >"$log/s_server" 2>&1) &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5576 "$p0" &&
    in_host 1 "$launch" curl -sSk -o "$o/got1" "https://$(host_ip 0):5576/blob" 2>"$log/tls.curl" &&
    cmp "$o/blob" "$o/got1" &&
    printf 'GET /blob HTTP/1.0\r\n\r\n' |
    in_host 1 "$launch" openssl s_client -quiet -connect "$(host_ip 0):5576" \
      >"$o/got2" 2>"$log/tls.s_client" &&
    tail -c $((16 << 20)) "$o/got2" | cmp - "$o/blob" &&
    wait "$p0" &&
    carried "$log/tls.curl" "$log/tls.s_client" &&
    [ "$(grep -c 'accepted on omx' "$log/s_server")" -eq 2 ]
  report openssl-tls $? "$log/openssl.req" "$log/s_server" "$log"/tls.*
  kill_tree "$p0"
  unset OMX_SOCKETS_HELLO_WAIT_MS
  rm -rf "$o"
fi
if want many-1000; then
  # 1,000 concurrent connections, each with 64 KiB of its own bytes checked, all carried.
  in_host 0 "$launch" python3 "$here/many.py" server 5563 1000 >"$log/many.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5563 "$p0" &&
    OMX_SOCKETS_HELLO_WAIT_MS=120000 in_host 1 "$launch" python3 "$here/many.py" client \
      "$(host_ip 0)" 5563 1000 65536 >"$log/many.client" 2>&1 &&
    wait "$p0" &&
    [ "$(grep -c 'accepted on omx' "$log/many.server")" -eq 1000 ] &&
    [ "$(grep -c 'carried on omx .* 0 bytes before' "$log/many.client")" -eq 1000 ]
  report many-1000 $? "$log/many.client" "$log/many.server"
fi
if want faults; then
  # The byte-stream checks with frames lost, duplicated and reordered on both ends.
  export OMX_FAULTS=loss:0.02,dup:0.02,reorder:0.05 OMX_SOCKETS_HELLO_WAIT_MS=120000
  stream faults-stream yes yes $((16 << 20))
  status=$?
  in_host 0 "$launch" python3 "$here/many.py" server 5564 50 >"$log/faults-many.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  [ $status -eq 0 ] && wait_listening 0 5564 "$p0" &&
    in_host 1 "$launch" python3 "$here/many.py" client "$(host_ip 0)" 5564 50 262144 \
      >"$log/faults-many.client" 2>&1 &&
    wait "$p0" &&
    forkserver faults-fork yes &&
    orphan_omx faults-orphan close &&
    carried "$log/faults-stream.client" "$log/faults-many.client" "$log/faults-fork.client" &&
    grep -q "peer's process went back to TCP" "$log/faults-fork.client" &&
    grep -h 'faults injected' "$log"/faults-* | grep -v ': 0 dropped, 0 duplicated, 0 reordered' >/dev/null
  status=$?
  unset OMX_FAULTS OMX_SOCKETS_HELLO_WAIT_MS
  report faults $status "$log/faults-stream.client" "$log/faults-stream.server" \
    "$log/faults-many.client" "$log/faults-fork.client" "$log/faults-fork.server" \
    "$log/faults-orphan.client" "$log/faults-orphan.server"
fi
# peer_death NAME SERVER_MODE CLIENT_ROLE: the server dies mid-stream (tests/sockets/peerdeath.py);
# the client's stream must end with a reset, a broken pipe or end of file, never hang.
peer_death() {
  local name=$1 p0
  in_host 0 "$launch" python3 "$here/peerdeath.py" server 5565 "$2" >"$log/$name.server" 2>&1 &
  p0=$!
  bgpids+=("$p0")
  wait_listening 0 5565 "$p0" &&
    in_host 1 "$launch" python3 "$here/peerdeath.py" client "$(host_ip 0)" 5565 "$3" \
      >"$log/$name.client" 2>&1 &&
    grep -Eq '^(ConnectionResetError|BrokenPipeError|end of file)' "$log/$name.client" &&
    carried "$log/$name.client"
  local status=$?
  wait "$p0"
  return $status
}
if want peer-death; then
  export OMX_SOCKETS_HELLO_WAIT_MS=120000
  peer_death peer-kill-writer sink-kill writer &&
    peer_death peer-exit-writer sink-exit writer &&
    peer_death peer-kill-reader source-kill reader
  status=$?
  unset OMX_SOCKETS_HELLO_WAIT_MS
  report peer-death $status "$log"/peer-*.client "$log"/peer-*.server
fi
summary
