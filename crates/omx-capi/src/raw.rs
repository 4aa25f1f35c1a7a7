//! The raw API (`mx_raw.h`): whole Ethernet frames for mappers and discovery tools.

use crate::types::*;
use crate::{cstr, fail};
use omx_runtime::{RawEndpoint, RawEvent, Runtime};
use std::ffi::{c_char, c_void};
use std::sync::Mutex;
use std::time::Duration;

const MX_RAW_NO_EVENT: i32 = 0;
const MX_RAW_SEND_COMPLETE: i32 = 1;
const MX_RAW_RECV_COMPLETE: i32 = 2;

/// Starts with the public `struct omx_raw_endpoint { int board_index; int fd; }`.
#[repr(C)]
pub struct CRaw {
    board_index: i32,
    fd: i32,
    inner: Mutex<RawEndpoint>,
}

static RAWS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

unsafe fn raw<'a>(e: *mut CRaw) -> Option<&'a CRaw> {
    RAWS.lock().ok()?.contains(&(e as usize)).then(|| &*e)
}

macro_rules! raw_or_fail {
    ($e:expr) => {
        match raw($e) {
            Some(r) => r,
            None => return fail(None, MX_BAD_ENDPOINT, "invalid or closed raw endpoint"),
        }
    };
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_handle(e: *mut CRaw) -> i32 {
    raw(e).map_or(-1, |r| r.fd)
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_open_endpoint(
    board: u32,
    _params: *mut MxParam,
    _count: u32,
    out: *mut *mut CRaw,
) -> MxReturn {
    if out.is_null() {
        return fail(None, MX_BAD_PARAM_LIST, "null endpoint pointer");
    }
    let rt = match Runtime::global() {
        Ok(rt) => rt,
        Err(e) => return fail(None, MX_BAD_BAD_BAD, &e),
    };
    match RawEndpoint::open(&rt, board) {
        Ok(r) => {
            let c = Box::new(CRaw {
                board_index: board as i32,
                fd: r.fd(),
                inner: Mutex::new(r),
            });
            let p = Box::into_raw(c);
            RAWS.lock().expect("raw endpoints").push(p as usize);
            *out = p;
            MX_SUCCESS
        }
        Err(omx_runtime::Error::Busy) => fail(None, MX_BUSY, "the board's raw endpoint is open"),
        Err(omx_runtime::Error::NoSuchBoard) => fail(None, MX_BOARD_UNKNOWN, "no such board"),
        Err(e) => fail(None, MX_NO_RESOURCES, &e.to_string()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_close_endpoint(e: *mut CRaw) -> MxReturn {
    let removed = {
        let mut v = RAWS.lock().expect("raw endpoints");
        let before = v.len();
        v.retain(|&p| p != e as usize);
        v.len() != before
    };
    if !removed {
        return fail(None, MX_BAD_ENDPOINT, "invalid or closed raw endpoint");
    }
    drop(Box::from_raw(e));
    MX_SUCCESS
}

/// Sends `buf` as a complete frame; port and route are meaningless on Ethernet.
#[no_mangle]
pub unsafe extern "C" fn mx_raw_send(
    e: *mut CRaw,
    _port: u32,
    _route: *mut c_void,
    _route_len: u32,
    buf: *mut c_void,
    len: u32,
    context: *mut c_void,
) -> MxReturn {
    let r = raw_or_fail!(e);
    if buf.is_null() || len < 14 || len as usize > 65535 + 14 {
        return fail(None, MX_BAD_INFO_VAL, "bad raw frame");
    }
    let frame = std::slice::from_raw_parts(buf as *const u8, len as usize);
    match r.inner.lock().expect("raw").send(frame, context as u64) {
        Ok(()) => MX_SUCCESS,
        Err(err) => fail(None, MX_NO_RESOURCES, &err.to_string()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_next_event(
    e: *mut CRaw,
    incoming_port: *mut u32,
    context: *mut *mut c_void,
    buf: *mut c_void,
    recv_bytes: *mut u32,
    timeout_ms: u32,
    status: *mut i32,
) -> MxReturn {
    let r = raw_or_fail!(e);
    if status.is_null() {
        return fail(None, MX_BAD_INFO_VAL, "null status");
    }
    *status = MX_RAW_NO_EVENT;
    let ev = r
        .inner
        .lock()
        .expect("raw")
        .next_event(Duration::from_millis(timeout_ms as u64));
    match ev {
        None => {}
        Some(RawEvent::Sent(c)) => {
            if !context.is_null() {
                *context = c as *mut c_void;
            }
            *status = MX_RAW_SEND_COMPLETE;
        }
        Some(RawEvent::Received(f)) => {
            let cap = if recv_bytes.is_null() || *recv_bytes == 0 {
                omx_runtime::raw::RAW_FRAME_MAX
            } else {
                *recv_bytes as usize
            };
            let n = f.len().min(cap);
            if !buf.is_null() {
                std::ptr::copy_nonoverlapping(f.as_ptr(), buf as *mut u8, n);
            }
            if !recv_bytes.is_null() {
                *recv_bytes = n as u32;
            }
            if !incoming_port.is_null() {
                *incoming_port = 0;
            }
            *status = MX_RAW_RECV_COMPLETE;
        }
    }
    MX_SUCCESS
}

fn add_peer(r: &CRaw, nic: u64, name: Option<String>) -> MxReturn {
    let board = r.inner.lock().expect("raw").board().clone();
    board.merge_peers(&[(nic, name)]);
    match board.dir.save_peers(&board.peer_snapshot()) {
        Ok(()) => MX_SUCCESS,
        Err(e) => fail(None, MX_NO_RESOURCES, &e.to_string()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_set_route_begin(e: *mut CRaw) -> MxReturn {
    raw_or_fail!(e);
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_set_route_end(e: *mut CRaw) -> MxReturn {
    raw_or_fail!(e);
    MX_SUCCESS
}

/// Ethernet needs no routes: the destination simply becomes a known peer.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn mx_raw_set_route_mag(
    e: *mut CRaw,
    dest: u64,
    _route: *mut c_void,
    _route_len: u32,
    _in_port: u32,
    _out_port: u32,
    _host_type: u32,
    _mag_id: u32,
) -> MxReturn {
    add_peer(raw_or_fail!(e), dest, None)
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_set_route(
    e: *mut CRaw,
    dest: u64,
    _route: *mut c_void,
    _route_len: u32,
    _in_port: u32,
    _out_port: u32,
    _host_type: u32,
) -> MxReturn {
    add_peer(raw_or_fail!(e), dest, None)
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_clear_routes(e: *mut CRaw, _dest: u64, _port: u32) -> MxReturn {
    raw_or_fail!(e);
    MX_SUCCESS
}

/// Removes a peer from the board's table (sessions already open with it continue).
#[no_mangle]
pub unsafe extern "C" fn mx_raw_remove_peer(e: *mut CRaw, dest: u64) -> MxReturn {
    let r = raw_or_fail!(e);
    let board = r.inner.lock().expect("raw").board().clone();
    if board.nic_id == dest {
        return fail(None, MX_BAD_INFO_VAL, "the local board cannot be removed");
    }
    if board.remove_peer(dest) {
        MX_SUCCESS
    } else {
        fail(None, MX_HOST_NOT_FOUND, "no such peer")
    }
}

/// Discovery is dynamic: the map version is accepted and has no effect.
#[no_mangle]
pub unsafe extern "C" fn mx_raw_set_map_version(
    e: *mut CRaw,
    _port: u32,
    _mapper: u64,
    _version: u32,
    _nodes: u32,
    _complete: u32,
) -> MxReturn {
    raw_or_fail!(e);
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_num_ports(e: *mut CRaw, n: *mut u32) -> MxReturn {
    raw_or_fail!(e);
    if !n.is_null() {
        *n = 1;
    }
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_line_speed(e: *mut CRaw, speed: *mut u32) -> MxReturn {
    raw_or_fail!(e);
    if !speed.is_null() {
        *speed = 2; // MX_SPEED_OPEN_MX
    }
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_set_hostname(e: *mut CRaw, name: *mut c_char) -> MxReturn {
    let r = raw_or_fail!(e);
    let n = cstr(name).into_owned();
    if n.is_empty() || n.len() >= MX_MAX_HOSTNAME_LEN {
        return fail(None, MX_BAD_INFO_VAL, "bad host name");
    }
    let board = r.inner.lock().expect("raw").board().clone();
    if let Err(err) = board.dir.save_name(&n) {
        return fail(None, MX_NO_RESOURCES, &err.to_string());
    }
    // The saved peer table names this board too (and is reloaded on lookups).
    add_peer(r, board.nic_id, Some(n))
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_set_peer_name(
    e: *mut CRaw,
    nic: u64,
    name: *mut c_char,
) -> MxReturn {
    let r = raw_or_fail!(e);
    let n = cstr(name).into_owned();
    add_peer(r, nic, (!n.is_empty()).then_some(n))
}

#[no_mangle]
pub unsafe extern "C" fn mx_raw_set_nic_reply_info(
    e: *mut CRaw,
    _blob: *mut c_void,
    _size: u32,
) -> MxReturn {
    raw_or_fail!(e);
    MX_SUCCESS
}
