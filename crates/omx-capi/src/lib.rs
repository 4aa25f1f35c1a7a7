//! The MX C ABI (`libmyriexpress.so.0`) over the omx runtime. Thin: argument checks,
//! handle and address translation, and MX's error-handler model; all protocol work is
//! the runtime's. Function-by-function status is in docs/API.md.

#![allow(clippy::missing_safety_doc)] // every entry point follows the MX C contract

mod types;

// The entry points, for Rust callers (tests, tools) as for C ones.
pub use addressing::*;
pub use comm::*;
pub use library::*;
pub use native::*;

use omx_proto::{PartnerId, ReqId, RequestKind, Status};
use omx_runtime::{Endpoint, Error as RtError, Segment};
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
    handler: ErrorHandler,
}

/// An installed error handler and the codes it takes: MX's, or native ones when it
/// came through the native API (omx_set_error_handler, omx_open_endpoint).
#[derive(Clone, Copy)]
struct ErrorHandler {
    f: MxErrorHandler,
    native: bool,
}

impl ErrorHandler {
    const fn mx(f: MxErrorHandler) -> Self {
        ErrorHandler { f, native: false }
    }
}

static GLOBAL: Mutex<Global> = Mutex::new(Global {
    initialized: false,
    handler: ErrorHandler::mx(Some(fatal_before_init)),
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
    handler: Mutex<Option<ErrorHandler>>,
    /// What the native API keeps beside the runtime (omx_cancel_notest).
    native: native::NativeState,
    ctx_mask: u64,
    /// The caller's context of each pending connect (the engine's context value of a
    /// connect is its match info). Other requests carry theirs in the engine.
    connects: connects::ConnectContexts,
    /// The addresses handed out for this endpoint, without the table's lock.
    addrs: addrcache::AddrCache,
    /// Resend budget for new requests set by mx_set_request_timeout(NULL), 0 = default.
    default_resends: std::sync::atomic::AtomicU32,
}

unsafe extern "C" fn fatal_before_init(msg: *mut c_char, code: MxReturn) -> MxReturn {
    eprintln!("MX: fatal error before mx_init: {} ({code})", cstr(msg));
    knobs::sleep_before_abort();
    std::process::exit(-1)
}

unsafe extern "C" fn fatal_handler(msg: *mut c_char, code: MxReturn) -> MxReturn {
    eprintln!(
        "MX: fatal error: {} ({})",
        cstr(msg),
        cstr(mx_strerror(code) as *mut c_char)
    );
    knobs::sleep_before_abort();
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

/// Reports a failure through the endpoint's (or the global) handler, MX style; a
/// native handler gets the native code, and what it returns is taken back to MX's.
fn fail(ep: Option<&CEndpoint>, code: MxReturn, what: &str) -> MxReturn {
    let handler = ep
        .and_then(|e| *e.handler.lock().expect("handler"))
        .unwrap_or_else(|| {
            GLOBAL
                .lock()
                .map(|g| g.handler)
                .unwrap_or(ErrorHandler::mx(None))
        });
    let Some(h) = handler.f else { return code };
    let mut msg = format!("{what}\0").into_bytes();
    let msg = msg.as_mut_ptr() as *mut c_char;
    // SAFETY: the handler receives a NUL-terminated string valid for the call.
    unsafe {
        if handler.native {
            native::mx_code(h(msg, native::native_code(code)))
        } else {
            h(msg, code)
        }
    }
}

fn initialized() -> bool {
    GLOBAL.lock().is_ok_and(|g| g.initialized)
}

/// The runtime for the calls that need the library initialised (between `mx_init`
/// and `mx_finalize`, as in MX: `MX_NOT_INITIALIZED` before and after).
fn runtime() -> Option<std::sync::Arc<omx_runtime::Runtime>> {
    if initialized() {
        omx_runtime::Runtime::global().ok()
    } else {
        None
    }
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

/// The address of `partner` as a completion names it: `session` is the partner's
/// session when the request completed, so a cached address needs no look at the
/// engine (no endpoint lock per completion); a miss takes [`addr_of`].
#[inline]
fn completion_addr(ep: &CEndpoint, partner: PartnerId, session: u32) -> MxEndpointAddr {
    match ep.addrs.index_of(partner, session) {
        Some(index) => MxEndpointAddr {
            stuff: [index, (session as u64) << 32],
        },
        None => addr_of(ep, partner),
    }
}

fn addr_of(ep: &CEndpoint, partner: PartnerId) -> MxEndpointAddr {
    let (nic, eid, session) = ep
        .ep
        .partner_addr(partner)
        .map(|(n, e, s)| (n, e as u32, s.unwrap_or(0)))
        .unwrap_or((0, 0, 0));
    if let Some(index) = ep.addrs.index_of(partner, session) {
        return MxEndpointAddr {
            stuff: [index, (session as u64) << 32],
        };
    }
    let key = (ep as *const CEndpoint as usize, partner.0);
    let mut g = ADDRS.lock().expect("address table");
    let t = g.get_or_insert_with(AddrTable::default);
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
    ep.addrs.record(partner, i as u64 + 1, session);
    MxEndpointAddr {
        stuff: [i as u64 + 1, (session as u64) << 32],
    }
}

/// The partner behind `dest`, an address of this endpoint: from the endpoint's cache,
/// else from the address table.
fn dest_partner(ep: &CEndpoint, dest: MxEndpointAddr) -> Option<PartnerId> {
    if let Some(p) = ep.addrs.partner_of(dest.stuff[0]) {
        return Some(p);
    }
    let rec = addr_rec(dest).filter(|r| r.ep == ep as *const CEndpoint as usize)?;
    ep.addrs.record(rec.partner, dest.stuff[0], rec.session);
    Some(rec.partner)
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

// Two, not more: every call moves the whole array (32 bytes a segment).
const FEW_SEGS: usize = 2;

impl std::ops::Deref for Segs {
    type Target = [Segment];
    fn deref(&self) -> &[Segment] {
        match self {
            Segs::Few(a, n) => &a[..*n],
            Segs::Many(v) => v,
        }
    }
}

/// Why a C segment list was refused: the MX code and the error handler's message.
type SegsError = (MxReturn, &'static str);

unsafe fn segments(list: *mut MxSegment, count: u32) -> Result<Segs, SegsError> {
    segment_list(list, count, |s| {
        Ok(Segment::memory(s.ptr as *mut u8, s.len as usize))
    })
}

/// A C segment list (`count` items at `list`, each converted by `conv`) in the
/// runtime's form.
unsafe fn segment_list<T>(
    list: *const T,
    count: u32,
    conv: impl Fn(&T) -> Result<Segment, SegsError>,
) -> Result<Segs, SegsError> {
    if count > MX_MAX_SEGMENTS {
        return Err((MX_BAD_SEG_CNT, "more than 256 segments"));
    }
    if count > 0 && list.is_null() {
        return Err((MX_BAD_SEG_LIST, "null segment list"));
    }
    let segs = if count == 0 {
        &[][..]
    } else {
        std::slice::from_raw_parts(list, count as usize)
    };
    if segs.len() <= FEW_SEGS {
        let mut a = [Segment::EMPTY; FEW_SEGS];
        for (d, s) in a.iter_mut().zip(segs) {
            *d = conv(s)?;
        }
        return Ok(Segs::Few(a, segs.len()));
    }
    Ok(Segs::Many(segs.iter().map(conv).collect::<Result<_, _>>()?))
}

/// Writes `s` to `out` (if not NULL); `session`: the source's session when `s` was
/// made (a completion's), `None` to look it up (a probe's status).
fn fill_status(
    ep: &CEndpoint,
    s: &Status,
    session: Option<u32>,
    context: usize,
    out: *mut MxStatus,
) {
    if out.is_null() {
        return;
    }
    let source = match (s.source, session) {
        (Some(p), Some(session)) => completion_addr(ep, p, session),
        (Some(p), None) => addr_of(ep, p),
        (None, _) => MxEndpointAddr::default(),
    };
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

/// The MX return code of a runtime error: the one place where they are mapped.
fn mx_code(e: &RtError) -> MxReturn {
    match e {
        RtError::TooManySegments => MX_BAD_SEG_CNT,
        RtError::NullSegment | RtError::MessageTooLong | RtError::Segment(_) => MX_BAD_SEG_LIST,
        RtError::BadEndpointIndex => MX_BAD_ENDPOINT,
        RtError::Busy => MX_BUSY,
        RtError::NoSuchBoard => MX_BOARD_UNKNOWN,
        RtError::Timeout => MX_TIMEOUT,
        RtError::Engine(omx_proto::EngineError::UnknownPeer) => MX_NIC_NOT_FOUND,
        RtError::Engine(omx_proto::EngineError::MatchOutsideMask) => MX_BAD_MATCH_MASK,
        RtError::Engine(omx_proto::EngineError::NoResources) => MX_NO_RESOURCES,
        RtError::Engine(omx_proto::EngineError::RegionExposed) => MX_BUSY,
        RtError::Engine(omx_proto::EngineError::BadRegion) => MX_BAD_PARAM_VAL,
        RtError::Engine(_) => MX_BAD_REQUEST,
        RtError::Io(_) => MX_NO_RESOURCES,
    }
}

fn rt_error(ep: &CEndpoint, e: RtError) -> MxReturn {
    fail(Some(ep), mx_code(&e), &e.to_string())
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

mod addrcache;
mod addressing;
mod comm;
mod connects;
mod info;
mod internals;
mod knobs;
mod library;
mod memcpy;
mod native;
mod onesided;
mod raw;
mod strings;
mod typed;
pub use info::mx_get_info;
pub use strings::{mx_strerror, mx_strstatus, omx_strerror};
