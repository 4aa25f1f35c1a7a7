//! `OMX_DEBUG_SIGNAL`: a signal (`OMX_DEBUG_SIGNAL_NUM`, SIGUSR1 by default) makes every
//! endpoint of the process print its state on stdout, as the original's dump did.
//!
//! The handler only bumps a counter (nothing else is async-signal-safe); each
//! endpoint's housekeeping, which runs once a second in a progress pass (the
//! application's or the progress thread's), prints its dump when the counter moved.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// Signals received so far.
static DUMPS_ASKED: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    DUMPS_ASKED.fetch_add(1, Ordering::Relaxed);
}

/// Installs the handler (once per process) when `level` > 0.
pub fn install(level: u32, signum: i32) {
    static ONCE: Once = Once::new();
    if level == 0 {
        return;
    }
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction with a handler that only touches an atomic, for a
        // signal number the kernel checks (an invalid one fails and is reported).
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(signum, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            crate::say!(
                "OMX_DEBUG_SIGNAL: cannot handle signal {signum}: {}",
                std::io::Error::last_os_error()
            );
        }
    });
}

/// Whether a dump was asked for since `seen` (which it updates).
pub fn asked_since(seen: &mut u64) -> bool {
    let now = DUMPS_ASKED.load(Ordering::Relaxed);
    std::mem::replace(seen, now) != now
}
