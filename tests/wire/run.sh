#!/usr/bin/env bash
# run.sh - the wire seen from outside: real omx traffic of every class between two
# namespace hosts, captured by tcpdump and by omx_dump, decoded by tshark with the
# dissector (dist/wireshark/omx.lua) and by omx_dump; asserts on the decoded fields.
#
#   tests/wire/run.sh        (root; tshark and tcpdump; target/release built)
#
# Prints "PASS name" / "FAIL name" per check, then "N passed, M failed, K skipped".
# Environment: OMX_NS_PREFIX (namespaces, default omxwire), TEST_TIMEOUT (120 s per step).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxwire}
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
hosts="$root/scripts/hosts.sh"
bin="$root/target/release"
lua="$root/dist/wireshark/omx.lua"
# shellcheck source=tests/runner.sh
. "$root/tests/runner.sh"
runner_start wire
all=(capture types lengths no-malformed checksum-good corrupted mx-layout dump-agrees dump-live dump-pcap striped)

if [ "$(id -u)" -ne 0 ]; then skip_all "needs root (namespaces, packet sockets)"; fi
for t in tshark tcpdump; do
  command -v "$t" >/dev/null || skip_all "$t not installed (apt-get install tshark tcpdump)"
done
for b in omx_dump omx_testpeer; do
  [ -x "$bin/$b" ] || skip_all "$bin/$b not built (cargo build --release -p omx-tools)"
done
export OMX_STATE_DIR="$tmp/state"
mkdir -p "$OMX_STATE_DIR"
# A second link (omx1) for the striped check.
hosts_up 2 9000 2
log="$tmp/log"
pcap="$tmp/all.pcap"

# wait_for FILE TEXT PID: returns once FILE holds TEXT; non-zero if PID ends first or
# TEST_TIMEOUT passes.
wait_for() {
  local deadline=$((SECONDS + TEST_TIMEOUT))
  until grep -q "$2" "$1" 2>/dev/null; do
    kill -0 "$3" 2>/dev/null || return 1
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

# exchange NAME ENV...: omx_testpeer between the two hosts, every size class, with ENV.
exchange() {
  local name=$1 p0
  shift
  in_host 0 env "$@" "$bin/omx_testpeer" --peers h0:0,h1:0 --count 2 \
    --sizes 0,1,100,5000,40000,300000 >"$log/$name.0" 2>&1 &
  p0=$!
  in_host 1 env "$@" "$bin/omx_testpeer" --peers h0:0,h1:0 --count 2 \
    --sizes 0,1,100,5000,40000,300000 >"$log/$name.1" 2>&1 &&
    wait "$p0" && grep -q '^OK' "$log/$name.0" && grep -q '^OK' "$log/$name.1"
}

tshark_() { tshark -X "lua_script:$lua" "$@" 2>>"$log/tshark.err"; }

# Capture: tcpdump and a live omx_dump (the first two connects) on h0, while hosts
# exchange every class natively, with checksums, and in MX-wire mode.
status=0
{
  ip netns exec "$OMX_NS_PREFIX-h0" tcpdump -U -i omx0 -w "$pcap" ether proto 0x86df \
    2>"$log/tcpdump" &
  tcpdump_pid=$!
  bgpids+=("$tcpdump_pid")
  ip netns exec "$OMX_NS_PREFIX-h0" timeout "$TEST_TIMEOUT" "$bin/omx_dump" -i omx0 \
    -t connect -c 2 -w "$tmp/live.pcap" >"$log/live" 2>"$log/live.err" &
  live_pid=$!
  wait_for "$log/tcpdump" "listening on" "$tcpdump_pid" &&
    wait_for "$log/live.err" "listening on" "$live_pid" &&
    exchange native OMX_CHECKSUM=0 &&
    exchange checksum OMX_CHECKSUM=1 &&
    exchange mx OMX_WIRE=mx &&
    wait "$live_pid"
} >"$log/capture" 2>&1 || status=$?
kill -INT "$tcpdump_pid" 2>/dev/null
wait "$tcpdump_pid" 2>/dev/null
report capture "$status" "$log/capture" "$log"/native.* "$log"/checksum.* "$log"/mx.* "$log/live.err"
[ "$status" -eq 0 ] || { summary; exit 1; }

# Every packet type the exchanges make, inner frames of bundles included.
tshark_ -r "$pcap" -T fields -e omx.type | tr ',' '\n' | sort | uniq -c >"$log/types"
status=0
for t in raw host_query host_reply connect tiny small medium rndv pull pull_reply notify truc bundle; do
  grep -qw "$t" "$log/types" || { echo "type $t not seen"; status=1; }
done >"$log/types.check"
report types "$status" "$log/types.check" "$log/types"

# Lengths as sent: tiny 0 and 1, small 100, medium 5000 (one fragment), rendezvous
# 40000 and 300000; every match info as omx_dump reads it.
status=0
{
  got=$(tshark_ -r "$pcap" -Y 'omx.type == "tiny" || omx.type == "small" || omx.type == "medium"' \
    -T fields -e omx.payload_length | tr ',' '\n' | sort -nu | tr '\n' ' ')
  # (Frames bundled with these add only payloads of 0.)
  echo "eager payload lengths: $got (want 0 1 100 5000, and 4096 + 904 in MX-wire fragments)"
  [ "$got" = "0 1 100 904 4096 5000 " ] || status=1
  got=$(tshark_ -r "$pcap" -Y 'omx.type == "rndv"' -T fields -e omx.msg_length | tr ',' '\n' | sort -nu | tr '\n' ' ')
  echo "rendezvous lengths: $got"
  [ "$got" = "40000 300000 " ] || status=1
  tshark_ -r "$pcap" -T fields -e omx.match_info | tr ',' '\n' | grep . | sort -u >"$tmp/match.tshark"
  "$bin/omx_dump" -r "$pcap" | grep -o 'match=0x[0-9a-f]*' | sed 's/match=//' | sort -u >"$tmp/match.dump"
  echo "match infos: $(wc -l <"$tmp/match.tshark") (tshark), $(wc -l <"$tmp/match.dump") (omx_dump)"
  [ -s "$tmp/match.tshark" ] && cmp "$tmp/match.tshark" "$tmp/match.dump"
} >"$log/lengths" 2>&1 || status=1
report lengths "$status" "$log/lengths"

status=0
{
  n=$(tshark_ -r "$pcap" -Y '_ws.malformed || omx.expert.malformed || omx.type == "unknown"' | wc -l)
  echo "malformed frames: $n"
  errors=$(tshark_ -r "$pcap" -V | grep -c 'Lua Error')
  echo "dissector errors: $errors"
  [ "$n" -eq 0 ] && [ "$errors" -eq 0 ] && ! grep -qi 'lua error' "$log/tshark.err"
} >"$log/malformed" 2>&1 || status=1
report no-malformed "$status" "$log/malformed" "$log/tshark.err"

# Checksummed frames: all verified good.
status=0
{
  good=$(tshark_ -r "$pcap" -Y 'omx.checksum_status == "good"' | wc -l)
  bad=$(tshark_ -r "$pcap" -Y 'omx.checksum_status == "bad"' | wc -l)
  echo "checksum good: $good, bad: $bad"
  [ "$good" -gt 0 ] && [ "$bad" -eq 0 ]
} >"$log/checksum" 2>&1 || status=1
report checksum-good "$status" "$log/checksum"

# A corrupted frame: the first checksummed tiny frame with one byte of its match info
# flipped (pcap header 24 bytes, record header 16, match info at frame offset 28..36).
status=0
{
  tshark_ -r "$pcap" -Y 'omx.type == "tiny" && omx.flags.checksum == 1 && !omx.bundle.items' \
    -w "$tmp/tiny.pcap" -F pcap &&
    "$bin/omx_dump" -r "$tmp/tiny.pcap" -c 1 -q -w "$tmp/one.pcap" &&
    printf '\x5a' | dd of="$tmp/one.pcap" bs=1 seek=$((24 + 16 + 30)) conv=notrunc 2>/dev/null &&
    tshark_ -r "$tmp/one.pcap" -V | tee "$tmp/one.txt" | grep -E 'Checksum status: bad|Bad checksum' &&
    grep -q 'BAD CHECKSUM' "$tmp/one.txt" &&
    "$bin/omx_dump" -r "$tmp/one.pcap" | tee /dev/stderr | grep 'malformed .*checksum mismatch' >/dev/null
} >"$log/corrupted" 2>&1 || status=1
report corrupted "$status" "$log/corrupted" "$log/tshark.err"

# MX-wire frames: medium and pull read in the MX layout.
status=0
{
  n=$(tshark_ -r "$pcap" -Y 'omx.layout == "mx" && (omx.type == "medium" || omx.type == "pull")' | wc -l)
  echo "MX-layout medium and pull frames: $n"
  [ "$n" -gt 0 ] &&
    "$bin/omx_dump" -r "$pcap" -t medium | grep 'len=5000 frag=0 flen=5000' >/dev/null
} >"$log/mx" 2>&1 || status=1
report mx-layout "$status" "$log/mx"

# omx_dump and tshark count the same frames of each type.
status=0
{
  tshark_ -r "$pcap" -T fields -e omx.type | tr ',' '\n' | grep . | sort | uniq -c >"$tmp/count.tshark"
  "$bin/omx_dump" -r "$pcap" | awk '{print $5}' | sort | uniq -c >"$tmp/count.dump"
  diff "$tmp/count.tshark" "$tmp/count.dump"
} >"$log/agree" 2>&1 || status=1
report dump-agrees "$status" "$log/agree" "$tmp/count.tshark"

# The live capture: the first two connects (a request and its reply, either way).
status=0
{
  cat "$log/live"
  [ "$(grep -c ' connect ep=0>0 \(request\|reply\) ' "$log/live")" -eq 2 ]
} >"$log/dump-live" 2>&1 || status=1
report dump-live "$status" "$log/dump-live"

# omx_dump's pcap file reads in tshark as the same two connects.
status=0
{
  tshark_ -r "$tmp/live.pcap" -T fields -e omx.type -e omx.is_reply | tee /dev/stderr >"$tmp/live.types"
  [ "$(grep -c '^connect' "$tmp/live.types")" -eq 2 ]
} >"$log/dump-pcap" 2>&1 || status=1
report dump-pcap "$status" "$log/dump-pcap"

# Striped pulls (OMX_STRIPE=1) captured on the second link: both decoders name them,
# read nothing as malformed, and count the same frames.
status=0
(
  # (Immediate mode: a few frames, and tcpdump is stopped right after them.)
  ip netns exec "$OMX_NS_PREFIX-h0" tcpdump -U --immediate-mode -i omx1 -w "$tmp/stripe.pcap" \
    ether proto 0x86df 2>"$log/tcpdump1" &
  tcpdump1_pid=$!
  wait_for "$log/tcpdump1" "listening on" "$tcpdump1_pid" && exchange stripe OMX_STRIPE=1
  ok=$?
  kill -INT "$tcpdump1_pid" 2>/dev/null
  wait "$tcpdump1_pid" 2>/dev/null
  echo "exchange: status $ok; capture: $(grep captured "$log/tcpdump1")"
  [ "$ok" -eq 0 ] || exit 1
  tshark_ -r "$tmp/stripe.pcap" -T fields -e omx.type | tr ',' '\n' | grep . | sort | uniq -c |
    tee "$tmp/stripe.tshark"
  grep -qw stripe_pull "$tmp/stripe.tshark" && grep -qw stripe_pull_reply "$tmp/stripe.tshark" ||
    exit 1
  n=$(tshark_ -r "$tmp/stripe.pcap" -Y '_ws.malformed || omx.expert.malformed || omx.type == "unknown"' | wc -l)
  echo "malformed frames: $n"
  [ "$n" -eq 0 ] || exit 1
  "$bin/omx_dump" -r "$tmp/stripe.pcap" | awk '{print $5}' | sort | uniq -c >"$tmp/stripe.dump"
  diff "$tmp/stripe.tshark" "$tmp/stripe.dump"
) >"$log/striped" 2>&1 || status=1
report striped "$status" "$log/striped" "$log"/stripe.* "$log/tshark.err"

summary
