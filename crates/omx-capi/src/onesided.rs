//! One-sided MX operations, the omx extension that exposes memory to them, and
//! remote atomics on that memory.

use crate::types::*;
use crate::{addr_rec, endpoint, fail, track, CEndpoint};
use bytes::Bytes;
use omx_proto::atomic::atomic_valid;
use omx_proto::onesided::{PutNotice, EXPOSE_READ, EXPOSE_WRITE, PUT_NOTICE_MAX};
use omx_proto::{AtomicKind, AtomicOp, AtomicType, RequestKind};
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

/// What a one-sided call does: a get, or a put with or without a notice.
enum Direction {
    Get,
    Put(Option<PutNotice>),
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
    dir: Direction,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    if local.is_null() && len > 0 {
        return fail(Some(ep), MX_BAD_SEG_LIST, "null local buffer");
    }
    let Some(rec) = addr_rec(dest).filter(|r| r.ep == e as usize) else {
        return fail(Some(ep), MX_BAD_REQUEST, "invalid destination address");
    };
    let seg = Segment::memory(local as *mut u8, len as usize);
    let (r, kind) = match dir {
        Direction::Put(notice) => (
            ep.ep
                .iput_notify(seg, rec.partner, remote, context as u64, notice),
            RequestKind::Send,
        ),
        Direction::Get => (
            ep.ep.iget(seg, rec.partner, remote, context as u64),
            RequestKind::Recv,
        ),
    };
    match r {
        Ok(r) => track(ep, r, kind, request),
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
    one_sided(
        e,
        local,
        len,
        dest,
        remote,
        context,
        request,
        Direction::Put(None),
    )
}

/// mx_iput that, once the data is in place at the destination, sends it an ordinary
/// message with match info `notice_match` and the `notice_len` bytes at `notice`
/// (copied at the call, at most `OMX_PUT_NOTICE_MAX`). The engine sends it: the
/// caller need not test or wait for anything first. A refused put sends nothing.
#[no_mangle]
pub unsafe extern "C" fn omx_iput_notify(
    e: *mut CEndpoint,
    local: *mut c_void,
    len: u32,
    dest: MxEndpointAddr,
    remote: u64,
    notice_match: u64,
    notice: *const c_void,
    notice_len: u32,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    if notice_len as usize > PUT_NOTICE_MAX || (notice.is_null() && notice_len > 0) {
        return fail(Some(ep), MX_BAD_PARAM_VAL, "bad put notice");
    }
    let payload = if notice_len > 0 {
        Bytes::copy_from_slice(std::slice::from_raw_parts(
            notice as *const u8,
            notice_len as usize,
        ))
    } else {
        Bytes::new()
    };
    let notice = PutNotice {
        match_info: notice_match,
        payload,
    };
    let dir = Direction::Put(Some(notice));
    one_sided(e, local, len, dest, remote, context, request, dir)
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
    one_sided(
        e,
        local,
        len,
        dest,
        remote,
        context,
        request,
        Direction::Get,
    )
}

/// Applies atomic `op` (libfabric's `enum fi_op` value) on `count` elements of
/// `datatype` (`enum fi_datatype`) at the destination's exposed memory at
/// `remote_addr`, issued as `kind` (`OMX_ATOMIC_PLAIN`, `_FETCH`, `_COMPARE`).
/// `operand` and `compare` are copied at the call; the old values land in `result`
/// for fetching kinds. The request completes as a receive of the old values, with
/// `MX_STATUS_BAD_RDMAWIN` if the range is not inside one region exposed with the
/// needed permissions (nothing touched).
#[no_mangle]
pub unsafe extern "C" fn omx_iatomic(
    e: *mut CEndpoint,
    what: *const OmxAtomic,
    dest: MxEndpointAddr,
    remote: u64,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    let Some(a) = what.as_ref() else {
        return fail(Some(ep), MX_BAD_PARAM_VAL, "null atomic description");
    };
    let (Some(op), Some(ty)) = (
        u8::try_from(a.op).ok().and_then(AtomicOp::from_code),
        u8::try_from(a.datatype)
            .ok()
            .and_then(AtomicType::from_code),
    ) else {
        return fail(
            Some(ep),
            MX_BAD_PARAM_VAL,
            "unknown atomic operation or type",
        );
    };
    let kind = match a.kind {
        OMX_ATOMIC_PLAIN => AtomicKind::Plain,
        OMX_ATOMIC_FETCH => AtomicKind::Fetch,
        OMX_ATOMIC_COMPARE => AtomicKind::Compare,
        _ => return fail(Some(ep), MX_BAD_PARAM_VAL, "unknown atomic kind"),
    };
    let count = a.count as usize;
    if count == 0 || count > atomic_valid(op, ty, kind) {
        return fail(
            Some(ep),
            MX_BAD_PARAM_VAL,
            "atomic operation not valid for this type, kind or count",
        );
    }
    let len = count * ty.size();
    let vectors: &[*const c_void] = if op.reads_only() {
        &[]
    } else if op.compares() {
        &[a.operand, a.compare]
    } else {
        &[a.operand]
    };
    let fetch = kind != AtomicKind::Plain;
    if vectors.iter().any(|v| v.is_null()) || (fetch && a.result.is_null()) {
        return fail(Some(ep), MX_BAD_SEG_LIST, "null atomic buffer");
    }
    let mut operands = Vec::with_capacity(len * vectors.len());
    for v in vectors {
        operands.extend_from_slice(std::slice::from_raw_parts(*v as *const u8, len));
    }
    let Some(rec) = addr_rec(dest).filter(|r| r.ep == e as usize) else {
        return fail(Some(ep), MX_BAD_REQUEST, "invalid destination address");
    };
    let result = if fetch {
        Segment::memory(a.result as *mut u8, len)
    } else {
        Segment::memory(std::ptr::null_mut(), 0)
    };
    match ep.ep.iatomic(
        result,
        rec.partner,
        remote,
        (op, ty, kind),
        a.count,
        &operands,
        context as u64,
    ) {
        Ok(r) => track(ep, r, RequestKind::Recv, request),
        Err(err) => fail(
            Some(ep),
            MX_BAD_REQUEST,
            &format!("atomic operation refused: {err}"),
        ),
    }
}

/// The largest element count of one `omx_iatomic` of `op` on `datatype` issued as
/// `kind`; 0 when the operation does not exist for them.
#[no_mangle]
pub extern "C" fn omx_atomic_valid(op: u32, datatype: u32, kind: u32) -> usize {
    let op = u8::try_from(op).ok().and_then(AtomicOp::from_code);
    let ty = u8::try_from(datatype).ok().and_then(AtomicType::from_code);
    let kind = match kind {
        OMX_ATOMIC_PLAIN => AtomicKind::Plain,
        OMX_ATOMIC_FETCH => AtomicKind::Fetch,
        OMX_ATOMIC_COMPARE => AtomicKind::Compare,
        _ => return 0,
    };
    match (op, ty) {
        (Some(op), Some(ty)) => atomic_valid(op, ty, kind),
        _ => 0,
    }
}

pub const OMX_ATOMIC_PLAIN: u32 = 0;
pub const OMX_ATOMIC_FETCH: u32 = 1;
pub const OMX_ATOMIC_COMPARE: u32 = 2;

/// `omx_atomic_t` of mx_extensions.h.
#[repr(C)]
pub struct OmxAtomic {
    pub op: u32,
    pub datatype: u32,
    pub kind: u32,
    pub count: u32,
    pub operand: *const c_void,
    pub compare: *const c_void,
    pub result: *mut c_void,
}
