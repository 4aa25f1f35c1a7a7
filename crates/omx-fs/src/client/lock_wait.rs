//! A blocked `F_SETLKW` withdrawn when its caller is interrupted.

use super::conn::Conn;
use super::req;
use crate::proto::Op;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a blocked F_SETLKW's caller is checked for a signal.
const LOCK_WAIT_POLL: Duration = Duration::from_millis(50);

/// Withdraws a blocked F_SETLKW on the server once its caller has a signal pending, so
/// that the kernel gets EINTR (the server answers the wait so) and no grant comes later.
/// fuser 0.15 answers the kernel's FUSE_INTERRUPT itself with ENOSYS, after which the
/// kernel sends none and leaves the caller waiting with the signal pending: this thread
/// looks for that signal in /proc instead.
pub fn watch_lock_wait(conn: Arc<Conn>, id: u64, tid: u32, answered: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        while !answered.load(Ordering::Acquire) {
            std::thread::sleep(LOCK_WAIT_POLL);
            if signal_pending(tid) && !answered.load(Ordering::Acquire) {
                let mut w = req(Op::CancelLockWait);
                w.u64(id);
                // ENOENT: granted meanwhile, its reply is on the way.
                conn.submit(w, None, 0, true, Box::new(|_| {}));
                return;
            }
        }
    });
}

/// Whether thread `tid` has an unblocked signal pending (or is gone).
fn signal_pending(tid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    (field("SigPnd:") | field("ShdPnd:")) & !field("SigBlk:") != 0
}
