//! Which kind of signal handler interrupted a blocked read. The kernel restarts a read
//! that a handler with `SA_RESTART` interrupted and fails it with `EINTR` otherwise
//! (signal(7)); the library's own wait learns only that some handler ran. So the
//! handlers the program installs through `sigaction`, `signal`, `bsd_signal`,
//! `sysv_signal` (and changes through `siginterrupt`) run behind a trampoline that
//! counts the deliveries to handlers without `SA_RESTART` (one atomic add, safe in a
//! handler) before it calls the program's handler; `sigaction` answers with the
//! program's own handler and flags. A read whose wait was interrupted restarts when
//! that count did not move meanwhile and every handler installed around the library
//! (a raw `rt_sigaction` system call) has `SA_RESTART`. The count is the process's:
//! a handler without `SA_RESTART` that runs in another thread during the wait makes
//! the read return `EINTR` too (as before this, where any such handler did).

use crate::real;
use libc::{c_int, c_void, sighandler_t, siginfo_t};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// Signal numbers 1..=64 (`SIGRTMAX` on Linux).
const SLOTS: usize = 65;

/// The program's handler and flags per signal, for the trampoline (read in handlers:
/// atomics only).
static HANDLER: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static FLAGS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];
/// Deliveries to handlers without `SA_RESTART` so far.
static NO_RESTART: AtomicU64 = AtomicU64::new(0);
/// Serialises the changes of the table (never taken in a handler).
static CHANGE: Mutex<()> = Mutex::new(());

/// Deliveries to handlers without `SA_RESTART` so far: a blocked read notes it before
/// it waits.
pub fn no_restart_count() -> u64 {
    NO_RESTART.load(Ordering::SeqCst)
}

extern "C" fn trampoline(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let Some(slot) = usize::try_from(sig).ok().filter(|&s| s < SLOTS) else {
        return;
    };
    let h = HANDLER[slot].load(Ordering::Acquire);
    let flags = FLAGS[slot].load(Ordering::Acquire);
    if flags & libc::SA_RESTART == 0 {
        NO_RESTART.fetch_add(1, Ordering::SeqCst);
    }
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return;
    }
    // SAFETY: `h` is the program's handler as it installed it, of the kind its flags
    // say.
    unsafe {
        if flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) = std::mem::transmute(h);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(c_int) = std::mem::transmute(h);
            f(sig);
        }
    }
}

fn trampoline_addr() -> sighandler_t {
    trampoline as *const () as sighandler_t
}

/// True when the kernel's action for `sig` is this library's trampoline or runs no
/// handler, or its handler has `SA_RESTART`: asked after an interruption for the
/// handlers installed around the library.
fn kernel_action_restarts(sig: c_int) -> bool {
    // SAFETY: a zeroed sigaction is a valid out-parameter; no action is set.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reads the action only.
    if unsafe { real::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
        return true;
    }
    old.sa_sigaction == libc::SIG_DFL
        || old.sa_sigaction == libc::SIG_IGN
        || old.sa_sigaction == trampoline_addr()
        || old.sa_flags & libc::SA_RESTART != 0
}

/// Whether a blocked read that a handler interrupted goes on (signal(7)): no handler
/// without `SA_RESTART` ran since `before` (a value of [`no_restart_count`]), and none
/// is installed around the library. One `sigaction` per signal number, after an
/// interruption only.
pub fn restarts(before: u64) -> bool {
    if no_restart_count() != before {
        return false;
    }
    (1..=libc::SIGRTMAX())
        .filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP)
        .all(kernel_action_restarts)
}

/// # Safety
/// As the C library's `sigaction`: a handler is installed behind the trampoline, and
/// the old action reported is the program's own.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(slot) = usize::try_from(sig).ok().filter(|&s| s > 0 && s < SLOTS) else {
        return real::sigaction(sig, act, old);
    };
    let _change = CHANGE.lock();
    let prev = (
        HANDLER[slot].load(Ordering::Acquire),
        FLAGS[slot].load(Ordering::Acquire),
    );
    let wrapped: libc::sigaction;
    let mut act = act;
    if let Some(a) = act.as_ref() {
        let h = a.sa_sigaction;
        if h != libc::SIG_DFL && h != libc::SIG_IGN && h != trampoline_addr() {
            wrapped = libc::sigaction {
                sa_sigaction: trampoline_addr(),
                sa_flags: a.sa_flags | libc::SA_SIGINFO,
                ..*a
            };
            HANDLER[slot].store(h, Ordering::Release);
            FLAGS[slot].store(a.sa_flags, Ordering::Release);
            act = &wrapped;
        }
    }
    let r = real::sigaction(sig, act, old);
    if r != 0 {
        HANDLER[slot].store(prev.0, Ordering::Release);
        FLAGS[slot].store(prev.1, Ordering::Release);
        return r;
    }
    if let Some(o) = old.as_mut() {
        if o.sa_sigaction == trampoline_addr() {
            o.sa_sigaction = prev.0;
            o.sa_flags = (o.sa_flags & !libc::SA_SIGINFO) | (prev.1 & libc::SA_SIGINFO);
        }
    }
    r
}

/// `signal` with `flags`, the set's mask holding `sig` unless `SA_NODEFER` (glibc's
/// BSD and System V flavours).
unsafe fn install(sig: c_int, handler: sighandler_t, flags: c_int) -> sighandler_t {
    let mut act: libc::sigaction = std::mem::zeroed();
    act.sa_sigaction = handler;
    libc::sigemptyset(&mut act.sa_mask);
    if flags & libc::SA_NODEFER == 0 {
        libc::sigaddset(&mut act.sa_mask, sig);
    }
    act.sa_flags = flags;
    let mut old: libc::sigaction = std::mem::zeroed();
    if sigaction(sig, &act, &mut old) != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// # Safety
/// As the C library's `signal` (BSD semantics: `SA_RESTART`).
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    install(sig, handler, libc::SA_RESTART)
}

/// # Safety
/// As the C library's `bsd_signal`.
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    install(sig, handler, libc::SA_RESTART)
}

/// # Safety
/// As the C library's `sysv_signal` (one-shot, not deferred, no restart).
#[no_mangle]
pub unsafe extern "C" fn sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    install(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER)
}

/// # Safety
/// As the C library's `siginterrupt`: sets or clears `SA_RESTART` of the program's
/// action (through `sigaction`, so the trampoline knows).
#[no_mangle]
pub unsafe extern "C" fn siginterrupt(sig: c_int, interrupt: c_int) -> c_int {
    let mut act: libc::sigaction = std::mem::zeroed();
    if sigaction(sig, std::ptr::null(), &mut act) != 0 {
        return -1;
    }
    if interrupt != 0 {
        act.sa_flags &= !libc::SA_RESTART;
    } else {
        act.sa_flags |= libc::SA_RESTART;
    }
    sigaction(sig, &act, std::ptr::null_mut())
}
