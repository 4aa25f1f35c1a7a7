#!/usr/bin/env bash
# run.sh - Open MPI end-to-end tests over the omx libfabric provider.
#
#   tests/mpi/run.sh              every case
#   tests/mpi/run.sh PATTERN...   only cases whose name matches a shell
#                                 pattern, e.g. 'omx.2h*' or '*.p2p'; a full
#                                 name runs even when not in the default
#                                 list (ob1.4h4r.p2p, ofitcp.2h4r.coll)
#   tests/mpi/run.sh -l           list the cases
#
# Builds the MPI programs of tests/mpi (p2p, probe, truncate, coll, threads; mpicc
# -Wall -Wextra -Werror) and runs each with mpirun, inside test hosts made by
# scripts/hosts.sh (4 network namespaces on a bridge, MTU 9000, prefix
# $OMX_NS_PREFIX, default omxmpi, with the addresses hosts.sh gives, 10.99.0.(i+1)/24 on omx0, for
# Open MPI's own TCP control traffic). mpirun runs in h0; it reaches the other
# hosts through scripts/mpi-ns-agent (--mca plm_rsh_agent). Case names are
# STACK.PLACEMENT.PROGRAM:
#
#   stacks      omx    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include omx
#                      with FI_PROVIDER_PATH=build/lib/libfabric; every rank
#                      also checks that libomx-fi.so is mapped into it
#               ob1    --mca pml ob1 --mca btl self,vader,tcp (sanity: tells an
#                      Open MPI setup problem from an omx one)
#               ofitcp --mca pml cm --mca mtl ofi over libfabric 'tcp;ofi_rxm'
#                      (not in the default list; see below)
#               mpich  MPICH (ch4:ofi, its bundled libfabric 2.x) over the omx
#                      provider: FI_PROVIDER=omx, MPIR_CVAR_CH4_NETMOD=ofi, and the
#                      tag layout narrowed to the provider's 47 tag bits
#                      (MPIR_CVAR_CH4_OFI_CONTEXT_ID_BITS=16, _TAG_BITS=26); launched
#                      by hydra through the same agent; MPICH from $MPICH_HOME
#                      (default build/mpich, made by scripts/get-mpich.sh)
#   placements  1h2r, 1h4r   2 or 4 ranks in h0 (omx on lo: OMX_IFACES=lo)
#               2h2r, 2h4r   2 or 4 ranks over h0 and h1 (--map-by node, so
#                            partners r, r^1 sit on different hosts)
#               4h4r         one rank in each of h0..h3
#
# When an omx case fails, the same program and placement is rerun over
# libfabric's tcp provider (cm/ofi 'tcp;ofi_rxm') and the outcome printed, to
# tell a provider bug from a test or Open MPI problem (not counted).
#
# Prints "PASS name (seconds)", "FAIL name" (with the end of its log) or
# "SKIP name: reason" per case, then "N passed, M failed, K skipped"; exits
# non-zero on any failure. Skips everything (saying why) when not root or
# when Open MPI (mpirun, mpicc), ip, unshare or timeout is missing; skips the
# omx cases when build/lib/libfabric/libomx-fi.so does not exist (make
# provider), and then fails if MPI_REQUIRE_PROVIDER=1; skips a threads case
# whose MPI does not provide MPI_THREAD_MULTIPLE. Any skip is a failure under
# CI=true or OMX_TEST_STRICT=1 (tests/runner.sh).
#
# The caller's OMX_* settings reach every rank, so variants run as, e.g.,
#   OMX_WIRE=mx tests/mpi/run.sh 'omx.2h*'
#   OMX_FAULTS=loss:0.01,dup:0.01,reorder:0.03 OMX_RESEND_DELAY_MS=20 tests/mpi/run.sh 'omx.2h2r.*'
# (OMX_IFACES, OMX_HOSTNAME and OMX_RNDV_THRESHOLD are reset; OMPI_MCA_* too).
#
# Environment: MPI_PROVIDER_DIR (where libomx-fi.so is, build/lib/libfabric),
# MPI_TEST_TIMEOUT (90 s per case), P2P_MAX (largest p2p
# message, 8388608), OMX_NS_PREFIX (omxmpi), MPI_KEEP_LOGS=1 (keep the
# temporary directory with every log and print its path).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
agent="$root/scripts/mpi-ns-agent"
hosts="$root/scripts/hosts.sh"
provdir="${MPI_PROVIDER_DIR:-$root/build/lib/libfabric}"
provider="$provdir/libomx-fi.so"
programs=(p2p probe truncate coll threads)
placements=(1h2r 1h4r 2h2r 2h4r 4h4r)

cases=()
for pl in "${placements[@]}"; do
  for p in "${programs[@]}"; do cases+=("omx.$pl.$p"); done
done
# ob1 sanity: truncate is left out (ob1 of Open MPI 4.1.4 writes a truncated
# rendezvous message past the receive buffer).
for p in p2p probe coll; do cases+=("ob1.2h2r.$p"); done
# MPICH: every program between two hosts, four ranks on two and on four hosts.
for p in p2p probe truncate coll; do cases+=("mpich.2h2r.$p"); done
cases+=(mpich.2h4r.p2p mpich.4h4r.coll)
mpich="${MPICH_HOME:-$root/build/mpich}"

if [ "${1:-}" = -l ]; then
  printf '%s\n' "${cases[@]}"
  exit 0
fi
if [ $# -gt 0 ]; then
  sel=()
  for c in "${cases[@]}"; do
    for pat in "$@"; do
      # shellcheck disable=SC2053
      if [[ "$c" == $pat ]]; then
        sel+=("$c")
        break
      fi
    done
  done
  # Any STACK.PLACEMENT.PROGRAM named in full also runs, default list or
  # not (stacks omx, ob1, ofitcp), e.g. ob1.2h4r.p2p or ofitcp.4h4r.truncate.
  for pat in "$@"; do
    IFS=. read -r s p g <<<"$pat"
    if [[ " omx ob1 ofitcp mpich " == *" $s "* && " ${placements[*]} " == *" $p "* &&
      " ${programs[*]} " == *" $g "* && " ${sel[*]} " != *" $pat "* ]]; then
      sel+=("$pat")
    fi
  done
  if [ ${#sel[@]} -eq 0 ]; then
    echo "FAIL selection"
    echo "    no case matches: $*; known: ${cases[*]}"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
  fi
  cases=("${sel[@]}")
fi

# shellcheck source=tests/runner.sh
. "$root/tests/runner.sh" # skip, skip_all, summary (this script has its own report)
all=("${cases[@]}")
[ "$(id -u)" -eq 0 ] || skip_all "needs root (network namespaces, raw packet sockets)"
missing=()
for t in mpirun:openmpi-bin mpicc:libopenmpi-dev ip:iproute2 unshare:util-linux timeout:coreutils; do
  command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t%%:*} (${t#*:})")
done
[ ${#missing[@]} -eq 0 ] || skip_all "not found: $(printf '%s, ' "${missing[@]}" | sed 's/, $//')"

MPI_TEST_TIMEOUT=${MPI_TEST_TIMEOUT:-90}
P2P_MAX=${P2P_MAX:-8388608}
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxmpi}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/omx-mpi.XXXXXX")
export TMPDIR="$tmp" # Open MPI session directories
export OMX_STATE_DIR="$tmp/state"
mkdir -p "$OMX_STATE_DIR" "$tmp/bin" "$tmp/log"
unset OMX_IFACES OMX_HOSTNAME OMX_RNDV_THRESHOLD FI_PROVIDER FI_PROVIDER_PATH OMX_MPI_EXPECT_LIB || true
# Open MPI reads OMPI_MCA_* from the environment: none of the caller's.
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(OMPI_MCA_[A-Za-z0-9_]*\)=.*/\1/p')

hosts_up=0
cleanup() {
  local i
  if [ "$hosts_up" = 1 ]; then
    for i in 0 1 2 3; do
      ip netns pids "$OMX_NS_PREFIX-h$i" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    done
    "$hosts" down >/dev/null 2>&1 || true
  fi
  if [ "${MPI_KEEP_LOGS:-0}" = 1 ]; then
    echo "logs kept in $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

report() { # report NAME STATUS SECONDS LOG
  local name=$1 st=$2 secs=$3 log=$4
  if [ "$st" -eq 0 ]; then
    echo "PASS $name (${secs} s)"
    passed=$((passed + 1))
  else
    echo "FAIL $name"
    failed=$((failed + 1))
    [ -s "$log" ] && grep -v '^\[[^]]*\] mca: base\|^\[[^]]*\] mca:base' "$log" | tail -n 40 | sed -e 's/^/    /'
  fi
  return 0
}

# ---- build ----
built=" "
for p in "${programs[@]}"; do
  if mpicc -O2 -g -Wall -Wextra -Werror -pthread -o "$tmp/bin/$p" "$here/$p.c" >"$tmp/log/$p.cc" 2>&1; then
    built+="$p "
  else
    report "build.$p" 1 0 "$tmp/log/$p.cc"
  fi
done

have_provider=1
[ -e "$provider" ] || have_provider=0

# The same programs built with MPICH's compiler wrapper, when MPICH is there.
built_mpich=" "
if [ -x "$mpich/bin/mpicc" ]; then
  mkdir -p "$tmp/bin-mpich"
  for p in "${programs[@]}"; do
    if "$mpich/bin/mpicc" -O2 -g -Wall -Wextra -Werror -pthread -o "$tmp/bin-mpich/$p" "$here/$p.c" \
      >"$tmp/log/$p.mpich.cc" 2>&1; then
      built_mpich+="$p "
    else
      report "build.mpich.$p" 1 0 "$tmp/log/$p.mpich.cc"
    fi
  done
fi

# ---- hosts ----
if ! "$hosts" up 4 9000 >"$tmp/log/hosts" 2>&1; then
  report hosts 1 0 "$tmp/log/hosts"
  summary
  exit 1
fi
hosts_up=1

# mpirun ARGS...: mpirun in h0 (own UTS namespace, hostname h0) with the
# extra environment in array menv, bounded by MPI_TEST_TIMEOUT; the caller
# redirects its output.
menv=()
mpirun_h0() {
  timeout -k 5 "$MPI_TEST_TIMEOUT" ip netns exec "$OMX_NS_PREFIX-h0" unshare --uts -- \
    env OMX_HOSTNAME=h0 "${menv[@]}" sh -c 'hostname h0 && exec "$@"' sh \
    mpirun --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include omx0 --mca btl_tcp_if_include omx0 \
    --mca btl_base_warn_component_unused 0 --bind-to none --oversubscribe "$@"
}

# mpiexec ARGS...: MPICH's hydra in h0, starting ranks on the other hosts through
# the same agent (it passes ssh's -x first, which the agent ignores).
mpiexec_h0() {
  timeout -k 5 "$MPI_TEST_TIMEOUT" ip netns exec "$OMX_NS_PREFIX-h0" unshare --uts -- \
    env OMX_HOSTNAME=h0 "${menv[@]}" sh -c 'hostname h0 && exec "$@"' sh \
    "$mpich/bin/mpiexec" -launcher ssh -launcher-exec "$agent" -iface omx0 "$@"
}

# Kill whatever a timed-out case left behind in our hosts.
reap() {
  local i left=0
  for i in 0 1 2 3; do
    if [ -n "$(ip netns pids "$OMX_NS_PREFIX-h$i" 2>/dev/null)" ]; then
      left=1
      ip netns pids "$OMX_NS_PREFIX-h$i" | xargs -r kill -9 2>/dev/null || true
    fi
  done
  [ "$left" = 0 ] || sleep 0.5
}

placement_args() { # placement_args PLACEMENT [STACK] -> words on stdout
  if [ "${2:-}" = mpich ]; then
    # hydra places ranks round robin over the hosts (-ppn 1), so partners r, r^1
    # sit on different hosts as with --map-by node.
    case $1 in
    2h2r) echo "-hosts h0,h1 -ppn 1 -n 2" ;;
    2h4r) echo "-hosts h0,h1 -ppn 1 -n 4" ;;
    4h4r) echo "-hosts h0,h1,h2,h3 -ppn 1 -n 4" ;;
    esac
    return
  fi
  case $1 in
  1h2r) echo "--host h0:2 -np 2" ;;
  1h4r) echo "--host h0:4 -np 4" ;;
  2h2r) echo "--host h0:1,h1:1 -np 2 --map-by node" ;;
  2h4r) echo "--host h0:2,h1:2 -np 4 --map-by node" ;;
  4h4r) echo "--host h0:1,h1:1,h2:1,h3:1 -np 4 --map-by node" ;;
  esac
}

# run_case STACK PLACEMENT PROGRAM LOG: returns mpirun's status.
run_case() {
  local stack=$1 pl=$2 prog=$3 log=$4 args=() st=0
  read -r -a args <<<"$(placement_args "$pl" "$stack")"
  menv=()
  case $pl in
  1h*) menv+=(OMX_IFACES=lo FI_TCP_IFACE=lo) ;;
  *) menv+=(FI_TCP_IFACE=omx0) ;;
  esac
  case $stack in
  omx)
    args+=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include omx --mca mtl_base_verbose 100)
    menv+=(FI_PROVIDER_PATH="$provdir" OMX_MPI_EXPECT_LIB=libomx-fi.so)
    ;;
  ofitcp)
    args+=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "tcp;ofi_rxm")
    ;;
  ob1)
    args+=(--mca pml ob1 --mca btl self,vader,tcp)
    ;;
  mpich)
    menv+=(FI_PROVIDER=omx FI_PROVIDER_PATH="$provdir" MPIR_CVAR_CH4_NETMOD=ofi
      MPIR_CVAR_CH4_OFI_CONTEXT_ID_BITS=16 MPIR_CVAR_CH4_OFI_TAG_BITS=26
      OMX_MPI_EXPECT_LIB=libomx-fi.so)
    ;;
  esac
  local pargs=()
  [ "$prog" = p2p ] && pargs=("$P2P_MAX")
  if [ "$stack" = mpich ]; then
    mpiexec_h0 "${args[@]}" "$tmp/bin-mpich/$prog" "${pargs[@]}" >"$log" 2>&1 || st=$?
  else
    mpirun_h0 "${args[@]}" "$tmp/bin/$prog" "${pargs[@]}" >"$log" 2>&1 || st=$?
  fi
  [ "$st" -eq 124 ] && echo "timed out after ${MPI_TEST_TIMEOUT}s" >>"$log"
  if [ "$st" -eq 0 ] && [ "$stack" = omx ]; then
    # every rank selected the ofi MTL and opened the provider (Open MPI 4.1
    # prints the provider's domain name, "omx", at mtl_base_verbose >= 1)
    local np sel
    np=$(sed -n 's/.*-np \([0-9]*\).*/\1/p' <<<"${args[*]}")
    sel=$(grep -c 'select: component ofi selected' "$log" || true)
    if [ "$sel" != "$np" ] || ! grep -q 'mtl:ofi:provider: omx' "$log"; then
      echo "the omx path was not used by every rank: $sel of $np ranks report 'select: component ofi selected'," \
        "$(grep -c 'mtl:ofi:provider: omx' "$log" || true) report 'mtl:ofi:provider: omx'" >>"$log"
      st=1
    fi
  fi
  reap
  return "$st"
}

for c in "${cases[@]}"; do
  IFS=. read -r stack pl prog <<<"$c"
  if [ "$stack" = mpich ] && [ ! -x "$mpich/bin/mpicc" ]; then
    skip "$c" "no MPICH with ch4:ofi in $mpich (scripts/get-mpich.sh)"
    continue
  fi
  if [ "$stack" = mpich ] && [[ "$built_mpich" != *" $prog "* ]]; then
    skip "$c" "MPICH build of $prog failed"
    continue
  fi
  if [[ "$built" != *" $prog "* ]]; then
    skip "$c" "build of $prog failed"
    continue
  fi
  if [[ "$stack" = omx || "$stack" = mpich ]] && [ "$have_provider" = 0 ]; then
    skip "$c" "no omx provider: $provider is missing; make provider"
    continue
  fi
  log="$tmp/log/$c"
  t0=$(date +%s.%N)
  st=0
  run_case "$stack" "$pl" "$prog" "$log" || st=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  # threads.c says "threads: skipped (reason)" when MPI cannot run it
  # (sed quits at the first: a `| head` could end it by SIGPIPE under pipefail)
  why=$(sed -n '/^threads: skipped (.*)$/{s/^threads: skipped (\(.*\))$/\1/p;q}' "$log")
  if [ "$st" -eq 0 ] && [ -n "$why" ]; then
    skip "$c" "$why"
    continue
  fi
  report "$c" "$st" "$secs" "$log"
  if [ "$st" -ne 0 ] && [ "$stack" = omx ]; then
    rst=0
    run_case ofitcp "$pl" "$prog" "$log.ofitcp" || rst=$?
    if [ "$rst" -eq 0 ]; then
      echo "    (the same case over libfabric tcp;ofi_rxm passes: points at the omx provider)"
    else
      echo "    (the same case over libfabric tcp;ofi_rxm fails too, status $rst: test or Open MPI setup?)"
      grep -v 'mca: base\|mca:base' "$log.ofitcp" | tail -n 10 | sed -e 's/^/      /'
    fi
  fi
done

if [ "$have_provider" = 0 ] && [ "${MPI_REQUIRE_PROVIDER:-0}" = 1 ]; then
  echo "FAIL provider: required (MPI_REQUIRE_PROVIDER=1) but $provider is missing"
  failed=$((failed + 1))
fi
summary
