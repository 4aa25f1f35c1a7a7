//! Communication: posting sends and receives, completions (test, wait, any), peek,
//! probe, cancel, forget, buffered state and request timeouts.

use crate::*;
use omx_proto::{Completion, ReqId, RequestKind};
use std::ffi::c_void;
use std::time::Duration;

/// Posts a send of the segments `segs` makes (after the endpoint is checked).
pub(crate) unsafe fn post_send(
    e: *mut CEndpoint,
    segs: impl FnOnce() -> Result<Segs, SegsError>,
    dest: MxEndpointAddr,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
    sync: bool,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    let segs = match segs() {
        Ok(s) => s,
        Err((c, why)) => return fail(Some(ep), c, why),
    };
    let Some(partner) = dest_partner(ep, dest) else {
        return fail(Some(ep), MX_BAD_REQUEST, "invalid destination address");
    };
    let ctx = context as u64;
    if request.is_null() && ep.default_resends.load(Ordering::Relaxed) == 0 {
        // Nobody takes the completion: forgotten with the post, under one lock.
        return match ep
            .ep
            .isend_then(&segs, partner, match_info, ctx, sync, true)
        {
            Ok(_) => MX_SUCCESS,
            Err(err) => rt_error(ep, err),
        };
    }
    let r = match ep.ep.isend(&segs, partner, match_info, ctx, sync) {
        Ok(r) => r,
        Err(err) => return rt_error(ep, err),
    };
    track(ep, r, RequestKind::Send, request)
}

#[no_mangle]
pub unsafe extern "C" fn mx_isend(
    e: *mut CEndpoint,
    segs: *mut MxSegment,
    count: u32,
    dest: MxEndpointAddr,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    post_send(
        e,
        || segments(segs, count),
        dest,
        match_info,
        context,
        request,
        false,
    )
}

#[no_mangle]
pub unsafe extern "C" fn mx_issend(
    e: *mut CEndpoint,
    segs: *mut MxSegment,
    count: u32,
    dest: MxEndpointAddr,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    post_send(
        e,
        || segments(segs, count),
        dest,
        match_info,
        context,
        request,
        true,
    )
}

#[no_mangle]
pub unsafe extern "C" fn mx_irecv(
    e: *mut CEndpoint,
    segs: *mut MxSegment,
    count: u32,
    match_info: u64,
    match_mask: u64,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    post_recv(
        e,
        || segments(segs, count),
        match_info,
        match_mask,
        context,
        request,
    )
}

/// Posts a receive into the segments `segs` makes (after the endpoint and the match
/// are checked).
pub(crate) unsafe fn post_recv(
    e: *mut CEndpoint,
    segs: impl FnOnce() -> Result<Segs, SegsError>,
    match_info: u64,
    match_mask: u64,
    context: *mut c_void,
    request: *mut usize,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    if match_info & !match_mask != 0 {
        return fail(
            Some(ep),
            MX_BAD_MATCH_MASK,
            "match info has bits outside the mask",
        );
    }
    if match_mask & ep.ctx_mask != ep.ctx_mask {
        return fail(
            Some(ep),
            MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK,
            "mask does not cover the context id",
        );
    }
    let segs = match segs() {
        Ok(s) => s,
        Err((c, why)) => return fail(Some(ep), c, why),
    };
    match ep.ep.irecv(&segs, match_info, match_mask, context as u64) {
        Ok(r) => track(ep, r, RequestKind::Recv, request),
        Err(err) => rt_error(ep, err),
    }
}

/// Completes `c` toward the application: status out, request handle cleared.
unsafe fn deliver(
    ep: &CEndpoint,
    c: Completion,
    request: *mut usize,
    status: *mut MxStatus,
    result: *mut u32,
) {
    let context = if c.kind == RequestKind::Connect {
        ep.connects.remove(c.req.0)
    } else {
        Some(c.status.context as usize)
    };
    fill_status(
        ep,
        &c.status,
        Some(c.source_session),
        context.unwrap_or(0),
        status,
    );
    if !request.is_null() {
        *request = 0;
    }
    if !result.is_null() {
        *result = 1;
    }
}

unsafe fn req_of(request: *mut usize) -> Option<ReqId> {
    if request.is_null() || *request == 0 {
        None
    } else {
        Some(ReqId(*request as u64))
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_test(
    e: *mut CEndpoint,
    request: *mut usize,
    status: *mut MxStatus,
    result: *mut u32,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    let Some(r) = req_of(request) else {
        return fail(Some(ep), MX_BAD_REQUEST, "null request");
    };
    if result.is_null() {
        return fail(Some(ep), MX_BAD_INFO_VAL, "null result");
    }
    *result = 0;
    if let Some(c) = ep.ep.test(r) {
        deliver(ep, c, request, status, result);
    }
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_wait(
    e: *mut CEndpoint,
    request: *mut usize,
    timeout: u32,
    status: *mut MxStatus,
    result: *mut u32,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    let Some(r) = req_of(request) else {
        return fail(Some(ep), MX_BAD_REQUEST, "null request");
    };
    if result.is_null() {
        return fail(Some(ep), MX_BAD_INFO_VAL, "null result");
    }
    *result = 0;
    if let Some(c) = ep.ep.wait(r, timeout_of(timeout)) {
        deliver(ep, c, request, status, result);
    }
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_test_any(
    e: *mut CEndpoint,
    match_info: u64,
    match_mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
) -> MxReturn {
    mx_wait_any_impl(e, AnyWait::Test, match_info, match_mask, status, result)
}

#[no_mangle]
pub unsafe extern "C" fn mx_wait_any(
    e: *mut CEndpoint,
    timeout: u32,
    match_info: u64,
    match_mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
) -> MxReturn {
    mx_wait_any_impl(
        e,
        AnyWait::Wait(timeout_of(timeout)),
        match_info,
        match_mask,
        status,
        result,
    )
}

/// Argument checks shared by the match-based queries; clears `*result`.
unsafe fn check_match_query(
    ep: &CEndpoint,
    match_info: u64,
    mask: u64,
    result: *mut u32,
) -> Result<(), MxReturn> {
    if match_info & !mask != 0 {
        return Err(fail(
            Some(ep),
            MX_BAD_MATCH_MASK,
            "match info has bits outside the mask",
        ));
    }
    if result.is_null() {
        return Err(fail(Some(ep), MX_BAD_INFO_VAL, "null result"));
    }
    *result = 0;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn omx_test_any_completed(
    e: *mut CEndpoint,
    match_info: u64,
    match_mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
) -> MxReturn {
    mx_wait_any_impl(
        e,
        AnyWait::Completed,
        match_info,
        match_mask,
        status,
        result,
    )
}

/// How a match-based completion query looks for its request.
enum AnyWait {
    /// Among the requests already completed (no progress pass).
    Completed,
    /// After one progress pass.
    Test,
    /// Until one completes or the timeout passes.
    Wait(Option<Duration>),
}

unsafe fn mx_wait_any_impl(
    e: *mut CEndpoint,
    wait: AnyWait,
    match_info: u64,
    match_mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    if let Err(code) = check_match_query(ep, match_info, match_mask, result) {
        return code;
    }
    let c = match wait {
        AnyWait::Completed => ep.ep.take_any_completed(match_info, match_mask),
        AnyWait::Test => ep.ep.test_any(match_info, match_mask),
        AnyWait::Wait(t) => ep.ep.wait_any(match_info, match_mask, t),
    };
    if let Some(c) = c {
        deliver(ep, c, std::ptr::null_mut(), status, result);
    }
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_ipeek(
    e: *mut CEndpoint,
    request: *mut usize,
    result: *mut u32,
) -> MxReturn {
    mx_peek_impl(e, None, request, result)
}

#[no_mangle]
pub unsafe extern "C" fn mx_peek(
    e: *mut CEndpoint,
    timeout: u32,
    request: *mut usize,
    result: *mut u32,
) -> MxReturn {
    mx_peek_impl(e, Some(timeout_of(timeout)), request, result)
}

unsafe fn mx_peek_impl(
    e: *mut CEndpoint,
    wait: Option<Option<Duration>>,
    request: *mut usize,
    result: *mut u32,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    if request.is_null() || result.is_null() {
        return fail(Some(ep), MX_BAD_INFO_VAL, "null argument");
    }
    *result = 0;
    let r = match wait {
        None => ep.ep.peek(),
        Some(t) => ep.ep.wait_peek(t),
    };
    if let Some(r) = r {
        *request = r.0 as usize;
        *result = 1;
    }
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_iprobe(
    e: *mut CEndpoint,
    match_info: u64,
    match_mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
) -> MxReturn {
    mx_probe_impl(e, None, match_info, match_mask, status, result)
}

#[no_mangle]
pub unsafe extern "C" fn mx_probe(
    e: *mut CEndpoint,
    timeout: u32,
    match_info: u64,
    match_mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
) -> MxReturn {
    mx_probe_impl(
        e,
        Some(timeout_of(timeout)),
        match_info,
        match_mask,
        status,
        result,
    )
}

unsafe fn mx_probe_impl(
    e: *mut CEndpoint,
    wait: Option<Option<Duration>>,
    match_info: u64,
    match_mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    if let Err(code) = check_match_query(ep, match_info, match_mask, result) {
        return code;
    }
    let s = match wait {
        None => ep.ep.iprobe(match_info, match_mask),
        Some(t) => ep.ep.probe(match_info, match_mask, t),
    };
    if let Some(s) = s {
        fill_status(ep, &s, None, 0, status);
        *result = 1;
    }
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_cancel(
    e: *mut CEndpoint,
    request: *mut usize,
    result: *mut u32,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    let Some(r) = req_of(request) else {
        return fail(Some(ep), MX_BAD_REQUEST, "null request");
    };
    if ep
        .ep
        .request_info(r)
        .is_some_and(|i| i.kind == RequestKind::Send)
    {
        return fail(
            Some(ep),
            MX_CANCEL_NOT_SUPPORTED,
            "sends cannot be cancelled",
        );
    }
    let cancelled = match ep.ep.cancel(r) {
        Ok(c) => c,
        Err(err) => return rt_error(ep, err),
    };
    if !result.is_null() {
        *result = cancelled as u32;
    }
    if cancelled {
        ep.connects.remove(r.0);
        *request = 0;
    }
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_forget(e: *mut CEndpoint, request: *mut usize) -> MxReturn {
    let ep = ep_or_fail!(e);
    let Some(r) = req_of(request) else {
        return fail(Some(ep), MX_BAD_REQUEST, "null request");
    };
    ep.connects.remove(r.0);
    ep.ep.forget(r);
    *request = 0;
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_context(request: *mut usize, context: *mut *mut c_void) -> MxReturn {
    let Some(r) = req_of(request) else {
        return fail(None, MX_BAD_REQUEST, "null request");
    };
    if context.is_null() {
        return fail(None, MX_BAD_INFO_VAL, "null context");
    }
    for p in live_handles() {
        let ep = &*(p as *const CEndpoint);
        let c = match ep.connects.get(r.0) {
            Some(c) => Some(c),
            None => ep
                .ep
                .request_info(r)
                .filter(|i| i.kind != RequestKind::Connect)
                .map(|i| i.context as usize),
        };
        if let Some(c) = c {
            *context = c as *mut c_void;
            return MX_SUCCESS;
        }
    }
    fail(None, MX_BAD_REQUEST, "unknown request")
}

/// 1 when the send buffer may be reused: eager sends copy their data at post time.
#[no_mangle]
pub unsafe extern "C" fn mx_ibuffered(
    e: *mut CEndpoint,
    request: *mut usize,
    result: *mut u32,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    let Some(r) = req_of(request) else {
        return fail(Some(ep), MX_BAD_REQUEST, "null request");
    };
    match ep.ep.request_info(r) {
        Some(i) if i.kind == RequestKind::Send => {
            if !result.is_null() {
                *result = i.buffered as u32;
            }
            MX_SUCCESS
        }
        _ => fail(Some(ep), MX_BAD_REQUEST, "not a send request"),
    }
}

/// Blocking ibuffered: eager sends are buffered at once; a rendezvous send's buffer is
/// free when the send completes (then the completion stays for mx_test/mx_wait).
#[no_mangle]
pub unsafe extern "C" fn mx_buffered(
    e: *mut CEndpoint,
    request: *mut usize,
    timeout: u32,
    result: *mut u32,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    let rc = mx_ibuffered(e, request, result);
    if rc != MX_SUCCESS || result.is_null() || *result == 1 {
        return rc;
    }
    let r = ReqId(*request as u64);
    let until = timeout_of(timeout).map(|t| std::time::Instant::now() + t);
    loop {
        if ep.ep.peek_done(r) {
            *result = 1;
            return MX_SUCCESS;
        }
        if until.is_some_and(|u| std::time::Instant::now() >= u) {
            return MX_SUCCESS;
        }
        ep.ep.progress();
        std::thread::yield_now();
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_set_request_timeout(
    e: *mut CEndpoint,
    request: usize,
    ms: u32,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    // MX semantics: 0 (MX_INFINITE) means no limit; otherwise one resend per ~0.5 s.
    let resends = if ms == MX_INFINITE {
        u32::MAX
    } else {
        (ms as u64 * 2).div_ceil(1024).max(1) as u32
    };
    if request == 0 {
        ep.default_resends
            .store(resends, std::sync::atomic::Ordering::Relaxed);
        return MX_SUCCESS;
    }
    match ep.ep.set_request_resends(ReqId(request as u64), resends) {
        Ok(()) => MX_SUCCESS,
        Err(err) => rt_error(ep, err),
    }
}
