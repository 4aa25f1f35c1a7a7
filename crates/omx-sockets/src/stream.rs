//! A TCP connection carried on omx: the byte stream cut into messages matched by the
//! receiving connection's id, read back in order; the kernel socket stays open beside it
//! for the set-up, the end of the stream (FIN/RST) and the descriptor's number.

use crate::fabric::{self, fabric, Fabric, CONTROL};
use crate::fds;
use crate::handshake::{check_hello, HelloCheck, OmxAddr, HELLO_LEN};
use crate::real;
use omx_proto::{PartnerId, ReqId, StatusCode};
use omx_runtime::Segment;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod ahead;
pub(crate) mod claims;
pub(crate) mod handover;

/// Largest message a write is cut into (above the rendezvous threshold, so a bulk
/// stream moves by pulls and the receiver's readiness paces the sender).
const CHUNK: usize = 512 * 1024;
/// Bytes a connection may have posted and not yet completed: a write waits (or a
/// non-blocking one stops short, `EAGAIN`) beyond it.
const WINDOW: usize = 4 * 1024 * 1024;
/// How often a write or close waiting for the peer looks at the kernel socket (a dead
/// peer's reset ends the wait).
const PEER_CHECK: Duration = Duration::from_millis(50);
/// `tcpi_state` of a closed socket (include/net/tcp_states.h).
const TCP_CLOSE: u8 = 7;
/// How often a peer that ended its side is probed while a write waits for it.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// Internal: `complete_oldest` saw bytes on TCP (the peer may be handing its side
/// back to TCP); never returned to the program.
const PEER_MOVED: i32 = libc::EREMCHG;
/// How long the exit of a process waits for its written data to be taken.
const EXIT_LINGER: Duration = Duration::from_secs(10);
enum TxMode {
    /// Client before it saw the server's hello: bytes go over TCP, counted.
    Tcp {
        sent: u64,
    },
    Omx {
        partner: PartnerId,
        peer_conn: u32,
    },
    Broken,
    /// Back on TCP for good (see `handover`).
    FellBack,
}

enum RxMode {
    /// Client: the first bytes from the server tell whether it carries the stream.
    AwaitHello,
    /// Server: bytes the client sent over TCP before it moved come first; the control
    /// message says how many.
    TcpFirst {
        delivered: u64,
        expected: Option<u64>,
    },
    Omx,
    /// The peer's process handed its side back to TCP: its omx writes up to a
    /// zero-length message come first, then the kernel socket (see `handover`).
    OmxThenTcp,
}

struct Tx {
    mode: TxMode,
    pending: VecDeque<(ReqId, Vec<u8>)>,
    pending_bytes: usize,
    shut: bool,
}

struct Rx {
    mode: RxMode,
    leftover: Vec<u8>,
    offset: usize,
    /// The readiness descriptor counts the leftover (see `flag_leftover`).
    flagged: bool,
    /// Large messages posted ahead of the reader, in stream order (see `ahead`).
    ahead: VecDeque<ahead::Ahead>,
}

pub struct Conn {
    /// The library's own descriptor of the kernel socket (see `private_dup`); -1 once
    /// closed while the connection is kept for a forked child (`release`).
    fd: AtomicI32,
    /// Readable while omx data waits for this connection (poll/select/epoll see it).
    pub evfd: i32,
    id: u32,
    fab: &'static Fabric,
    /// The program's descriptors naming this connection.
    users: AtomicUsize,
    /// `shutdown(SHUT_WR)` sent our FIN.
    fin_sent: AtomicBool,
    /// `fabric::forks()` when the connection was made: a child forked since may use it.
    forks_at_creation: u32,
    /// `O_NONBLOCK` as last read, with `FLAGS_GEN` then (see `nonblocking`); MAX: unread.
    nonblock: AtomicU64,
    /// Writes on omx so far (see `TCP_LOOK_EVERY`).
    writes: AtomicU64,
    /// The connection went back to TCP (see `handover`): the program's calls go to the
    /// kernel socket.
    pub(crate) fell_back: AtomicBool,
    /// When a byte was last sent over TCP to learn whether the peer is still there.
    probed: Mutex<Option<Instant>>,
    /// Writes that found the window full: edge-triggered `EPOLLOUT` reports the room
    /// that follows each (as TCP's write-space event follows a full send buffer).
    full_hits: AtomicU64,
    tx: Mutex<Tx>,
    rx: Mutex<Rx>,
}

/// A private duplicate of `fd` for the library's own kernel calls: the program may
/// close or `dup2` over its descriptors while the connection lives. It is marked plain:
/// left undecided, it would pass for an inherited name of the same socket
/// (`fds::undecided_dups_of`) and count as a user, so the program's `close` would never
/// end the connection (no FIN: the peer's read waits forever).
fn private_dup(fd: i32) -> Option<i32> {
    // SAFETY: plain system call.
    let d = unsafe { real::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if d < 0 {
        return None;
    }
    fds::mark_plain(d);
    Some(d)
}

fn new_evfd() -> Option<i32> {
    // SAFETY: plain system call.
    let e = unsafe {
        libc::eventfd(
            0,
            libc::EFD_NONBLOCK | libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE,
        )
    };
    (e >= 0).then_some(e)
}

impl Conn {
    fn new(
        fd: i32,
        fab: &'static Fabric,
        id: u32,
        evfd: Option<i32>,
        tx: TxMode,
        rx: RxMode,
    ) -> Option<Arc<Conn>> {
        if fabric::in_forked_child() {
            return None;
        }
        let sock = private_dup(fd)?;
        let Some(evfd) = evfd.or_else(new_evfd) else {
            // SAFETY: our own duplicate.
            unsafe { real::close(sock) };
            return None;
        };
        let conn = Arc::new(Conn {
            fd: AtomicI32::new(sock),
            forks_at_creation: fabric::forks(),
            nonblock: AtomicU64::new(u64::MAX),
            writes: AtomicU64::new(0),
            fell_back: AtomicBool::new(false),
            evfd,
            id,
            fab,
            users: AtomicUsize::new(0),
            probed: Mutex::new(None),
            full_hits: AtomicU64::new(0),
            fin_sent: AtomicBool::new(false),
            tx: Mutex::new(Tx::new(tx)),
            rx: Mutex::new(Rx::new(rx)),
        });
        fabric::register_waker(id, evfd);
        handover::register(id, &conn);
        Some(conn)
    }

    pub fn add_user(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    /// One descriptor fewer; true when it was the last.
    pub fn remove_user(&self) -> bool {
        self.users.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

/// A client's connection whose SYN offered omx.
/// A client's connection id and readiness descriptor, registered before its SYN
/// leaves: the server's first messages may arrive before `connect` returns.
pub fn reserve_client(fab: &'static Fabric) -> Option<(u32, i32)> {
    let id = fab.new_conn_id();
    let evfd = new_evfd()?;
    fabric::register_waker(id, evfd);
    Some((id, evfd))
}

/// A reservation whose connection is not carried after all.
pub fn unreserve(id: u32, evfd: i32) {
    fabric::unregister_waker(id);
    // SAFETY: the library's own eventfd, not handed out.
    unsafe { real::close(evfd) };
}

/// A client's connection whose SYN offered omx.
pub fn adopt_client(fd: i32, fab: &'static Fabric, id: u32, evfd: i32) {
    let tx = TxMode::Tcp { sent: 0 };
    match Conn::new(fd, fab, id, Some(evfd), tx, RxMode::AwaitHello) {
        Some(c) => {
            fds::attach(fd, &c);
        }
        None => {
            unreserve(id, evfd);
            fds::mark_plain(fd);
        }
    }
}

/// First use of a descriptor not looked at yet: an accepted connection whose client
/// offered omx in its SYN is carried (the server connects to the client's endpoint and
/// says hello). False when it stays plain.
pub fn adopt_accepted(fd: i32) -> bool {
    // A forked child of a process with an endpoint carries nothing (and may run under
    // a seccomp filter that kills it for a `getsockopt`, sshd's pre-auth child).
    if fabric::in_forked_child() {
        return false;
    }
    let mut syn = [0u8; 512];
    let mut len = syn.len() as libc::socklen_t;
    // SAFETY: syn and len are locals; the kernel frees the saved SYN once read.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_SAVED_SYN,
            syn.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return false;
    }
    let Some(client) = crate::handshake::parse_saved_syn(&syn[..len as usize]) else {
        return false;
    };
    adopt_server(fd, client)
}

fn adopt_server(fd: i32, client: OmxAddr) -> bool {
    // In a forked child of a process with an endpoint there is none: plain TCP (the
    // client stops waiting for the hello and stays on TCP too).
    let Some(fab) = fabric() else { return false };
    let Some(partner) = fab.partner(client.nic, client.endpoint) else {
        return false;
    };
    let id = fab.new_conn_id();
    let tx = TxMode::Omx {
        partner,
        peer_conn: client.conn,
    };
    let rx = RxMode::TcpFirst {
        delivered: 0,
        expected: None,
    };
    let Some(conn) = Conn::new(fd, fab, id, None, tx, rx) else {
        return false;
    };
    let hello = crate::handshake::encode_hello(OmxAddr {
        nic: fab.nic,
        endpoint: fab.index,
        conn: id,
    });
    if send_all_tcp(conn.sock(), &hello).is_err() {
        conn.release();
        return false;
    }
    fds::attach(fd, &conn);
    // Descriptors inherited across exec may name the same socket (stdin and stdout).
    for dup in fds::undecided_dups_of(fd) {
        fds::attach(dup, &conn);
    }
    if fabric::verbose() {
        eprintln!("omx_sockets: fd {fd} accepted on omx (conn {id:#x})");
    }
    true
}

fn send_all_tcp(fd: i32, mut bytes: &[u8]) -> Result<()> {
    while !bytes.is_empty() {
        // SAFETY: bytes is a valid slice.
        let n = unsafe {
            real::send(
                fd,
                bytes.as_ptr() as *const libc::c_void,
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            if e.kind() == ErrorKind::WouldBlock {
                poll_one(fd, libc::POLLOUT, -1);
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

fn poll_one(fd: i32, events: i16, timeout_ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { real::poll(&mut p, 1, timeout_ms) };
}

/// `OMX_SOCKETS_HELLO_WAIT_MS` (default 20).
fn hello_wait() -> Duration {
    static MS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    Duration::from_millis(*MS.get_or_init(|| {
        std::env::var("OMX_SOCKETS_HELLO_WAIT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20)
    }))
}

fn os_err(code: i32) -> Error {
    Error::from_raw_os_error(code)
}

impl Tx {
    fn new(mode: TxMode) -> Tx {
        Tx {
            mode,
            pending: VecDeque::new(),
            pending_bytes: 0,
            shut: false,
        }
    }
}

impl Rx {
    fn new(mode: RxMode) -> Rx {
        Rx {
            mode,
            leftover: Vec::new(),
            ahead: VecDeque::new(),
            offset: 0,
            flagged: false,
        }
    }
}

/// What a non-blocking look at the kernel socket found.
enum TcpState {
    Data,
    Eof,
    Empty,
    Failed(Error),
}

/// Counts the status-flag changes (`fcntl(F_SETFL)`, `ioctl(FIONBIO)`) of this process:
/// a connection's cached `O_NONBLOCK` is good while it has not moved.
static FLAGS_GEN: AtomicU64 = AtomicU64::new(0);

/// A write on omx looks at the kernel socket once in this many.
const TCP_LOOK_EVERY: u64 = 16;

/// A program changed the status flags of a descriptor (maybe one of ours).
pub fn status_flags_changed() {
    FLAGS_GEN.fetch_add(1, Ordering::AcqRel);
}

impl Conn {
    fn sock(&self) -> i32 {
        self.fd.load(Ordering::Acquire)
    }

    /// `O_NONBLOCK` of the socket, read once per change of any status flags this
    /// process makes (`status_flags_changed`), not by a system call per read and write;
    /// read every time while a forked child may share the socket (and change them).
    fn nonblocking(&self) -> bool {
        let gen = FLAGS_GEN.load(Ordering::Acquire);
        let cached = self.nonblock.load(Ordering::Relaxed);
        if cached != u64::MAX && cached >> 1 == gen && !self.maybe_shared() {
            return cached & 1 == 1;
        }
        // SAFETY: plain system call on our descriptor.
        let fl = unsafe { real::fcntl(self.sock(), libc::F_GETFL, 0) };
        let nonblocking = fl >= 0 && fl & libc::O_NONBLOCK != 0;
        self.nonblock
            .store(gen << 1 | nonblocking as u64, Ordering::Relaxed);
        nonblocking
    }

    fn tcp_state(&self) -> TcpState {
        if self.sock() < 0 {
            return TcpState::Empty;
        }
        let mut b = 0u8;
        // SAFETY: one byte into a local.
        let n = unsafe {
            real::recv(
                self.sock(),
                &mut b as *mut u8 as *mut libc::c_void,
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match n {
            1 => TcpState::Data,
            // After a FIN the kernel answers 0 even once a reset closed the socket
            // (the reset's error is not reported behind the FIN): its state tells.
            // (Both FINs also end in that state: only a side that sent none learns.)
            0 if !self.fin_sent.load(Ordering::Acquire)
                && self.kernel_state() == Some(TCP_CLOSE) =>
            {
                TcpState::Failed(os_err(libc::ECONNRESET))
            }
            0 => TcpState::Eof,
            _ => {
                let e = Error::last_os_error();
                match e.kind() {
                    ErrorKind::WouldBlock | ErrorKind::Interrupted => TcpState::Empty,
                    _ => TcpState::Failed(e),
                }
            }
        }
    }

    /// The kernel socket's TCP state (`tcpi_state`, the first byte of `TCP_INFO`).
    fn kernel_state(&self) -> Option<u8> {
        let mut info = [0u8; 8];
        let mut len = info.len() as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into info.
        let r = unsafe {
            libc::getsockopt(
                self.sock(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                info.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            )
        };
        (r == 0 && len >= 1).then_some(info[0])
    }

    /// Client: looks for the server's hello at the head of the TCP stream and moves to
    /// omx if it is there. Returns false when the connection turned out to stay on TCP
    /// (it is then forgotten).
    fn look_for_hello(&self, rx: &mut Rx, block: bool) -> Result<bool> {
        loop {
            let mut buf = [0u8; HELLO_LEN];
            let flags = libc::MSG_PEEK | if block { 0 } else { libc::MSG_DONTWAIT };
            // SAFETY: buf is HELLO_LEN bytes.
            let n = unsafe {
                real::recv(
                    self.sock(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    HELLO_LEN,
                    flags,
                )
            };
            if n < 0 {
                let e = Error::last_os_error();
                return match e.kind() {
                    ErrorKind::WouldBlock => Ok(true),
                    ErrorKind::Interrupted => continue,
                    _ => Ok(false),
                };
            }
            match check_hello(&buf[..n as usize]) {
                HelloCheck::Plain => return Ok(false),
                HelloCheck::Partial if n == 0 => return Ok(false),
                HelloCheck::Partial if block => {
                    poll_one(self.sock(), libc::POLLIN, 10);
                    continue;
                }
                HelloCheck::Partial => return Ok(true),
                HelloCheck::Hello(server) => {
                    // SAFETY: consumes the hello just peeked.
                    unsafe {
                        real::recv(
                            self.sock(),
                            buf.as_mut_ptr() as *mut libc::c_void,
                            HELLO_LEN,
                            libc::MSG_WAITALL,
                        )
                    };
                    self.switch_client(rx, server)?;
                    return Ok(true);
                }
            }
        }
    }

    fn switch_client(&self, rx: &mut Rx, server: OmxAddr) -> Result<()> {
        rx.mode = RxMode::Omx;
        let mut tx = self.tx.lock();
        let TxMode::Tcp { sent } = tx.mode else {
            return Ok(());
        };
        // The server already writes on omx: without a partner the stream is lost.
        let Some(partner) = self.fab.partner(server.nic, server.endpoint) else {
            tx.mode = TxMode::Broken;
            return Err(os_err(libc::ECONNRESET));
        };
        let count = sent.to_be_bytes().to_vec();
        tx.mode = TxMode::Omx {
            partner,
            peer_conn: server.conn,
        };
        self.post(&mut tx, count, CONTROL | server.conn as u64)?;
        if fabric::verbose() {
            eprintln!(
                "omx_sockets: fd {} carried on omx (conn {:#x}, {sent} bytes before)",
                self.sock(),
                self.id
            );
        }
        Ok(())
    }

    /// Client connections move when the hello is seen; a look that finds the
    /// connection plain forgets it. True while the connection is still ours.
    fn settle_client(&self, block: bool) -> Result<bool> {
        // A reader holds `rx` (perhaps blocked until the peer writes): it settles the
        // connection itself, and a write goes on as the send mode says meanwhile.
        let Some(mut rx) = self.rx.try_lock() else {
            return Ok(true);
        };
        if !matches!(rx.mode, RxMode::AwaitHello) {
            return Ok(true);
        }
        if !self.look_for_hello(&mut rx, block)? {
            drop(rx);
            self.forget();
            return Ok(false);
        }
        Ok(true)
    }

    /// A client's first write waits a little for the server's hello (it follows the
    /// SYN-ACK within a round trip when the server accepts at once), so that a stream
    /// is carried from its first byte; a server without the library costs this once.
    fn await_hello_before_first_write(&self) {
        if !matches!(self.tx.lock().mode, TxMode::Tcp { sent: 0 }) {
            return;
        }
        let until = Instant::now() + hello_wait();
        // (A reader holding `rx` looks for the hello itself; moving switches `tx`.)
        let awaiting = || {
            self.rx
                .try_lock()
                .is_none_or(|rx| matches!(rx.mode, RxMode::AwaitHello))
                && matches!(self.tx.lock().mode, TxMode::Tcp { sent: 0 })
        };
        while awaiting() && self.users.load(Ordering::Acquire) > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            poll_one(self.sock(), libc::POLLIN, left.as_millis().max(1) as i32);
            if self.settle_client(false).is_err() {
                break;
            }
        }
    }

    /// The connection stays on TCP: its descriptors become plain.
    fn forget(&self) {
        fds::forget(self);
        fabric::unregister_waker(self.id);
        handover::unregister(self.id);
    }

    /// Closes the library's descriptor of the kernel socket (the program closed its own).
    fn close_sock(&self) {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the library's own descriptor, closed once (swapped out above).
            unsafe { real::close(fd) };
        }
    }

    fn post(&self, tx: &mut Tx, data: Vec<u8>, match_info: u64) -> Result<()> {
        let TxMode::Omx { partner, .. } = tx.mode else {
            return Err(os_err(libc::EPIPE));
        };
        let seg = Segment::memory(data.as_ptr() as *mut u8, data.len());
        // SAFETY: the buffer is kept in `pending` until its request completes.
        let r = unsafe { self.fab.ep.isend(&[seg], partner, match_info, 0, false) }
            .map_err(|e| Error::other(e.to_string()))?;
        tx.pending_bytes += data.len();
        tx.pending.push_back((r, data));
        Ok(())
    }

    /// Completes the sends that already finished.
    fn reap(&self, tx: &mut Tx) -> Result<()> {
        while let Some(&(r, _)) = tx.pending.front() {
            let Some(c) = self.fab.ep.test(r) else { break };
            self.completed(tx, c)?;
        }
        Ok(())
    }

    fn completed(&self, tx: &mut Tx, c: omx_proto::Completion) -> Result<()> {
        let (_, data) = tx.pending.pop_front().expect("a pending send");
        tx.pending_bytes -= data.len();
        if c.status.code != StatusCode::Success {
            tx.mode = TxMode::Broken;
            return Err(os_err(libc::ECONNRESET));
        }
        Ok(())
    }

    /// Waits for the oldest posted send. The peer's end is watched meanwhile: its reset
    /// ends the wait (a dead peer's kernel answers the probe byte with one).
    fn complete_oldest(&self, tx: &mut Tx, deadline: Option<Instant>) -> Result<()> {
        let Some(&(r, _)) = tx.pending.front() else {
            return Ok(());
        };
        loop {
            if let Some(c) = self.fab.ep.wait(r, Some(PEER_CHECK)) {
                return self.completed(tx, c);
            }
            match self.tcp_state() {
                TcpState::Failed(_) => {
                    tx.mode = TxMode::Broken;
                    return Err(os_err(libc::ECONNRESET));
                }
                TcpState::Eof => self.probe_peer(),
                TcpState::Data => return Err(os_err(PEER_MOVED)),
                TcpState::Empty => {}
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(os_err(libc::ETIMEDOUT));
            }
        }
    }

    /// After the peer's FIN: one byte over TCP, which a live peer ignores (nothing but
    /// the set-up travels on TCP once carried) and a closed one answers with a reset.
    fn probe_peer(&self) {
        let mut last = self.probed.lock();
        if last.is_some_and(|t| t.elapsed() < PROBE_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let b = 0u8;
        // SAFETY: one byte from a local.
        unsafe {
            real::send(
                self.sock(),
                &b as *const u8 as *const libc::c_void,
                1,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
    }

    fn check_owner(&self) -> Result<()> {
        if fabric::in_forked_child() {
            // The stream's messages go to the parent's endpoint: never two readers.
            return Err(os_err(libc::ECONNRESET));
        }
        Ok(())
    }

    /// Writes go on omx (or fail), no longer on the kernel socket.
    pub fn writes_on_omx(&self) -> bool {
        !matches!(self.tx.lock().mode, TxMode::Tcp { .. })
    }

    /// How many writes found the window full so far.
    pub fn full_hits(&self) -> u64 {
        self.full_hits.load(Ordering::Acquire)
    }

    /// Room for a write now (poll's POLLOUT): the window is not full.
    pub fn writable(&self) -> bool {
        if fabric::in_forked_child() {
            return true;
        }
        let mut tx = self.tx.lock();
        if !matches!(tx.mode, TxMode::Omx { .. }) {
            return true;
        }
        let _ = self.reap(&mut tx);
        tx.pending_bytes < WINDOW
    }

    pub fn send(&self, buf: &[u8], flags: i32) -> Result<usize> {
        self.check_owner()?;
        self.await_hello_before_first_write();
        if !self.settle_client(false)? {
            return self.send_tcp(buf, flags);
        }
        let mut tx = self.tx.lock();
        if tx.shut {
            return Err(os_err(libc::EPIPE));
        }
        match tx.mode {
            TxMode::Tcp { ref mut sent } => {
                // Counted under the lock: the switch to omx tells the peer how many
                // bytes came over TCP.
                let n = self.send_tcp(buf, flags)?;
                *sent += n as u64;
                Ok(n)
            }
            TxMode::Broken => Err(os_err(libc::EPIPE)),
            TxMode::FellBack => self.send_tcp(buf, flags),
            TxMode::Omx { peer_conn, .. } => {
                // The kernel socket is looked at every `TCP_LOOK_EVERY` writes only (a
                // system call each): a peer's reset, FIN or hand-back is still seen
                // within a few writes, and a full window looks at it every time.
                let look = self
                    .writes
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(TCP_LOOK_EVERY);
                match if look {
                    self.tcp_state()
                } else {
                    TcpState::Empty
                } {
                    TcpState::Failed(_) => {
                        tx.mode = TxMode::Broken;
                        return Err(os_err(libc::EPIPE));
                    }
                    // The peer ended its side: is it still there to read?
                    TcpState::Eof => self.probe_peer(),
                    TcpState::Data => {
                        drop(tx);
                        if self.follow_peer_to_tcp()? {
                            return self.send(buf, flags);
                        }
                        tx = self.tx.lock();
                    }
                    TcpState::Empty => {}
                }
                let dontwait = flags & libc::MSG_DONTWAIT != 0 || self.nonblocking();
                let mut sent = 0;
                while sent < buf.len() {
                    self.reap(&mut tx)?;
                    let room = WINDOW.saturating_sub(tx.pending_bytes);
                    if room == 0 {
                        self.full_hits.fetch_add(1, Ordering::AcqRel);
                        if dontwait {
                            break;
                        }
                        match self.complete_oldest(&mut tx, None) {
                            Err(e) if e.raw_os_error() == Some(PEER_MOVED) => {
                                drop(tx);
                                if self.follow_peer_to_tcp()? {
                                    return match self.send(&buf[sent..], flags) {
                                        Ok(n) => Ok(sent + n),
                                        Err(_) if sent > 0 => Ok(sent),
                                        Err(e) => Err(e),
                                    };
                                }
                                tx = self.tx.lock();
                            }
                            r => r?,
                        }
                        continue;
                    }
                    let n = (buf.len() - sent).min(CHUNK).min(room);
                    self.post(&mut tx, buf[sent..sent + n].to_vec(), peer_conn as u64)?;
                    sent += n;
                }
                if sent == 0 && !buf.is_empty() {
                    return Err(os_err(libc::EAGAIN));
                }
                Ok(sent)
            }
        }
    }

    fn send_tcp(&self, buf: &[u8], flags: i32) -> Result<usize> {
        // SAFETY: buf is a valid slice.
        let n = unsafe {
            real::send(
                self.sock(),
                buf.as_ptr() as *const libc::c_void,
                buf.len(),
                flags,
            )
        };
        if n < 0 {
            Err(Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    pub fn recv(&self, out: &mut [u8], flags: i32) -> Result<usize> {
        self.check_owner()?;
        let peek = flags & libc::MSG_PEEK != 0;
        let block = flags & libc::MSG_DONTWAIT == 0 && !self.nonblocking();
        let waitall = flags & libc::MSG_WAITALL != 0 && !peek;
        let mut got = 0;
        while got < out.len() || out.is_empty() {
            match self.recv_some(&mut out[got..], peek, block && (got == 0 || waitall)) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if got > 0 && e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if got == 0 => return Err(e),
                Err(_) => break,
            }
            if !waitall || out.is_empty() {
                break;
            }
        }
        Ok(got)
    }

    fn recv_some(&self, out: &mut [u8], peek: bool, block: bool) -> Result<usize> {
        let mut rx = self.rx.lock();
        let mut deadline: Option<Option<Instant>> = None;
        loop {
            if self.fell_back.load(Ordering::Acquire) {
                drop(rx);
                return self.recv_tcp(out, if peek { libc::MSG_PEEK } else { 0 }, block);
            }
            // Noted before looking: a message that arrives after the look moves it.
            let seen = fabric::arrivals();
            if rx.offset < rx.leftover.len() {
                let n = out.len().min(rx.leftover.len() - rx.offset);
                out[..n].copy_from_slice(&rx.leftover[rx.offset..rx.offset + n]);
                if !peek {
                    rx.offset += n;
                }
                self.flag_leftover(&mut rx);
                return Ok(n);
            }
            match rx.mode {
                RxMode::AwaitHello => {
                    if !self.look_for_hello(&mut rx, block)? {
                        drop(rx);
                        self.forget();
                        return self.recv_tcp(out, if peek { libc::MSG_PEEK } else { 0 }, block);
                    }
                    if matches!(rx.mode, RxMode::AwaitHello) && !block {
                        return Err(os_err(libc::EAGAIN));
                    }
                    continue;
                }
                RxMode::TcpFirst {
                    delivered,
                    expected,
                } => {
                    let expected = expected.or_else(|| self.take_control());
                    rx.mode = RxMode::TcpFirst {
                        delivered,
                        expected,
                    };
                    if expected == Some(delivered) {
                        rx.mode = RxMode::Omx;
                        continue;
                    }
                    let want = match expected {
                        Some(e) => out.len().min((e - delivered) as usize),
                        None => out.len(),
                    };
                    let flags = libc::MSG_DONTWAIT | if peek { libc::MSG_PEEK } else { 0 };
                    match self.recv_tcp(&mut out[..want], flags, false) {
                        Ok(0) if expected.is_none() => return Ok(0),
                        Ok(0) => return Err(os_err(libc::ECONNRESET)),
                        Ok(n) => {
                            if !peek {
                                rx.mode = RxMode::TcpFirst {
                                    delivered: delivered + n as u64,
                                    expected,
                                };
                            }
                            return Ok(n);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                RxMode::OmxThenTcp => {
                    if rx.ahead.is_empty() {
                        self.await_stored();
                    }
                    // The peer's last omx bytes were read: the rest is on TCP.
                    if rx.ahead.is_empty() && self.take_end_marker() {
                        self.end_fallback(&mut rx);
                        continue;
                    }
                    if let Some(n) = self.take_data(&mut rx, out, peek)? {
                        return Ok(n);
                    }
                }
                RxMode::Omx => {
                    if rx.ahead.is_empty() {
                        self.await_stored();
                    }
                    if let Some(n) = self.take_data(&mut rx, out, peek)? {
                        return Ok(n);
                    }
                    match self.tcp_state() {
                        TcpState::Eof => {
                            // Everything sent before the FIN has arrived: one last look.
                            return match self.take_data(&mut rx, out, peek)? {
                                Some(n) => Ok(n),
                                None => Ok(0),
                            };
                        }
                        TcpState::Failed(e) => {
                            return match self.take_data(&mut rx, out, peek)? {
                                Some(n) => Ok(n),
                                None => Err(e),
                            };
                        }
                        // Once carried, bytes on TCP are the peer's probes or its
                        // process handing the connection back to TCP.
                        TcpState::Data if self.peer_left_omx() => {
                            self.fall_back(&mut rx)?;
                            continue;
                        }
                        // Probe bytes were dropped; bytes a child may read are not
                        // ours: wait for omx.
                        TcpState::Data if !self.maybe_shared() => continue,
                        TcpState::Data => {}
                        TcpState::Empty => {}
                    }
                }
            }
            if !block {
                return Err(os_err(libc::EAGAIN));
            }
            // The kernel socket (set-up bytes, FIN, reset) and the readiness descriptor
            // (a message stored by another thread) beside the endpoint's own wake-ups.
            let watch = [
                libc::pollfd {
                    fd: self.evfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    // Until the peer's omx writes end, its TCP bytes wait behind them;
                    // on a socket a child may use they may be the child's.
                    fd: if matches!(rx.mode, RxMode::OmxThenTcp) || self.maybe_shared() {
                        -1
                    } else {
                        self.sock()
                    },
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let deadline = *deadline.get_or_insert_with(|| self.receive_deadline());
            let left = match deadline {
                None => None,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        // SO_RCVTIMEO passed, as TCP says it.
                        return Err(os_err(libc::EAGAIN));
                    }
                    Some(left)
                }
            };
            // The kernel socket unwatched: its end is looked at every PEER_CHECK.
            let left = if watch[1].fd < 0 {
                Some(left.map_or(PEER_CHECK, |l| l.min(PEER_CHECK)))
            } else {
                left
            };
            if fabric::block(&watch, left, seen).is_err() {
                // As the kernel's read interrupted by a signal handler.
                return Err(os_err(libc::EINTR));
            }
        }
    }

    /// When a blocking receive gives up: `SO_RCVTIMEO` from now, or never.
    fn receive_deadline(&self) -> Option<Instant> {
        let mut tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        };
        let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
        // SAFETY: tv and len are locals of the right size.
        let r = unsafe {
            libc::getsockopt(
                self.sock(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &mut tv as *mut libc::timeval as *mut libc::c_void,
                &mut len,
            )
        };
        if r != 0 || (tv.tv_sec == 0 && tv.tv_usec == 0) {
            return None;
        }
        Some(Instant::now() + Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000))
    }

    /// `ioctl(FIONREAD)`: bytes that a read takes now without waiting (the rest of the
    /// current message, else the next one's length; TCP counts every queued byte).
    pub fn readable_bytes(&self) -> usize {
        let rx = self.rx.lock();
        if rx.offset < rx.leftover.len() {
            return rx.leftover.len() - rx.offset;
        }
        if let Some(len) = Self::ahead_len(&rx) {
            return len;
        }
        match rx.mode {
            RxMode::Omx => {
                self.await_stored();
                self.fab
                    .ep
                    .iprobe(self.id as u64, !0)
                    .map_or(0, |s| s.msg_length as usize)
            }
            _ => {
                let mut n: libc::c_int = 0;
                // SAFETY: FIONREAD writes one int.
                unsafe {
                    real::ioctl(
                        self.sock(),
                        libc::FIONREAD,
                        &mut n as *mut libc::c_int as libc::c_ulong,
                    )
                };
                n.max(0) as usize
            }
        }
    }

    fn take_control(&self) -> Option<u64> {
        let m = CONTROL | self.id as u64;
        self.fab.ep.iprobe(m, !0)?;
        let mut count = [0u8; 8];
        self.receive_into(m, &mut count).ok()?;
        Some(u64::from_be_bytes(count))
    }

    /// Receives the next message matching `match_info` into `buf`; its length.
    fn receive_into(&self, match_info: u64, buf: &mut [u8]) -> Result<usize> {
        let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
        // SAFETY: buf outlives the wait below.
        let r = unsafe { self.fab.ep.irecv(&[seg], match_info, !0, 0) }
            .map_err(|e| Error::other(e.to_string()))?;
        self.wait_received(r)
    }

    /// Waits until receive `r` completed (however long a dying peer takes to be seen
    /// as dead: its buffer must not be reused before); the message's length.
    fn wait_received(&self, r: ReqId) -> Result<usize> {
        let c = loop {
            if let Some(c) = self.fab.ep.wait(r, Some(PEER_CHECK)) {
                break c;
            }
            // A pull from a peer whose process died would go on for omx's whole resend
            // budget (minutes): its kernel socket's reset (or the answer to a probe
            // after its FIN) tells sooner. The partner's operations then fail, this
            // receive among them; a live peer's FIN comes only after its data.
            match self.tcp_state() {
                TcpState::Failed(_) => self.drop_dead_peer(),
                TcpState::Eof => self.probe_peer(),
                TcpState::Data | TcpState::Empty => {}
            }
        };
        // One message fewer waits: the readiness descriptor counts them.
        fabric::take_one(self.evfd);
        if c.status.code != StatusCode::Success {
            return Err(os_err(libc::ECONNRESET));
        }
        Ok(c.status.xfer_length as usize)
    }

    /// The peer's process is gone: forget its omx partner (what is under way with it
    /// fails; a new connection connects afresh).
    fn drop_dead_peer(&self) {
        let mut tx = self.tx.lock();
        if let TxMode::Omx { partner, .. } = tx.mode {
            self.fab.forget_partner(partner);
            tx.mode = TxMode::Broken;
        }
    }

    fn take_data(&self, rx: &mut Rx, out: &mut [u8], peek: bool) -> Result<Option<usize>> {
        let m = self.id as u64;
        let whole = match self.take_ahead(rx) {
            Some(got) => {
                let whole = got?;
                self.read_ahead(rx);
                whole
            }
            None => {
                let Some(status) = self.fab.ep.iprobe(m, !0) else {
                    return Ok(None);
                };
                let len = status.msg_length as usize;
                if !peek && len <= out.len() {
                    // Straight into the caller's buffer, the large messages behind it
                    // posted ahead meanwhile.
                    let seg = Segment::memory(out.as_mut_ptr(), len);
                    // SAFETY: out outlives the wait below.
                    let r = unsafe { self.fab.ep.irecv(&[seg], m, !0, 0) }
                        .map_err(|e| Error::other(e.to_string()))?;
                    self.read_ahead(rx);
                    let n = self.wait_received(r)?;
                    self.flag_leftover(rx);
                    return Ok(Some(n));
                }
                let mut whole = vec![0u8; len];
                let n = self.receive_into(m, &mut whole)?;
                whole.truncate(n);
                self.read_ahead(rx);
                whole
            }
        };
        let n = out.len().min(whole.len());
        out[..n].copy_from_slice(&whole[..n]);
        rx.leftover = whole;
        rx.offset = if peek { 0 } else { n };
        self.flag_leftover(rx);
        Ok(Some(n))
    }

    /// A message whose arrival was counted (the readiness descriptor) is stored a moment
    /// later: waits for that moment, so that readiness and the next read agree.
    fn await_stored(&self) {
        let until = Instant::now() + Duration::from_millis(10);
        while self.fab.ep.iprobe(self.id as u64, !0).is_none() && Instant::now() < until {
            let mut p = libc::pollfd {
                fd: self.evfd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            if unsafe { real::poll(&mut p, 1, 0) } <= 0 {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// The readiness descriptor counts the messages that arrived and were not taken
    /// (the progress thread adds one as each arrives, just before it is stored), plus
    /// one while a taken message has bytes left to read.
    fn flag_leftover(&self, rx: &mut Rx) {
        let left = rx.offset < rx.leftover.len();
        if left != rx.flagged {
            if left {
                fabric::signal(self.evfd);
            } else {
                fabric::take_one(self.evfd);
            }
            rx.flagged = left;
        }
    }

    fn recv_tcp(&self, out: &mut [u8], flags: i32, block: bool) -> Result<usize> {
        let flags = flags | if block { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: out is a valid slice.
        let n = unsafe {
            real::recv(
                self.sock(),
                out.as_mut_ptr() as *mut libc::c_void,
                out.len(),
                flags,
            )
        };
        if n < 0 {
            Err(Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Waits until everything written has been taken by the peer's endpoint (or the
    /// peer is gone).
    pub fn flush(&self) {
        self.flush_until(None);
    }

    fn flush_until(&self, deadline: Option<Instant>) {
        let Some(mut tx) = (match deadline {
            None => Some(self.tx.lock()),
            Some(d) => self.tx.try_lock_until(d),
        }) else {
            return;
        };
        while !tx.pending.is_empty() && deadline.is_none_or(|d| Instant::now() < d) {
            match self.complete_oldest(&mut tx, deadline) {
                Err(e) if e.raw_os_error() == Some(PEER_MOVED) => {
                    drop(tx);
                    if self.follow_peer_to_tcp().is_err() {
                        return;
                    }
                    tx = self.tx.lock();
                }
                Err(_) => break,
                Ok(()) => {}
            }
        }
    }

    pub fn shutdown_write(&self) {
        self.flush();
        self.tx.lock().shut = true;
        self.fin_sent.store(true, Ordering::Release);
    }

    /// The program closed its last descriptor. As TCP's `close`, it returns at once and
    /// what was written is still delivered: a closing thread waits for it (or for the
    /// peer's end), then the kernel socket closes, so its FIN follows the data. A forked
    /// child has no endpoint to deliver with. A child forked since the connection was
    /// made may still use it: what arrives for it is then kept (the child may hand the
    /// connection back to TCP, see `handover`), but not the kernel socket, so that the
    /// child's close ends the stream.
    pub fn release(self: Arc<Self>) {
        if fabric::in_forked_child() {
            return;
        }
        let kept_for_child =
            fabric::forks() != self.forks_at_creation && !self.fell_back.load(Ordering::Acquire);
        if !kept_for_child {
            fabric::unregister_waker(self.id);
            handover::unregister(self.id);
        }
        // Sends whose completion already came (a reply carried the peer's ack) need
        // no closing thread.
        let pending = {
            let mut tx = self.tx.lock();
            let _ = self.reap(&mut tx);
            !tx.pending.is_empty()
        };
        if !pending {
            if kept_for_child {
                self.close_sock();
            }
            return;
        }
        CLOSING.lock().push(self.clone());
        let spawned = std::thread::Builder::new()
            .name("omx-sockets-close".into())
            .spawn(move || {
                self.flush();
                if kept_for_child {
                    self.close_sock();
                }
                CLOSING.lock().retain(|c| !Arc::ptr_eq(c, &self));
            });
        if spawned.is_err() {
            flush_closing(None);
        }
    }

    /// The endpoint's descriptor that rings at the next completion, armed; `None` when
    /// the caller should look again soon instead (work under way that rings nothing).
    pub fn completion_notifier(&self) -> Option<i32> {
        let fd = self.fab.ep.notify_fd().ok()?;
        self.fab.ep.arm_notify().then_some(fd)
    }
}

/// Connections closed by the program whose data is still on its way.
static CLOSING: Mutex<Vec<Arc<Conn>>> = Mutex::new(Vec::new());

fn flush_closing(deadline: Option<Instant>) {
    let closing: Vec<Arc<Conn>> = CLOSING.lock().clone();
    for c in closing {
        c.flush_until(deadline);
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let mut rx = std::mem::replace(
            self.rx.get_mut(),
            Rx {
                mode: RxMode::Omx,
                leftover: Vec::new(),
                offset: 0,
                flagged: false,
                ahead: VecDeque::new(),
            },
        );
        self.abandon_ahead(&mut rx);
        let fd = self.sock();
        // Probe bytes left unread would make the kernel answer our close with a reset
        // instead of a FIN (unless the bytes may be a child's, or the stream's own).
        if fd >= 0 && !self.fell_back.load(Ordering::Acquire) && !self.maybe_shared() {
            let mut buf = [0u8; 64];
            loop {
                let n = self.recv_tcp(&mut buf, libc::MSG_PEEK, false).unwrap_or(0);
                let zeros = buf[..n].iter().take_while(|&&b| b == 0).count();
                if zeros == 0 {
                    break;
                }
                let _ = self.recv_tcp(&mut buf[..zeros], 0, false);
            }
        }
        // SAFETY: the library's own descriptors.
        unsafe {
            real::close(self.evfd);
            if fd >= 0 {
                real::close(fd);
            }
        }
    }
}

/// Delivers what every connection wrote before the process exits (as the kernel
/// would after it), waiting `EXIT_LINGER` at most.
pub fn flush_all() {
    if fabric::in_forked_child() {
        return;
    }
    let deadline = Some(Instant::now() + EXIT_LINGER);
    for c in fds::all() {
        c.flush_until(deadline);
    }
    flush_closing(deadline);
}
