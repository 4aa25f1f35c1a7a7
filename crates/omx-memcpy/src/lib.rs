//! `libomx_memcpy.so`: preloaded into an unmodified program (`omx_memcpy CMD`), it
//! makes the program's large `memcpy`/`memmove` calls asynchronous: the whole pages of
//! the destination are posted to the copy engine (`omx_copyd`, else the process's copy
//! thread: `omx_runtime::memcpy`) and protected until the copy is done, so an early
//! touch waits in the fault handler and the program sees ordinary `memcpy`
//! semantics. Design and limits: docs/COPY.md.

mod fault;
mod interpose;
mod pending;
mod protect;
mod real;

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Copies shorter than this stay synchronous (`OMX_MEMCPY_MIN`); `usize::MAX` until
/// the library is set up, and in a forked child.
static MIN: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Default of `OMX_MEMCPY_MIN`, from `bench/memcpy_preload.sh` (docs/COPY.md).
const DEFAULT_MIN: usize = 4 << 20;
static STATS: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set while this thread runs the library's own code: its copies and calls go
    /// straight to the C library.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` as the library's own code, or returns `None` when already inside.
fn inside<T>(f: impl FnOnce() -> T) -> Option<T> {
    if INSIDE.with(|i| i.replace(true)) {
        return None;
    }
    let r = f();
    INSIDE.with(|i| i.set(false));
    Some(r)
}

/// Waits for the copies touching `[addr, addr+len)`, unless called from inside or
/// by the copy thread (which would wait for itself).
fn settle(addr: usize, len: usize) {
    if pending::any_pending() && !protect::thread_has_key() {
        inside(|| pending::wait_range(addr, len));
    }
}

fn getenv(name: &std::ffi::CStr) -> Option<String> {
    // SAFETY: read once at load, before the program's threads exist.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    (!p.is_null()).then(|| {
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    })
}

extern "C" fn setup() {
    real::init();
    STATS.store(
        getenv(c"OMX_MEMCPY_STATS").is_some_and(|v| v == "1"),
        Ordering::Relaxed,
    );
    let min = match getenv(c"OMX_MEMCPY_MIN") {
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) => n,
            Err(_) => {
                let msg =
                    b"omx_memcpy: OMX_MEMCPY_MIN is not a byte count; copies stay synchronous\n";
                unsafe { real::write(2, msg.as_ptr().cast(), msg.len()) };
                return;
            }
        },
        None => DEFAULT_MIN,
    };
    if protect::init_key().is_none() {
        report(b"omx_memcpy: no protection keys (pkey_alloc failed); copies stay synchronous\n");
        return;
    }
    fault::install();
    // SAFETY: registering fork handlers with plain functions.
    unsafe { libc::pthread_atfork(Some(before_fork), None, Some(in_child)) };
    MIN.store(min.max(2 * protect::PAGE), Ordering::Release);
}

fn report(msg: &[u8]) {
    if STATS.load(Ordering::Relaxed) {
        // SAFETY: a live buffer to stderr.
        unsafe { real::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}

/// A child starts with no copy in flight: they all end before the fork.
extern "C" fn before_fork() {
    inside(pending::wait_all);
}

/// The child has no copy thread and must not share the parent's service rings: its
/// copies stay synchronous.
extern "C" fn in_child() {
    MIN.store(usize::MAX, Ordering::Release);
}

extern "C" fn finish() {
    inside(pending::wait_all);
    if STATS.load(Ordering::Relaxed) {
        let msg = format!(
            "omx_memcpy: {} asynchronous copies, {} waits on a fault, {} waits before a call, {} failed and redone\n",
            pending::ASYNC.load(Ordering::Relaxed),
            pending::FAULT_WAITS.load(Ordering::Relaxed),
            pending::CALL_WAITS.load(Ordering::Relaxed),
            pending::FAILED.load(Ordering::Relaxed),
        );
        report(msg.as_bytes());
    }
}

#[used]
#[link_section = ".init_array"]
static SETUP: extern "C" fn() = setup;

#[used]
#[link_section = ".fini_array"]
static FINISH: extern "C" fn() = finish;

/// `memcpy`/`memmove` above the limit: asynchronous when it can be, else the C
/// library's. `Some(dst)` when done here.
#[inline(always)]
fn copy(dst: usize, src: usize, len: usize) -> bool {
    if len < MIN.load(Ordering::Relaxed) {
        return false;
    }
    if dst < src + len && src < dst + len || protect::thread_has_key() {
        return false;
    }
    inside(|| pending::post(dst, src, len)).unwrap_or(false)
}
