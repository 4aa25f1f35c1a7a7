#!/usr/bin/env bash
# mpi_pingpong.sh - MPI over omx against MPI over TCP, side by side, between two
# test hosts (network namespaces joined by veth, scripts/hosts.sh), plus the
# libfabric and MX layers underneath for the provider-overhead comparison.
#
#   bench/mpi_pingpong.sh [MTU]        (root; MTU default 9000)
#
# Stacks, all ping-pong between h0 and h1, 1 B .. 16 MiB:
#   mpi-omx      Open MPI, --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include omx
#                (FI_PROVIDER_PATH=build/lib/libfabric)         bench/mpi_pingpong.c
#   mpi-tcp      Open MPI, --mca pml ob1 --mca btl self,tcp     bench/mpi_pingpong.c
#   mpi-ofitcp   Open MPI, cm/ofi over libfabric 'tcp;ofi_rxm'  bench/mpi_pingpong.c
#   mpich-omx    MPICH (ch4:ofi, the PyPI wheel of scripts/get-mpich.sh in $MPICH_HOME,
#                default build/mpich) over omx: FI_PROVIDER=omx  bench/mpi_pingpong.c
#   mpich-tcp    the same MPICH over its bundled libfabric's 'tcp;ofi_rxm' (same
#                MPIR_CVAR_* settings, so only the provider differs)
#   fi-omx       fi_pingpong -p omx -e rdm                     (libfabric, no MPI)
#   fi-tcp       fi_pingpong -p 'tcp;ofi_rxm' -e rdm
#   omx_perf     the MX API directly (target/release/omx_perf)
#   raw          the floor of any raw-Ethernet stack on this link: 8 B raw AF_PACKET
#                ping-pong (busy-poll) and a one-way stream of full-MTU frames without
#                flow control (best of the RX ring and recvmmsg receivers, frames
#                delivered), crates/omx-transport/examples/raw_{pingpong,stream}.rs
#   pairs        the provider's cost at 8 B: omx_perf, bench/ofi_pingpong.c (the same
#                loop over libfabric) and fi_pingpong -p omx back to back, PAIRS
#                times; the summary gives the medians of the differences
#
# Results in $OUT (default bench/results/mpi-<date-time>/): mpi_pingpong.csv
# (tool,transport,size,latency_us,bandwidth_MBps,runs; latency = half a round
# trip, medians of RUNS runs for the MPI stacks), the raw outputs, machine.txt,
# summary.md (table and the ratios omx/TCP and omx/libfabric-tcp for 8 B
# latency and 4 MiB bandwidth, and MPI-over-omx against fi_pingpong and
# omx_perf) and, when matplotlib is there, mpi_pingpong.png.
#
# Environment: RUNS (5), RUN_SECONDS (0.1: length of each timed run per
# size), MIN (1: the MPI stacks' first size), MAX (16777216), FI_SIZES (fi_pingpong sizes: "1 8 64 512 4096 32768
# 65536 262144 1048576 4194304 16777216"), STACKS (all ten, space separated), PAIRS (9),
# OMX_NS_PREFIX (omxmpib), MPICH_HOME (build/mpich), LOSS (percent of the frames arriving on each host
# dropped by nftables, bench/lossy.sh, as in bench/loss.sh; unset: none; with it
# the MPI stacks' .txt add p50, p99 and max per size: mpi_pingpong -L). Stacks
# whose prerequisites are missing (the omx provider: make provider; fi_pingpong:
# apt-get install libfabric-bin) are skipped with a note. The CPU may be shared: figures are indicative.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
MTU=${1:-${MTU:-9000}}
RUNS=${RUNS:-5}
RUN_SECONDS=${RUN_SECONDS:-0.1}
MIN=${MIN:-1}
MAX=${MAX:-16777216}
FI_SIZES=${FI_SIZES:-"1 8 64 512 4096 32768 65536 262144 1048576 4194304 16777216"}
STACKS=${STACKS:-"mpi-omx mpi-tcp mpi-ofitcp mpich-omx mpich-tcp fi-omx fi-tcp omx_perf raw pairs"}
PAIRS=${PAIRS:-9}
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxmpib}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=${OUT:-bench/results/mpi-$(date +%Y%m%d-%H%M%S)}
H=scripts/hosts.sh
# The addresses scripts/hosts.sh gives h0 and h1 (one per host: Open MPI and others
# are confused by a second one on the interface).
IP0=10.99.0.1
IP1=10.99.0.2
provdir="$root/build/lib/libfabric"
mpich=${MPICH_HOME:-$root/build/mpich}
T0=$(date +%s)

say() { echo "mpi_pingpong: $*" >&2; }
. scripts/progress.sh
die() {
  say "$*"
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, raw packet sockets)"
command -v mpirun >/dev/null && command -v mpicc >/dev/null ||
  die "Open MPI not installed (mpirun, mpicc; Debian: apt-get install openmpi-bin libopenmpi-dev)"

want() { [[ " $STACKS " == *" $1 "* ]]; }
skip_note=()
if [ ! -e "$provdir/libomx-fi.so" ]; then
  for s in mpi-omx mpich-omx fi-omx pairs; do
    want "$s" && skip_note+=("$s: skipped, $provdir/libomx-fi.so is missing (make provider)")
  done
  STACKS=$(sed -e 's/\bmpi-omx\b//; s/\bmpich-omx\b//; s/\bfi-omx\b//; s/\bpairs\b//' <<<"$STACKS")
fi
if [ ! -x "$mpich/bin/mpicc" ]; then
  for s in mpich-omx mpich-tcp; do
    want "$s" && skip_note+=("$s: skipped, no MPICH in $mpich (scripts/get-mpich.sh)")
  done
  STACKS=$(sed -e 's/\bmpich-omx\b//; s/\bmpich-tcp\b//' <<<"$STACKS")
fi
if ! command -v fi_pingpong >/dev/null; then
  for s in fi-omx fi-tcp pairs; do
    want "$s" && skip_note+=("$s: skipped, fi_pingpong not found (apt-get install libfabric-bin)")
  done
  STACKS=$(sed -e 's/\bfi-omx\b//; s/\bfi-tcp\b//; s/\bpairs\b//' <<<"$STACKS")
fi
for n in "${skip_note[@]}"; do say "$n"; done

mkdir -p "$OUT" target/bench
tmp=$(mktemp -d "${TMPDIR:-/tmp}/omx-mpibench.XXXXXX")
export TMPDIR="$tmp" OMX_STATE_DIR="$tmp/state"
mkdir -p "$OMX_STATE_DIR"
unset OMX_IFACES OMX_HOSTNAME FI_PROVIDER FI_PROVIDER_PATH || true
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(OMPI_MCA_[A-Za-z0-9_]*\)=.*/\1/p')

say "building"
PP=target/bench/mpi_pingpong
mpicc -O2 -Wall -Wextra -Werror -o "$PP" bench/mpi_pingpong.c
PPMPICH=target/bench/mpi_pingpong.mpich
if want mpich-omx || want mpich-tcp; then
  "$mpich/bin/mpicc" -O2 -Wall -Wextra -Werror -o "$PPMPICH" bench/mpi_pingpong.c
fi
OFIPP=$root/target/bench/ofi_pingpong
if want pairs; then
  cc -O2 -Wall -Wextra -Werror -o "$OFIPP" bench/ofi_pingpong.c -lfabric
fi
if want omx_perf || want pairs; then
  cargo build --release -q -p omx-tools
fi
if want raw; then
  cargo build --release -q -p omx-transport --examples
fi

pids=()
stop_bg() {
  local ns p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for ns in "$OMX_NS_PREFIX-h0" "$OMX_NS_PREFIX-h1"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
  done
  pids=()
  sleep 0.3
}
cleanup() {
  stop_bg
  $H down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
$H up 2 "$MTU" >/dev/null
[ "$MTU" = 9000 ] || export OMX_MTU=$MTU
if [ -n "${LOSS:-}" ]; then
  . bench/lossy.sh
  lossy_setup
  set_loss "$LOSS"
fi

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "cores: $(nproc)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "kernel: $(uname -r)"
  echo "mtu: $MTU"
  [ -z "${LOSS:-}" ] || echo "injected loss: $LOSS% of the frames arriving on each host (bench/lossy.sh)"
  echo "open mpi: $(mpirun --version 2>/dev/null | head -1)"
  [ ! -x "$mpich/bin/mpichversion" ] || echo "mpich: $("$mpich/bin/mpichversion" 2>/dev/null | head -1 | tr -s ' \t' ' ')"
  echo "libfabric: $(fi_info --version 2>/dev/null | sed -n 's/^libfabric: *//p')"
  echo "runs: $RUNS x ${RUN_SECONDS}s per size (MPI stacks, median)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >"$OUT/machine.txt"

CSV="$OUT/mpi_pingpong.csv"
echo "tool,transport,size,latency_us,bandwidth_MBps,runs" >"$CSV"

# mpi STACK: bench/mpi_pingpong between h0 and h1 (mpirun or MPICH's hydra in h0,
# the rank on h1 started through scripts/mpi-ns-agent).
mpi() {
  local stack=$1 args=() env=() launch
  launch=(mpirun --host h0:1,h1:1 -np 2 --map-by node --bind-to none
    --mca plm_rsh_agent "$root/scripts/mpi-ns-agent" --mca plm_rsh_no_tree_spawn 1
    --mca oob_tcp_if_include omx0 --mca btl_tcp_if_include omx0
    --mca btl_base_warn_component_unused 0)
  case $stack in
  mpi-omx)
    args=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include omx)
    env=(FI_PROVIDER_PATH="$provdir")
    ;;
  mpi-tcp) args=(--mca pml ob1 --mca btl self,tcp) ;;
  mpi-ofitcp)
    args=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "tcp;ofi_rxm")
    env=(FI_TCP_IFACE=omx0)
    ;;
  mpich-*)
    # ch4:ofi with the tag layout narrowed to omx's 47 tag bits (docs/LIBFABRIC.md,
    # MPICH) for both providers; one rank per host, so no shared memory in between
    launch=("$mpich/bin/mpiexec" -launcher ssh -launcher-exec "$root/scripts/mpi-ns-agent"
      -iface omx0 -hosts h0,h1 -ppn 1 -n 2)
    env=(MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_CH4_OFI_CONTEXT_ID_BITS=16
      MPIR_CVAR_CH4_OFI_TAG_BITS=26)
    if [ "$stack" = mpich-omx ]; then
      env+=(FI_PROVIDER=omx FI_PROVIDER_PATH="$provdir")
    else
      env+=(FI_PROVIDER="tcp;ofi_rxm" FI_TCP_IFACE=omx0)
    fi
    ;;
  esac
  local pp=$PP
  [[ $stack != mpich-* ]] || pp=$PPMPICH
  timeout 600 ip netns exec "$OMX_NS_PREFIX-h0" unshare --uts -- \
    env OMX_HOSTNAME=h0 "${env[@]}" sh -c 'hostname h0 && exec "$@"' sh \
    "${launch[@]}" "${args[@]}" \
    "$pp" -S "$MIN" -E "$MAX" -r "$RUNS" -t "$RUN_SECONDS" ${LOSS:+-L} >"$OUT/$stack.txt" 2>"$OUT/$stack.err" || {
    say "  $stack failed (status $?): see $OUT/$stack.err"
    tail -n 5 "$OUT/$stack.err" >&2
    return 0
  }
  awk -v t="$stack" -v r="$RUNS" '$1 ~ /^[0-9]+$/ && NF >= 3 {print "mpi_pingpong," t "," $1 "," $2 "," $3 "," r}' \
    "$OUT/$stack.txt" >>"$CSV"
}

# omx_perf_server: an omx_perf server in h0 (stop_bg ends it).
omx_perf_server() {
  $H exec 0 target/release/omx_perf -s >/dev/null 2>&1 &
  pids+=($!)
  sleep 0.5
}

# fi_server LOG PROV ITERS SIZE ENV...: a fi_pingpong server in h0, once it listens.
fi_server() {
  local log=$1 prov=$2 n=$3 s=$4 i
  shift 4
  timeout 120 $H exec 0 env "$@" fi_pingpong -p "$prov" -e rdm -I "$n" -S "$s" >>"$log" 2>&1 &
  pids+=($!)
  for i in $(seq 100); do
    ip netns exec "$OMX_NS_PREFIX-h0" ss -ltn 2>/dev/null | grep ':47592 ' >/dev/null && break
    sleep 0.05
  done
}

# fi STACK SIZE: fi_pingpong server in h0, client in h1.
fi_pp() {
  local stack=$1 s=$2 prov n=2000 env=() i
  case $stack in
  fi-omx)
    prov=omx
    env=(FI_PROVIDER_PATH="$provdir")
    ;;
  fi-tcp)
    prov="tcp;ofi_rxm"
    env=(FI_TCP_IFACE=omx0)
    ;;
  esac
  [ "$s" -le 4096 ] && n=20000
  [ "$s" -ge 65536 ] && n=500
  [ "$s" -ge 1048576 ] && n=100
  fi_server "$OUT/$stack.server.txt" "$prov" "$n" "$s" "${env[@]}"
  # columns: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec (usec/xfer: one way;
  # bytes are written 4k, 1m, ...: the row takes the size asked for)
  timeout 120 $H exec 1 env "${env[@]}" fi_pingpong -p "$prov" -e rdm -I "$n" -S "$s" $IP0 \
    2>>"$OUT/$stack.err" | tee -a "$OUT/$stack.txt" |
    awk -v t="$stack" -v s="$s" 'NF == 8 && $1 ~ /^[0-9]+[kmg]?$/ {print "fi_pingpong," t "," s "," $7 "," $6 ",1"}' >>"$CSV" ||
    say "  $stack $s B failed"
  # the server ends with its client; give it a moment, then clear the host
  for i in $(seq 50); do
    kill -0 "${pids[@]}" 2>/dev/null || break
    sleep 0.1
  done
  stop_bg
}

omx_perf_pp() {
  omx_perf_server
  {
    # from 0 B: the first size also pays for finding the peer (0 B is not kept)
    timeout 120 $H exec 1 target/release/omx_perf -d h0:0 -S 0 -E 65537 -M 2 -N 2000 -W 100 -P 0
    timeout 300 $H exec 1 target/release/omx_perf -d h0:0 -S 131072 -E $((MAX + 1)) -M 2 -N 30 -W 3 -P 0
  } 2>>"$OUT/omx_perf.err" | tee "$OUT/omx_perf.txt" |
    awk '$1 ~ /^[0-9]+$/ && $1 > 0 && NF >= 4 {print "omx_perf,omx_perf," $1 "," $2 "," $3 ",1"}' >>"$CSV"
  stop_bg
}

# pairs: the provider's own cost at 8 B. omx_perf, bench/ofi_pingpong.c (omx_perf's
# loop over libfabric: the difference is the provider's) and fi_pingpong -p omx
# (fabtests: it reposts its receive between completion and reply) run back to
# back, PAIRS times; only runs next to each other compare, since the machine's fast
# and slow phases last seconds. Rows pair,pair-<tool>,8,latency,nan,<index>.
pairs() {
  local i a b c
  for i in $(seq "$PAIRS"); do
    omx_perf_server
    a=$(timeout 60 $H exec 1 target/release/omx_perf -d h0:0 -S 8 -E 9 -N 20000 -W 1000 -P 0 \
      2>>"$OUT/pairs.err" | awk '$1 == 8 {print $2}')
    stop_bg
    : >"$tmp/ofi_pp.name"
    $H exec 0 env FI_PROVIDER_PATH="$provdir" "$OFIPP" server >"$tmp/ofi_pp.name" 2>>"$OUT/pairs.err" &
    pids+=($!)
    for _ in $(seq 100); do
      [ -s "$tmp/ofi_pp.name" ] && break
      sleep 0.05
    done
    b=$(timeout 60 $H exec 1 env FI_PROVIDER_PATH="$provdir" "$OFIPP" client \
      "$(head -1 "$tmp/ofi_pp.name")" 8 20000 2>>"$OUT/pairs.err" | awk '{print $2}')
    stop_bg
    fi_server "$OUT/pairs.server.txt" omx 20000 8 FI_PROVIDER_PATH="$provdir"
    c=$(timeout 60 $H exec 1 env FI_PROVIDER_PATH="$provdir" fi_pingpong -p omx -e rdm -I 20000 \
      -S 8 $IP0 2>>"$OUT/pairs.err" | awk '$1 == "8" {print $7}')
    stop_bg
    echo "pair $i: omx_perf $a us, ofi_pingpong $b us, fi_pingpong $c us" >>"$OUT/pairs.txt"
    [ -n "$a" ] || continue
    echo "pair,pair-omx_perf,8,$a,nan,$i" >>"$CSV"
    [ -n "$b" ] && echo "pair,pair-ofi_pingpong,8,$b,nan,$i" >>"$CSV"
    [ -n "$c" ] && echo "pair,pair-fi-omx,8,$c,nan,$i" >>"$CSV"
  done
}

# raw: the per-frame floor. Latency: raw_pingpong's median (8 B frames, spinning).
# Bandwidth: one-way full-MTU frames counted at the receiver (the sender has no flow
# control, so frames lost on the way are not counted), best of the two receivers.
raw_pp() {
  local r mode lat bw best
  for r in $(seq "$RUNS"); do
    $H exec 0 target/release/examples/raw_pingpong pong omx0 8 20000 spin >/dev/null 2>&1 &
    pids+=($!)
    sleep 0.4
    lat=$(timeout 60 $H exec 1 target/release/examples/raw_pingpong ping omx0 8 20000 spin 2>>"$OUT/raw.err" |
      tee -a "$OUT/raw.txt" | sed -n 's/.*median \([0-9.]*\).*/\1/p')
    stop_bg
    best=
    for mode in "" --mmsg; do
      timeout 60 $H exec 0 target/release/examples/raw_stream recv omx0 $((MTU + 14)) 100000 $mode \
        >"$tmp/raw_recv.txt" 2>>"$OUT/raw.err" &
      pids+=($!)
      sleep 0.4
      timeout 60 $H exec 1 target/release/examples/raw_stream send omx0 $((MTU + 14)) 100000 $mode \
        >>"$OUT/raw.txt" 2>>"$OUT/raw.err" || true
      wait "${pids[@]}" 2>/dev/null || true
      pids=()
      cat "$tmp/raw_recv.txt" >>"$OUT/raw.txt"
      bw=$(sed -n 's/.*frames, \([0-9.]*\) GB\/s.*/\1/p' "$tmp/raw_recv.txt" | awk '{print $1 * 1000}')
      if [ -n "$bw" ] && { [ -z "$best" ] || awk -v a="$bw" -v b="$best" 'BEGIN {exit !(a > b)}'; }; then
        best=$bw
      fi
    done
    stop_bg
    [ -n "$lat" ] && echo "raw,raw,8,$lat,nan,1" >>"$CSV"
    [ -n "$best" ] && echo "raw,raw,4194304,nan,$best,1" >>"$CSV"
  done
}

progress_start mpi_pingpong "$(wc -w <<<"$STACKS")"
for stack in $STACKS; do
  progress "$stack"
  case $stack in
  mpi-* | mpich-*) mpi "$stack" ;;
  fi-*) for s in $FI_SIZES; do [ "$s" -le "$MAX" ] && fi_pp "$stack" "$s"; done ;;
  omx_perf) omx_perf_pp ;;
  raw) raw_pp ;;
  pairs) pairs ;;
  *) say "unknown stack $stack" ;;
  esac
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
[ -z "${LOSS:-}" ] || echo "frames received, dropped (both hosts): $(lossy_frames)" >>"$OUT/machine.txt"
for n in "${skip_note[@]}"; do echo "$n" >>"$OUT/machine.txt"; done

python3 bench/plot_mpi.py "$OUT" >"$OUT/summary.md"
cat "$OUT/summary.md"
say "done in $(($(date +%s) - T0)) s: $OUT"
