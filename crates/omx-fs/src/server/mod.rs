//! `omxfsd`: serves the exports to omx clients. A pool of threads takes turns to
//! receive request headers (server/pool.rs), each serving what it received; POSIX
//! locks live in the server's [`LockTable`]; a client silent for longer than the lease (it pings well
//! within it) loses its session: open files closed, locks released.

mod attrs;
mod dirs;
mod entries;
mod files;
mod locking;
mod pool;

use dirs::Dir;
use locking::Waiter;

use crate::export::{check_fd, fstat, sized, Errno, Export, R};
use crate::locks::{self, Lock, LockTable};
use crate::proto::*;
use omx_proto::{PartnerId, ReqId, StatusCode};
use omx_runtime::{Endpoint, Segment};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Receives posted for request headers at once.
const POSTED: usize = 16;
/// Threads serving requests unless told (`--threads`): enough for a few slow requests
/// (creates, fsyncs, large transfers) to leave the others served.
pub const DEFAULT_THREADS: usize = 8;
/// How long a worker waits for a write's data or a read's data to be taken.
const DATA_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Options {
    pub read_only: bool,
    pub lease: Duration,
    /// Threads serving requests (server/pool.rs).
    pub threads: usize,
}

struct OpenFile {
    fd: OwnedFd,
    key: locks::FileKey,
    /// Opened with `O_APPEND`: every write goes at the file's end (see `Op::Write`).
    append: bool,
    /// Where the last large read ended and how far the disk was asked to read ahead
    /// (`read_ahead`).
    read_end: AtomicU64,
    advised_end: AtomicU64,
}

struct Session {
    export: usize,
    last_seen: Mutex<Instant>,
    files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    dirs: Mutex<HashMap<u64, Arc<Mutex<Dir>>>>,
    next_fh: AtomicU64,
}

/// What the server has seen; `omxfsd` prints them on `SIGUSR1` (docs/FILES.md).
pub struct Counters {
    pub requests: AtomicU64,
    /// Messages that do not decode (no reply when even the header is unreadable, else
    /// `EPROTO`).
    pub malformed: AtomicU64,
    pub unknown_session: AtomicU64,
    pub expired_sessions: AtomicU64,
    /// Requests by operation code (what a workload costs in round trips).
    pub by_op: [AtomicU64; 64],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            requests: AtomicU64::new(0),
            malformed: AtomicU64::new(0),
            unknown_session: AtomicU64::new(0),
            expired_sessions: AtomicU64::new(0),
            by_op: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        write!(
            f,
            "requests={} malformed={} unknown_session={} expired_sessions={}",
            get(&self.requests),
            get(&self.malformed),
            get(&self.unknown_session),
            get(&self.expired_sessions)
        )?;
        for (code, n) in self.by_op.iter().enumerate() {
            let n = get(n);
            if let (true, Some(op)) = (n > 0, Op::from_u8(code as u8)) {
                write!(f, " {op:?}={n}")?;
            }
        }
        Ok(())
    }
}

pub struct Server {
    ep: Endpoint,
    exports: Vec<Export>,
    opts: Options,
    sessions: Mutex<HashMap<u32, Arc<Session>>>,
    next_session: AtomicU32,
    locks: Mutex<LockTable>,
    waiters: Mutex<Vec<Waiter>>,
    /// The partner to reply to, by the sender's (nic, endpoint).
    backs: Mutex<HashMap<(u64, u8), PartnerId>>,
    pub counters: Counters,
    pool: pool::Pool,
}

struct Job {
    msg: Vec<u8>,
    source: PartnerId,
}

fn now_secs_seed() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u32 ^ std::process::id().rotate_left(16)) & SESSION_MASK
}

impl Server {
    pub fn new(ep: Endpoint, exports: Vec<Export>, opts: Options) -> Arc<Server> {
        Arc::new(Server {
            ep,
            exports,
            opts,
            sessions: Mutex::new(HashMap::new()),
            next_session: AtomicU32::new(now_secs_seed()),
            locks: Mutex::new(LockTable::default()),
            waiters: Mutex::new(Vec::new()),
            backs: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            pool: pool::Pool::default(),
        })
    }

    /// The partner replies go to: a connection back to the sender, made once.
    fn reply_partner(&self, source: PartnerId) -> Option<PartnerId> {
        let (nic, ep, _) = self.ep.partner_addr(source)?;
        if let Some(p) = self.backs.lock().get(&(nic, ep)) {
            return Some(*p);
        }
        let p = match self.ep.connect(nic, ep, KEY, Some(Duration::from_secs(10))) {
            Ok(Ok(p)) => p,
            _ => return None,
        };
        self.backs.lock().insert((nic, ep), p);
        Some(p)
    }

    fn send(&self, to: PartnerId, bytes: Vec<u8>, match_info: u64) {
        let seg = Segment::memory(bytes.as_ptr() as *mut u8, bytes.len());
        self.send_lent(to, seg, match_info, bytes);
    }

    /// Sends `seg`, backed by what `keep` owns (a buffer, or the open file of a file
    /// range), and waits. A client gone mid-send leaves the engine holding the
    /// segment: `keep` is then leaked so nothing it names is freed or reused.
    fn send_lent<K>(&self, to: PartnerId, seg: Segment, match_info: u64, keep: K) {
        if let Some(r) = self.post_lent(to, seg, match_info) {
            self.finish_lent(r, keep);
        }
    }

    /// Posts the send of [`Server::send_lent`]; [`Server::finish_lent`] must follow
    /// with what backs `seg`.
    fn post_lent(&self, to: PartnerId, seg: Segment, match_info: u64) -> Option<ReqId> {
        // SAFETY: what `seg` names stays alive until the send completes (waited for
        // in finish_lent) or forever (leaked there).
        unsafe { self.ep.isend(&[seg], to, match_info, 0, false) }.ok()
    }

    fn finish_lent<K>(&self, r: ReqId, keep: K) {
        if self.ep.wait(r, Some(DATA_TIMEOUT)).is_none() {
            std::mem::forget(keep);
            self.ep.forget(r);
        }
    }

    fn reply(&self, to: PartnerId, op: u8, id: u64, res: R<Writer>) {
        let w = match res {
            Ok(mut body) => {
                let mut w = Writer::reply(op, 0, id);
                w.0.append(&mut body.0);
                w
            }
            Err(e) => Writer::reply(op, e, id),
        };
        self.send(to, w.0, match_info(Kind::Reply, 0, id));
    }

    fn handle(&self, job: Job) {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let mut r = Reader::new(&job.msg);
        let Ok(h) = decode_header(&mut r) else {
            // No id to answer to: count it.
            self.counters.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some(to) = self.reply_partner(job.source) else {
            return;
        };
        if let Some(n) = self.counters.by_op.get(h.op as usize) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let Some(op) = Op::from_u8(h.op) else {
            self.counters.malformed.fetch_add(1, Ordering::Relaxed);
            return self.reply(to, h.op, h.id, Err(libc::EPROTO));
        };
        let refused_write = |s: &Self| match io_len(&job.msg) {
            Some(n) if op == Op::Write => s.discard_write_data(h, n),
            _ => {}
        };
        let res = if op == Op::Hello {
            self.hello(&mut r)
        } else {
            let Some(sess) = self.sessions.lock().get(&h.word).cloned() else {
                self.counters
                    .unknown_session
                    .fetch_add(1, Ordering::Relaxed);
                refused_write(self);
                return self.reply(to, h.op, h.id, Err(libc::EBADR));
            };
            *sess.last_seen.lock() = Instant::now();
            if self.opts.read_only && op.mutates() {
                refused_write(self);
                return self.reply(to, h.op, h.id, Err(libc::EROFS));
            }
            self.dispatch(op, h, &sess, &mut r, to)
        };
        match res {
            Err(Dispatch::Malformed) => {
                self.counters.malformed.fetch_add(1, Ordering::Relaxed);
                self.reply(to, h.op, h.id, Err(libc::EPROTO))
            }
            Err(Dispatch::Errno(e)) => self.reply(to, h.op, h.id, Err(e)),
            Err(Dispatch::Deferred) => {}
            Ok(w) => self.reply(to, h.op, h.id, Ok(w)),
        }
    }

    /// The data message of a large write refused before it was received (unknown
    /// session, no such handle, read-only): taken into nothing (a zero-length receive,
    /// not waited for), so that the client's send completes and nothing is left
    /// unexpected here.
    fn discard_write_data(&self, h: Header, len: u32) {
        if len as usize <= INLINE_WRITE {
            return;
        }
        let seg = Segment::memory(std::ptr::null_mut(), 0);
        let m = match_info(Kind::WriteData, h.word, h.id);
        // SAFETY: an empty segment names no memory.
        if let Ok(r) = unsafe { self.ep.irecv(&[seg], m, u64::MAX, 0) } {
            self.ep.forget(r);
        }
    }

    fn hello(&self, r: &mut Reader) -> Result<Writer, Dispatch> {
        let name = r.bytes()?;
        let export = self
            .exports
            .iter()
            .position(|e| e.name.as_bytes() == name)
            .ok_or(libc::ENOENT)?;
        let attr = self.exports[export].lstat(b"")?;
        let id = loop {
            let id = self.next_session.fetch_add(1, Ordering::Relaxed) & SESSION_MASK;
            if id != 0 && !self.sessions.lock().contains_key(&id) {
                break id;
            }
        };
        self.sessions.lock().insert(
            id,
            Arc::new(Session {
                export,
                last_seen: Mutex::new(Instant::now()),
                files: Mutex::new(HashMap::new()),
                dirs: Mutex::new(HashMap::new()),
                next_fh: AtomicU64::new(1),
            }),
        );
        let mut w = Writer::default();
        w.u32(id).u32(MAX_IO).u32(self.opts.read_only as u32);
        w.u32(self.opts.lease.as_millis() as u32);
        attr.encode(&mut w);
        Ok(w)
    }

    fn expire_sessions(&self) {
        let lease = self.opts.lease;
        let gone: Vec<u32> = self
            .sessions
            .lock()
            .iter()
            .filter(|(_, s)| s.last_seen.lock().elapsed() > lease)
            .map(|(id, _)| *id)
            .collect();
        if gone.is_empty() {
            return;
        }
        for id in &gone {
            self.sessions.lock().remove(id);
            self.locks.lock().release_session(*id);
            self.waiters.lock().retain(|w| w.lock.owner.0 != *id);
            self.counters
                .expired_sessions
                .fetch_add(1, Ordering::Relaxed);
            eprintln!("omxfsd: session {id} expired (client silent); its files and locks released");
        }
        self.grant_waiters();
    }

    fn file(&self, s: &Session, fh: u64) -> Result<Arc<OpenFile>, Dispatch> {
        s.files
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(Dispatch::Errno(libc::EBADF))
    }

    fn dispatch(
        &self,
        op: Op,
        h: Header,
        s: &Session,
        r: &mut Reader,
        to: PartnerId,
    ) -> Result<Writer, Dispatch> {
        let call = Call { op, h, s, to };
        match op {
            Op::Hello => unreachable!("handled before"),
            Op::Ping => Ok(Writer::default()),
            Op::Lookup
            | Op::Getattr
            | Op::Setattr
            | Op::Readlink
            | Op::Statfs
            | Op::Setxattr
            | Op::Getxattr
            | Op::Listxattr
            | Op::Removexattr => self.attr_op(call, r),
            Op::Mkdir
            | Op::Mknod
            | Op::Symlink
            | Op::Unlink
            | Op::Rmdir
            | Op::Rename
            | Op::Link => self.entry_op(call, r),
            Op::Open
            | Op::Create
            | Op::Read
            | Op::Write
            | Op::Flush
            | Op::Fsync
            | Op::Release
            | Op::Fallocate
            | Op::Lseek => self.file_op(call, r),
            Op::Opendir | Op::Readdir | Op::Readdirplus | Op::Releasedir => self.dir_op(call, r),
            Op::Getlk | Op::Setlk | Op::CancelLockWait => self.lock_op(call, r),
        }
    }
}

/// The length of a read or write request (it carries (fh, offset, length) right after
/// the header), read before the request is decoded.
fn io_len(msg: &[u8]) -> Option<u32> {
    msg.get(32..36)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

/// A decoded request's header, its session and where to reply: what the op handlers
/// share.
#[derive(Clone, Copy)]
struct Call<'a> {
    op: Op,
    h: Header,
    s: &'a Session,
    to: PartnerId,
}

enum Dispatch {
    Errno(Errno),
    Malformed,
    /// The reply is sent later (a blocked lock).
    Deferred,
}

impl From<Errno> for Dispatch {
    fn from(e: Errno) -> Self {
        Dispatch::Errno(e)
    }
}

impl From<Malformed> for Dispatch {
    fn from(_: Malformed) -> Self {
        Dispatch::Malformed
    }
}
