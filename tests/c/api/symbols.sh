#!/usr/bin/env bash
# symbols.sh - binary interface of libmyriexpress.so.0, read with objdump.
#
#   symbols.sh LIBDIR      the library: soname, MX symbol version nodes,
#                          every MX entry point and native omx_* function
#                          exported, nothing else
#   symbols.sh -r PROGRAM  a program linked with -lmyriexpress: it needs the
#                          soname and recorded the versioned references
#
# Prints one line per failed check and exits non-zero if any failed.
set -euo pipefail

fails=0
bad() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# version_of TABLE SYMBOL: the version objdump -T prints for SYMBOL.
version_of() {
  awk -v s="$2" '$NF == s { print $(NF - 1); exit }' <<<"$1"
}

# Versioned entry points (MX 1.2 / Open-MX version nodes).
declare -A node=(
  [mx_open_endpoint]=MX_0.9 [mx_decompose_endpoint_addr]=MX_0.9
  [mx_get_info]=MX_0.91 [mx_test]=MX_0.91 [mx_wait]=MX_0.91 [mx_iprobe]=MX_0.91
  [mx__init_api]=MX_0.92
)

if [ "${1:-}" = "-r" ]; then
  prog=$2
  table=$(objdump -T "$prog")
  objdump -p "$prog" | grep -E 'NEEDED +libmyriexpress\.so\.0$' >/dev/null ||
    bad "$prog does not need libmyriexpress.so.0"
  for s in "${!node[@]}"; do
    v=$(version_of "$table" "$s")
    # objdump prints references as "(MX_0.9)"
    [ -z "$v" ] && continue
    [ "$v" = "(${node[$s]})" ] || bad "$prog references $s as $v, expected (${node[$s]})"
  done
  for s in mx_open_endpoint mx__init_api mx_wait; do
    [ -n "$(version_of "$table" "$s")" ] || bad "$prog does not reference $s"
  done
  [ "$fails" -eq 0 ]
  exit
fi

libdir=${1:?usage: symbols.sh LIBDIR | symbols.sh -r PROGRAM}
lib="$libdir/libmyriexpress.so.0"
[ -f "$lib" ] || {
  bad "$lib missing"
  exit 1
}

soname=$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = "libmyriexpress.so.0" ] || bad "SONAME is '$soname', expected libmyriexpress.so.0"
[ "$(readlink "$libdir/libmyriexpress.so")" = "libmyriexpress.so.0" ] ||
  bad "libmyriexpress.so is not a link to libmyriexpress.so.0"
[ -f "$libdir/libmyriexpress.a" ] || bad "libmyriexpress.a missing"

table=$(objdump -T "$lib")
for s in "${!node[@]}"; do
  v=$(version_of "$table" "$s")
  [ "$v" = "${node[$s]}" ] || bad "$s has version '$v', expected ${node[$s]}"
done

# The version nodes are defined and chained MX_0.92 -> MX_0.91 -> MX_0.9.
vd=$(objdump -p "$lib" | sed -n '/Version definitions:/,/^$/p')
for v in MX_0.9 MX_0.91 MX_0.92; do
  grep -Eq "[[:space:]]$v\$" <<<"$vd" || bad "version node $v not defined"
done
grep -A1 -E '[[:space:]]MX_0\.92$' <<<"$vd" | grep -E 'MX_0\.91[[:space:]]*$' >/dev/null || bad "MX_0.92 does not inherit MX_0.91"
grep -A1 -E '[[:space:]]MX_0\.91$' <<<"$vd" | grep -E 'MX_0\.9[[:space:]]*$' >/dev/null || bad "MX_0.91 does not inherit MX_0.9"

# Every MX entry point of myriexpress.h, mx_extensions.h and mx_io.h is exported
# (defined, in .text); the raw API (mx_raw.h) is checked for presence only
# when exported at all.
api=(
  mx__init_api mx_finalize mx_set_error_handler mx_open_endpoint mx_close_endpoint
  mx_wakeup mx_disable_progression mx_reenable_progression mx_register_unexp_callback
  mx_isend mx_issend mx_irecv mx_cancel mx_test mx_wait mx_test_any mx_wait_any
  mx_ipeek mx_peek mx_iprobe mx_probe mx_ibuffered mx_buffered mx_context mx_iput
  mx_iget mx_connect mx_get_endpoint_addr mx_decompose_endpoint_addr
  mx_hostname_to_nic_id mx_nic_id_to_hostname mx_board_number_to_nic_id
  mx_nic_id_to_board_number mx_get_info mx_strerror mx_strstatus
  mx_register_unexp_handler mx_progress mx_forget mx_set_request_timeout mx_iconnect
  mx_disconnect mx_decompose_endpoint_addr2 mx_set_endpoint_addr_context
  mx_get_endpoint_addr_context mx__regcache_clean omx_expose_region omx_unexpose_region
  omx_test_any_completed omx_resolve_node omx_port_endpoint omx_endpoint_notify_fd
  omx_endpoint_arm_notify omx_expose_window omx_isend_typed omx_issend_typed omx_irecv_typed
  omx_iatomic omx_atomic_valid omx_iput_notify
  mx_open_board mx__get_mapper_state
  # the native API (open-mx.h)
  omx__init_api omx_finalize omx_strerror omx_board_number_to_nic_id
  omx_nic_id_to_board_number omx_set_error_handler omx_open_endpoint omx_close_endpoint
  omx_wakeup omx_get_endpoint_addr omx_connect omx_iconnect omx_disconnect
  omx_decompose_endpoint_addr omx_decompose_endpoint_addr_with_session
  omx_set_endpoint_addr_context omx_get_endpoint_addr_context omx_isend omx_issend omx_irecv
  omx_isendv omx_issendv omx_irecvv omx_context omx_test omx_wait omx_test_any omx_wait_any
  omx_ipeek omx_peek omx_iprobe omx_probe omx_ibuffered omx_register_unexp_handler
  omx_cancel omx_cancel_notest omx_forget omx_disable_progression omx_reenable_progression
  omx_progress omx_set_request_timeout omx_get_info omx_hostname_to_nic_id
  omx_nic_id_to_hostname
)
defined=$(awk '$0 ~ / g / && $0 !~ /\*UND\*/ { print $NF }' <<<"$table")
for s in "${api[@]}"; do
  grep -qx "$s" <<<"$defined" || bad "$s is not exported"
done
for s in MX_ERRORS_ARE_FATAL MX_ERRORS_RETURN OMX_ERRORS_ARE_FATAL OMX_ERRORS_RETURN; do
  awk -v s="$s" '$NF == s && $0 ~ /O / { f = 1 } END { exit !f }' <<<"$table" ||
    bad "$s is not exported as data"
done

# The raw API (mx_raw.h) is all or nothing: omx does not export it yet.
raw=(
  mx_raw_handle mx_raw_open_endpoint mx_raw_close_endpoint mx_raw_send mx_raw_next_event
  mx_raw_set_route_begin mx_raw_set_route_end mx_raw_set_route_mag mx_raw_set_route
  mx_raw_clear_routes mx_raw_remove_peer mx_raw_set_map_version mx_raw_num_ports
  mx_raw_line_speed mx_raw_set_hostname mx_raw_set_peer_name mx_raw_set_nic_reply_info
)
nraw=0
for s in "${raw[@]}"; do
  grep -qx "$s" <<<"$defined" && nraw=$((nraw + 1))
done
if [ "$nraw" -eq 0 ]; then
  echo "note: the raw API (mx_raw.h) is not exported"
elif [ "$nraw" -ne "${#raw[@]}" ]; then
  bad "only $nraw of the ${#raw[@]} raw API functions are exported"
fi

# Nothing but the MX ABI and the native API leaks out (no Rust runtime symbols).
extra=$(grep -Ev '^(mx_|mx__|MX_|omx_|OMX_ERRORS_(ARE_FATAL|RETURN)$)' <<<"$defined" |
  grep -Ev '^MX_0\.[0-9]+$' || true)
[ -z "$extra" ] || bad "unexpected exported symbols: $(tr '\n' ' ' <<<"$extra" | cut -c1-300)"

[ "$fails" -eq 0 ] && echo "symbols: all checks passed"
[ "$fails" -eq 0 ]
