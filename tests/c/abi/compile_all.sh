#!/usr/bin/env bash
# compile_all.sh - checks the public MX headers of omx and its native open-mx.h.
#
#  1. each header alone, as C99, as C11 (gcc -Wall -Wextra -Werror -pedantic)
#     and as C++11 (g++ ... -pedantic), plus all headers together, twice,
#     in both orders (include guards, no conflicting definitions);
#  2. the same with -m32 when a hosted 32-bit toolchain exists (gcc-multilib),
#     skipped otherwise (counted);
#  3. usage.c: a typical MX client compiles as C99 and as C++11;
#  4. layout.c: sizes, offsets, enum values, #defines and prototypes against
#     the specification, run on the host ABI (x86-64) and checked at compile
#     time for i386 (-m32);
#  5. the pkg-config templates, once filled in;
#  6. programs/*.c: MX programs written for the original's headers, each
#     including only the MX header(s) it names (what those headers brought in,
#     such as <inttypes.h> and <stdlib.h>, included), built and linked against
#     build/lib as C99, C11 and C++11 with -Wall -Werror; nic_id is also run.
#
# Prints "N passed, M failed, K skipped" (a skip, of -m32 or pkg-config, is a
# failure under CI=true or OMX_TEST_STRICT=1); exits non-zero on any failure.
# Usage: tests/c/abi/compile_all.sh   (CC and CXX may be overridden)

set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
inc="$root/include"
CC=${CC:-gcc}
CXX=${CXX:-g++}

headers="myriexpress.h mx_extensions.h mx_io.h mx_raw.h mx_internals/mx__fops.h mx_internals/mx__driver_interface.h open-mx.h"
cflags="-Wall -Wextra -Werror -pedantic"
extra_cflags="-Wstrict-prototypes -Wmissing-prototypes -Wshadow -Wundef -Wcast-qual -Wconversion"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/omx-abi.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=tests/runner.sh
. "$root/tests/runner.sh" # skip (counted; a failure under CI=true or OMX_TEST_STRICT=1)

# step DESCRIPTION COMMAND...: run one check, keep its output only on failure.
step() {
  local desc=$1
  shift
  if "$@" >"$tmp/out" 2>&1; then
    passed=$((passed + 1))
    echo "PASS $desc"
  else
    failed=$((failed + 1))
    echo "FAIL $desc"
    sed 's/^/    /' "$tmp/out"
  fi
}

# Translation units including one header alone, or all of them.
tu_name() { local b=${1%.h}; echo "only_${b//\//_}"; }
for h in $headers; do
  # (the declaration keeps a unit whose header declares nothing from being empty)
  printf '#include <%s>\ntypedef int tu_not_empty;\n' "$h" >"$tmp/$(tu_name "$h").c"
  cp "$tmp/$(tu_name "$h").c" "$tmp/$(tu_name "$h").cpp"
done
{
  for h in $headers; do printf '#include <%s>\n' "$h"; done
  for h in $(echo $headers | tr ' ' '\n' | tac); do printf '#include <%s>\n' "$h"; done
} >"$tmp/all.c"
cp "$tmp/all.c" "$tmp/all.cpp"

# headers_pass LABEL EXTRA-FLAGS...: every C/C++ header check with extra flags.
headers_pass() {
  local label=$1
  shift
  local h
  for h in $headers all; do
    local name=$h
    [ "$h" = all ] && name="all headers twice"
    local tu
    tu=$(tu_name "$h")
    [ "$h" = all ] && tu=all
    step "$label c99   $name" $CC -std=c99 $cflags "$@" -I"$inc" -fsyntax-only "$tmp/$tu.c"
    step "$label c11   $name" $CC -std=c11 $cflags "$@" -I"$inc" -fsyntax-only "$tmp/$tu.c"
    step "$label c++11 $name" $CXX -std=c++11 $cflags "$@" -I"$inc" -fsyntax-only "$tmp/$tu.cpp"
  done
}

echo "== headers (host)"
headers_pass host
step "host c11 all headers, extra warnings" \
  $CC -std=c11 $cflags $extra_cflags -I"$inc" -fsyntax-only "$tmp/all.c"

echo "== usage (host)"
step "usage.c c99" $CC -std=c99 $cflags -I"$inc" -fsyntax-only "$here/usage.c"
step "usage.c c++11" $CXX -std=c++11 $cflags -I"$inc" -fsyntax-only -x c++ "$here/usage.c"

echo "== layout (host)"
step "layout.c static checks (host)" \
  $CC -std=c11 $cflags -DLAYOUT_STATIC_ONLY -I"$inc" -fsyntax-only "$here/layout.c"
if $CC -std=c11 $cflags -I"$inc" "$here/layout.c" -o "$tmp/layout" >"$tmp/build.log" 2>&1; then
  step "layout.c run (host)" "$tmp/layout"
  sed 's/^/    /' "$tmp/out"
else
  failed=$((failed + 1))
  echo "FAIL layout.c build (host)"
  sed 's/^/    /' "$tmp/build.log"
fi

echo "== 32-bit (i386)"
printf '#include <stdint.h>\n#include <stdio.h>\nint main(void) { return (int)sizeof(uint64_t) - 8; }\n' >"$tmp/probe32.c"
if $CC -m32 "$tmp/probe32.c" -o "$tmp/probe32" >/dev/null 2>&1 && "$tmp/probe32" >/dev/null 2>&1; then
  echo "(hosted 32-bit toolchain found)"
  headers_pass m32 -m32
  if $CC -m32 -std=c11 $cflags -I"$inc" "$here/layout.c" -o "$tmp/layout32" >"$tmp/build.log" 2>&1; then
    step "layout.c run (i386)" "$tmp/layout32"
    sed 's/^/    /' "$tmp/out"
  else
    failed=$((failed + 1))
    echo "FAIL layout.c build (i386)"
    sed 's/^/    /' "$tmp/build.log"
  fi
  step "layout.c static checks (i386)" \
    $CC -m32 -std=c11 $cflags -DLAYOUT_STATIC_ONLY -I"$inc" -fsyntax-only "$here/layout.c"
else
  # The headers include <inttypes.h> and <stdlib.h>, as the original's did, so a
  # freestanding check is no longer possible: a hosted 32-bit C library is needed.
  skip m32 "no 32-bit C library ($CC -m32 cannot build a program; install gcc-multilib g++-multilib)"
fi

echo "== programs written for the original's headers"
libdir="$root/build/lib"
if [ -e "$libdir/libmyriexpress.so.0" ]; then
  for prog in "$here"/programs/*.c; do
    name=$(basename "$prog" .c)
    link=(-L"$libdir" -lmyriexpress -Wl,-rpath,"$libdir")
    step "$name c99 build" $CC -std=c99 $cflags -I"$inc" "$prog" -o "$tmp/$name" "${link[@]}"
    step "$name c11 build" $CC -std=c11 $cflags -I"$inc" "$prog" -o "$tmp/$name.c11" "${link[@]}"
    step "$name c++11 build" $CXX -std=c++11 $cflags -I"$inc" -x c++ "$prog" -x none -o "$tmp/$name.cxx" "${link[@]}"
  done
  step "nic_id prints the id it read" sh -c "
    out=\$('$tmp/nic_id' 0x0002c9a1b2c3); echo \"\$out\"
    [ \"\$out\" = '0002c9a1b2c3 00000002c9a1b2c3 11972752067' ]"
else
  failed=$((failed + 1))
  echo "FAIL programs: $libdir/libmyriexpress.so.0 is missing (make lib first; make test-c does)"
fi

echo "== pkg-config templates"
if command -v pkg-config >/dev/null 2>&1; then
  for pc in omx myriexpress; do
    # As `make install` fills them for a prefix outside /usr: with the run path.
    sed -e 's|@PREFIX@|/opt/omx-test|g' -e 's|@VERSION@|0.0.0|g' \
      -e 's|@RPATH@|-Wl,-rpath,${libdir} |g' "$inc/$pc.pc.in" >"$tmp/$pc.pc"
    step "$pc.pc has no placeholder left" sh -c "! grep -q '@[A-Z_]*@' '$tmp/$pc.pc'"
    step "$pc.pc validates" env PKG_CONFIG_PATH="$tmp" pkg-config --validate "$pc"
    step "$pc.pc flags" sh -c "
      got=\$(PKG_CONFIG_PATH='$tmp' pkg-config --cflags --libs '$pc' | tr -s ' ' | sed 's/ *\$//')
      want='-I/opt/omx-test/include -L/opt/omx-test/lib -Wl,-rpath,/opt/omx-test/lib -lmyriexpress'
      echo \"got:  \$got\"; echo \"want: \$want\"; [ \"\$got\" = \"\$want\" ]"
  done
else
  skip pkg-config "pkg-config not installed"
fi

echo "compile_all: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
