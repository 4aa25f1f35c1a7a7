//! A TCP connection carried on omx: the byte stream cut into messages matched by the
//! receiving connection's id, read back in order; the kernel socket stays open beside it
//! for the set-up, the end of the stream (FIN/RST) and the descriptor's number.

use crate::fabric::{self, fabric, Fabric, CONTROL};
use crate::handshake::{check_hello, HelloCheck, OmxAddr, HELLO_LEN};
use crate::real;
use omx_proto::{PartnerId, ReqId, StatusCode};
use omx_runtime::Segment;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::io::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest message a write is cut into (above the rendezvous threshold, so a bulk
/// stream moves by pulls and the receiver's readiness paces the sender).
const CHUNK: usize = 512 * 1024;
/// Bytes a connection may have posted and not yet completed before a write waits.
const WINDOW: usize = 4 * 1024 * 1024;
/// Descriptors below this are looked up without taking a lock when not carried.
const FD_TABLE: usize = 65536;

static CARRIED: [AtomicBool; FD_TABLE] = [const { AtomicBool::new(false) }; FD_TABLE];
static CONNS: Mutex<Option<HashMap<i32, Arc<Conn>>>> = Mutex::new(None);

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
}

pub struct Conn {
    pub fd: i32,
    /// Readable while omx data waits for this connection (poll/select/epoll see it).
    pub evfd: i32,
    id: u32,
    fab: &'static Fabric,
    tx: Mutex<Tx>,
    rx: Mutex<Rx>,
}

pub fn lookup(fd: i32) -> Option<Arc<Conn>> {
    let slot = CARRIED.get(usize::try_from(fd).ok()?)?;
    if !slot.load(Ordering::Acquire) {
        return None;
    }
    CONNS.lock().as_ref()?.get(&fd).cloned()
}

fn insert(conn: Conn) {
    let fd = conn.fd;
    fabric::register_waker(conn.id, conn.evfd);
    CONNS
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(fd, Arc::new(conn));
    CARRIED[fd as usize].store(true, Ordering::Release);
}

/// Forgets `fd` (the connection stays on TCP, or is being closed).
pub fn remove(fd: i32) -> Option<Arc<Conn>> {
    let conn = CONNS.lock().as_mut()?.remove(&fd)?;
    CARRIED[fd as usize].store(false, Ordering::Release);
    fabric::unregister_waker(conn.id);
    Some(conn)
}

fn new_evfd() -> Option<i32> {
    // SAFETY: plain system call.
    let e = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    (e >= 0).then_some(e)
}

/// A client's connection whose SYN offered omx; returns false if it cannot be tracked.
pub fn adopt_client(fd: i32, fab: &'static Fabric, id: u32) -> bool {
    if fd as usize >= FD_TABLE {
        return false;
    }
    let Some(evfd) = new_evfd() else { return false };
    insert(Conn {
        fd,
        evfd,
        id,
        fab,
        tx: Mutex::new(Tx::new(TxMode::Tcp { sent: 0 })),
        rx: Mutex::new(Rx::new(RxMode::AwaitHello)),
    });
    true
}

/// A server's accepted connection whose client offered omx (`client`): connects to the
/// client's endpoint and says hello; on any failure the connection stays on TCP.
pub fn adopt_server(fd: i32, client: OmxAddr) {
    let Some(fab) = fabric() else { return };
    if fd as usize >= FD_TABLE {
        return;
    }
    let Some(partner) = fab.partner(client.nic, client.endpoint) else {
        return;
    };
    let Some(evfd) = new_evfd() else { return };
    let id = fab.new_conn_id();
    let conn = Conn {
        fd,
        evfd,
        id,
        fab,
        tx: Mutex::new(Tx::new(TxMode::Omx {
            partner,
            peer_conn: client.conn,
        })),
        rx: Mutex::new(Rx::new(RxMode::TcpFirst {
            delivered: 0,
            expected: None,
        })),
    };
    // Registered before the hello goes out: the client may answer at once.
    insert(conn);
    let hello = crate::handshake::encode_hello(OmxAddr {
        nic: fab.nic,
        endpoint: fab.index,
        conn: id,
    });
    if send_all_tcp(fd, &hello).is_err() {
        if let Some(c) = remove(fd) {
            // SAFETY: our own eventfd.
            unsafe { real::close(c.evfd) };
        }
        return;
    }
    if fabric::verbose() {
        eprintln!("omx_sockets: fd {fd} accepted on omx (conn {id:#x})");
    }
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
            offset: 0,
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

impl Conn {
    fn nonblocking(&self) -> bool {
        // SAFETY: plain system call on our descriptor.
        let fl = unsafe { libc::fcntl(self.fd, libc::F_GETFL) };
        fl >= 0 && fl & libc::O_NONBLOCK != 0
    }

    fn tcp_state(&self) -> TcpState {
        let mut b = 0u8;
        // SAFETY: one byte into a local.
        let n = unsafe {
            real::recv(
                self.fd,
                &mut b as *mut u8 as *mut libc::c_void,
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match n {
            1 => TcpState::Data,
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
                    self.fd,
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
                    poll_one(self.fd, libc::POLLIN, 10);
                    continue;
                }
                HelloCheck::Partial => return Ok(true),
                HelloCheck::Hello(server) => {
                    // SAFETY: consumes the hello just peeked.
                    unsafe {
                        real::recv(
                            self.fd,
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
                self.fd, self.id
            );
        }
        Ok(())
    }

    /// Client connections move when the hello is seen; a look that finds the
    /// connection plain forgets it. True while the connection is still ours.
    fn settle_client(&self, block: bool) -> Result<bool> {
        let mut rx = self.rx.lock();
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
        while matches!(self.rx.lock().mode, RxMode::AwaitHello) && lookup(self.fd).is_some() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            poll_one(self.fd, libc::POLLIN, left.as_millis().max(1) as i32);
            if self.settle_client(false).is_err() {
                break;
            }
        }
    }

    fn forget(&self) {
        if remove(self.fd).is_some() {
            // SAFETY: our own eventfd.
            unsafe { real::close(self.evfd) };
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

    /// Completes posted sends: all of them with `all`, else until under the window
    /// (waiting) and whatever already finished.
    fn reap(&self, tx: &mut Tx, all: bool) -> Result<()> {
        while let Some(&(r, _)) = tx.pending.front() {
            let must_wait = all || tx.pending_bytes > WINDOW;
            let c = if must_wait {
                self.fab.ep.wait(r, None)
            } else {
                self.fab.ep.test(r)
            };
            let Some(c) = c else { break };
            let (_, data) = tx.pending.pop_front().expect("front");
            tx.pending_bytes -= data.len();
            if c.status.code != StatusCode::Success {
                tx.mode = TxMode::Broken;
                return Err(os_err(libc::ECONNRESET));
            }
        }
        Ok(())
    }

    pub fn send(&self, buf: &[u8], flags: i32) -> Result<usize> {
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
            TxMode::Omx { peer_conn, .. } => {
                if let TcpState::Failed(_) = self.tcp_state() {
                    tx.mode = TxMode::Broken;
                    return Err(os_err(libc::EPIPE));
                }
                for chunk in buf.chunks(CHUNK) {
                    self.post(&mut tx, chunk.to_vec(), peer_conn as u64)?;
                    self.reap(&mut tx, false)?;
                }
                Ok(buf.len())
            }
        }
    }

    fn send_tcp(&self, buf: &[u8], flags: i32) -> Result<usize> {
        // SAFETY: buf is a valid slice.
        let n = unsafe {
            real::send(
                self.fd,
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
        loop {
            if rx.offset < rx.leftover.len() {
                let n = out.len().min(rx.leftover.len() - rx.offset);
                out[..n].copy_from_slice(&rx.leftover[rx.offset..rx.offset + n]);
                if !peek {
                    rx.offset += n;
                }
                self.refresh_readiness(&rx);
                return Ok(n);
            }
            fabric::drain(self.evfd);
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
                RxMode::Omx => {
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
                        TcpState::Data | TcpState::Empty => {}
                    }
                    if block && self.spin_for_data() {
                        continue;
                    }
                }
            }
            if !block {
                return Err(os_err(libc::EAGAIN));
            }
            let mut p = [
                libc::pollfd {
                    fd: self.evfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            unsafe { real::poll(p.as_mut_ptr(), 2, -1) };
        }
    }

    /// Polls omx for this connection's next message for the spin budget (a reply that
    /// comes within it is caught without sleeping).
    fn spin_for_data(&self) -> bool {
        let cfg = &self.fab.ep.runtime().cfg;
        let until = Instant::now() + cfg.wait_spin_for.min(Duration::from_millis(10));
        while Instant::now() < until {
            if self.fab.ep.iprobe(self.id as u64, !0).is_some() {
                return true;
            }
            std::hint::spin_loop();
        }
        false
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
        let c = self
            .fab
            .ep
            .wait(r, None)
            .ok_or_else(|| os_err(libc::EINTR))?;
        if c.status.code != StatusCode::Success {
            return Err(os_err(libc::ECONNRESET));
        }
        Ok(c.status.xfer_length as usize)
    }

    fn take_data(&self, rx: &mut Rx, out: &mut [u8], peek: bool) -> Result<Option<usize>> {
        let m = self.id as u64;
        let Some(status) = self.fab.ep.iprobe(m, !0) else {
            return Ok(None);
        };
        let len = status.msg_length as usize;
        let n = if !peek && len <= out.len() {
            self.receive_into(m, &mut out[..len])?
        } else {
            let mut whole = vec![0u8; len];
            self.receive_into(m, &mut whole)?;
            let n = out.len().min(len);
            out[..n].copy_from_slice(&whole[..n]);
            rx.leftover = whole;
            rx.offset = if peek { 0 } else { n };
            n
        };
        self.refresh_readiness(rx);
        Ok(Some(n))
    }

    /// Leaves the readiness descriptor readable exactly while data waits.
    fn refresh_readiness(&self, rx: &Rx) {
        fabric::drain(self.evfd);
        if rx.offset < rx.leftover.len() || self.fab.ep.iprobe(self.id as u64, !0).is_some() {
            fabric::signal(self.evfd);
        }
    }

    fn recv_tcp(&self, out: &mut [u8], flags: i32, block: bool) -> Result<usize> {
        let flags = flags | if block { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: out is a valid slice.
        let n = unsafe {
            real::recv(
                self.fd,
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

    /// Waits until everything written has been taken by the peer's endpoint.
    pub fn flush(&self) {
        let mut tx = self.tx.lock();
        let _ = self.reap(&mut tx, true);
    }

    pub fn shutdown_write(&self) {
        self.flush();
        self.tx.lock().shut = true;
    }

    /// close(): what was written is delivered first, then the kernel socket closes (its
    /// FIN is the peer's end of stream).
    pub fn close(&self) {
        self.flush();
        // SAFETY: our own eventfd.
        unsafe { real::close(self.evfd) };
    }
}

pub fn flush_all() {
    let conns: Vec<Arc<Conn>> = match CONNS.lock().as_ref() {
        Some(m) => m.values().cloned().collect(),
        None => return,
    };
    for c in conns {
        c.flush();
    }
}
