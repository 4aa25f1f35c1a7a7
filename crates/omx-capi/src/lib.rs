//! The MX C ABI (`libmyriexpress.so.0`) over the omx runtime. Thin: argument checks,
//! handle and address translation, and MX's error-handler model; all protocol work is
//! the runtime's. Function-by-function status is in docs/API.md.

#![allow(clippy::missing_safety_doc)] // every entry point follows the MX C contract

mod types;

use omx_proto::{Completion, PartnerId, ReqId, RequestKind, Status, StatusCode};
use omx_runtime::{Endpoint, Error as RtError, Runtime, Segment};
// Keys are pointers and request ids: Fx hashing, no SipHash on every call.
use rustc_hash::FxHashMap as HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
pub use types::*;

/// How long name lookups wait for discovery to learn a peer.
const NAME_WAIT: Duration = Duration::from_secs(2);

struct Global {
    initialized: bool,
    handler: MxErrorHandler,
}

static GLOBAL: Mutex<Global> = Mutex::new(Global {
    initialized: false,
    handler: Some(fatal_before_init),
});
/// Open endpoint handles. Every call checks its handle here, so the check is a scan of
/// a few atomics, without a lock: a process has at most `MAX_ENDPOINTS` per board open.
static LIVE: [AtomicUsize; LIVE_SLOTS] = [const { AtomicUsize::new(0) }; LIVE_SLOTS];
/// Slots ever used: scans stop there.
static LIVE_USED: AtomicUsize = AtomicUsize::new(0);
const LIVE_SLOTS: usize = 256;
static ADDRS: Mutex<Option<AddrTable>> = Mutex::new(None);

#[derive(Clone, Copy)]
struct AddrRec {
    ep: usize,
    partner: PartnerId,
    nic: u64,
    eid: u32,
    session: u32,
    context: usize,
}

#[derive(Default)]
struct AddrTable {
    recs: Vec<AddrRec>,
    index: HashMap<(usize, u32), usize>,
}

pub struct CEndpoint {
    ep: Endpoint,
    handler: Option<MxErrorHandler>,
    ctx_mask: u64,
    /// The caller's context of each pending connect (the engine's context value of a
    /// connect is its match info). Other requests carry theirs in the engine.
    connects: Mutex<HashMap<u64, usize>>,
    /// Resend budget for new requests set by mx_set_request_timeout(NULL), 0 = default.
    default_resends: std::sync::atomic::AtomicU32,
}

unsafe extern "C" fn fatal_before_init(msg: *mut c_char, code: MxReturn) -> MxReturn {
    eprintln!("MX: fatal error before mx_init: {} ({code})", cstr(msg));
    std::process::exit(-1)
}

unsafe extern "C" fn fatal_handler(msg: *mut c_char, code: MxReturn) -> MxReturn {
    eprintln!(
        "MX: fatal error: {} ({})",
        cstr(msg),
        cstr(mx_strerror(code) as *mut c_char)
    );
    std::process::exit(-1)
}

unsafe extern "C" fn return_handler(_msg: *mut c_char, code: MxReturn) -> MxReturn {
    code
}

#[no_mangle]
pub static MX_ERRORS_ARE_FATAL: MxErrorHandler = Some(fatal_handler);
#[no_mangle]
pub static MX_ERRORS_RETURN: MxErrorHandler = Some(return_handler);

unsafe fn cstr<'a>(p: *mut c_char) -> std::borrow::Cow<'a, str> {
    if p.is_null() {
        "".into()
    } else {
        CStr::from_ptr(p).to_string_lossy()
    }
}

/// Reports a failure through the endpoint's (or the global) handler, MX style.
fn fail(ep: Option<&CEndpoint>, code: MxReturn, what: &str) -> MxReturn {
    let handler = ep
        .and_then(|e| e.handler)
        .unwrap_or_else(|| GLOBAL.lock().map(|g| g.handler).unwrap_or(None));
    let Some(h) = handler else { return code };
    let mut msg = format!("{what}\0").into_bytes();
    // SAFETY: the handler receives a NUL-terminated string valid for the call.
    unsafe { h(msg.as_mut_ptr() as *mut c_char, code) }
}

fn initialized() -> bool {
    GLOBAL.lock().is_ok_and(|g| g.initialized)
}

fn live_slots() -> &'static [AtomicUsize] {
    &LIVE[..LIVE_USED.load(Ordering::Acquire)]
}

/// Records an open handle; false when every slot is taken.
fn live_insert(p: usize) -> bool {
    for (i, slot) in LIVE.iter().enumerate() {
        if slot
            .compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            LIVE_USED.fetch_max(i + 1, Ordering::AcqRel);
            return true;
        }
    }
    false
}

/// Forgets a handle; false when it was not open (a second close, a stray pointer).
fn live_remove(p: usize) -> bool {
    live_slots().iter().any(|slot| {
        slot.compare_exchange(p, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    })
}

fn live_handles() -> Vec<usize> {
    live_slots()
        .iter()
        .map(|slot| slot.load(Ordering::Acquire))
        .filter(|&p| p != 0)
        .collect()
}

/// The endpoint behind a handle, if it is open.
unsafe fn endpoint<'a>(e: *mut CEndpoint) -> Option<&'a CEndpoint> {
    let p = e as usize;
    let live = p != 0
        && live_slots()
            .iter()
            .any(|slot| slot.load(Ordering::Acquire) == p);
    live.then(|| &*e)
}

macro_rules! ep_or_fail {
    ($e:expr) => {
        match endpoint($e) {
            Some(e) => e,
            None => return fail(None, MX_BAD_ENDPOINT, "invalid or closed endpoint"),
        }
    };
}

fn addr_of(ep: &CEndpoint, partner: PartnerId) -> MxEndpointAddr {
    let key = (ep as *const CEndpoint as usize, partner.0);
    let mut g = ADDRS.lock().expect("address table");
    let t = g.get_or_insert_with(AddrTable::default);
    let (nic, eid, session) = ep
        .ep
        .partner_addr(partner)
        .map(|(n, e, s)| (n, e as u32, s.unwrap_or(0)))
        .unwrap_or((0, 0, 0));
    let i = match t.index.get(&key) {
        Some(&i) => {
            t.recs[i].session = session;
            i
        }
        None => {
            t.recs.push(AddrRec {
                ep: key.0,
                partner,
                nic,
                eid,
                session,
                context: 0,
            });
            t.index.insert(key, t.recs.len() - 1);
            t.recs.len() - 1
        }
    };
    MxEndpointAddr {
        stuff: [i as u64 + 1, (session as u64) << 32],
    }
}

fn addr_rec(a: MxEndpointAddr) -> Option<AddrRec> {
    let g = ADDRS.lock().ok()?;
    g.as_ref()?
        .recs
        .get((a.stuff[0] as usize).checked_sub(1)?)
        .copied()
}

fn timeout_of(ms: u32) -> Option<Duration> {
    (ms != MX_INFINITE).then(|| Duration::from_millis(ms as u64))
}

/// A request's segments in the runtime's form: on the stack for the common few (the
/// libfabric provider sends two: its header and the payload).
enum Segs {
    Few([Segment; FEW_SEGS], usize),
    Many(Vec<Segment>),
}

const FEW_SEGS: usize = 4;

impl std::ops::Deref for Segs {
    type Target = [Segment];
    fn deref(&self) -> &[Segment] {
        match self {
            Segs::Few(a, n) => &a[..*n],
            Segs::Many(v) => v,
        }
    }
}

unsafe fn segments(list: *mut MxSegment, count: u32) -> Result<Segs, MxReturn> {
    if count > MX_MAX_SEGMENTS {
        return Err(MX_BAD_SEG_CNT);
    }
    if count > 0 && list.is_null() {
        return Err(MX_BAD_SEG_CNT);
    }
    let segs = if count == 0 {
        &[][..]
    } else {
        std::slice::from_raw_parts(list, count as usize)
    };
    let conv = |s: &MxSegment| Segment {
        ptr: s.ptr as *mut u8,
        len: s.len as usize,
    };
    if segs.len() <= FEW_SEGS {
        let mut a = [Segment {
            ptr: std::ptr::null_mut(),
            len: 0,
        }; FEW_SEGS];
        for (d, s) in a.iter_mut().zip(segs) {
            *d = conv(s);
        }
        return Ok(Segs::Few(a, segs.len()));
    }
    Ok(Segs::Many(segs.iter().map(conv).collect()))
}

fn fill_status(ep: &CEndpoint, c: &Completion, context: usize, out: *mut MxStatus) {
    if out.is_null() {
        return;
    }
    let s: &Status = &c.status;
    let source = s.source.map(|p| addr_of(ep, p)).unwrap_or_default();
    // SAFETY: the caller passed a writable mx_status_t.
    unsafe {
        *out = MxStatus {
            code: s.code as u32,
            source,
            match_info: s.match_info,
            msg_length: s.msg_length,
            xfer_length: s.xfer_length,
            context: context as *mut c_void,
        }
    }
}

fn rt_error(ep: &CEndpoint, e: RtError) -> MxReturn {
    let code = match &e {
        RtError::BadArgument(w) if w.contains("segments") => MX_BAD_SEG_CNT,
        RtError::BadArgument(w) if w.contains("segment pointer") => MX_BAD_SEG_LIST,
        RtError::BadArgument(_) => MX_BAD_MATCH_MASK,
        RtError::Busy => MX_BUSY,
        RtError::NoSuchBoard => MX_BOARD_UNKNOWN,
        RtError::Timeout => MX_TIMEOUT,
        RtError::Engine(omx_proto::EngineError::UnknownPeer) => MX_NIC_NOT_FOUND,
        RtError::Engine(omx_proto::EngineError::BadRequest) => MX_BAD_REQUEST,
        RtError::Engine(_) => MX_BAD_REQUEST,
        RtError::Io(_) => MX_NO_RESOURCES,
    };
    fail(Some(ep), code, &e.to_string())
}

// ----- Library -----

#[no_mangle]
pub extern "C" fn mx__init_api(api: i32) -> MxReturn {
    if api == 0 || (api >> 8) != 0x3 {
        return fail(None, MX_BAD_LIB_VERSION, "MX API version mismatch");
    }
    let fatal = omx_runtime::config::fatal_errors_from_env();
    {
        let mut g = GLOBAL.lock().expect("global");
        if g.initialized {
            drop(g);
            return fail(None, MX_ALREADY_INITIALIZED, "mx_init called twice");
        }
        g.initialized = true;
        g.handler = if fatal {
            Some(fatal_handler)
        } else {
            Some(return_handler)
        };
    }
    if let Err(e) = Runtime::global() {
        GLOBAL.lock().expect("global").initialized = false;
        return fail(None, MX_BAD_BAD_BAD, &format!("cannot initialise omx: {e}"));
    }
    MX_SUCCESS
}

#[no_mangle]
pub extern "C" fn mx_finalize() -> MxReturn {
    if let Ok(mut g) = GLOBAL.lock() {
        g.initialized = false;
    }
    MX_SUCCESS
}

/// Installs the global handler and returns the previous one (MX semantics).
#[no_mangle]
pub extern "C" fn mx_set_error_handler(h: MxErrorHandler) -> MxErrorHandler {
    let mut g = GLOBAL.lock().expect("global");
    std::mem::replace(&mut g.handler, h)
}

#[no_mangle]
pub unsafe extern "C" fn mx_open_endpoint(
    board: u32,
    endpoint_id: u32,
    key: u32,
    params: *mut MxParam,
    params_count: u32,
    out: *mut *mut CEndpoint,
) -> MxReturn {
    if !initialized() {
        return fail(None, MX_NOT_INITIALIZED, "mx_open_endpoint before mx_init");
    }
    if out.is_null() || (params_count > 0 && params.is_null()) {
        return fail(None, MX_BAD_PARAM_LIST, "bad parameter list");
    }
    let mut handler = None;
    let mut ctx_mask = 0u64;
    let mut unexp_max = None;
    let plist = if params_count == 0 {
        &[][..]
    } else {
        std::slice::from_raw_parts(params, params_count as usize)
    };
    for p in plist {
        match p.key {
            MX_PARAM_ERROR_HANDLER => handler = Some(p.val.error_handler),
            MX_PARAM_UNEXP_QUEUE_MAX => unexp_max = Some(p.val.unexp_queue_max as usize),
            MX_PARAM_CONTEXT_ID => {
                let c = p.val.context_id;
                if c.bits > 16 || c.bits as u32 + c.shift as u32 > 64 {
                    return fail(None, MX_BAD_PARAM_VAL, "bad context id bits/shift");
                }
                ctx_mask = if c.bits == 0 {
                    0
                } else {
                    ((1u64 << c.bits) - 1) << c.shift
                };
            }
            _ => return fail(None, MX_BAD_PARAM_NAME, "unknown endpoint parameter"),
        }
    }
    let rt = match Runtime::global() {
        Ok(rt) => rt,
        Err(e) => return fail(None, MX_BAD_BAD_BAD, &e),
    };
    let boards: Vec<u32> = if board == MX_ANY_NIC {
        (0..rt.boards.len() as u32).collect()
    } else {
        vec![board]
    };
    let index = (endpoint_id != MX_ANY_ENDPOINT).then_some(endpoint_id);
    if index.is_some_and(|i| i >= omx_runtime::MAX_ENDPOINTS as u32) {
        return fail(None, MX_BAD_ENDPOINT, "endpoint index out of range");
    }
    let mut last = MX_BOARD_UNKNOWN;
    for b in boards {
        match Endpoint::open(&rt, b, index.map(|i| i as u8), key) {
            Ok(ep) => {
                if let Some(m) = unexp_max {
                    ep.set_unexpected_max(m);
                }
                let c = Box::new(CEndpoint {
                    ep,
                    handler,
                    ctx_mask,
                    connects: Mutex::new(HashMap::default()),
                    default_resends: std::sync::atomic::AtomicU32::new(0),
                });
                if !live_insert(&*c as *const CEndpoint as usize) {
                    return fail(None, MX_NO_RESOURCES, "too many open endpoints");
                }
                *out = Box::into_raw(c);
                return MX_SUCCESS;
            }
            Err(RtError::Busy) => last = MX_BUSY,
            Err(RtError::NoSuchBoard) => {}
            Err(e) => return fail(None, MX_NO_RESOURCES, &format!("cannot open endpoint: {e}")),
        }
    }
    fail(None, last, "cannot open endpoint")
}

type CUnexpHandler =
    unsafe extern "C" fn(*mut c_void, MxEndpointAddr, u64, u32, *mut c_void) -> u32;

thread_local! {
    /// Set while this thread runs an unexpected handler (MX forbids closing then).
    static IN_HANDLER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs (non-NULL) or removes (NULL) the unexpected-message handler.
#[no_mangle]
pub unsafe extern "C" fn mx_register_unexp_handler(
    e: *mut CEndpoint,
    handler: Option<CUnexpHandler>,
    context: *mut c_void,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    let Some(h) = handler else {
        ep.ep.set_unexpected_handler(None);
        return MX_SUCCESS;
    };
    let (ep_addr, ctx) = (e as usize, context as usize);
    ep.ep.set_unexpected_handler(Some(Box::new(move |info: &omx_proto::UnexpectedInfo| {
        // SAFETY: the endpoint outlives its handler (closing removes the handler first).
        let ep = unsafe { &*(ep_addr as *const CEndpoint) };
        let source = addr_of(ep, info.source);
        let data = info.data.as_ref().map_or(std::ptr::null_mut(), |d| d.as_ptr() as *mut c_void);
        IN_HANDLER.with(|f| f.set(true));
        // SAFETY: calling the application's handler with MX's arguments.
        let action = unsafe { h(ctx as *mut c_void, source, info.match_info, info.msg_length, data) };
        IN_HANDLER.with(|f| f.set(false));
        match action {
            0 => false,
            1 => true,
            other => {
                eprintln!("MX: unexpected handler returned {other}, neither MX_RECV_CONTINUE nor MX_RECV_FINISHED");
                std::process::abort()
            }
        }
    })));
    MX_SUCCESS
}

type CMatchingCallback = unsafe extern "C" fn(*mut c_void, u64, i32);

/// MX's older notification for unexpected messages (deprecated in MX): `cb` is told
/// the match value and length of each, which then stays unexpected.
#[no_mangle]
pub unsafe extern "C" fn mx_register_unexp_callback(
    e: *mut CEndpoint,
    cb: Option<CMatchingCallback>,
    context: *mut c_void,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    let Some(cb) = cb else {
        ep.ep.set_unexpected_handler(None);
        return MX_SUCCESS;
    };
    let ctx = context as usize;
    ep.ep
        .set_unexpected_handler(Some(Box::new(move |info: &omx_proto::UnexpectedInfo| {
            IN_HANDLER.with(|f| f.set(true));
            // SAFETY: calling the application's callback with MX's arguments.
            unsafe {
                cb(
                    ctx as *mut c_void,
                    info.match_info,
                    info.msg_length.min(i32::MAX as u32) as i32,
                )
            };
            IN_HANDLER.with(|f| f.set(false));
            false
        })));
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_close_endpoint(e: *mut CEndpoint) -> MxReturn {
    if IN_HANDLER.with(|f| f.get()) {
        return fail(
            endpoint(e),
            MX_CLOSE_IN_HANDLER,
            "mx_close_endpoint inside the unexpected handler",
        );
    }
    if !live_remove(e as usize) {
        return fail(None, MX_BAD_ENDPOINT, "invalid or closed endpoint");
    }
    if let Ok(mut g) = ADDRS.lock() {
        if let Some(t) = g.as_mut() {
            for r in t.recs.iter_mut().filter(|r| r.ep == e as usize) {
                r.ep = 0;
            }
            // An endpoint opened later may get this one's address: it must not find
            // these (now invalid) records through the index.
            t.index.retain(|&(ep, _), _| ep != e as usize);
        }
    }
    let c = Box::from_raw(e);
    c.ep.set_unexpected_handler(None);
    drop(c);
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_wakeup(e: *mut CEndpoint) -> MxReturn {
    ep_or_fail!(e).ep.wakeup();
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_progress(e: *mut CEndpoint) -> MxReturn {
    ep_or_fail!(e).ep.progress();
    MX_SUCCESS
}

/// omx always progresses in the background; these keep their MX meaning of "no
/// progression inside library calls" only as no-ops (documented in docs/API.md).
#[no_mangle]
pub unsafe extern "C" fn mx_disable_progression(e: *mut CEndpoint) -> MxReturn {
    ep_or_fail!(e);
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_reenable_progression(e: *mut CEndpoint) -> MxReturn {
    ep_or_fail!(e).ep.progress();
    MX_SUCCESS
}

// ----- Communication -----

#[allow(clippy::too_many_arguments)] // mirrors the C signature
unsafe fn post_send(
    e: *mut CEndpoint,
    segs: *mut MxSegment,
    count: u32,
    dest: MxEndpointAddr,
    match_info: u64,
    context: *mut c_void,
    request: *mut usize,
    sync: bool,
) -> MxReturn {
    let ep = ep_or_fail!(e);
    let segs = match segments(segs, count) {
        Ok(s) => s,
        Err(c) => return fail(Some(ep), c, "more than 256 segments"),
    };
    let Some(rec) = addr_rec(dest).filter(|r| r.ep == e as usize) else {
        return fail(Some(ep), MX_BAD_REQUEST, "invalid destination address");
    };
    let r = match ep
        .ep
        .isend(&segs, rec.partner, match_info, context as u64, sync)
    {
        Ok(r) => r,
        Err(err) => return rt_error(ep, err),
    };
    track(ep, r, RequestKind::Send, request)
}

/// Hands a posted request to the caller (or forgets it when `request` is NULL).
unsafe fn track(ep: &CEndpoint, r: ReqId, kind: RequestKind, request: *mut usize) -> MxReturn {
    let d = ep
        .default_resends
        .load(std::sync::atomic::Ordering::Relaxed);
    if d != 0 && kind != RequestKind::Recv {
        let _ = ep.ep.set_request_resends(r, d);
    }
    if request.is_null() {
        ep.ep.forget(r);
        return MX_SUCCESS;
    }
    *request = r.0 as usize;
    MX_SUCCESS
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
    post_send(e, segs, count, dest, match_info, context, request, false)
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
    post_send(e, segs, count, dest, match_info, context, request, true)
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
    let segs = match segments(segs, count) {
        Ok(s) => s,
        Err(c) => return fail(Some(ep), c, "more than 256 segments"),
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
        ep.connects.lock().expect("connects").remove(&c.req.0)
    } else {
        Some(c.status.context as usize)
    };
    fill_status(ep, &c, context.unwrap_or(0), status);
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
        let c = Completion {
            req: ReqId(0),
            kind: omx_proto::RequestKind::Recv,
            status: s,
            mem: None,
        };
        fill_status(ep, &c, 0, status);
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
        ep.connects.lock().expect("connects").remove(&r.0);
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
    ep.connects.lock().expect("connects").remove(&r.0);
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
        let c = match ep.connects.lock().expect("connects").get(&r.0) {
            Some(&c) => Some(c),
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

// ----- Addressing -----

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
    match ep
        .ep
        .connect(nic_id, endpoint_id as u8, key, timeout_of(timeout))
    {
        Ok(Ok(p)) => {
            *addr = addr_of(ep, p);
            MX_SUCCESS
        }
        // Nothing answered until the timeout, and no board of that id was ever heard.
        Ok(Err(s)) if s.code == StatusCode::Timeout && !ep.ep.runtime().knows_nic(nic_id) => fail(
            Some(ep),
            MX_NIC_NOT_FOUND,
            "no board answered for this nic id",
        ),
        Err(RtError::Timeout) if !ep.ep.runtime().knows_nic(nic_id) => fail(
            Some(ep),
            MX_NIC_NOT_FOUND,
            "no board answered for this nic id",
        ),
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
                ep.connects
                    .lock()
                    .expect("connects")
                    .insert(r.0, context as usize);
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
    let Ok(rt) = Runtime::global() else {
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
    let Ok(rt) = Runtime::global() else {
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
    let Ok(rt) = Runtime::global() else {
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
    let Ok(rt) = Runtime::global() else {
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

mod info;
mod internals;
mod onesided;
mod raw;
mod strings;
pub use info::mx_get_info;
pub use strings::{mx_strerror, mx_strstatus};
