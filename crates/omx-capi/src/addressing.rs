//! Addressing: connect, disconnect, endpoint addresses and their contexts, and the
//! mapping between host names, nic ids and board numbers.

use crate::*;
use omx_proto::{RequestKind, StatusCode};
use omx_runtime::Error as RtError;
use std::ffi::{c_char, c_void};
use std::time::Duration;

unsafe fn connect_code(s: StatusCode) -> MxReturn {
    match s {
        StatusCode::BadKey => MX_BAD_CONNECTION_KEY,
        StatusCode::BadEndpoint => MX_BAD_ENDPOINT_ID,
        StatusCode::EndpointClosed => MX_CONNECTION_FAILED,
        _ => MX_TIMEOUT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_connect(
    e: *mut CEndpoint,
    nic_id: u64,
    endpoint_id: u32,
    key: u32,
    timeout: u32,
    addr: *mut MxEndpointAddr,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    if addr.is_null() || endpoint_id > 255 {
        return fail(Some(ep), MX_BAD_ENDPOINT_ID, "bad endpoint id or address");
    }
    let outcome = if crate::knobs::connect_poll_all() {
        ep.ep
            .connect_polling(nic_id, endpoint_id as u8, key, timeout_of(timeout), || {
                for p in live_handles() {
                    if p != e as usize {
                        (*(p as *const CEndpoint)).ep.progress();
                    }
                }
            })
    } else {
        ep.ep
            .connect(nic_id, endpoint_id as u8, key, timeout_of(timeout))
    };
    match outcome {
        Ok(Ok(p)) => {
            *addr = addr_of(ep, p);
            MX_SUCCESS
        }
        Ok(Err(s)) => fail(Some(ep), connect_code(s.code), "connect failed"),
        Err(RtError::Engine(omx_proto::EngineError::UnknownPeer)) => {
            fail(Some(ep), MX_NIC_NOT_FOUND, "nic id not in the peer table")
        }
        Err(err) => rt_error(ep, err),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_iconnect(
    e: *mut CEndpoint,
    nic_id: u64,
    endpoint_id: u32,
    key: u32,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    if endpoint_id > 255 {
        return fail(Some(ep), MX_BAD_ENDPOINT_ID, "bad endpoint id");
    }
    // The engine reports a connect's context as its match info (for mx_test_any).
    match ep.ep.iconnect(nic_id, endpoint_id as u8, key, match_info) {
        Ok(r) => {
            if !request.is_null() {
                ep.connects.insert(r.0, context as usize);
            }
            track(ep, r, RequestKind::Connect, request)
        }
        Err(RtError::Engine(omx_proto::EngineError::UnknownPeer)) => {
            fail(Some(ep), MX_NIC_NOT_FOUND, "nic id not in the peer table")
        }
        Err(err) => rt_error(ep, err),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_disconnect(e: *mut CEndpoint, addr: MxEndpointAddr) -> MxReturn {
    let ep = ep_or_fail!(e);
    let Some(rec) = addr_rec(addr).filter(|r| r.ep == e as usize) else {
        return fail(Some(ep), MX_BAD_REQUEST, "invalid address");
    };
    ep.ep.disconnect(rec.partner);
    ep.addrs.forget(rec.partner);
    // Every address of this partner becomes invalid; a new connect gets a fresh one.
    if let Ok(mut g) = ADDRS.lock() {
        if let Some(t) = g.as_mut() {
            t.index.remove(&(e as usize, rec.partner.0));
            for r in t
                .recs
                .iter_mut()
                .filter(|r| r.ep == e as usize && r.partner == rec.partner)
            {
                r.ep = 0;
                r.context = 0;
            }
        }
    }
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_get_endpoint_addr(
    e: *mut CEndpoint,
    addr: *mut MxEndpointAddr,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    if addr.is_null() {
        return fail(Some(ep), MX_BAD_INFO_VAL, "null address");
    }
    let nic = ep.ep.board().nic_id;
    match ep.ep.connect(
        nic,
        ep.ep.index(),
        ep.ep.key(),
        Some(Duration::from_secs(1)),
    ) {
        Ok(Ok(p)) => {
            *addr = addr_of(ep, p);
            MX_SUCCESS
        }
        _ => fail(
            Some(ep),
            MX_BAD_BAD_BAD,
            "cannot build the endpoint address",
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_decompose_endpoint_addr(
    a: MxEndpointAddr,
    nic_id: *mut u64,
    endpoint_id: *mut u32,
) -> MxReturn {
    mx_decompose_endpoint_addr2(a, nic_id, endpoint_id, std::ptr::null_mut())
}

#[no_mangle]
pub unsafe extern "C" fn mx_decompose_endpoint_addr2(
    a: MxEndpointAddr,
    nic_id: *mut u64,
    endpoint_id: *mut u32,
    session: *mut u32,
) -> MxReturn {
    let Some(r) = addr_rec(a) else {
        return fail(None, MX_BAD_REQUEST, "invalid address");
    };
    if !nic_id.is_null() {
        *nic_id = r.nic;
    }
    if !endpoint_id.is_null() {
        *endpoint_id = r.eid;
    }
    if !session.is_null() {
        *session = r.session;
    }
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_set_endpoint_addr_context(
    a: MxEndpointAddr,
    context: *mut c_void,
) -> MxReturn {
    let mut g = ADDRS.lock().expect("addresses");
    match g
        .as_mut()
        .and_then(|t| t.recs.get_mut((a.stuff[0] as usize).wrapping_sub(1)))
    {
        Some(r) => {
            r.context = context as usize;
            MX_SUCCESS
        }
        None => {
            drop(g);
            fail(None, MX_BAD_REQUEST, "invalid address")
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_get_endpoint_addr_context(
    a: MxEndpointAddr,
    context: *mut *mut c_void,
) -> MxReturn {
    match addr_rec(a) {
        Some(r) if !context.is_null() => {
            *context = r.context as *mut c_void;
            MX_SUCCESS
        }
        _ => fail(None, MX_BAD_REQUEST, "invalid address"),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_hostname_to_nic_id(name: *mut c_char, nic_id: *mut u64) -> MxReturn {
    if name.is_null() || nic_id.is_null() {
        return fail(None, MX_BAD_INFO_VAL, "null argument");
    }
    let Some(rt) = runtime() else {
        return fail(None, MX_NOT_INITIALIZED, "not initialised");
    };
    match rt.hostname_to_nic_id(&cstr(name), NAME_WAIT) {
        Some(n) => {
            *nic_id = n;
            MX_SUCCESS
        }
        None => fail(None, MX_HOST_NOT_FOUND, "host name not found"),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_nic_id_to_hostname(nic_id: u64, name: *mut c_char) -> MxReturn {
    if name.is_null() {
        return fail(None, MX_BAD_INFO_VAL, "null buffer");
    }
    let Some(rt) = runtime() else {
        return fail(None, MX_NOT_INITIALIZED, "not initialised");
    };
    let known = rt
        .boards
        .iter()
        .any(|b| b.peer_snapshot().iter().any(|(n, _)| *n == nic_id));
    if !known {
        return fail(None, MX_HOST_NOT_FOUND, "nic id not found");
    }
    let s = rt.nic_id_to_hostname(nic_id).unwrap_or_default();
    let bytes = s.as_bytes();
    let n = bytes.len().min(MX_MAX_HOSTNAME_LEN - 1);
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), name as *mut u8, n);
    *name.add(n) = 0;
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_board_number_to_nic_id(board: u32, nic_id: *mut u64) -> MxReturn {
    let Some(rt) = runtime() else {
        return fail(None, MX_NOT_INITIALIZED, "not initialised");
    };
    match rt.board(board) {
        Some(b) if !nic_id.is_null() => {
            *nic_id = b.nic_id;
            MX_SUCCESS
        }
        _ => fail(None, MX_BOARD_UNKNOWN, "no such board"),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_nic_id_to_board_number(nic_id: u64, board: *mut u32) -> MxReturn {
    let Some(rt) = runtime() else {
        return fail(None, MX_NOT_INITIALIZED, "not initialised");
    };
    match rt.boards.iter().find(|b| b.nic_id == nic_id) {
        Some(b) if !board.is_null() => {
            *board = b.index;
            MX_SUCCESS
        }
        _ => fail(None, MX_BOARD_UNKNOWN, "not a local board"),
    }
}

/// omx extension: the nic id of the board owning `node`, an IPv4/IPv6 address, a host
/// name resolving to one, `localhost`, or an omx board name (`omx_runtime::ipmap`).
#[no_mangle]
pub unsafe extern "C" fn omx_resolve_node(
    node: *const c_char,
    timeout_ms: u32,
    nic_id: *mut u64,
) -> MxReturn {
    if node.is_null() || nic_id.is_null() {
        return fail(None, MX_BAD_PARAM_VAL, "null argument");
    }
    let Some(rt) = runtime() else {
        return fail(None, MX_NOT_INITIALIZED, "not initialised");
    };
    let wait = Duration::from_millis(timeout_ms as u64);
    match omx_runtime::ipmap::resolve_node(&rt, &cstr(node as *mut c_char), wait) {
        Ok(n) => {
            *nic_id = n;
            MX_SUCCESS
        }
        Err(e) => fail(None, MX_HOST_NOT_FOUND, &e.to_string()),
    }
}

/// omx extension: the endpoint index and connection key that carry a port number.
#[no_mangle]
pub unsafe extern "C" fn omx_port_endpoint(
    port: u32,
    endpoint_id: *mut u32,
    key: *mut u32,
) -> MxReturn {
    let Ok(port) = u16::try_from(port) else {
        return fail(None, MX_BAD_PARAM_VAL, "port above 65535");
    };
    if endpoint_id.is_null() || key.is_null() {
        return fail(None, MX_BAD_PARAM_VAL, "null argument");
    }
    let (index, k) = omx_runtime::ipmap::port_endpoint(port);
    *endpoint_id = index as u32;
    *key = k;
    MX_SUCCESS
}
