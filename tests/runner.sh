# shellcheck shell=bash disable=SC2154  # hosts, tmp and TEST_TIMEOUT come from the runner
# runner.sh - shared parts of the test runners (tests/c/api/run.sh, tests/ofi/run.sh),
# sourced after they set $root and $hosts (scripts/hosts.sh) and TEST_TIMEOUT.
#
#   runner_start NAME       private $tmp (bin/, log/), cleaned up with the test hosts
#                           and the background pids in bgpids on exit
#   report NAME STATUS LOG… "PASS name" or "FAIL name" with the end of each log
#   select_tests NAME…      narrows the array `all` to the names asked for (an
#                           unknown one is a failure); `want NAME` tests membership
#   hosts_up N MTU          test hosts, or "FAIL hosts" and exit
#   in_host I CMD…          CMD in host I, bounded by TEST_TIMEOUT
#   summary                 "N passed, M failed"; returns non-zero on any failure

runner_start() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/omx-$1.XXXXXX")
  mkdir -p "$tmp/bin" "$tmp/log"
  bgpids=()
  passed=0
  failed=0
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
  "$hosts" up "$1" "$2" >"$tmp/log/hosts" 2>&1 || {
    cat "$tmp/log/hosts"
    echo "FAIL hosts"
    echo "0 passed, 1 failed"
    exit 1
  }
}

in_host() {
  local i=$1
  shift
  timeout -k 5 "$TEST_TIMEOUT" "$hosts" exec "$i" "$@"
}

summary() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
