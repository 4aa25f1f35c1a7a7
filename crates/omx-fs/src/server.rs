//! `omxfsd`: serves the exports to omx clients. One thread receives request headers
//! (a pool of posted receives) and serves the quick ones itself, workers run the
//! others and reply; POSIX locks live in the
//! server's [`LockTable`]; a client silent for longer than the lease (it pings well
//! within it) loses its session: open files closed, locks released.

use crate::export::{check_fd, fstat, sized, Errno, Export, R};
use crate::locks::{self, Lock, LockTable};
use crate::proto::*;
use omx_proto::{PartnerId, StatusCode};
use omx_runtime::{Endpoint, Segment};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Receives posted for request headers at once.
const POSTED: usize = 16;
const WORKERS: usize = 8;
/// How long a worker waits for a write's data or a read's data to be taken.
const DATA_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Options {
    pub read_only: bool,
    pub lease: Duration,
}

struct OpenFile {
    fd: OwnedFd,
    key: locks::FileKey,
}

struct Dir {
    stream: *mut libc::DIR,
}
// SAFETY: a DIR stream is used under its Mutex by one thread at a time.
unsafe impl Send for Dir {}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: the stream was opened by fdopendir and is closed once.
        unsafe { libc::closedir(self.stream) };
    }
}

struct Session {
    export: usize,
    last_seen: Mutex<Instant>,
    files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    dirs: Mutex<HashMap<u64, Arc<Mutex<Dir>>>>,
    next_fh: AtomicU64,
}

/// A blocked F_SETLKW, granted when a lock is released.
struct Waiter {
    reply_to: PartnerId,
    id: u64,
    file: locks::FileKey,
    lock: Lock,
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
        })
    }

    /// Serves forever.
    pub fn run(self: &Arc<Self>) -> ! {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        for _ in 0..WORKERS {
            let (s, rx) = (self.clone(), rx.clone());
            std::thread::spawn(move || loop {
                let job = match rx.lock().expect("job queue").recv() {
                    Ok(j) => j,
                    Err(_) => return,
                };
                s.handle(job);
            });
        }
        let s = self.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            s.expire_sessions();
        });
        let mut bufs: Vec<Vec<u8>> = (0..POSTED).map(|_| vec![0u8; MAX_HEADER]).collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            self.post_header_recv(b, i);
        }
        loop {
            let Some(c) = self.ep.wait_any(kind_bits(Kind::Request), KIND_MASK, None) else {
                continue;
            };
            let slot = c.status.context as usize;
            let st = c.status;
            let ok = st.code == StatusCode::Success && st.msg_length as usize <= MAX_HEADER;
            let job = (ok && slot < POSTED).then(|| Job {
                msg: bufs[slot][..st.xfer_length as usize].to_vec(),
                source: st.source.expect("sender"),
            });
            if slot < POSTED {
                self.post_header_recv(&mut bufs[slot], slot);
            }
            match job {
                Some(j) if self.runs_inline(&j) => self.handle(j),
                Some(j) => tx.send(j).expect("workers"),
                None => {
                    self.counters.malformed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Whether the receiving thread serves a request itself: one that cannot wait on
    /// the network or a slow device (not a large read or write, an open that may be of
    /// a FIFO, an fsync, a fallocate, or the first request of a peer, which connects
    /// back), saving the hand-over to a worker, a thread wake-up per request.
    fn runs_inline(&self, job: &Job) -> bool {
        let Some(op) = job.msg.get(3).and_then(|&b| Op::from_u8(b)) else {
            return false;
        };
        let small_io = || io_len(&job.msg).is_some_and(|n| n as usize <= INLINE_WRITE);
        let quick = match op {
            Op::Hello | Op::Open | Op::Fsync | Op::Fallocate => false,
            Op::Read | Op::Write => small_io(),
            _ => true,
        };
        quick
            && self
                .ep
                .partner_addr(job.source)
                .is_some_and(|(nic, ep, _)| self.backs.lock().contains_key(&(nic, ep)))
    }

    fn post_header_recv(&self, buf: &mut [u8], slot: usize) {
        let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
        // SAFETY: the buffer lives in `run` for the server's lifetime and is only read
        // after this receive completes.
        unsafe {
            self.ep
                .irecv(&[seg], kind_bits(Kind::Request), KIND_MASK, slot as u64)
                .expect("post a request receive");
        }
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
        // SAFETY: what `seg` names stays alive until the send completes (waited for
        // below) or forever (leaked).
        let r = unsafe { self.ep.isend(&[seg], to, match_info, 0, false) };
        if let Ok(r) = r {
            if self.ep.wait(r, Some(DATA_TIMEOUT)).is_none() {
                std::mem::forget(keep);
                self.ep.forget(r);
            }
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

    /// Grants every blocked lock that no longer conflicts.
    fn grant_waiters(&self) {
        let mut granted = Vec::new();
        {
            let mut table = self.locks.lock();
            let mut waiters = self.waiters.lock();
            waiters.retain(|w| {
                if table.set(w.file, w.lock).is_ok() {
                    granted.push((w.reply_to, w.id));
                    false
                } else {
                    true
                }
            });
        }
        for (to, id) in granted {
            self.reply(to, Op::Setlk as u8, id, Ok(Writer::default()));
        }
    }

    fn file(&self, s: &Session, fh: u64) -> Result<Arc<OpenFile>, Dispatch> {
        s.files
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(Dispatch::Errno(libc::EBADF))
    }

    fn add_file(&self, s: &Session, fd: OwnedFd) -> R<(u64, crate::proto::Attr)> {
        let st = fstat(fd.as_raw_fd())?;
        let fh = s.next_fh.fetch_add(1, Ordering::Relaxed);
        let key = (st.st_dev, st.st_ino);
        s.files.lock().insert(fh, Arc::new(OpenFile { fd, key }));
        Ok((fh, crate::proto::Attr::from_stat(&st)))
    }

    fn dispatch(
        &self,
        op: Op,
        h: Header,
        s: &Session,
        r: &mut Reader,
        to: PartnerId,
    ) -> Result<Writer, Dispatch> {
        let ex = &self.exports[s.export];
        let mut w = Writer::default();
        match op {
            Op::Hello => unreachable!("handled before"),
            Op::Ping => {}
            Op::Lookup | Op::Getattr => ex.lstat(r.path()?)?.encode(&mut w),
            Op::Setattr => {
                let path = r.path()?;
                let fh = r.u64()?;
                let (valid, mode, uid, gid) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
                let size = r.u64()?;
                let atime = (r.i64()?, r.u32()?);
                let mtime = (r.i64()?, r.u32()?);
                let file = if fh != 0 {
                    Some(self.file(s, fh)?)
                } else {
                    None
                };
                let fd = file.as_ref().map(|f| f.fd.as_raw_fd());
                ex.setattr(path, fd, valid, mode, uid, gid, size, atime, mtime)?
                    .encode(&mut w)
            }
            Op::Readlink => {
                let t = ex.readlink(r.path()?)?;
                w.bytes(&t);
            }
            // Entry changes end their reply with the parent's stamps (proto::Stamp).
            Op::Mkdir => {
                let path = r.path()?;
                let (mode, uid, gid) = (r.u32()?, r.u32()?, r.u32()?);
                let (a, before, after) = ex.in_dir(path, || ex.mkdir(path, mode, uid, gid))?;
                a.encode(&mut w);
                before.encode(&mut w);
                after.encode(&mut w);
                if let Some(own) = ex.new_dir_stamp(path, &a) {
                    own.encode(&mut w);
                }
            }
            Op::Mknod => {
                let path = r.path()?;
                let (mode, rdev, uid, gid) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
                let made = ex.in_dir(path, || ex.mknod(path, mode, rdev, uid, gid))?;
                encode_made(made, &mut w)
            }
            Op::Symlink => {
                let path = r.path()?;
                let target = r.path()?;
                let (uid, gid) = (r.u32()?, r.u32()?);
                let made = ex.in_dir(path, || ex.symlink(path, target, uid, gid))?;
                encode_made(made, &mut w)
            }
            Op::Unlink => {
                let path = r.path()?;
                encode_made(ex.in_dir(path, || ex.unlink(path))?, &mut w)
            }
            Op::Rmdir => {
                let path = r.path()?;
                encode_made(ex.in_dir(path, || ex.rmdir(path))?, &mut w)
            }
            Op::Rename => {
                let (from, to, flags) = (r.path()?, r.path()?, r.u32()?);
                // The source's parent's stamps, then the target's (the same directory:
                // two changes in a row).
                let ((_, from_before, from_after), to_before, to_after) =
                    ex.in_dir(to, || ex.in_dir(from, || ex.rename(from, to, flags)))?;
                for st in [from_before, from_after, to_before, to_after] {
                    st.encode(&mut w);
                }
            }
            Op::Link => {
                let (from, to) = (r.path()?, r.path()?);
                encode_made(ex.in_dir(to, || ex.link(from, to))?, &mut w)
            }
            Op::Open | Op::Create => {
                let path = r.path()?;
                let flags = r.u32()? as i32;
                let (mode, uid, gid) = (r.u32()?, r.u32()?, r.u32()?);
                // The client's kernel picks write offsets (append included) and handles
                // O_TRUNC through setattr. O_DIRECT stays on the client (its kernel sends
                // the I/O uncached): the server's buffers are not aligned for it.
                let mut flags = flags
                    & !(libc::O_APPEND
                        | libc::O_NOCTTY
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_DIRECT);
                if op == Op::Create {
                    flags |= libc::O_CREAT | libc::O_EXCL;
                }
                if op == Op::Open {
                    let (fh, attr) = self.add_file(s, ex.open_beneath(path, flags, mode)?)?;
                    w.u64(fh);
                    attr.encode(&mut w);
                } else {
                    let (fd, before, after) =
                        ex.in_dir(path, || ex.open_beneath(path, flags, mode))?;
                    // SAFETY: geteuid has no preconditions; fchown on an owned fd.
                    if unsafe { libc::geteuid() } == 0 {
                        unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) };
                    }
                    let (fh, attr) = self.add_file(s, fd)?;
                    w.u64(fh);
                    attr.encode(&mut w);
                    before.encode(&mut w);
                    after.encode(&mut w);
                }
            }
            Op::Read => {
                let (fh, off, size) = (r.u64()?, r.u64()?, r.u32()?);
                if size > MAX_IO {
                    return Err(Dispatch::Errno(libc::EINVAL));
                }
                let f = self.file(s, fh)?;
                let data = match_info(Kind::ReadData, 0, h.id);
                let st = fstat(f.fd.as_raw_fd())?;
                let regular = st.st_mode & libc::S_IFMT == libc::S_IFREG;
                if size as usize > INLINE_WRITE && regular {
                    // Large reads of regular files go straight from the file's pages
                    // into the frames (a file-range segment): no buffer here.
                    let n = (st.st_size as u64).saturating_sub(off).min(size as u64) as usize;
                    w.u32(n as u32);
                    let seg = if n == 0 {
                        Segment::memory(std::ptr::null_mut(), 0)
                    } else {
                        Segment::file(f.fd.as_raw_fd(), off, n)
                    };
                    self.send_lent(to, seg, data, f.clone());
                } else {
                    let mut buf = vec![0u8; size as usize];
                    // SAFETY: buf has `size` bytes.
                    let n = sized(unsafe {
                        libc::pread(
                            f.fd.as_raw_fd(),
                            buf.as_mut_ptr() as *mut libc::c_void,
                            buf.len(),
                            off as i64,
                        )
                    })?;
                    w.u32(n as u32);
                    buf.truncate(n);
                    if size as usize <= INLINE_WRITE {
                        w.0.extend_from_slice(&buf);
                    } else {
                        self.send(to, buf, data);
                    }
                }
            }
            Op::Write => {
                let (fh, off, len) = (r.u64()?, r.u64()?, r.u32()?);
                let f = match self.file(s, fh) {
                    Ok(f) if len <= MAX_IO => f,
                    Ok(_) => return Err(Dispatch::Errno(libc::EINVAL)),
                    Err(e) => {
                        self.discard_write_data(h, len);
                        return Err(e);
                    }
                };
                if len as usize <= INLINE_WRITE {
                    let d = r.rest();
                    if d.len() != len as usize {
                        return Err(Dispatch::Malformed);
                    }
                    // SAFETY: d has d.len() bytes.
                    let n = sized(unsafe {
                        libc::pwrite(
                            f.fd.as_raw_fd(),
                            d.as_ptr() as *const libc::c_void,
                            d.len(),
                            off as i64,
                        )
                    })?;
                    w.u32(n as u32);
                } else {
                    self.recv_into_file(h, &f, off, len)?;
                    w.u32(len);
                }
            }
            Op::Flush => {
                let (fh, owner) = (r.u64()?, r.u64()?);
                let f = self.file(s, fh)?;
                self.locks.lock().release_owner(f.key, (h.word, owner));
                self.grant_waiters();
            }
            Op::Fsync => {
                let (fh, datasync) = (r.u64()?, r.u32()?);
                let f = self.file(s, fh)?;
                let fd = f.fd.as_raw_fd();
                // SAFETY: plain syscalls on a descriptor.
                check_fd(unsafe {
                    if datasync != 0 {
                        libc::fdatasync(fd)
                    } else {
                        libc::fsync(fd)
                    }
                })?;
            }
            Op::Release => {
                let (fh, owner, has_owner) = (r.u64()?, r.u64()?, r.u32()?);
                let f = s.files.lock().remove(&fh).ok_or(libc::EBADF)?;
                if has_owner != 0 {
                    self.locks.lock().release_owner(f.key, (h.word, owner));
                    self.grant_waiters();
                }
            }
            Op::Opendir => {
                let fd = ex.open_beneath(r.path()?, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
                let raw = fd.as_raw_fd();
                // SAFETY: fdopendir takes ownership of the descriptor on success.
                let stream = unsafe { libc::fdopendir(raw) };
                if stream.is_null() {
                    return Err(Dispatch::Errno(libc::EIO));
                }
                std::mem::forget(fd);
                let dir = Dir { stream };
                // A client that asks for it gets the first READDIRPLUS page with the
                // handle: listing a directory then takes one round trip, not two.
                let first_page = r.rest().get(..4).map(|b| {
                    let max = u32::from_le_bytes(b.try_into().expect("4 bytes"));
                    let mut page = Writer::default();
                    read_dir_page(&dir, 0, max as usize, true, &mut page);
                    page
                });
                let fh = s.next_fh.fetch_add(1, Ordering::Relaxed);
                s.dirs.lock().insert(fh, Arc::new(Mutex::new(dir)));
                w.u64(fh);
                if let Some(mut page) = first_page {
                    w.0.append(&mut page.0);
                }
            }
            Op::Readdir | Op::Readdirplus => {
                let (fh, off, max) = (r.u64()?, r.i64()?, r.u32()?);
                let d = s.dirs.lock().get(&fh).cloned().ok_or(libc::EBADF)?;
                read_dir_page(&d.lock(), off, max as usize, op == Op::Readdirplus, &mut w);
            }
            Op::Releasedir => {
                s.dirs.lock().remove(&r.u64()?).ok_or(libc::EBADF)?;
            }
            Op::Statfs => {
                let st = ex.statfs()?;
                w.u64(st.f_blocks).u64(st.f_bfree).u64(st.f_bavail);
                w.u64(st.f_files).u64(st.f_ffree).u32(st.f_bsize as u32);
                w.u32(st.f_namemax as u32).u32(st.f_frsize as u32);
            }
            Op::Setxattr => {
                let (path, name, value, flags) = (r.path()?, r.path()?, r.bytes()?, r.u32()?);
                let name = std::ffi::CString::new(name).map_err(|_| libc::EINVAL)?;
                ex.xattr(path, Err(libc::EPERM), |p| {
                    // SAFETY: valid strings and value buffer.
                    check_fd(unsafe {
                        libc::setxattr(
                            p,
                            name.as_ptr(),
                            value.as_ptr() as *const libc::c_void,
                            value.len(),
                            flags as i32,
                        )
                    })
                    .map(|_| ())
                })?
            }
            Op::Getxattr | Op::Listxattr => {
                let path = r.path()?;
                let name = if op == Op::Getxattr {
                    Some(std::ffi::CString::new(r.path()?).map_err(|_| libc::EINVAL)?)
                } else {
                    None
                };
                let size = (r.u32()? as usize).min(MAX_HEADER - 64);
                let mut buf = vec![0u8; size];
                let empty = if name.is_some() {
                    Err(libc::ENODATA)
                } else {
                    Ok(0)
                };
                let n = ex.xattr(path, empty, |p| {
                    let (ptr, len) = (buf.as_mut_ptr() as *mut libc::c_void, buf.len());
                    // SAFETY: valid strings and a buffer of len bytes (0 = size query).
                    sized(unsafe {
                        match &name {
                            Some(n) => libc::getxattr(p, n.as_ptr(), ptr, len),
                            None => libc::listxattr(p, ptr as *mut libc::c_char, len),
                        }
                    })
                })?;
                w.u32(n as u32);
                if size > 0 {
                    w.0.extend_from_slice(&buf[..n]);
                }
            }
            Op::Removexattr => {
                let (path, name) = (r.path()?, r.path()?);
                let name = std::ffi::CString::new(name).map_err(|_| libc::EINVAL)?;
                ex.xattr(path, Err(libc::EPERM), |p| {
                    // SAFETY: valid strings.
                    check_fd(unsafe { libc::removexattr(p, name.as_ptr()) }).map(|_| ())
                })?
            }
            Op::Getlk | Op::Setlk => {
                let (fh, owner, start, end) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                let (typ, pid, sleep) = (r.u32()? as i32, r.u32()?, r.u32()?);
                if ![locks::F_RDLCK, locks::F_WRLCK, locks::F_UNLCK].contains(&typ) || start > end {
                    return Err(Dispatch::Errno(libc::EINVAL));
                }
                let f = self.file(s, fh)?;
                let lock = Lock {
                    owner: (h.word, owner),
                    start,
                    end,
                    typ,
                    pid,
                };
                if op == Op::Getlk {
                    let c = self.locks.lock().conflict(f.key, &lock);
                    let c = c.unwrap_or(Lock {
                        typ: locks::F_UNLCK,
                        ..lock
                    });
                    w.u64(c.start).u64(c.end).u32(c.typ as u32).u32(c.pid);
                } else {
                    let res = self.locks.lock().set(f.key, lock);
                    match res {
                        Ok(()) if typ == locks::F_UNLCK => self.grant_waiters(),
                        Ok(()) => {}
                        Err(_) if sleep != 0 => {
                            self.waiters.lock().push(Waiter {
                                reply_to: to,
                                id: h.id,
                                file: f.key,
                                lock,
                            });
                            // A release between the try and the queueing is not lost.
                            self.grant_waiters();
                            return Err(Dispatch::Deferred);
                        }
                        Err(_) => return Err(Dispatch::Errno(libc::EAGAIN)),
                    }
                }
            }
            Op::CancelLockWait => {
                // The waiter's F_SETLKW was interrupted on the client: it is withdrawn
                // and answered EINTR; ENOENT when it was already granted (its reply
                // is on the way).
                let target = r.u64()?;
                let mut waiters = self.waiters.lock();
                let at = waiters
                    .iter()
                    .position(|w| w.lock.owner.0 == h.word && w.id == target)
                    .ok_or(libc::ENOENT)?;
                let w = waiters.remove(at);
                drop(waiters);
                self.reply(w.reply_to, Op::Setlk as u8, w.id, Err(libc::EINTR));
            }
            Op::Fallocate => {
                let (fh, off, len, mode) = (r.u64()?, r.u64()?, r.u64()?, r.u32()?);
                let f = self.file(s, fh)?;
                // SAFETY: plain syscall on a descriptor.
                check_fd(unsafe {
                    libc::fallocate(f.fd.as_raw_fd(), mode as i32, off as i64, len as i64)
                })?;
            }
        }
        Ok(w)
    }

    /// The data message of a large write, received straight into the file range it
    /// writes (a file-range segment: no buffer here).
    fn recv_into_file(
        &self,
        h: Header,
        f: &Arc<OpenFile>,
        off: u64,
        len: u32,
    ) -> Result<(), Dispatch> {
        let seg = Segment::file(f.fd.as_raw_fd(), off, len as usize);
        let m = match_info(Kind::WriteData, h.word, h.id);
        // SAFETY: the file stays open until the receive completes (its handle is held
        // here), or forever if the receive is still lent when given up.
        let req = match unsafe { self.ep.irecv(&[seg], m, u64::MAX, 0) } {
            Ok(req) => req,
            // The descriptor is not open for writing (or not seekable).
            Err(omx_runtime::Error::Segment(_)) => return Err(Dispatch::Errno(libc::EBADF)),
            Err(_) => return Err(Dispatch::Errno(libc::EIO)),
        };
        match self.ep.wait(req, Some(DATA_TIMEOUT)) {
            Some(c) if c.status.code == StatusCode::Success && c.status.msg_length == len => Ok(()),
            Some(c) if c.status.code == StatusCode::Success => Err(Dispatch::Malformed),
            Some(_) => Err(Dispatch::Errno(libc::EIO)),
            None => {
                if !matches!(self.ep.cancel(req), Ok(true)) {
                    std::mem::forget(f.clone());
                    self.ep.forget(req);
                }
                Err(Dispatch::Errno(libc::EIO))
            }
        }
    }
}

/// The length of a read or write request (it carries (fh, offset, length) right after
/// the header), read before the request is decoded.
/// The reply to an entry change: what it returns (attributes, or nothing), then the
/// parent's stamps.
fn encode_made<T: EncodeMade>((v, before, after): (T, Stamp, Stamp), w: &mut Writer) {
    v.encode_made(w);
    before.encode(w);
    after.encode(w);
}

trait EncodeMade {
    fn encode_made(&self, w: &mut Writer);
}

impl EncodeMade for () {
    fn encode_made(&self, _: &mut Writer) {}
}

impl EncodeMade for Attr {
    fn encode_made(&self, w: &mut Writer) {
        self.encode(w)
    }
}

fn io_len(msg: &[u8]) -> Option<u32> {
    msg.get(32..36)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

/// Directory entries from offset `off` on, as many as fit in `max` bytes of the
/// client kernel's buffer: each is (ino, offset of the next, d_type, name) and, with
/// `plus` (READDIRPLUS), a flag and the entry's attributes (`lstat` beneath the
/// directory: the name is one component, never followed), so that a listing brings
/// what a `stat` of every entry would ask for. `.` and `..` carry none (the kernel
/// does not look them up; `..` of the export's root is outside it).
fn read_dir_page(d: &Dir, off: i64, max: usize, plus: bool, w: &mut Writer) {
    // SAFETY: the stream is valid while `d` is held.
    unsafe {
        if off == 0 {
            libc::rewinddir(d.stream);
        } else {
            libc::seekdir(d.stream, off as libc::c_long);
        }
    }
    // What an entry takes in the kernel's buffer (struct fuse_dirent[plus]).
    let kernel_size = |name: usize| {
        let dirent = (24 + name + 7) & !7;
        if plus {
            128 + dirent
        } else {
            dirent
        }
    };
    let mut entries = Vec::new();
    let (mut used, mut ours) = (0usize, 0usize);
    let end = loop {
        // SAFETY: as above.
        let pos = unsafe { libc::telldir(d.stream) };
        // SAFETY: as above; the entry stays valid until the next readdir.
        let e = unsafe { libc::readdir(d.stream) };
        if e.is_null() {
            break true;
        }
        // SAFETY: a non-null entry from readdir.
        let (ino, typ, name) = unsafe {
            let e = &*e;
            let name = std::ffi::CStr::from_ptr(e.d_name.as_ptr());
            (e.d_ino, e.d_type, name.to_owned())
        };
        let len = name.to_bytes().len();
        ours += 8 + 8 + 1 + 4 + len + if plus { 1 + ATTR_SIZE } else { 0 };
        used += kernel_size(len);
        if used > max || ours > MAX_HEADER - 64 {
            // SAFETY: as above.
            unsafe { libc::seekdir(d.stream, pos) };
            break false;
        }
        // SAFETY: as above.
        let next = unsafe { libc::telldir(d.stream) };
        entries.push((ino, next as i64, typ, name));
    };
    let stats = if plus {
        lstat_entries(d, &entries)
    } else {
        Vec::new()
    };
    w.u32(entries.len() as u32);
    for (i, (ino, next, typ, name)) in entries.iter().enumerate() {
        w.u64(*ino).i64(*next).u8(*typ).bytes(name.to_bytes());
        if plus {
            match &stats[i] {
                Some(st) => {
                    w.u8(1);
                    Attr::from_stat(st).encode(w);
                }
                None => {
                    w.u8(0);
                }
            }
        }
    }
    // The listing ends here: the client answers the kernel's next page itself.
    w.u8(end as u8);
}

/// Entries a page's `lstat`s fan out to once one of them was slow (the inodes are
/// not cached: each is a disk read, and the disk serves several at once).
const STAT_THREADS: usize = 8;
const SLOW_STAT: Duration = Duration::from_micros(200);

/// The attributes of a listing's entries (None for `.`, `..` and entries gone
/// meanwhile), in parallel when the first one shows they come from the disk.
fn lstat_entries(
    d: &Dir,
    entries: &[(u64, i64, u8, std::ffi::CString)],
) -> Vec<Option<libc::stat>> {
    // SAFETY: the stream is valid while `d` is held (until this returns).
    let fd = unsafe { libc::dirfd(d.stream) };
    let is_dot = |name: &std::ffi::CString| matches!(name.to_bytes(), b"." | b"..");
    let stat = |name: &std::ffi::CString| (!is_dot(name)).then(|| lstat_at(fd, name)).flatten();
    let mut out: Vec<Option<libc::stat>> = Vec::with_capacity(entries.len());
    let t0 = Instant::now();
    // Time the first real entry's lstat.
    while out.len() < entries.len() {
        let name = &entries[out.len()].3;
        out.push(stat(name));
        if !is_dot(name) {
            break;
        }
    }
    let rest = &entries[out.len()..];
    if t0.elapsed() < SLOW_STAT || rest.len() < 2 {
        out.extend(rest.iter().map(|e| stat(&e.3)));
        return out;
    }
    let chunk = rest.len().div_ceil(STAT_THREADS);
    std::thread::scope(|sc| {
        let parts: Vec<_> = rest
            .chunks(chunk)
            .map(|part| sc.spawn(move || part.iter().map(|e| stat(&e.3)).collect::<Vec<_>>()))
            .collect();
        for p in parts {
            out.extend(p.join().expect("lstat thread"));
        }
    });
    out
}

/// `lstat` of one entry of a directory (None if it went away meanwhile).
fn lstat_at(dirfd: i32, name: &std::ffi::CStr) -> Option<libc::stat> {
    // SAFETY: zeroed stat is a valid out-parameter; the descriptor and the name are
    // valid; the name is one component and is not followed.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstatat(dirfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0).then_some(st)
    }
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
