# shellcheck shell=bash disable=SC2154  # hosts, tmp and TEST_TIMEOUT come from the runner
# runner.sh - shared parts of the test runners (tests/c/api/run.sh, tests/ofi/run.sh,
# tests/mpi/run.sh, tests/c/abi/compile_all.sh), sourced after they set $root and
# $hosts (scripts/hosts.sh) and TEST_TIMEOUT.
#
#   runner_start NAME       private $tmp (bin/, log/), cleaned up with the test hosts
#                           and the background pids in bgpids on exit
#   report NAME STATUS LOG… "PASS name" or "FAIL name" with the end of each log
#   skip NAME REASON        "SKIP name: reason", counted; a failure instead when
#                           CI=true or OMX_TEST_STRICT=1 (a CI run must not go green
#                           with tests never executed)
#   skip_all REASON         every test still in `all` skipped, then the summary and exit
#   select_tests NAME…      narrows the array `all` to the names asked for (an
#                           unknown one is a failure); `want NAME` tests membership
#   hosts_up N MTU [LINKS]  test hosts (LINKS interfaces each), or "FAIL hosts" and exit
#   in_host I CMD…          CMD in host I, bounded by TEST_TIMEOUT
#   wait_listening I PORT PID  returns once a TCP socket listens on PORT in host I;
#                           non-zero if process PID ends first or TEST_TIMEOUT passes
#   host_ip I               IPv4 address of host I (scripts/hosts.sh)
#   summary                 "N passed, M failed, K skipped"; non-zero on any failure

passed=0
failed=0
skipped=0

runner_start() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/omx-$1.XXXXXX")
  mkdir -p "$tmp/bin" "$tmp/log"
  bgpids=()
  trap runner_cleanup EXIT
  trap 'exit 130' INT TERM
}

runner_cleanup() {
  local p
  for p in "${bgpids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  "$hosts" down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}

# True under CI=true or OMX_TEST_STRICT=1: a skip is then a failure.
strict_tests() {
  [ "${CI:-}" = true ] || [ "${OMX_TEST_STRICT:-0}" = 1 ]
}

skip() {
  local name=$1 reason=$2
  if strict_tests; then
    echo "FAIL $name: skipped ($reason), and skips fail under CI=true or OMX_TEST_STRICT=1"
    failed=$((failed + 1))
  else
    echo "SKIP $name: $reason"
    skipped=$((skipped + 1))
  fi
  return 0
}

skip_all() {
  local x
  for x in "${all[@]}"; do skip "$x" "$1"; done
  summary
  exit
}

report() {
  local name=$1 status=$2 log
  shift 2
  if [ "$status" -eq 0 ]; then
    echo "PASS $name"
    passed=$((passed + 1))
  else
    echo "FAIL $name"
    failed=$((failed + 1))
    for log in "$@"; do
      [ -s "$log" ] && sed -e 's/^/    /' "$log" | tail -n 40
    done
  fi
  return 0
}

select_tests() {
  [ $# -gt 0 ] || return 0
  local known=" ${all[*]} " x
  for x in "$@"; do
    if [[ "$known" != *" $x "* ]]; then
      echo "FAIL $x"
      echo "    no such test; known: ${known# }"
      failed=$((failed + 1))
    fi
  done
  all=("$@")
}

want() {
  local x
  for x in "${all[@]}"; do [ "$x" = "$1" ] && return 0; done
  return 1
}

hosts_up() {
  "$hosts" up "$1" "$2" "${3:-1}" >"$tmp/log/hosts" 2>&1 || {
    cat "$tmp/log/hosts"
    echo "FAIL hosts"
    failed=$((failed + 1))
    summary
    exit 1
  }
}

in_host() {
  local i=$1
  shift
  timeout -k 5 "$TEST_TIMEOUT" "$hosts" exec "$i" "$@"
}

wait_listening() {
  local ns="$OMX_NS_PREFIX-h$1" port=$2 pid=$3 deadline=$((SECONDS + TEST_TIMEOUT))
  until ip netns exec "$ns" ss -Hltn "sport = :$port" 2>/dev/null | grep . >/dev/null; do
    kill -0 "$pid" 2>/dev/null || return 1
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

host_ip() {
  echo "10.99.0.$(($1 + 1))"
}

summary() {
  echo "$passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
}
