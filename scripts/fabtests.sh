#!/usr/bin/env bash
# fabtests.sh - libfabric's conformance suite (fabtests' runfabtests.sh) over the omx
# provider, by hand: fabtests is not packaged in the registries reachable here.
#
#   scripts/fabtests.sh build SRC [TAG]   build fabtests from a libfabric git tree SRC
#                                         at TAG (v1.17.1: Debian's libfabric 1.17
#                                         headers) into $FABTESTS_DIR
#   scripts/fabtests.sh one [ARGS...]     runfabtests.sh ARGS omx in one test host,
#                                         client and server on 127.0.0.1
#   scripts/fabtests.sh two [ARGS...]     server in h1 (10.99.0.2), client in h0
#
# ARGS default to "-v -T 90 -t quick". Root; needs `make provider`. FABTESTS_DIR
# defaults to /tmp/omx-fabtests; hosts come from scripts/hosts.sh with
# OMX_NS_PREFIX (default omxfab) and are removed at the end.
#
# runfabtests.sh reaches the hosts through ssh and, after every test, kills every
# process of the machine whose name starts with fi_ (other users' too). The copy
# installed here runs its commands in the namespace hosts instead of ssh and
# kills only the fi_* processes of this prefix's hosts.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${FABTESTS_DIR:-/tmp/omx-fabtests}
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxfab}
say() { echo "fabtests.sh: $*" >&2; }
die() {
  say "$*"
  exit 1
}

build() {
  local src=$1 tag=${2:-v1.17.1}
  [ -d "$src" ] || die "no libfabric tree at $src"
  rm -rf "$dir" && mkdir -p "$dir/src"
  git -C "$src" archive "$tag" fabtests | tar x -C "$dir/src"
  (
    cd "$dir/src/fabtests"
    ./autogen.sh && ./configure --prefix="$dir/inst" --with-libfabric=/usr &&
      make -j"$(nproc)" && make install
  ) >"$dir/build.log" 2>&1 || die "build failed: $dir/build.log"
  # The ssh stand-in: "nsrun [ssh options] ADDRESS COMMAND" runs COMMAND in the host
  # that owns ADDRESS (10.99.0.<i+1> is h<i>, scripts/hosts.sh).
  cat >"$dir/nsrun" <<'EOF'
#!/usr/bin/env bash
while [[ $1 == -* ]]; do
  case $1 in -o) shift 2 ;; *) shift ;; esac
done
host=$1
shift
[[ $host =~ ^10\.99\.0\.([0-9]+)$ ]] || { echo "nsrun: unknown host $host" >&2; exit 255; }
i=$((BASH_REMATCH[1] - 1))
exec ip netns exec "$OMX_NS_PREFIX-h$i" env OMX_HOSTNAME="h$i" bash -c "$*"
EOF
  # The cleanup: fi_* processes of this prefix's hosts only.
  cat >"$dir/nskill" <<'EOF'
#!/usr/bin/env bash
for ns in $(ip netns list | awk '{print $1}' | grep -E "^$OMX_NS_PREFIX-h[0-9]+$"); do
  for p in $(ip netns pids "$ns"); do
    c=$(cat "/proc/$p/comm" 2>/dev/null) || continue
    [[ $c == fi_* ]] && kill -9 "$p" 2>/dev/null
  done
done
exit 0
EOF
  chmod +x "$dir/nsrun" "$dir/nskill"
  local f="$dir/inst/bin/runfabtests.sh"
  sed -i -e "s|^\t\${CLIENT_CMD} \"ps -eo comm,pid.*|\t$dir/nskill|" \
    -e '/^\t${SERVER_CMD} "ps -eo comm,pid/d' \
    -e "s|^declare bssh=\"ssh .*|declare bssh=\"$dir/nsrun\"|" "$f"
  ! grep -q 'ps -eo comm' "$f" || die "could not take the machine-wide kill out of $f"
  say "fabtests $tag in $dir/inst"
}

run() {
  local where=$1
  shift
  [ $# -gt 0 ] || set -- -v -T 90 -t quick
  [ -x "$dir/inst/bin/runfabtests.sh" ] || die "not built: scripts/fabtests.sh build SRC"
  [ -e "$root/build/lib/libfabric/libomx-fi.so" ] || die "make provider first"
  [ "$(id -u)" -eq 0 ] || die "needs root"
  # global: the EXIT trap runs after this function has returned
  state=$(mktemp -d "${TMPDIR:-/tmp}/omx-fabtests-state.XXXXXX")
  trap '"$root/scripts/hosts.sh" down >/dev/null 2>&1 || true; rm -rf "$state"' EXIT
  "$root/scripts/hosts.sh" up 2 >/dev/null
  export OMX_STATE_DIR=$state FI_PROVIDER_PATH=$root/build/lib/libfabric
  export PATH=$dir/inst/bin:$PATH
  say "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ "$where" = one ]; then
    ip netns exec "$OMX_NS_PREFIX-h0" env OMX_HOSTNAME=h0 \
      runfabtests.sh "$@" -p "$dir/inst/bin" omx
  else
    runfabtests.sh "$@" -p "$dir/inst/bin" omx 10.99.0.2 10.99.0.1
  fi
}

case ${1:-} in
build)
  shift
  [ $# -ge 1 ] || die "usage: fabtests.sh build SRC [TAG]"
  build "$@"
  ;;
one | two) run "$@" ;;
*) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2 && exit 2 ;;
esac
