#!/usr/bin/env bash
# ofi_bench.sh - bench/ofi_bench.c over the omx provider and over 'tcp;ofi_rxm' in
# the same run, between two namespace hosts (scripts/hosts.sh; h1 serves, h0 is the
# client, over the veth link 10.99.0.1/2): RMA write/read bandwidth, RMA write
# latency, tagged ping-pong and bandwidth, 64 B .. 4 MiB. A benchmark, not a test.
#
#   bench/ofi_bench.sh [OUT]   results in OUT (default target/bench/ofi): omx.txt,
#                              tcp.txt ("TEST SIZE VALUE"), and ofi_bench.md, a
#                              side-by-side table (MB/s for *_bw, us for *_lat)
#
# Needs root, libfabric 1.17 (libfabric-dev), the provider (make provider). Figures
# from a loaded machine say so: the script prints the load average beside them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${1:-target/bench/ofi}
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxofib}
H=scripts/hosts.sh
provdir=$root/build/lib/libfabric
say() { echo "ofi_bench: $*" >&2; }
[ "$(id -u)" -eq 0 ] || { say "needs root"; exit 1; }
[ -e "$provdir/libomx-fi.so" ] || { say "$provdir/libomx-fi.so missing (make provider)"; exit 1; }
mkdir -p "$OUT" target/bench
BIN=target/bench/ofi_bench
cc -std=gnu11 -O2 -Wall -Wextra -Werror -o "$BIN" bench/ofi_bench.c -lfabric
tmp=$(mktemp -d "${TMPDIR:-/tmp}/omx-ofibench.XXXXXX")
export OMX_STATE_DIR="$tmp/state"
mkdir -p "$OMX_STATE_DIR"
unset OMX_IFACES FI_PROVIDER FI_PROVIDER_PATH || true
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  $H down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
$H up 2 9000 >/dev/null

# run NAME PROVIDER: server in h1, client in h0; the client's lines go to OUT/NAME.txt.
run() {
  local name=$1 prov=$2 env i
  env=(FI_PROVIDER="$prov" FI_PROVIDER_PATH="$provdir")
  [ "$prov" = omx ] || env+=(FI_TCP_IFACE=omx0)
  : >"$tmp/$name.name"
  $H exec 1 env "${env[@]}" OFI_BENCH_NODE=10.99.0.2 "$BIN" server \
    >"$tmp/$name.name" 2>"$OUT/$name.server.err" &
  server_pid=$!
  for i in $(seq 200); do
    [ -s "$tmp/$name.name" ] && break
    sleep 0.05
  done
  [ -s "$tmp/$name.name" ] || { say "$name: the server printed no name"; return 1; }
  say "$name: running (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  timeout 900 $H exec 0 env "${env[@]}" OFI_BENCH_NODE=10.99.0.1 "$BIN" client \
    "$(cat "$tmp/$name.name")" | tee "$OUT/$name.txt" >&2
  wait "$server_pid" || true
  server_pid=
}
run omx omx
run tcp "tcp;ofi_rxm"
{
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
  echo
  echo "| test | size (B) | omx | tcp;ofi_rxm | omx / tcp |"
  echo "|---|---:|---:|---:|---:|"
  join <(awk '{print $1 "_" $2, $3}' "$OUT/omx.txt" | sort) \
    <(awk '{print $1 "_" $2, $3}' "$OUT/tcp.txt" | sort) |
    awk '{n = split($1, a, "_"); t = a[1]; for (i = 2; i < n; i++) t = t "_" a[i];
          printf "%s %d | %s | %s | %.2f |\n", t, a[n], $2, $3, ($3 > 0 ? $2 / $3 : 0)}' |
    sort -k1,1 -k2,2n | awk '{printf "| %s | %s %s %s %s %s %s %s %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9}'
} >"$OUT/ofi_bench.md"
cat "$OUT/ofi_bench.md"
