//! `mx_get_info`: board, endpoint and counter information (keys of MX 1.2).

use crate::types::*;
use crate::{endpoint, fail, runtime, CEndpoint};
use omx_proto::Counters;
use omx_runtime::Runtime;
use std::ffi::c_void;

const PRODUCT: &str = "N/A (omx, Open-MX over Ethernet)";

pub(crate) unsafe fn put_u32(out: *mut c_void, len: u32, v: u32) -> MxReturn {
    if len < 4 {
        return fail(None, MX_BAD_INFO_LENGTH, "output buffer too short");
    }
    *(out as *mut u32) = v;
    MX_SUCCESS
}

pub(crate) unsafe fn put_str(out: *mut c_void, len: u32, s: &str) -> MxReturn {
    if len == 0 {
        return fail(None, MX_BAD_INFO_LENGTH, "output buffer too short");
    }
    let n = s.len().min(len as usize - 1);
    std::ptr::copy_nonoverlapping(s.as_ptr(), out as *mut u8, n);
    *(out as *mut u8).add(n) = 0;
    MX_SUCCESS
}

/// The board an info key is about: the endpoint's, or the index in `in_val` (uint8).
pub(crate) unsafe fn board_of(
    rt: &Runtime,
    ep: Option<&CEndpoint>,
    in_val: *mut c_void,
    in_len: u32,
) -> Option<u32> {
    match ep {
        Some(e) => Some(e.ep.board().index),
        None if !in_val.is_null() && in_len >= 1 => Some(*(in_val as *const u8) as u32),
        None => Some(0).filter(|_| !rt.boards.is_empty()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_get_info(
    e: *mut CEndpoint,
    key: u32,
    in_val: *mut c_void,
    in_len: u32,
    out: *mut c_void,
    out_len: u32,
) -> MxReturn {
    let ep = if e.is_null() { None } else { endpoint(e) };
    if !e.is_null() && ep.is_none() {
        return fail(None, MX_BAD_ENDPOINT, "invalid or closed endpoint");
    }
    if out.is_null() {
        return fail(ep, MX_BAD_INFO_VAL, "null output buffer");
    }
    let Some(rt) = runtime() else {
        return fail(ep, MX_NOT_INITIALIZED, "not initialised");
    };
    let names = Counters::NAMES;
    match key {
        1 => put_u32(out, out_len, rt.boards.len() as u32),
        2 => {
            let need = 8 * (rt.boards.len() + 1);
            if (out_len as usize) < need {
                return fail(ep, MX_BAD_INFO_LENGTH, "output buffer too short");
            }
            let ids = out as *mut u64;
            for (i, b) in rt.boards.iter().enumerate() {
                *ids.add(i) = b.nic_id;
            }
            *ids.add(rt.boards.len()) = 0;
            MX_SUCCESS
        }
        3 => put_u32(out, out_len, omx_runtime::MAX_ENDPOINTS as u32),
        4 => put_u32(out, out_len, u32::MAX),
        5 => put_u32(out, out_len, names.len() as u32),
        6 => {
            if (out_len as usize) < names.len() * MX_MAX_STR_LEN {
                return fail(ep, MX_BAD_INFO_LENGTH, "output buffer too short");
            }
            for (i, n) in names.iter().enumerate() {
                put_str(
                    (out as *mut u8).add(i * MX_MAX_STR_LEN) as *mut c_void,
                    MX_MAX_STR_LEN as u32,
                    n,
                );
            }
            MX_SUCCESS
        }
        7 => {
            if (out_len as usize) < names.len() * 4 {
                return fail(ep, MX_BAD_INFO_LENGTH, "output buffer too short");
            }
            let Some(b) = board_of(&rt, ep, in_val, in_len).and_then(|i| rt.board(i)) else {
                return fail(ep, MX_BOARD_UNKNOWN, "no such board");
            };
            let vals = b.dir.board_counters(names);
            for (i, (_, v)) in vals.iter().take(names.len()).enumerate() {
                *(out as *mut u32).add(i) = (*v).min(u32::MAX as u64) as u32;
            }
            MX_SUCCESS
        }
        8..=10 => put_str(out, out_len, PRODUCT),
        11 => put_u32(out, out_len, 1),
        12 => put_u32(out, out_len, omx_wire::SMALL_MAX as u32),
        13 => put_u32(out, out_len, rt.cfg.copy_send_max()),
        14 => {
            let node = board_of(&rt, ep, in_val, in_len)
                .and_then(|i| rt.board(i))
                .and_then(|b| {
                    std::fs::read_to_string(format!(
                        "/sys/class/net/{}/device/numa_node",
                        b.iface.name
                    ))
                    .ok()
                })
                .and_then(|s| s.trim().parse::<i32>().ok())
                .unwrap_or(-1);
            put_u32(out, out_len, node as u32)
        }
        15 => put_u32(out, out_len, 1),
        16 => put_u32(
            out,
            out_len,
            if rt.cfg.wire.mode == omx_wire::WireMode::MxCompat {
                1
            } else {
                2
            },
        ),
        _ => fail(ep, MX_BAD_INFO_KEY, "unknown info key"),
    }
}
