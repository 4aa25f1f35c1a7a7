#!/usr/bin/env bash
# all.sh - `make test`: every suite in turn (Rust, C headers and API, libfabric provider,
# Open MPI), each run to its end even when an earlier one failed, then ONE summary line
# summing them all, last: "N passed, M failed, K skipped".
#
# Counts come from cargo's "test result:" lines and the suites' own
# "N passed, M failed[, K skipped]" lines. A Rust integration test that could not run
# here passed in cargo's eyes; it recorded itself in $OMX_SKIP_LOG (tests/rust/skip.rs)
# and is counted as skipped instead. A suite whose make target failed without a counted
# failure (a build error) counts as one failure. Under CI=true or OMX_TEST_STRICT=1 every
# skip is already a failure in the suite that met it (tests/runner.sh).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
MAKE=${MAKE:-make}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/omx-all.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMX_SKIP_LOG="$tmp/rust-skips"
: >"$OMX_SKIP_LOG"

passed=0
failed=0
skipped=0
problems=()

# add P F S: adds to the totals.
add() {
  passed=$((passed + $1))
  failed=$((failed + $2))
  skipped=$((skipped + $3))
}

# suite TARGET: make TARGET, its output shown and kept, its counts added.
suite() {
  local target=$1 log="$tmp/$1.log" st p=0 f=0 s=0 counts
  echo "== make $target"
  "$MAKE" -C "$root" --no-print-directory "$target" 2>&1 | tee "$log"
  st=${PIPESTATUS[0]}
  if [ "$target" = test-rust ]; then
    counts=$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored.*/\1 \2 \3/p' "$log")
  else
    counts=$(sed -En 's/^([A-Za-z_]+: )?([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) skipped)?$/\2 \3 \5/p' "$log")
  fi
  while read -r a b c; do
    [ -n "$a" ] || continue
    p=$((p + a))
    f=$((f + b))
    s=$((s + ${c:-0}))
  done <<<"$counts"
  if [ "$st" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1
    problems+=("FAIL $target: make $target exited with status $st and no test failure counted (see above)")
  fi
  add "$p" "$f" "$s"
}

suite test-rust
# The Rust tests that returned early were counted as passed by cargo.
rust_skips=$(wc -l <"$OMX_SKIP_LOG")
add $((-rust_skips)) 0 "$rust_skips"
suite test-c
suite test-ofi
suite test-mpi
suite test-install
suite test-wire
suite test-sockets
suite test-fs
suite test-memcpy

echo "== summary of every suite"
if [ "$rust_skips" -gt 0 ]; then
  sort "$OMX_SKIP_LOG"
fi
for x in "${problems[@]}"; do echo "$x"; done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
