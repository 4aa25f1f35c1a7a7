//! Typed segments (mx_extensions.h): sends and receives whose segments may be file
//! ranges or another process's memory as well as this process's memory.

use crate::comm::{post_recv, post_send};
use crate::*;
use std::ffi::c_void;

fn typed(s: &OmxTypedSegment) -> Result<Segment, SegsError> {
    let len = usize::try_from(s.length).map_err(|_| (MX_BAD_SEG_LIST, "segment too long"))?;
    if s.reserved != 0 {
        return Err((MX_BAD_SEG_LIST, "typed segment: reserved field not zero"));
    }
    Ok(match s.kind {
        OMX_SEG_MEMORY => Segment::memory(s.addr as usize as *mut u8, len),
        OMX_SEG_FILE => Segment::file(s.fd, s.offset, len),
        OMX_SEG_PROCESS => Segment::process(s.pid, s.addr, len),
        _ => return Err((MX_BAD_SEG_LIST, "typed segment: unknown kind")),
    })
}

unsafe fn typed_segments(list: *mut OmxTypedSegment, count: u32) -> Result<Segs, SegsError> {
    segment_list(list, count, typed)
}

#[no_mangle]
pub unsafe extern "C" fn omx_isend_typed(
    e: *mut CEndpoint,
    segs: *mut OmxTypedSegment,
    count: u32,
    dest: MxEndpointAddr,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    let list = || typed_segments(segs, count);
    post_send(e, list, dest, match_info, context, request, false)
}

#[no_mangle]
pub unsafe extern "C" fn omx_issend_typed(
    e: *mut CEndpoint,
    segs: *mut OmxTypedSegment,
    count: u32,
    dest: MxEndpointAddr,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    let list = || typed_segments(segs, count);
    post_send(e, list, dest, match_info, context, request, true)
}

#[no_mangle]
pub unsafe extern "C" fn omx_irecv_typed(
    e: *mut CEndpoint,
    segs: *mut OmxTypedSegment,
    count: u32,
    match_info: u64,
    match_mask: u64,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    let list = || typed_segments(segs, count);
    post_recv(e, list, match_info, match_mask, context, request)
}
