#!/usr/bin/env bash
# Soak on real frames (`make soak`, root): omx_soak on namespace hosts under injected
# faults, every message checked end to end (checksum, length, per-sender order,
# duplicates, losses). Runs, in sequence, 2 and 4 hosts in native mode at MTU 9000 and
# 1500 and in MX-wire mode, each under OMX_FAULTS loss/dup/reorder (seeded), then
# prints a table of the runs, the totals and a verdict line.
#
#   SOAK_MESSAGES  messages over the whole soak (default 1000000: about 2 minutes
#                  here with 2 CPUs; SOAK_MESSAGES=5000000 for a longer soak)
#   SOAK_RUNS      runs as HOSTS:MODE:MTU (default: the six above)
#   SOAK_FAULTS    default loss:0.02,dup:0.02,reorder:0.05 (a per-run seed is added)
#   SOAK_CHECKSUM  1 (default): native runs set OMX_CHECKSUM=1, so frames corrupted
#                  on the way are dropped by their checksum and resent; 0: off
#   SOAK_CORRUPT   probability that a received frame gets a bit flipped (default 0.001),
#                  applied to the runs with checksums; the others (MX wire, which has no
#                  checksum, or SOAK_CHECKSUM=0) get it only when SOAK_CORRUPT is set
#                  explicitly, and must then report corrupted messages (a check of the
#                  checker, not of omx)
#   SOAK_SEED      seed of traffic and faults (default 1)
#   SOAK_MAX_SIZE  largest message (default 16777216)
#   SOAK_TIMEOUT   omx_soak --timeout: connect, stall and final-wait limit (default 120)
#   SOAK_BIN       the omx_soak binary (default target/release/omx_soak)
# Hosts use OMX_NS_PREFIX=omxsoak and a private OMX_STATE_DIR, removed at the end.

set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/progress.sh

messages="${SOAK_MESSAGES:-1000000}"
runs="${SOAK_RUNS:-2:native:9000 2:native:1500 2:mx:9000 4:native:9000 4:native:1500 4:mx:9000}"
faults="${SOAK_FAULTS:-loss:0.02,dup:0.02,reorder:0.05}"
corrupt="${SOAK_CORRUPT:-0.001}"
corrupt_unchecked="${SOAK_CORRUPT:-0}"
checksum="${SOAK_CHECKSUM:-1}"
seed="${SOAK_SEED:-1}"
max_size="${SOAK_MAX_SIZE:-16777216}"
timeout="${SOAK_TIMEOUT:-120}"
bin="${SOAK_BIN:-target/release/omx_soak}"

export OMX_NS_PREFIX=omxsoak
hosts=scripts/hosts.sh

die() {
    echo "soak.sh: $*" >&2
    exit 2
}

[[ "$(id -u)" == 0 ]] || die "needs root (network namespaces, raw packet sockets)"
[[ -x "$bin" ]] || die "$bin not found (make build)"
[[ "$messages" =~ ^[0-9]+$ ]] || die "SOAK_MESSAGES must be a number"

work="$(mktemp -d /tmp/omxsoak.XXXXXX)"
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    "$hosts" down || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

read -ra run_list <<<"$runs"
nruns=${#run_list[@]}
((nruns > 0)) || die "no run in SOAK_RUNS"
per_run=$(((messages + nruns - 1) / nruns))

# Sum of field $2 over the soak: lines of file $1.
field() {
    sed -n 's/.* '"$2"'=\([0-9.]*\).*/\1/p' "$1" | awk '{s += $1} END {printf "%.0f", s}'
}

fields=(sent delivered lost duplicated corrupted misordered bytes truncated errors stalled
    frames_corrupted drop_checksum)
declare -A total
for f in "${fields[@]}"; do total[$f]=0; done
rows=()
failed=0
soak_start=$SECONDS

progress_start soak "$nruns"
echo "soak: $messages messages over $nruns runs, faults $faults,corrupt:$corrupt (checksums: $checksum), seed $seed, max size $max_size"
k=0
for r in "${run_list[@]}"; do
    IFS=: read -r n mode mtu <<<"$r"
    [[ "$n" =~ ^[0-9]+$ && "$mtu" =~ ^[0-9]+$ && ("$mode" == native || "$mode" == mx) ]] ||
        die "bad run $r (HOSTS:native|mx:MTU)"
    k=$((k + 1))
    each=$(((per_run + n - 1) / n))
    "$hosts" up "$n" "$mtu" >/dev/null
    state="$work/state$k"
    mkdir -p "$state"
    peers="$(for ((i = 0; i < n; i++)); do printf 'h%d:0,' "$i"; done)"
    peers="${peers%,}"
    wire=()
    run_corrupt="$corrupt"
    if [[ "$mode" == mx ]]; then
        wire=(OMX_WIRE=mx)
        run_corrupt="$corrupt_unchecked"
    elif [[ "$checksum" == 1 ]]; then
        wire=(OMX_CHECKSUM=1)
    else
        run_corrupt="$corrupt_unchecked"
    fi
    progress "run $k/$nruns: $n hosts, $mode, MTU $mtu, ${wire[*]:-no checksum} corrupt:$run_corrupt, $each messages per host"
    start=$SECONDS
    pids=()
    for ((i = 0; i < n; i++)); do
        "$hosts" exec "$i" env OMX_STATE_DIR="$state" OMX_MTU="$mtu" "${wire[@]}" \
            OMX_FAULTS="$faults,corrupt:$run_corrupt,seed:$((seed * 1000 + k * 10 + i))" \
            OMX_RESEND_DELAY_MS=20 OMX_PULL_RESEND_DELAY_MS=40 \
            timeout -k 10 $((timeout * 4 + 60)) \
            "$bin" -p "$peers" --messages "$each" --seed "$((seed + k))" \
            --max-size "$max_size" --timeout "$timeout" \
            >"$work/run$k.h$i.out" 2>&1 &
        pids+=($!)
    done
    ok=1
    for p in "${pids[@]}"; do
        wait "$p" || ok=0
    done
    pids=()
    secs=$((SECONDS - start))
    out="$work/run$k.out"
    cat "$work"/run$k.h*.out >"$out"
    nlines="$(grep -c '^soak: ' "$out" || true)"
    if [[ "$nlines" != "$n" ]]; then
        ok=0
    fi
    declare -A v
    for f in "${fields[@]}"; do
        v[$f]="$(field "$out" "$f")"
        total[$f]=$((total[$f] + ${v[$f]%.*}))
    done
    for f in lost duplicated corrupted misordered truncated errors stalled; do
        [[ "${v[$f]}" == 0 ]] || ok=0
    done
    [[ "${v[sent]}" == "${v[delivered]}" ]] || ok=0
    verdict=PASS
    if ((ok == 0)); then
        verdict=FAIL
        failed=$((failed + 1))
        echo "run $k FAILED; output of its processes:"
        sed 's/^/    /' "$out"
    fi
    rows+=("$(printf '%-3s %5s %-6s %5s %9s %9s %5s %5s %7s %7s %7s %7s %9s %6s  %s' \
        "$k" "$n" "$mode" "$mtu" "${v[sent]}" "${v[delivered]}" "${v[lost]}" \
        "${v[duplicated]}" "${v[corrupted]}" "${v[misordered]}" \
        "${v[frames_corrupted]}" "${v[drop_checksum]}" \
        "$((${v[bytes]%.*} / 1048576))" "$secs" "$verdict")")
    progress_note "run $k/$nruns $verdict in ${secs}s (${v[delivered]} messages delivered)"
    "$hosts" down
done

echo
# flipped: frames the injector corrupted; caught: frames dropped by their checksum.
printf '%-3s %5s %-6s %5s %9s %9s %5s %5s %7s %7s %7s %7s %9s %6s  %s\n' \
    run hosts mode mtu sent delivered lost dup corrupt misord flipped caught MiB secs result
for row in "${rows[@]}"; do echo "$row"; done
printf '%-3s %5s %-6s %5s %9s %9s %5s %5s %7s %7s %7s %7s %9s %6s\n' \
    all "" "" "" "${total[sent]}" "${total[delivered]}" "${total[lost]}" \
    "${total[duplicated]}" "${total[corrupted]}" "${total[misordered]}" \
    "${total[frames_corrupted]}" "${total[drop_checksum]}" \
    "$((total[bytes] / 1048576))" "$((SECONDS - soak_start))"
echo
summary="sent=${total[sent]} delivered=${total[delivered]} lost=${total[lost]} duplicated=${total[duplicated]} corrupted=${total[corrupted]} misordered=${total[misordered]} truncated=${total[truncated]} errors=${total[errors]} stalled=${total[stalled]} frames_corrupted=${total[frames_corrupted]} drop_checksum=${total[drop_checksum]} bytes=${total[bytes]} seconds=$((SECONDS - soak_start))"
if ((failed == 0)); then
    echo "soak: PASS ($nruns runs) $summary"
else
    echo "soak: FAIL ($failed of $nruns runs failed) $summary"
    exit 1
fi
