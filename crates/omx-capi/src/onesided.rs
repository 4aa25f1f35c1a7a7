//! One-sided MX operations and the omx extension that exposes memory to them.

use crate::types::*;
use crate::{addr_rec, endpoint, fail, track, CEndpoint};
use omx_proto::onesided::{EXPOSE_READ, EXPOSE_WRITE};
use omx_proto::RequestKind;
use omx_runtime::{Error as RtError, Segment};
use std::ffi::c_void;

macro_rules! ep_or_fail {
    ($e:expr) => {
        match endpoint($e) {
            Some(e) => e,
            None => return fail(None, MX_BAD_ENDPOINT, "invalid or closed endpoint"),
        }
    };
}

/// Lets remote endpoints read (`OMX_REGION_READ`) and/or write (`OMX_REGION_WRITE`)
/// `len` bytes at `addr` through mx_iget/mx_iput, until omx_unexpose_region.
#[no_mangle]
pub unsafe extern "C" fn omx_expose_region(
    e: *mut CEndpoint,
    addr: *mut c_void,
    len: usize,
    id: u64,
    flags: u32,
) -> MxReturn {
    omx_expose_window(e, addr, len, addr as u64, id, flags)
}

/// omx_expose_region whose bytes remote accesses name from `window` on instead of
/// from `addr` (`window + i` is byte `i`).
#[no_mangle]
pub unsafe extern "C" fn omx_expose_window(
    e: *mut CEndpoint,
    addr: *mut c_void,
    len: usize,
    window: u64,
    id: u64,
    flags: u32,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    if flags == 0
        || flags & !(EXPOSE_READ | EXPOSE_WRITE) != 0
        || (addr.is_null() && len > 0)
        || len > u32::MAX as usize
        || window.checked_add(len as u64).is_none()
    {
        return fail(
            Some(ep),
            MX_BAD_PARAM_VAL,
            "bad region address, length or flags",
        );
    }
    match ep
        .ep
        .expose(Segment::memory(addr as *mut u8, len), window, id, flags)
    {
        Ok(()) => MX_SUCCESS,
        Err(RtError::Engine(omx_proto::EngineError::RegionExposed)) => {
            fail(Some(ep), MX_BUSY, "region id already exposed")
        }
        Err(_) => fail(Some(ep), MX_BAD_PARAM_VAL, "cannot expose the region"),
    }
}

#[no_mangle]
pub unsafe extern "C" fn omx_unexpose_region(e: *mut CEndpoint, id: u64) -> MxReturn {
    let ep = ep_or_fail!(e);
    match ep.ep.unexpose(id) {
        Ok(()) => MX_SUCCESS,
        Err(_) => fail(Some(ep), MX_BAD_PARAM_VAL, "no region with this id"),
    }
}

#[allow(clippy::too_many_arguments)] // the C signature plus the direction
unsafe fn one_sided(
    e: *mut CEndpoint,
    local: *mut c_void,
    len: u32,
    dest: MxEndpointAddr,
    remote: u64,
    context: *mut c_void,
    request: *mut usize,
    put: bool,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    if local.is_null() && len > 0 {
        return fail(Some(ep), MX_BAD_SEG_LIST, "null local buffer");
    }
    let Some(rec) = addr_rec(dest).filter(|r| r.ep == e as usize) else {
        return fail(Some(ep), MX_BAD_REQUEST, "invalid destination address");
    };
    let seg = Segment::memory(local as *mut u8, len as usize);
    let r = if put {
        ep.ep.iput(seg, rec.partner, remote, context as u64)
    } else {
        ep.ep.iget(seg, rec.partner, remote, context as u64)
    };
    match r {
        Ok(r) => {
            let kind = if put {
                RequestKind::Send
            } else {
                RequestKind::Recv
            };
            track(ep, r, kind, request)
        }
        Err(err) => fail(
            Some(ep),
            MX_BAD_REQUEST,
            &format!("one-sided operation refused: {err}"),
        ),
    }
}

/// Writes `length` bytes at `local_addr` to the destination's exposed memory at
/// `remote_addr`; the request completes with `MX_STATUS_BAD_RDMAWIN` if the range is
/// not inside one region exposed for writing.
#[no_mangle]
pub unsafe extern "C" fn mx_iput(
    e: *mut CEndpoint,
    local: *mut c_void,
    len: u32,
    dest: MxEndpointAddr,
    remote: u64,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    one_sided(e, local, len, dest, remote, context, request, true)
}

/// Reads `length` bytes of the destination's exposed memory at `remote_addr`.
#[no_mangle]
pub unsafe extern "C" fn mx_iget(
    e: *mut CEndpoint,
    local: *mut c_void,
    len: u32,
    dest: MxEndpointAddr,
    remote: u64,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    one_sided(e, local, len, dest, remote, context, request, false)
}
