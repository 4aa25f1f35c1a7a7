#!/usr/bin/env bash
# pjdfstest (the POSIX file-system conformance suite, github.com/pjd/pjdfstest) on an
# omxfs mount between two namespace hosts: omxfsd on h0 exporting a fresh directory in
# /tmp, omxfs on h1, `prove -r` of the suite's tests run as root in the mount (about
# 3 minutes). Not in `make test` (the suite is fetched and built by hand); root.
#
#   tests/fs/pjdfstest.sh PJDFSTEST_DIR [TEST...]
#
# PJDFSTEST_DIR: a checkout of pjdfstest built in place (autoreconf -ifs && ./configure
# && make pjdfstest). TEST: files or directories of its tests/ (default: all). Prints
# prove's report; the exit status is prove's.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
suite=$(cd "$1" && pwd)
shift
[ -x "$suite/pjdfstest" ] || { echo "pjdfstest.sh: build $suite/pjdfstest first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "pjdfstest.sh: needs root" >&2; exit 2; }
command -v prove >/dev/null || { echo "pjdfstest.sh: prove (perl) missing" >&2; exit 2; }
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=("$suite/tests")
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-pjdfs}
H=scripts/hosts.sh
bin=${BIN:-target/release}
tmp=$(mktemp -d /tmp/omxfs-pjdfstest.XXXXXX)
export OMX_STATE_DIR=$tmp/state
mkdir -p "$OMX_STATE_DIR" "$tmp/export/data" "$tmp/m"
pids=()
cleanup() {
  [ -n "${cpid:-}" ] && nsenter -t "$cpid" -m fusermount3 -u -z "$tmp/m" 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$H" down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
"$H" up 2 9000 >/dev/null
"$H" exec 0 "$bin/omxfsd" "$tmp/export/data" >"$tmp/server.log" 2>&1 &
pids+=($!)
"$H" exec 1 "$bin/omxfs" h0:data "$tmp/m" -f >"$tmp/client.log" 2>&1 &
cpid=$!
pids+=("$cpid")
deadline=$((SECONDS + 60))
until nsenter -t "$cpid" -m findmnt -n "$tmp/m" >/dev/null 2>&1; do
  kill -0 "$cpid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ] || { cat "$tmp/client.log" >&2; exit 1; }
  sleep 0.1
done
status=0
nsenter -t "$cpid" -m sh -c 'cd "$1" && shift && prove -r "$@"' sh "$tmp/m" "${tests[@]}" || status=$?
exit "$status"
