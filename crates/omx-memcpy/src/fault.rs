//! The `SIGSEGV` handler: a touch of a page of a copy in flight waits for the copy
//! and resumes; every other fault goes to the program's own handler. The program's
//! `sigaction`/`signal` for `SIGSEGV` are interposed so that its handler is recorded
//! here (and reported back to it) while this one stays in front.

use crate::{pending, protect, real};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// `si_code` of a fault on a protection key.
const SEGV_PKUERR: i32 = 4;

struct Chained(UnsafeCell<libc::sigaction>);
// SAFETY: written only by sigaction calls (the program's, racing with itself as it
// would with the kernel), read by the handler.
unsafe impl Sync for Chained {}

static CHAINED: Chained = Chained(UnsafeCell::new(unsafe { std::mem::zeroed() }));
static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The last fault address found in no copy, retried once: the copy may have
    /// ended between the fault and the look-up.
    static RETRIED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Puts the handler in front of whatever the program had.
pub fn install() {
    if INSTALLED.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: a zeroed sigaction is valid; handler is an extern "C" function.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction =
            handler as extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        if real::sigaction(libc::SIGSEGV, &act, CHAINED.0.get()) == 0 {
            INSTALLED.store(true, Ordering::Release);
        }
    }
}

extern "C" fn handler(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SIGSEGV.
    let (addr, code, pkey) = unsafe {
        let i = &*info;
        // si_pkey follows si_addr and si_addr_lsb in the fault union (offset 32).
        let pkey = *((info as *const u8).add(32) as *const u32);
        (i.si_addr() as usize, i.si_code, pkey)
    };
    // The copy thread itself never waits (it would wait for itself).
    if !protect::thread_has_key() {
        // The wait runs library code (its frees must not wait again): inside.
        let was = crate::INSIDE.with(|i| i.replace(true));
        let hit = pending::fault_at(addr);
        crate::INSIDE.with(|i| i.set(was));
        if hit {
            RETRIED.with(|r| r.set(0));
            return;
        }
        let ours = code == SEGV_PKUERR && pkey as i32 == protect::key();
        if ours || RETRIED.with(|r| r.replace(addr)) != addr {
            return; // ended meanwhile: the touch succeeds when retried
        }
        RETRIED.with(|r| r.set(0));
    }
    chain(sig, info, ctx);
}

fn chain(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: CHAINED holds the program's handler as it installed it.
    unsafe {
        let old = *CHAINED.0.get();
        match old.sa_sigaction {
            libc::SIG_DFL | libc::SIG_IGN => {
                if crate::STATS.load(Ordering::Relaxed) {
                    let msg = format!(
                        "omx_memcpy: a fault not of a copy in flight at {:#x} (code {}, copy thread {})\n",
                        (*info).si_addr() as usize,
                        (*info).si_code,
                        protect::thread_has_key()
                    );
                    real::write(2, msg.as_ptr().cast(), msg.len());
                }
                // Let the fault happen again with the default action (a core dump).
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                real::sigaction(sig, &dfl, std::ptr::null_mut());
                INSTALLED.store(false, Ordering::Release);
            }
            f if old.sa_flags & libc::SA_SIGINFO != 0 => {
                let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(f);
                f(sig, info, ctx)
            }
            f => {
                let f: extern "C" fn(i32) = std::mem::transmute(f);
                f(sig)
            }
        }
        if old.sa_flags & libc::SA_RESETHAND != 0 {
            (*CHAINED.0.get()).sa_sigaction = libc::SIG_DFL;
        }
    }
}

/// The program's `sigaction`: for `SIGSEGV` once ours is installed, records its
/// handler behind ours.
pub unsafe fn sigaction(sig: i32, act: *const libc::sigaction, old: *mut libc::sigaction) -> i32 {
    if sig != libc::SIGSEGV || !INSTALLED.load(Ordering::Acquire) {
        return real::sigaction(sig, act, old);
    }
    let prev = *CHAINED.0.get();
    if !act.is_null() {
        *CHAINED.0.get() = *act;
    }
    if !old.is_null() {
        *old = prev;
    }
    0
}

/// The program's `signal`, as `sigaction` with BSD semantics (glibc's).
pub unsafe fn signal(sig: i32, h: libc::sighandler_t) -> libc::sighandler_t {
    let mut act: libc::sigaction = std::mem::zeroed();
    act.sa_sigaction = h;
    act.sa_flags = libc::SA_RESTART;
    libc::sigemptyset(&mut act.sa_mask);
    libc::sigaddset(&mut act.sa_mask, sig);
    let mut old: libc::sigaction = std::mem::zeroed();
    if sigaction(sig, &act, &mut old) != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}
