//! A mount's connection to the server: requests in flight by id, a completion thread
//! that finishes them, pings within the server's lease, and reconnection.
//!
//! Bounded failure: a request unanswered for the timeout (a lock wait excepted, which
//! the pings cover) marks the server down: every request in flight fails with `EIO`,
//! new ones with `ENOTCONN` until a reconnect (a new session) succeeds: tried by the
//! pings, and by a request made while disconnected (at most one attempt per
//! [`RECONNECT_GAP`], each bounded by the timeout).

use crate::proto::*;
use omx_proto::{NicId, PartnerId, RequestKind, StatusCode};
use omx_runtime::{Endpoint, Segment};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A failed reconnect is not retried sooner than this (requests made meanwhile fail
/// at once with `ENOTCONN` instead of each waiting for the timeout).
pub const RECONNECT_GAP: Duration = Duration::from_secs(1);

/// What a finished request hands its callback: the reply body (after the header) and
/// the read data, or an errno.
pub struct Reply {
    pub body: Vec<u8>,
    pub data: Vec<u8>,
}

pub type Done = Box<dyn FnOnce(Result<Reply, i32>) + Send>;

struct Pending {
    header: Vec<u8>,
    header_req: omx_proto::ReqId,
    data: Option<(Vec<u8>, omx_proto::ReqId)>,
    /// The header, sent by reference: alive until its send completes.
    sent: Vec<Vec<u8>>,
    /// A large write's data, sent by reference (shared with a retry).
    write: Option<Arc<Vec<u8>>>,
    parts_left: u32,
    reply: Option<(i32, usize)>,
    data_len: usize,
    deadline: Option<Instant>,
    done: Option<Done>,
}

struct State {
    server: Option<PartnerId>,
    session: u32,
    /// Bumped at each new session: handles of an older one are stale.
    generation: u64,
}

pub struct Conn {
    ep: Endpoint,
    server_nic: NicId,
    server_index: u8,
    export: String,
    pub timeout: Duration,
    state: Mutex<State>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    pub root_attr: Mutex<Attr>,
    pub read_only: Mutex<bool>,
    connected: (Mutex<Option<Result<PartnerId, StatusCode>>>, Condvar),
    /// Held while a reconnect runs (one at a time), with when the last one failed.
    reconnecting: Mutex<Option<Instant>>,
    /// A ping's reconnect thread is under way.
    ping_reconnecting: AtomicBool,
    /// Large reads' receive buffers, given back once their data is in FUSE's reply:
    /// a fresh 1 MiB buffer costs 256 page faults and its zeroing at every read.
    read_bufs: Mutex<Vec<Vec<u8>>>,
}

/// Read buffers kept for reuse: the reads the kernel keeps in flight at once.
const READ_BUFS_KEPT: usize = 16;

impl Conn {
    pub fn new(
        ep: Endpoint,
        server_nic: NicId,
        server_index: u8,
        export: &str,
        timeout: Duration,
    ) -> Arc<Conn> {
        Arc::new(Conn {
            ep,
            server_nic,
            server_index,
            export: export.to_string(),
            timeout,
            state: Mutex::new(State {
                server: None,
                session: 0,
                generation: 0,
            }),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            root_attr: Mutex::new(Attr::default()),
            read_only: Mutex::new(false),
            connected: (Mutex::new(None), Condvar::new()),
            reconnecting: Mutex::new(None),
            ping_reconnecting: AtomicBool::new(false),
            read_bufs: Mutex::new(Vec::new()),
        })
    }

    pub fn generation(&self) -> u64 {
        self.state.lock().generation
    }

    /// Whether a session is open (as far as this side knows).
    pub fn connected(&self) -> bool {
        self.state.lock().server.is_some()
    }

    /// Opens a new session unless one newer than generation `seen` is already open
    /// (blocking; never on the completion thread, which the hello's reply goes
    /// through). The old session's requests still in flight fail with `EBADR` (a
    /// caller retries those). A failed attempt is not repeated for [`RECONNECT_GAP`]
    /// unless `now` (a retry, on a thread of its own: waiting blocks nothing else).
    pub fn reconnect(self: &Arc<Self>, seen: u64, now: bool) -> Result<(), String> {
        let mut failed_at = self.reconnecting.lock();
        {
            let st = self.state.lock();
            if st.generation != seen && st.server.is_some() {
                return Ok(());
            }
        }
        if !now && failed_at.is_some_and(|t| t.elapsed() < RECONNECT_GAP) {
            return Err("the server is not answering".into());
        }
        self.server_down(libc::EBADR);
        let res = self.hello();
        match &res {
            Ok(()) => {
                *failed_at = None;
                eprintln!("omxfs: reconnected to the server (new session)");
            }
            Err(e) => {
                self.state.lock().server = None;
                *failed_at = Some(Instant::now());
                eprintln!("omxfs: reconnect: {e}");
            }
        }
        res
    }

    /// Connects and opens a session (blocking).
    pub fn hello(self: &Arc<Self>) -> Result<(), String> {
        // The completion thread takes every completion: it hands the connect's over.
        *self.connected.0.lock() = None;
        let r = self
            .ep
            .iconnect(self.server_nic, self.server_index, KEY, 0)
            .map_err(|e| format!("connect failed: {e}"))?;
        let until = Instant::now() + self.timeout;
        let mut g = self.connected.0.lock();
        while g.is_none() {
            if self.connected.1.wait_until(&mut g, until).timed_out() {
                drop(g);
                self.ep.forget(r);
                return Err("connect failed: timed out".into());
            }
        }
        let p = match g.take().expect("set") {
            Ok(p) => p,
            Err(code) => return Err(format!("connect failed: {code:?}")),
        };
        drop(g);
        self.state.lock().server = Some(p);
        let mut w = Writer::request(Op::Hello, 0, 0);
        w.bytes(self.export.as_bytes());
        let reply = self.call(w, None, 0).map_err(|e| match e {
            libc::ENOENT => format!("the server exports no {}", self.export),
            e => format!("hello failed: {}", std::io::Error::from_raw_os_error(e)),
        })?;
        let mut r = Reader::new(&reply.body);
        let bad = |_| "malformed hello reply".to_string();
        let session = r.u32().map_err(bad)?;
        let _max_io = r.u32().map_err(bad)?;
        *self.read_only.lock() = r.u32().map_err(bad)? != 0;
        let _lease_ms = r.u32().map_err(bad)?;
        *self.root_attr.lock() = Attr::decode(&mut r).map_err(bad)?;
        let mut st = self.state.lock();
        st.session = session;
        st.generation += 1;
        Ok(())
    }

    /// Sends a request and waits for its reply (blocking; for setup and tests).
    pub fn call(
        self: &Arc<Self>,
        w: Writer,
        write: Option<Arc<Vec<u8>>>,
        read: u32,
    ) -> Result<Reply, i32> {
        let slot = Arc::new((Mutex::new(None), Condvar::new()));
        let s2 = slot.clone();
        self.submit(
            w,
            write,
            read,
            true,
            Box::new(move |r| {
                *s2.0.lock() = Some(r);
                s2.1.notify_all();
            }),
        );
        let mut g = slot.0.lock();
        while g.is_none() {
            slot.1.wait(&mut g);
        }
        g.take().expect("set")
    }

    /// Posts a request: `w` (its header, session and id filled in here), an optional
    /// large write's data (sent as its own message) and the size of a large read's data
    /// message to receive. `done` runs on the completion thread.
    pub fn submit(
        &self,
        w: Writer,
        write: Option<Arc<Vec<u8>>>,
        read: u32,
        bounded: bool,
        done: Done,
    ) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) & ID_MASK;
        self.submit_as(id, w, write, read, bounded, done)
    }

    /// A fresh request id, for [`Conn::submit_as`] (a request referred to later).
    /// A buffer of `len` bytes to receive a read's data into (its contents are
    /// whatever an earlier read left: only the received part is used).
    fn read_buf(&self, len: usize) -> Vec<u8> {
        let mut buf = self.read_bufs.lock().pop().unwrap_or_default();
        buf.resize(len, 0);
        buf
    }

    /// Gives a read's data buffer back for the next read.
    pub fn recycle_read_buf(&self, buf: Vec<u8>) {
        let mut bufs = self.read_bufs.lock();
        if bufs.len() < READ_BUFS_KEPT && buf.capacity() > INLINE_WRITE {
            bufs.push(buf);
        }
    }

    pub fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) & ID_MASK
    }

    /// [`Conn::submit`] with the request id chosen by the caller.
    pub fn submit_as(
        &self,
        id: u64,
        mut w: Writer,
        write: Option<Arc<Vec<u8>>>,
        read: u32,
        bounded: bool,
        done: Done,
    ) {
        let (server, session) = {
            let st = self.state.lock();
            (st.server, st.session)
        };
        let Some(server) = server else {
            return done(Err(libc::ENOTCONN));
        };
        w.0[4..8].copy_from_slice(&session.to_le_bytes());
        w.0[8..16].copy_from_slice(&id.to_le_bytes());
        let mut p = Pending {
            header: vec![0u8; MAX_HEADER],
            header_req: omx_proto::ReqId(0),
            data: None,
            sent: Vec::new(),
            write: None,
            parts_left: 1,
            reply: None,
            data_len: 0,
            deadline: bounded.then(|| Instant::now() + self.timeout),
            done: Some(done),
        };
        // Every receive is posted, and the request recorded, before anything is sent:
        // the completion thread then always finds it.
        let mut pending = self.pending.lock();
        let seg = Segment::memory(p.header.as_mut_ptr(), p.header.len());
        // SAFETY: the buffer lives in `pending` until the receive completes or is
        // cancelled (or is leaked when neither can be known).
        let r = unsafe {
            self.ep
                .irecv(&[seg], match_info(Kind::Reply, 0, id), u64::MAX, id)
        };
        let Ok(r) = r else {
            drop(pending);
            return (p.done.take().expect("set"))(Err(libc::EIO));
        };
        p.header_req = r;
        if read as usize > INLINE_WRITE {
            let mut buf = self.read_buf(read as usize);
            let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
            // SAFETY: as above.
            if let Ok(r) = unsafe {
                self.ep
                    .irecv(&[seg], match_info(Kind::ReadData, 0, id), u64::MAX, id)
            } {
                p.data = Some((buf, r));
                p.parts_left += 1;
            }
        }
        let hdr = w.0;
        let seg = Segment::memory(hdr.as_ptr() as *mut u8, hdr.len());
        // SAFETY: the header is kept in `sent` until its send completes.
        let ok = unsafe {
            self.ep.isend(
                &[seg],
                server,
                match_info(Kind::Request, session, id),
                id,
                false,
            )
        }
        .is_ok();
        p.sent.push(hdr);
        p.parts_left += ok as u32;
        if let (true, Some(data)) = (ok, write) {
            let seg = Segment::memory(data.as_ptr() as *mut u8, data.len());
            // SAFETY: as above.
            if unsafe {
                self.ep.isend(
                    &[seg],
                    server,
                    match_info(Kind::WriteData, session, id),
                    id,
                    false,
                )
            }
            .is_ok()
            {
                p.parts_left += 1;
            }
            p.write = Some(data);
        }
        if !ok {
            p.deadline = Some(Instant::now());
        }
        pending.insert(id, p);
    }

    /// The completion thread: finishes requests, pings, fails overdue ones.
    pub fn run_completions(self: Arc<Self>) {
        let ping_every = Duration::from_secs(2);
        let mut next_ping = Instant::now() + ping_every;
        loop {
            if let Some(c) = self.ep.wait_any(0, 0, Some(Duration::from_millis(250))) {
                self.complete(c);
            }
            let now = Instant::now();
            if now >= next_ping {
                next_ping = now + ping_every;
                self.ping();
            }
            let overdue = self
                .pending
                .lock()
                .values()
                .any(|p| p.deadline.is_some_and(|d| now >= d));
            if overdue {
                self.server_down(libc::EIO);
            }
        }
    }

    fn ping(self: &Arc<Self>) {
        if self.state.lock().generation == 0 {
            return; // the first hello is still under way
        }
        let generation = self.generation();
        if !self.connected() {
            return self.reconnect_in_background(generation);
        }
        let w = Writer::request(Op::Ping, 0, 0);
        let c = self.clone();
        self.submit(
            w,
            None,
            0,
            true,
            Box::new(move |r| {
                if matches!(r, Err(libc::EBADR)) {
                    // The server restarted (our session is unknown there).
                    c.reconnect_in_background(generation);
                }
            }),
        );
    }

    /// Reconnects off the completion thread (the hello's reply comes through it), one
    /// such thread at a time.
    fn reconnect_in_background(self: &Arc<Self>, seen: u64) {
        if self.ping_reconnecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let c = self.clone();
        std::thread::spawn(move || {
            let _ = c.reconnect(seen, false);
            c.ping_reconnecting.store(false, Ordering::Release);
        });
    }

    /// Fails every request in flight with `errno` and forgets the server until a
    /// reconnect.
    pub fn server_down(&self, errno: i32) {
        let taken: Vec<Pending> = {
            let mut st = self.state.lock();
            if let Some(p) = st.server.take() {
                self.ep.disconnect(p);
            }
            self.pending.lock().drain().map(|(_, p)| p).collect()
        };
        if !taken.is_empty() {
            eprintln!(
                "omxfs: server not answering: {} requests failed",
                taken.len()
            );
        }
        for mut p in taken {
            let mut leak = false;
            for r in [Some(p.header_req), p.data.as_ref().map(|d| d.1)]
                .into_iter()
                .flatten()
            {
                if !matches!(self.ep.cancel(r), Ok(true)) {
                    self.ep.forget(r);
                    leak = true;
                }
            }
            if let Some(done) = p.done.take() {
                done(Err(errno));
            }
            if leak || p.parts_left > 0 {
                // The engine may still hold these buffers.
                std::mem::forget(p);
            }
        }
    }

    fn complete(&self, c: omx_proto::Completion) {
        if c.kind == RequestKind::Connect {
            *self.connected.0.lock() = Some(match c.status.code {
                StatusCode::Success => Ok(c.status.source.expect("partner")),
                code => Err(code),
            });
            self.connected.1.notify_all();
            return;
        }
        let id = c.status.context;
        let mut pending = self.pending.lock();
        let Some(p) = pending.get_mut(&id) else {
            return;
        };
        p.parts_left = p.parts_left.saturating_sub(1);
        // A write's data cut short: the server refused the write (its error reply
        // says why) and took the data into nothing.
        let cut = c.kind == RequestKind::Send && c.status.code == StatusCode::Truncated;
        let failed = c.status.code != StatusCode::Success && !cut;
        if failed {
            eprintln!(
                "omxfs: request {id} ({:?}) failed: {:?}",
                c.kind, c.status.code
            );
        }
        match c.kind {
            RequestKind::Recv if c.req == p.header_req && !failed => {
                let n = c.status.xfer_length as usize;
                let mut r = Reader::new(&p.header[..n]);
                p.reply = Some(match decode_header(&mut r) {
                    Ok(h) if h.id == id => (h.word as i32, n),
                    _ => (libc::EPROTO, n),
                });
            }
            RequestKind::Recv if c.req == p.header_req => {}
            RequestKind::Recv => p.data_len = c.status.xfer_length as usize,
            _ => {}
        }
        if failed {
            drop(pending);
            // The server's endpoint is gone (closed or restarted: the engine saw its
            // new instance): the session went with it, the requests are made again in
            // a new one (EBADR, as a restarted server answers).
            let gone = c.status.code == StatusCode::EndpointUnreachable;
            return self.server_down(if gone { libc::EBADR } else { libc::EIO });
        }
        // An error reply means no data message will come: drop its receive.
        if let (Some((e, _)), Some((_, dr))) = (p.reply, &p.data) {
            if e != 0 && p.parts_left > 0 && matches!(self.ep.cancel(*dr), Ok(true)) {
                p.parts_left -= 1;
                p.data = None;
            }
        }
        if p.parts_left > 0 || p.reply.is_none() {
            return;
        }
        let p = pending.remove(&id).expect("present");
        drop(pending);
        let (errno, n) = p.reply.expect("reply");
        let res = if errno != 0 {
            Err(errno)
        } else {
            let mut data = p.data.map(|d| d.0).unwrap_or_default();
            data.truncate(p.data_len);
            let mut body = p.header;
            body.truncate(n);
            body.drain(..16);
            Ok(Reply { body, data })
        };
        if let Some(done) = p.done {
            done(res);
        }
    }
}
