//! Library and endpoint life: mx_init, mx_finalize, error handlers, opening and
//! closing endpoints, progression control.

use crate::*;
use omx_runtime::{Endpoint, Error as RtError, Runtime};
use std::ffi::{c_int, c_void};

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
        g.handler = ErrorHandler::mx(if fatal {
            Some(fatal_handler)
        } else {
            Some(return_handler)
        });
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
    std::mem::replace(&mut g.handler, ErrorHandler::mx(h)).f
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
    let mut ctx_mask = crate::knobs::default_context_ids().map_or(0, |(bits, shift)| {
        if bits == 0 || bits > 16 || bits as u32 + shift as u32 > 64 {
            0
        } else {
            ((1u64 << bits) - 1) << shift
        }
    });
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
    let index = if endpoint_id == MX_ANY_ENDPOINT {
        crate::knobs::any_endpoint()
    } else {
        Some(endpoint_id)
    };
    let boards: Vec<u32> = match (board, index) {
        (MX_ANY_NIC, None) => rt.boards_for_any_open(),
        (MX_ANY_NIC, Some(_)) => (0..rt.boards.len() as u32).collect(),
        _ => vec![board],
    };
    if index.is_some_and(|i| i >= omx_runtime::MAX_ENDPOINTS as u32) {
        return fail(None, MX_BAD_ENDPOINT, "endpoint index out of range");
    }
    let mut last = MX_BOARD_UNKNOWN;
    for b in boards {
        match Endpoint::open(&rt, b, index.map(|i| i as u8), key) {
            Ok(ep) => {
                let mac = ep.board().nic_id.to_be_bytes();
                crate::knobs::bind_process(
                    [mac[2], mac[3], mac[4], mac[5], mac[6], mac[7]],
                    ep.index() as u32,
                );
                if let Some(m) = unexp_max {
                    ep.set_unexpected_max(m);
                }
                let c = Box::new(CEndpoint {
                    ep,
                    handler: Mutex::new(handler.map(ErrorHandler::mx)),
                    native: Default::default(),
                    ctx_mask,
                    connects: Default::default(),
                    default_resends: std::sync::atomic::AtomicU32::new(0),
                    addrs: Default::default(),
                });
                if !live_insert(&*c as *const CEndpoint as usize) {
                    return fail(None, MX_NO_RESOURCES, "too many open endpoints");
                }
                *out = Box::into_raw(c);
                return MX_SUCCESS;
            }
            Err(RtError::Busy) => last = MX_BUSY,
            Err(RtError::NoSuchBoard) => {}
            Err(e) => return fail(None, mx_code(&e), &format!("cannot open endpoint: {e}")),
        }
    }
    fail(None, last, "cannot open endpoint")
}

pub type CUnexpHandler =
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

/// omx extension: the endpoint's notify descriptor (see `omx_endpoint_arm_notify`).
#[no_mangle]
pub unsafe extern "C" fn omx_endpoint_notify_fd(e: *mut CEndpoint, fd: *mut c_int) -> MxReturn {
    let ep = ep_or_fail!(e);
    if fd.is_null() {
        return fail(Some(ep), MX_BAD_PARAM_VAL, "null descriptor pointer");
    }
    match ep.ep.notify_fd() {
        Ok(f) => {
            *fd = f;
            MX_SUCCESS
        }
        Err(_) => fail(
            Some(ep),
            MX_NO_RESOURCES,
            "cannot create the notify descriptor",
        ),
    }
}

/// omx extension: arms the notify descriptor; MX_BUSY when the caller should poll
/// instead of sleeping on it.
#[no_mangle]
pub unsafe extern "C" fn omx_endpoint_arm_notify(e: *mut CEndpoint) -> MxReturn {
    if ep_or_fail!(e).ep.arm_notify() {
        MX_SUCCESS
    } else {
        MX_BUSY
    }
}

#[no_mangle]
pub unsafe extern "C" fn mx_progress(e: *mut CEndpoint) -> MxReturn {
    ep_or_fail!(e).ep.progress();
    MX_SUCCESS
}

/// Suspends every progress pass of the endpoint (library calls and the progress
/// thread) and handler calls until mx_reenable_progression; from inside the
/// unexpected handler it does not wait for that handler to return.
#[no_mangle]
pub unsafe extern "C" fn mx_disable_progression(e: *mut CEndpoint) -> MxReturn {
    let in_handler = IN_HANDLER.with(|f| f.get());
    ep_or_fail!(e).ep.disable_progression(in_handler);
    MX_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn mx_reenable_progression(e: *mut CEndpoint) -> MxReturn {
    ep_or_fail!(e).ep.reenable_progression();
    MX_SUCCESS
}
