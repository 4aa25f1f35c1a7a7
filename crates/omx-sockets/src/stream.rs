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
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

mod ahead;
pub(crate) mod claims;
mod close;
pub(crate) mod handover;
mod rx;
mod setup;
mod tx;

pub use close::flush_all;
pub use setup::{adopt_accepted, adopt_client, reserve_client, unreserve};

/// Largest message a write is cut into (above the rendezvous threshold, so a bulk
/// stream moves by pulls and the receiver's readiness paces the sender).
const CHUNK: usize = 512 * 1024;
/// Bytes a connection may have posted and not yet completed: a write waits (or a
/// non-blocking one stops short, `EAGAIN`) beyond it.
pub(crate) const WINDOW: usize = 4 * 1024 * 1024;
/// Messages a connection may have posted and not yet completed, whatever their size:
/// each costs the reader a receive, so 4 MiB of 16-byte writes (262,144 messages) took
/// the reader longer than the exit's `EXIT_LINGER` to drain, and the rest was lost
/// (sockperf throughput). As many as the window holds of 4 KiB writes.
const WINDOW_MESSAGES: usize = WINDOW / 4096;
/// How often a write or close waiting for the peer looks at the kernel socket (a dead
/// peer's reset ends the wait).
const PEER_CHECK: Duration = Duration::from_millis(50);
/// A blocking read's first wait, before it reads `SO_RCVTIMEO` (see `recv_some`).
const FIRST_WAIT: Duration = Duration::from_millis(1);
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
    /// Posted sends, oldest first: the request, the library's copy of its bytes (empty
    /// for a direct send from the program's memory, see `tx`), its length.
    pending: VecDeque<(ReqId, Vec<u8>, usize)>,
    pending_bytes: usize,
    shut: bool,
    /// Buffers of completed sends, reused for the next writes.
    spare: Vec<Vec<u8>>,
}

struct Rx {
    mode: RxMode,
    leftover: Vec<u8>,
    offset: usize,
    /// The readiness descriptor counts the leftover (see `flag_leftover`).
    flagged: bool,
    /// Receives posted ahead of the program's reads, oldest first (see `read_ahead`);
    /// still counted on the readiness descriptor until a read takes them.
    ahead: VecDeque<ahead::Ahead>,
    /// Buffers of messages read out, reused for the next ones (see `ahead`).
    spare: Vec<Vec<u8>>,
}

pub struct Conn {
    /// The library's own descriptor of the kernel socket (see `private_dup`); -1 once
    /// closed while the connection is kept for a forked child (`release`).
    fd: AtomicI32,
    /// Readable while omx data waits for this connection (poll/select/epoll see it).
    pub evfd: i32,
    /// What a read takes now, and when `evfd` holds it (`fabric::Readiness`).
    pub ready: Arc<fabric::Readiness>,
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
    /// Bytes on the kernel socket are the peer's stream, not a sign that it left omx:
    /// those it wrote before it saw our hello (`RxMode::TcpFirst`), until they are
    /// read. The write side reads this flag (it cannot take `rx`, which a blocked
    /// reader holds) before it takes such bytes for the peer's probes or `MAGIC`.
    tcp_bytes_ours: AtomicBool,
    /// Closed by the program after a fork, it is on its way back to TCP (`release`):
    /// closing ends once the peer took what we hold.
    handing_back: AtomicBool,
    /// When a byte was last sent over TCP to learn whether the peer is still there.
    probed: Mutex<Option<Instant>>,
    /// A write saw the peer's FIN: later writes look at the kernel socket every time,
    /// so the reset a closed peer answers the probe with fails the next write (`EPIPE`),
    /// as TCP's second write after the peer's close.
    peer_ended: AtomicBool,
    /// Writes that found the window full: edge-triggered `EPOLLOUT` reports the room
    /// that follows each (as TCP's write-space event follows a full send buffer).
    full_hits: AtomicU64,
    /// `SO_RCVLOWAT` of the kernel socket (see `update_lowat`).
    lowat: AtomicUsize,
    /// `SO_SNDTIMEO` of the kernel socket is set (see `update_send_timeout`).
    send_timeout: AtomicBool,
    /// The last message a read took was large (`READ_AHEAD_MIN` or more): the peer
    /// streams bulk data, whose next message comes at the pace of its pulls, so a
    /// read (or `poll`) blocked on it sleeps at once (`Conn::wait_spin`).
    bulk: AtomicBool,
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
        let ready = fabric::register_waker(id, evfd);
        let tcp_first = matches!(rx, RxMode::TcpFirst { .. });
        let conn = Arc::new(Conn {
            fd: AtomicI32::new(sock),
            forks_at_creation: fabric::forks(),
            nonblock: AtomicU64::new(u64::MAX),
            writes: AtomicU64::new(0),
            fell_back: AtomicBool::new(false),
            tcp_bytes_ours: AtomicBool::new(tcp_first),
            handing_back: AtomicBool::new(false),
            evfd,
            ready,
            id,
            fab,
            users: AtomicUsize::new(0),
            probed: Mutex::new(None),
            peer_ended: AtomicBool::new(false),
            full_hits: AtomicU64::new(0),
            lowat: AtomicUsize::new(1),
            send_timeout: AtomicBool::new(false),
            bulk: AtomicBool::new(false),
            fin_sent: AtomicBool::new(false),
            tx: Mutex::new(Tx::new(tx)),
            rx: Mutex::new(Rx::new(rx)),
        });
        // Set before the connection was made (or inherited from the listener).
        conn.update_lowat();
        conn.update_send_timeout();
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

fn os_err(code: i32) -> Error {
    Error::from_raw_os_error(code)
}

/// A byte-moving system call's result: its count, or the error it set.
fn byte_count(n: isize) -> Result<usize> {
    if n < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

impl Tx {
    fn new(mode: TxMode) -> Tx {
        Tx {
            mode,
            pending: VecDeque::new(),
            pending_bytes: 0,
            shut: false,
            spare: Vec::new(),
        }
    }
}

impl Rx {
    fn new(mode: RxMode) -> Rx {
        Rx {
            mode,
            leftover: Vec::new(),
            offset: 0,
            flagged: false,
            ahead: VecDeque::new(),
            spare: Vec::new(),
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
    pub(crate) fn nonblocking(&self) -> bool {
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
}
