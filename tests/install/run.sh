#!/usr/bin/env bash
# run.sh - installs omx to a temporary prefix (`make install PREFIX=...`), builds a
# C program against it with pkg-config alone and runs it, as a user of the
# installed library would: no LD_LIBRARY_PATH, no ldconfig, nothing from the
# build tree. The installed .pc files put the prefix's lib directory in the
# program's run path (README: "Installing").
#
#   tests/install/run.sh
#
# Prints "PASS name" or "FAIL name" per check (with the log of a failure), then
# "N passed, M failed"; exits non-zero on any failure. Environment: CC (gcc),
# TEST_TIMEOUT (600 s per installed program), BUILD_TIMEOUT (1800 s for the install,
# which builds the whole workspace in release when earlier suites built only parts:
# a build cannot hang, but on a loaded 2-core machine it took longer than 600 s).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CC=${CC:-gcc}
TEST_TIMEOUT=${TEST_TIMEOUT:-600}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-1800}
hosts=true # runner_cleanup takes test hosts down; this suite makes none
# shellcheck source=tests/runner.sh
. "$root/tests/runner.sh"
runner_start install

if ! command -v pkg-config >/dev/null; then
  echo "FAIL pkg-config"
  echo "    pkg-config not found (apt-get install pkg-config)"
  echo "0 passed, 1 failed"
  exit 1
fi

prefix="$tmp/prefix"
log="$tmp/log"

# make install builds the libfabric provider too, which needs libfabric's headers.
status=0
timeout "$BUILD_TIMEOUT" make -C "$root" --no-print-directory install PREFIX="$prefix" \
  >"$log/install" 2>&1 || status=$?
report install "$status" "$log/install"
[ "$status" -eq 0 ] || { summary; exit 1; }

# Only what the prefix holds: pkg-config's search path is its lib/pkgconfig alone.
export PKG_CONFIG_LIBDIR="$prefix/lib/pkgconfig"
unset PKG_CONFIG_PATH LD_LIBRARY_PATH
cat >"$tmp/prog.c" <<'C'
#include <myriexpress.h>
#include <stdio.h>

int main(void) {
  mx_return_t r = mx_init();
  if (r != MX_SUCCESS) {
    printf("mx_init: %s\n", mx_strerror(r));
    return 1;
  }
  printf("mx_init: %s\n", mx_strerror(r));
  mx_finalize();
  return 0;
}
C

for pc in myriexpress omx; do
  status=0
  {
    flags=$(pkg-config --cflags --libs "$pc") &&
      echo "$CC prog.c $flags" &&
      # shellcheck disable=SC2086 # the flags are words
      $CC -Wall -Werror -o "$tmp/bin/prog-$pc" "$tmp/prog.c" $flags &&
      # The library the loader picks must be the prefix's.
      ldd "$tmp/bin/prog-$pc" | tee /dev/stderr |
      grep "libmyriexpress.so.0 => $prefix/lib/libmyriexpress.so.0 " >/dev/null &&
      OMX_STATE_DIR="$tmp" timeout "$TEST_TIMEOUT" "$tmp/bin/prog-$pc" | tee /dev/stderr |
      grep -x "mx_init: Success" >/dev/null
  } >"$log/$pc" 2>&1 || status=$?
  report "pkg-config $pc: build and run" "$status" "$log/$pc"
done

# Every installed tool has its manual page, a roff page naming the tool, that man
# renders without a warning.
status=0
{
  for page in "$prefix"/share/man/man1/omx_info.1 "$prefix"/share/man/man1/omx_perf.1 \
    "$prefix"/share/man/man1/omx_counters.1 "$prefix"/share/man/man1/omx_endpoint_info.1 \
    "$prefix"/share/man/man1/omx_hostname.1 "$prefix"/share/man/man1/omx_init_peers.1 \
    "$prefix"/share/man/man1/omx_prepare_binding.1 "$prefix"/share/man/man1/omx_stream.1 \
    "$prefix"/share/man/man1/omx_soak.1 "$prefix"/share/man/man8/omxd.8 \
    "$prefix"/share/man/man8/omx_copyd.8; do
    name=$(basename "${page%.*}")
    grep -q "^\.TH $name " "$page" || { echo "$page: no .TH $name"; exit 1; }
    grep -q "^\.SH OPTIONS" "$page" || { echo "$page: no OPTIONS"; exit 1; }
    if command -v groff >/dev/null; then
      warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
      [ -z "$warnings" ] || { echo "$page: $warnings"; exit 1; }
    fi
    echo "ok $page"
  done
} >"$log/man" 2>&1 || status=$?
report "manual pages" "$status" "$log/man"

# The copy service and the memcpy preload are installed and run from the prefix:
# omx_copyd answers, and omx_memcpy finds its library in the prefix's lib.
status=0
{
  "$prefix/sbin/omx_copyd" --help | grep "copy service" >/dev/null &&
    "$prefix/bin/omx_memcpy" sh -c 'echo "$LD_PRELOAD"' | tee /dev/stderr |
    grep -x "$(realpath "$prefix/lib/libomx_memcpy.so")" >/dev/null
} >"$log/copyd" 2>&1 || status=$?
report "omx_copyd and omx_memcpy installed" "$status" "$log/copyd"

# The native API: open-mx.h is installed, and a program written for it runs.
cat >"$tmp/native.c" <<'C'
#include <open-mx.h>
#include <stdio.h>

int main(void) {
  omx_return_t r = omx_init();
  printf("omx_init: %s\n", omx_strerror(r));
  return r == OMX_SUCCESS && omx_finalize() == OMX_SUCCESS ? 0 : 1;
}
C
status=0
{
  flags=$(pkg-config --cflags --libs omx) &&
    # shellcheck disable=SC2086 # the flags are words
    $CC -Wall -Werror -o "$tmp/bin/native" "$tmp/native.c" $flags &&
    OMX_STATE_DIR="$tmp" timeout "$TEST_TIMEOUT" "$tmp/bin/native" | tee /dev/stderr |
    grep -x "omx_init: Success" >/dev/null
} >"$log/native" 2>&1 || status=$?
report "native API (open-mx.h): build and run" "$status" "$log/native"
summary
