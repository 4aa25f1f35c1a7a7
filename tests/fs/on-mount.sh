#!/usr/bin/env bash
# Runs a command in a fresh omxfs mount between two namespace hosts (omxfsd on h0
# exporting a new directory in /tmp, omxfs on h1), as root, its working directory the
# mount: for outside test suites run by hand (not in `make test`), docs/FILES.md
# "Outside test suites".
#
#   tests/fs/on-mount.sh CMD [ARG...]
#
#   CLIENT_ENV="OMX_FAULTS=loss:0.02"  environment of omxfs (frame faults...)
#   EXPORT_FS=tmpfs                    the export on a tmpfs of its own
#
# e.g. tests/fs/on-mount.sh prove -r /src/pjdfstest/tests
#      tests/fs/on-mount.sh /src/xfstests/ltp/fsx -N 20000 -S 1 f
# The exit status is the command's.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "on-mount.sh: needs root" >&2; exit 2; }
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-onmount}
H=scripts/hosts.sh
bin=${BIN:-target/release}
tmp=$(mktemp -d /tmp/omxfs-onmount.XXXXXX)
export OMX_STATE_DIR=$tmp/state
mkdir -p "$OMX_STATE_DIR" "$tmp/export/data" "$tmp/m"
[ "${EXPORT_FS:-}" = tmpfs ] && mount -t tmpfs -o size=4g omxfs-onmount "$tmp/export/data"
pids=()
cleanup() {
  [ -n "${cpid:-}" ] && nsenter -t "$cpid" -m fusermount3 -u -z "$tmp/m" 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$H" down >/dev/null 2>&1 || true
  [ "${EXPORT_FS:-}" = tmpfs ] && umount -l "$tmp/export/data"
  rm -rf "$tmp"
}
trap cleanup EXIT
"$H" up 2 9000 >/dev/null
"$H" exec 0 "$bin/omxfsd" "$tmp/export/data" >"$tmp/server.log" 2>&1 &
pids+=($!)
# shellcheck disable=SC2086 # CLIENT_ENV is words of VAR=value.
"$H" exec 1 env ${CLIENT_ENV:-} "$bin/omxfs" h0:data "$tmp/m" -f >"$tmp/client.log" 2>&1 &
cpid=$!
pids+=("$cpid")
deadline=$((SECONDS + 60))
until nsenter -t "$cpid" -m findmnt -n "$tmp/m" >/dev/null 2>&1; do
  kill -0 "$cpid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ] || { cat "$tmp/client.log" >&2; exit 1; }
  sleep 0.1
done
status=0
nsenter -t "$cpid" -m sh -c 'cd "$1" && shift && exec "$@"' sh "$tmp/m" "$@" || status=$?
exit "$status"
