//! POSIX byte-range locks, kept by the server (`F_GETLK`, `F_SETLK`, `F_SETLKW`); a
//! blocked `F_SETLKW` is withdrawn when its caller is interrupted. A lock taken drops
//! the kernel's cached pages of the file first (what another client wrote under its
//! lock is read from the server, as an NFS client revalidates at a lock).

use super::conn::Conn;
use super::request::{body, req};
use super::OmxFs;
use crate::proto::*;
use fuser::Notifier;
use fuser::{ReplyEmpty, ReplyLock};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A granted lock's answer (if any), given once the kernel dropped the file's pages.
type Grant = (Arc<OnceLock<Notifier>>, u64, Option<ReplyEmpty>);

/// The thread that drops a locked file's cached pages and then answers the lock: the
/// kernel waits for each page under a read, whose reply comes from the completion
/// thread and whose request from the FUSE thread, so neither may wait for it.
fn grants() -> &'static Mutex<Sender<Grant>> {
    static GRANTS: OnceLock<Mutex<Sender<Grant>>> = OnceLock::new();
    GRANTS.get_or_init(|| {
        let (tx, rx) = channel::<Grant>();
        std::thread::spawn(move || {
            for (notifier, ino, reply) in rx {
                if let Some(n) = notifier.get() {
                    // Offset 0, length 0: every page, and the attributes (the size a
                    // read is cut at). An inode the kernel no longer has: nothing cached.
                    let _ = n.inval_inode(ino, 0, 0);
                }
                if let Some(reply) = reply {
                    reply.ok();
                }
            }
        });
        Mutex::new(tx)
    })
}

/// How often a blocked F_SETLKW's caller is checked for a signal.
const LOCK_WAIT_POLL: Duration = Duration::from_millis(50);

/// Has the kernel drop its cached pages and attributes of node `ino`, from the thread
/// that does so for locks (never the completion thread: it may wait for a read's reply).
pub(super) fn drop_pages(notifier: Arc<OnceLock<Notifier>>, ino: u64) {
    let _ = grants().lock().map(|g| g.send((notifier, ino, None)));
}

/// Withdraws a blocked F_SETLKW on the server once its caller has a signal pending, so
/// that the kernel gets EINTR (the server answers the wait so) and no grant comes later.
/// fuser 0.15 answers the kernel's FUSE_INTERRUPT itself with ENOSYS, after which the
/// kernel sends none and leaves the caller waiting with the signal pending: this thread
/// looks for that signal in /proc instead.
fn watch_lock_wait(conn: Arc<Conn>, id: u64, tid: u32, answered: Arc<AtomicBool>) {
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

/// A lock or unlock of a byte range, as the kernel describes it.
pub(super) struct LockRange {
    owner: u64,
    start: u64,
    end: u64,
    typ: i32,
    pid: u32,
}

impl LockRange {
    pub fn new(owner: u64, start: u64, end: u64, typ: i32, pid: u32) -> LockRange {
        LockRange {
            owner,
            start,
            end,
            typ,
            pid,
        }
    }

    fn encode(&self, w: &mut Writer, server_fh: u64, sleep: bool) {
        w.u64(server_fh)
            .u64(self.owner)
            .u64(self.start)
            .u64(self.end);
        w.u32(self.typ as u32).u32(self.pid).u32(sleep as u32);
    }
}

impl OmxFs {
    pub(super) fn get_lock(&self, fh: u64, range: LockRange, reply: ReplyLock) {
        let build = move |fh| {
            let mut w = req(Op::Getlk);
            range.encode(&mut w, fh, false);
            w
        };
        self.send_fh(fh, build, None, 0, move |r| {
            match body(r, |_, rd| Ok((rd.u64()?, rd.u64()?, rd.u32()?, rd.u32()?))) {
                Ok((s, e, t, p)) => reply.locked(s, e, t as i32, p),
                Err(e) => reply.error(e),
            }
        });
    }

    /// `tid`: the caller's, watched for a signal while a `F_SETLKW` waits.
    pub(super) fn set_lock(
        &self,
        ino: u64,
        fh: u64,
        range: LockRange,
        sleep: bool,
        tid: u32,
        reply: ReplyEmpty,
    ) {
        // A lock released after writes lets another client read them.
        self.sh.drain();
        let server_fh = match self.sh.server_fh(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        if let Some(h) = self.sh.handles.lock().map.get_mut(&fh) {
            h.locked = true;
        }
        let mut w = req(Op::Setlk);
        range.encode(&mut w, server_fh, sleep);
        let id = self.sh.conn.new_id();
        let answered = Arc::new(AtomicBool::new(false));
        let a2 = answered.clone();
        // A lock (not an unlock) makes the file's cached pages stale: data another client
        // wrote under its lock, released before this one was granted, must be read anew.
        // A database (SQLite's rollback journal) reads its pages under a lock and
        // writes them back: with the old pages it silently undid the other client's
        // transactions.
        let lock = range.typ != libc::F_UNLCK;
        let notifier = self.sh.notifier.clone();
        // A lock wait may last: the pings, not a request timeout, bound it.
        self.sh.conn.submit_as(
            id,
            w,
            None,
            0,
            !sleep,
            Box::new(move |r| {
                a2.store(true, Ordering::Release);
                match r {
                    Ok(_) if lock => {
                        let _ = grants()
                            .lock()
                            .map(|g| g.send((notifier, ino, Some(reply))));
                    }
                    Ok(_) => reply.ok(),
                    // The server restarted under the wait: no lock.
                    Err(libc::EBADR) => reply.error(libc::EIO),
                    Err(e) => reply.error(e),
                }
            }),
        );
        if sleep {
            watch_lock_wait(self.sh.conn.clone(), id, tid, answered);
        }
    }
}
