//! The native Open-MX API (`open-mx.h`): every `omx_*` function over the MX entry
//! points of this library. What differs from MX is translated here: return and status
//! codes (native numbers), timeouts (milliseconds, `OMX_TIMEOUT_INFINITE` = forever,
//! 0 = do not wait, given last), contiguous sends and receives, and
//! `omx_cancel_notest`, whose cancelled requests this module keeps until reported.

use crate::info::{board_of, put_str, put_u32};
use crate::*;
use omx_proto::RequestKind;
use std::collections::VecDeque;
use std::ffi::c_void;

pub type OmxReturn = u32;

pub const OMX_SUCCESS: OmxReturn = 0;
pub const OMX_BAD_ERROR: OmxReturn = 1;
pub const OMX_BAD_REQUEST: OmxReturn = 13;
pub const OMX_CANCELLED: OmxReturn = 90;
pub const OMX_NOT_SUPPORTED_IN_HANDLER: OmxReturn = 96;
pub const OMX_TIMEOUT_INFINITE: u32 = u32::MAX;

/// An MX return code in native numbers (values shared by both APIs are equal).
pub(crate) fn native_code(mx: MxReturn) -> OmxReturn {
    match mx {
        MX_CANCEL_NOT_SUPPORTED => OMX_BAD_REQUEST,
        MX_CLOSE_IN_HANDLER => OMX_NOT_SUPPORTED_IN_HANDLER,
        // Bad segment list / memory: the native API says bad request.
        10 | 11 => OMX_BAD_REQUEST,
        // MX codes without a native meaning.
        2 | 16..=19 | 23 | 27 | 29 | 31 | 39 | 43 => OMX_BAD_ERROR,
        // Shared values, and native-only ones a native handler gave back.
        other => other,
    }
}

/// A native code in MX numbers; native-only codes pass unchanged (MX's handler model
/// hands status codes through the same way).
pub(crate) fn mx_code(native: OmxReturn) -> MxReturn {
    match native {
        OMX_NOT_SUPPORTED_IN_HANDLER => MX_CLOSE_IN_HANDLER,
        other => other,
    }
}

/// An MX completion status code (`mx_status_code_t`) in native numbers.
fn native_status(mx: u32) -> OmxReturn {
    match mx {
        0 => OMX_SUCCESS,
        4 => 30, // timeout
        5 => 95, // message truncated
        6 => OMX_CANCELLED,
        8 => 33,  // remote endpoint closed
        9 => 92,  // remote endpoint unreachable
        10 => 93, // remote endpoint bad session
        11 => 34, // remote endpoint bad connection key
        12 => 32, // remote endpoint bad id
        13 => 91, // remote RDMA window bad id
        14 => 94, // message aborted
        16 => 15, // no resources
        _ => OMX_BAD_ERROR,
    }
}

/// A native timeout as MX's: `None` for "do not wait" (the caller polls instead),
/// MX_INFINITE for forever.
fn mx_timeout(ms: u32) -> Option<u32> {
    match ms {
        0 => None,
        OMX_TIMEOUT_INFINITE => Some(MX_INFINITE),
        ms => Some(ms),
    }
}

/// What the native API keeps per endpoint beside the runtime.
#[derive(Default)]
pub(crate) struct NativeState {
    /// Match info of receives posted through the native API, by request: a receive
    /// cancelled by omx_cancel_notest reports it (and omx_test_any matches on it).
    recv_match: Mutex<RecvMatches>,
    /// Requests cancelled by omx_cancel_notest, oldest first, until reported.
    cancelled: Mutex<VecDeque<Cancelled>>,
}

#[derive(Default)]
struct RecvMatches {
    map: HashMap<u64, u64>,
    /// Size after the last sweep of finished requests: the next sweep waits until the
    /// map has doubled, so sweeping costs O(1) per receive.
    swept: usize,
}

#[derive(Clone, Copy)]
struct Cancelled {
    req: u64,
    match_info: u64,
    context: usize,
}

impl NativeState {
    fn note_recv(&self, ep: &CEndpoint, req: u64, match_info: u64) {
        let mut m = self.recv_match.lock().expect("recv match");
        m.map.insert(req, match_info);
        if m.map.len() > 1024 && m.map.len() > 2 * m.swept {
            m.map
                .retain(|&r, _| ep.ep.request_info(omx_proto::ReqId(r)).is_some());
            m.swept = m.map.len();
        }
    }

    fn forget_recv(&self, req: u64) -> Option<u64> {
        self.recv_match.lock().expect("recv match").map.remove(&req)
    }

    /// Takes the oldest cancelled request `pick` accepts.
    fn take_cancelled(&self, pick: impl Fn(&Cancelled) -> bool) -> Option<Cancelled> {
        let mut q = self.cancelled.lock().expect("cancelled");
        let i = q.iter().position(pick)?;
        q.remove(i)
    }

    fn find_cancelled(&self, pick: impl Fn(&Cancelled) -> bool) -> Option<Cancelled> {
        self.cancelled
            .lock()
            .expect("cancelled")
            .iter()
            .find(|c| pick(c))
            .copied()
    }
}

/// Reports a cancelled request as completed with status OMX_CANCELLED.
unsafe fn deliver_cancelled(
    c: Cancelled,
    request: *mut usize,
    status: *mut MxStatus,
    result: *mut u32,
) {
    if !status.is_null() {
        *status = MxStatus {
            code: OMX_CANCELLED,
            source: MxEndpointAddr::default(),
            match_info: c.match_info,
            msg_length: 0,
            xfer_length: 0,
            context: c.context as *mut c_void,
        };
    }
    if !request.is_null() {
        *request = 0;
    }
    if !result.is_null() {
        *result = 1;
    }
}

/// After an MX completion call: the return code, and the status code when a request
/// was reported, in native numbers.
unsafe fn completed(rc: MxReturn, status: *mut MxStatus, result: *mut u32) -> OmxReturn {
    if rc == MX_SUCCESS && !status.is_null() && !result.is_null() && *result == 1 {
        (*status).code = native_status((*status).code);
    }
    native_code(rc)
}

unsafe fn the_request(request: *mut usize) -> Option<u64> {
    (!request.is_null() && *request != 0).then(|| *request as u64)
}

// ---- library ----

unsafe extern "C" fn native_fatal(msg: *mut c_char, code: OmxReturn) -> OmxReturn {
    eprintln!(
        "Open-MX: fatal error: {} ({})",
        cstr(msg),
        cstr(omx_strerror(code) as *mut c_char)
    );
    std::process::exit(-1)
}

unsafe extern "C" fn native_return(_msg: *mut c_char, code: OmxReturn) -> OmxReturn {
    code
}

#[no_mangle]
pub static OMX_ERRORS_ARE_FATAL: MxErrorHandler = Some(native_fatal);
#[no_mangle]
pub static OMX_ERRORS_RETURN: MxErrorHandler = Some(native_return);

#[no_mangle]
pub extern "C" fn omx__init_api(api: i32) -> OmxReturn {
    native_code(mx__init_api(api))
}

#[no_mangle]
pub extern "C" fn omx_finalize() -> OmxReturn {
    native_code(mx_finalize())
}

/// Installs a native handler (native codes) on an endpoint, or globally for a NULL
/// endpoint; returns the previous one (NULL for a closed endpoint).
#[no_mangle]
pub unsafe extern "C" fn omx_set_error_handler(
    e: *mut CEndpoint,
    h: MxErrorHandler,
) -> MxErrorHandler {
    let new = ErrorHandler { f: h, native: true };
    if e.is_null() {
        let mut g = GLOBAL.lock().expect("global");
        return std::mem::replace(&mut g.handler, new).f;
    }
    match endpoint(e) {
        Some(ep) => {
            let mut slot = ep.handler.lock().expect("handler");
            slot.replace(new).and_then(|old| old.f)
        }
        None => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn omx_board_number_to_nic_id(board: u32, nic_id: *mut u64) -> OmxReturn {
    native_code(mx_board_number_to_nic_id(board, nic_id))
}

#[no_mangle]
pub unsafe extern "C" fn omx_nic_id_to_board_number(nic_id: u64, board: *mut u32) -> OmxReturn {
    native_code(mx_nic_id_to_board_number(nic_id, board))
}

// ---- endpoints ----

#[no_mangle]
pub unsafe extern "C" fn omx_open_endpoint(
    board: u32,
    index: u32,
    key: u32,
    params: *mut MxParam,
    count: u32,
    out: *mut *mut CEndpoint,
) -> OmxReturn {
    let rc = mx_open_endpoint(board, index, key, params, count, out);
    if rc == MX_SUCCESS && count > 0 {
        // A handler given here is a native one.
        let ep = &**out;
        if let Some(h) = ep.handler.lock().expect("handler").as_mut() {
            h.native = true;
        }
    }
    native_code(rc)
}

#[no_mangle]
pub unsafe extern "C" fn omx_close_endpoint(e: *mut CEndpoint) -> OmxReturn {
    native_code(mx_close_endpoint(e))
}

#[no_mangle]
pub unsafe extern "C" fn omx_wakeup(e: *mut CEndpoint) -> OmxReturn {
    native_code(mx_wakeup(e))
}

#[no_mangle]
pub unsafe extern "C" fn omx_progress(e: *mut CEndpoint) -> OmxReturn {
    native_code(mx_progress(e))
}

#[no_mangle]
pub unsafe extern "C" fn omx_disable_progression(e: *mut CEndpoint) -> OmxReturn {
    native_code(mx_disable_progression(e))
}

#[no_mangle]
pub unsafe extern "C" fn omx_reenable_progression(e: *mut CEndpoint) -> OmxReturn {
    native_code(mx_reenable_progression(e))
}

#[no_mangle]
pub unsafe extern "C" fn omx_register_unexp_handler(
    e: *mut CEndpoint,
    handler: Option<CUnexpHandler>,
    context: *mut c_void,
) -> OmxReturn {
    native_code(mx_register_unexp_handler(e, handler, context))
}

// ---- addresses and connections ----

#[no_mangle]
pub unsafe extern "C" fn omx_get_endpoint_addr(
    e: *mut CEndpoint,
    addr: *mut MxEndpointAddr,
) -> OmxReturn {
    native_code(mx_get_endpoint_addr(e, addr))
}

#[no_mangle]
pub unsafe extern "C" fn omx_connect(
    e: *mut CEndpoint,
    nic_id: u64,
    endpoint_id: u32,
    key: u32,
    timeout: u32,
    addr: *mut MxEndpointAddr,
) -> OmxReturn {
    // MX has no "do not wait": the shortest wait stands for it.
    let t = mx_timeout(timeout).unwrap_or(1);
    native_code(mx_connect(e, nic_id, endpoint_id, key, t, addr))
}

#[no_mangle]
pub unsafe extern "C" fn omx_iconnect(
    e: *mut CEndpoint,
    nic_id: u64,
    endpoint_id: u32,
    key: u32,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
) -> OmxReturn {
    native_code(mx_iconnect(
        e,
        nic_id,
        endpoint_id,
        key,
        match_info,
        context,
        request,
    ))
}

#[no_mangle]
pub unsafe extern "C" fn omx_disconnect(e: *mut CEndpoint, addr: MxEndpointAddr) -> OmxReturn {
    native_code(mx_disconnect(e, addr))
}

#[no_mangle]
pub unsafe extern "C" fn omx_decompose_endpoint_addr(
    a: MxEndpointAddr,
    nic_id: *mut u64,
    endpoint_id: *mut u32,
) -> OmxReturn {
    native_code(mx_decompose_endpoint_addr(a, nic_id, endpoint_id))
}

#[no_mangle]
pub unsafe extern "C" fn omx_decompose_endpoint_addr_with_session(
    a: MxEndpointAddr,
    nic_id: *mut u64,
    endpoint_id: *mut u32,
    session: *mut u32,
) -> OmxReturn {
    native_code(mx_decompose_endpoint_addr2(a, nic_id, endpoint_id, session))
}

#[no_mangle]
pub unsafe extern "C" fn omx_set_endpoint_addr_context(
    a: MxEndpointAddr,
    context: *mut c_void,
) -> OmxReturn {
    native_code(mx_set_endpoint_addr_context(a, context))
}

#[no_mangle]
pub unsafe extern "C" fn omx_get_endpoint_addr_context(
    a: MxEndpointAddr,
    context: *mut *mut c_void,
) -> OmxReturn {
    native_code(mx_get_endpoint_addr_context(a, context))
}

#[no_mangle]
pub unsafe extern "C" fn omx_hostname_to_nic_id(name: *mut c_char, nic_id: *mut u64) -> OmxReturn {
    native_code(mx_hostname_to_nic_id(name, nic_id))
}

#[no_mangle]
pub unsafe extern "C" fn omx_nic_id_to_hostname(nic_id: u64, name: *mut c_char) -> OmxReturn {
    native_code(mx_nic_id_to_hostname(nic_id, name))
}

// ---- sends and receives ----

/// One segment over a contiguous buffer; segment lengths are 32-bit.
unsafe fn one_segment(
    e: *mut CEndpoint,
    buffer: *mut c_void,
    length: usize,
) -> Result<MxSegment, OmxReturn> {
    match u32::try_from(length) {
        Ok(len) => Ok(MxSegment { ptr: buffer, len }),
        Err(_) => Err(native_code(fail(
            endpoint(e),
            MX_BAD_REQUEST,
            "message longer than 4 GiB",
        ))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn omx_isend(
    e: *mut CEndpoint,
    buffer: *mut c_void,
    length: usize,
    dest: MxEndpointAddr,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
) -> OmxReturn {
    match one_segment(e, buffer, length) {
        Ok(mut seg) => omx_isendv(e, &mut seg, 1, dest, match_info, context, request),
        Err(rc) => rc,
    }
}

#[no_mangle]
pub unsafe extern "C" fn omx_issend(
    e: *mut CEndpoint,
    buffer: *mut c_void,
    length: usize,
    dest: MxEndpointAddr,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
) -> OmxReturn {
    match one_segment(e, buffer, length) {
        Ok(mut seg) => omx_issendv(e, &mut seg, 1, dest, match_info, context, request),
        Err(rc) => rc,
    }
}

#[no_mangle]
pub unsafe extern "C" fn omx_irecv(
    e: *mut CEndpoint,
    buffer: *mut c_void,
    length: usize,
    match_info: u64,
    match_mask: u64,
    context: *mut c_void,
    request: *mut usize,
) -> OmxReturn {
    match one_segment(e, buffer, length) {
        Ok(mut seg) => omx_irecvv(e, &mut seg, 1, match_info, match_mask, context, request),
        Err(rc) => rc,
    }
}

#[no_mangle]
pub unsafe extern "C" fn omx_isendv(
    e: *mut CEndpoint,
    segs: *mut MxSegment,
    count: u32,
    dest: MxEndpointAddr,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
) -> OmxReturn {
    native_code(mx_isend(e, segs, count, dest, match_info, context, request))
}

#[no_mangle]
pub unsafe extern "C" fn omx_issendv(
    e: *mut CEndpoint,
    segs: *mut MxSegment,
    count: u32,
    dest: MxEndpointAddr,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
) -> OmxReturn {
    native_code(mx_issend(
        e, segs, count, dest, match_info, context, request,
    ))
}

#[no_mangle]
pub unsafe extern "C" fn omx_irecvv(
    e: *mut CEndpoint,
    segs: *mut MxSegment,
    count: u32,
    match_info: u64,
    match_mask: u64,
    context: *mut c_void,
    request: *mut usize,
) -> OmxReturn {
    let rc = mx_irecv(e, segs, count, match_info, match_mask, context, request);
    if let (MX_SUCCESS, Some(ep), Some(r)) = (rc, endpoint(e), the_request(request)) {
        ep.native.note_recv(ep, r, match_info);
    }
    native_code(rc)
}

#[no_mangle]
pub unsafe extern "C" fn omx_context(request: *mut usize, context: *mut *mut c_void) -> OmxReturn {
    if let (Some(r), false) = (the_request(request), context.is_null()) {
        for p in live_handles() {
            let ep = &*(p as *const CEndpoint);
            if let Some(c) = ep.native.find_cancelled(|c| c.req == r) {
                *context = c.context as *mut c_void;
                return OMX_SUCCESS;
            }
        }
    }
    native_code(mx_context(request, context))
}

// ---- completions ----

#[no_mangle]
pub unsafe extern "C" fn omx_test(
    e: *mut CEndpoint,
    request: *mut usize,
    status: *mut MxStatus,
    result: *mut u32,
) -> OmxReturn {
    test_or_wait(e, request, status, result, None)
}

#[no_mangle]
pub unsafe extern "C" fn omx_wait(
    e: *mut CEndpoint,
    request: *mut usize,
    status: *mut MxStatus,
    result: *mut u32,
    timeout: u32,
) -> OmxReturn {
    test_or_wait(e, request, status, result, mx_timeout(timeout))
}

/// omx_test (`wait` None) or omx_wait (`wait`: MX's timeout).
unsafe fn test_or_wait(
    e: *mut CEndpoint,
    request: *mut usize,
    status: *mut MxStatus,
    result: *mut u32,
    wait: Option<u32>,
) -> OmxReturn {
    let mine = endpoint(e).zip(the_request(request));
    if let (Some((ep, r)), false) = (mine, result.is_null()) {
        if let Some(c) = ep.native.take_cancelled(|c| c.req == r) {
            deliver_cancelled(c, request, status, result);
            return OMX_SUCCESS;
        }
    }
    let rc = match wait {
        None => mx_test(e, request, status, result),
        Some(t) => mx_wait(e, request, t, status, result),
    };
    if let Some((ep, r)) = mine.filter(|_| rc == MX_SUCCESS && *result == 1) {
        ep.native.forget_recv(r);
    }
    completed(rc, status, result)
}

/// A cancelled request an `_any` query takes (valid arguments only: the MX call
/// reports bad ones).
unsafe fn any_cancelled(
    e: *mut CEndpoint,
    match_info: u64,
    mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
) -> bool {
    let Some(ep) = endpoint(e) else { return false };
    if result.is_null() || match_info & !mask != 0 {
        return false;
    }
    match ep
        .native
        .take_cancelled(|c| c.match_info & mask == match_info)
    {
        Some(c) => {
            deliver_cancelled(c, std::ptr::null_mut(), status, result);
            true
        }
        None => false,
    }
}

#[no_mangle]
pub unsafe extern "C" fn omx_test_any(
    e: *mut CEndpoint,
    match_info: u64,
    mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
) -> OmxReturn {
    if any_cancelled(e, match_info, mask, status, result) {
        return OMX_SUCCESS;
    }
    completed(
        mx_test_any(e, match_info, mask, status, result),
        status,
        result,
    )
}

#[no_mangle]
pub unsafe extern "C" fn omx_wait_any(
    e: *mut CEndpoint,
    match_info: u64,
    mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
    timeout: u32,
) -> OmxReturn {
    let Some(t) = mx_timeout(timeout) else {
        return omx_test_any(e, match_info, mask, status, result);
    };
    if any_cancelled(e, match_info, mask, status, result) {
        return OMX_SUCCESS;
    }
    completed(
        mx_wait_any(e, t, match_info, mask, status, result),
        status,
        result,
    )
}

/// The oldest cancelled request, for peek (it stays until tested).
unsafe fn peek_cancelled(e: *mut CEndpoint, request: *mut usize, result: *mut u32) -> bool {
    let Some(ep) = endpoint(e) else { return false };
    if request.is_null() || result.is_null() {
        return false;
    }
    match ep.native.find_cancelled(|_| true) {
        Some(c) => {
            *request = c.req as usize;
            *result = 1;
            true
        }
        None => false,
    }
}

#[no_mangle]
pub unsafe extern "C" fn omx_ipeek(
    e: *mut CEndpoint,
    request: *mut usize,
    result: *mut u32,
) -> OmxReturn {
    if peek_cancelled(e, request, result) {
        return OMX_SUCCESS;
    }
    native_code(mx_ipeek(e, request, result))
}

#[no_mangle]
pub unsafe extern "C" fn omx_peek(
    e: *mut CEndpoint,
    request: *mut usize,
    result: *mut u32,
    timeout: u32,
) -> OmxReturn {
    if peek_cancelled(e, request, result) {
        return OMX_SUCCESS;
    }
    match mx_timeout(timeout) {
        None => native_code(mx_ipeek(e, request, result)),
        Some(t) => native_code(mx_peek(e, t, request, result)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn omx_iprobe(
    e: *mut CEndpoint,
    match_info: u64,
    mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
) -> OmxReturn {
    completed(
        mx_iprobe(e, match_info, mask, status, result),
        status,
        result,
    )
}

#[no_mangle]
pub unsafe extern "C" fn omx_probe(
    e: *mut CEndpoint,
    match_info: u64,
    mask: u64,
    status: *mut MxStatus,
    result: *mut u32,
    timeout: u32,
) -> OmxReturn {
    let rc = match mx_timeout(timeout) {
        None => mx_iprobe(e, match_info, mask, status, result),
        Some(t) => mx_probe(e, t, match_info, mask, status, result),
    };
    completed(rc, status, result)
}

#[no_mangle]
pub unsafe extern "C" fn omx_ibuffered(
    e: *mut CEndpoint,
    request: *mut usize,
    result: *mut u32,
) -> OmxReturn {
    native_code(mx_ibuffered(e, request, result))
}

// ---- cancel, forget, timeouts ----

#[no_mangle]
pub unsafe extern "C" fn omx_cancel(
    e: *mut CEndpoint,
    request: *mut usize,
    result: *mut u32,
) -> OmxReturn {
    if let (Some(ep), Some(r)) = (endpoint(e), the_request(request)) {
        // Already cancelled without a test: it has completed, too late to cancel.
        if ep.native.find_cancelled(|c| c.req == r).is_some() {
            if !result.is_null() {
                *result = 0;
            }
            return OMX_SUCCESS;
        }
        let rc = mx_cancel(e, request, result);
        if rc == MX_SUCCESS && *request == 0 {
            ep.native.forget_recv(r);
        }
        return native_code(rc);
    }
    native_code(mx_cancel(e, request, result))
}

/// Cancels like omx_cancel, but the request stays: it completes with status
/// OMX_CANCELLED, reported by omx_test/omx_wait, the _any calls and peek.
#[no_mangle]
pub unsafe extern "C" fn omx_cancel_notest(
    e: *mut CEndpoint,
    request: *mut usize,
    result: *mut u32,
) -> OmxReturn {
    let (Some(ep), Some(r)) = (endpoint(e), the_request(request)) else {
        return native_code(mx_cancel(e, request, result));
    };
    if ep.native.find_cancelled(|c| c.req == r).is_some() {
        if !result.is_null() {
            *result = 0;
        }
        return OMX_SUCCESS;
    }
    // What the completion will report, read before the cancel frees the request.
    let info = ep.ep.request_info(omx_proto::ReqId(r));
    let connect_context = ep.connects.get(r);
    let mut handle = *request;
    let mut cancelled = 0u32;
    let rc = mx_cancel(e, &mut handle, &mut cancelled);
    if !result.is_null() {
        *result = cancelled;
    }
    if rc == MX_SUCCESS && cancelled == 1 {
        let (match_info, context) = match info {
            // A connect's engine context is its match info.
            Some(i) if i.kind == RequestKind::Connect => (i.context, connect_context.unwrap_or(0)),
            Some(i) => (ep.native.forget_recv(r).unwrap_or(0), i.context as usize),
            None => (0, 0),
        };
        ep.native
            .cancelled
            .lock()
            .expect("cancelled")
            .push_back(Cancelled {
                req: r,
                match_info,
                context,
            });
    }
    native_code(rc)
}

#[no_mangle]
pub unsafe extern "C" fn omx_forget(e: *mut CEndpoint, request: *mut usize) -> OmxReturn {
    if let (Some(ep), Some(r)) = (endpoint(e), the_request(request)) {
        ep.native.forget_recv(r);
        if ep.native.take_cancelled(|c| c.req == r).is_some() {
            *request = 0;
            return OMX_SUCCESS;
        }
    }
    native_code(mx_forget(e, request))
}

#[no_mangle]
pub unsafe extern "C" fn omx_set_request_timeout(
    e: *mut CEndpoint,
    request: usize,
    ms: u32,
) -> OmxReturn {
    // MX's 0 is "no limit"; the native 0 is the shortest budget.
    let ms = match ms {
        OMX_TIMEOUT_INFINITE => MX_INFINITE,
        0 => 1,
        ms => ms,
    };
    native_code(mx_set_request_timeout(e, request, ms))
}

// ---- information ----

const OMX_INFO_BOARD_MAX: u32 = 0;
const OMX_INFO_ENDPOINT_MAX: u32 = 1;
const OMX_INFO_BOARD_COUNT: u32 = 2;
const OMX_INFO_BOARD_IDS: u32 = 3;
const OMX_INFO_BOARD_HOSTNAME: u32 = 4;
const OMX_INFO_BOARD_IFACENAME: u32 = 5;
const OMX_INFO_BOARD_NUMA_NODE: u32 = 6;
const OMX_INFO_COUNTER_MAX: u32 = 7;
const OMX_INFO_COUNTER_VALUES: u32 = 8;
const OMX_INFO_COUNTER_LABEL: u32 = 9;

/// The original's limit of boards per host; omx has none of its own.
const BOARD_MAX: u32 = 32;

#[no_mangle]
pub unsafe extern "C" fn omx_get_info(
    e: *mut CEndpoint,
    key: u32,
    in_val: *const c_void,
    in_len: u32,
    out: *mut c_void,
    out_len: u32,
) -> OmxReturn {
    let in_val = in_val as *mut c_void;
    // Keys MX has too: its mx_get_info key.
    let mx_key = match key {
        OMX_INFO_ENDPOINT_MAX => Some(3),
        OMX_INFO_BOARD_COUNT => Some(1),
        OMX_INFO_BOARD_IDS => Some(2),
        OMX_INFO_BOARD_NUMA_NODE => Some(14),
        OMX_INFO_COUNTER_MAX => Some(5),
        OMX_INFO_COUNTER_VALUES => Some(7),
        _ => None,
    };
    if let Some(k) = mx_key {
        return native_code(mx_get_info(e, k, in_val, in_len, out, out_len));
    }
    let ep = endpoint(e);
    if !e.is_null() && ep.is_none() {
        return native_code(fail(None, MX_BAD_ENDPOINT, "invalid or closed endpoint"));
    }
    if out.is_null() {
        return native_code(fail(ep, MX_BAD_INFO_VAL, "null output buffer"));
    }
    let Some(rt) = runtime() else {
        return native_code(fail(ep, MX_NOT_INITIALIZED, "not initialised"));
    };
    let rc = match key {
        OMX_INFO_BOARD_MAX => put_u32(out, out_len, BOARD_MAX.max(rt.boards.len() as u32)),
        OMX_INFO_BOARD_HOSTNAME | OMX_INFO_BOARD_IFACENAME => {
            match board_of(&rt, ep, in_val, in_len).and_then(|i| rt.board(i)) {
                Some(b) if key == OMX_INFO_BOARD_HOSTNAME => put_str(out, out_len, &b.name),
                Some(b) => put_str(out, out_len, &b.iface.name),
                None => fail(ep, MX_BOARD_UNKNOWN, "no such board"),
            }
        }
        OMX_INFO_COUNTER_LABEL => {
            let names = omx_proto::Counters::NAMES;
            let index = (!in_val.is_null() && in_len >= 1).then(|| *(in_val as *const u8) as usize);
            match index.and_then(|i| names.get(i)) {
                Some(n) => put_str(out, out_len, n),
                None => fail(
                    ep,
                    MX_BAD_INFO_VAL,
                    "counter index (uint8_t in_val) missing or out of range",
                ),
            }
        }
        _ => fail(ep, MX_BAD_INFO_KEY, "unknown info key"),
    };
    native_code(rc)
}
