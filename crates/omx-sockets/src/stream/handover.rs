//! A carried connection used by a child forked after it was carried (a forking server,
//! sshd's privilege-separated children): the child has no endpoint (the progress thread
//! stayed in the parent) and may not be allowed to open one (sshd's pre-authentication
//! child runs under a seccomp filter that kills a process calling `socket` or `clone`),
//! so the connection goes back to kernel TCP, with no byte lost, duplicated or
//! reordered (docs/SOCKETS.md, "Processes: fork and exec"):
//!
//! 1. the child's first call on it writes `MAGIC` on the kernel socket and from then on
//!    uses the kernel socket (only `write` is needed, which any sandbox allows);
//! 2. the peer sees `MAGIC` on TCP (behind probe bytes, zeros, which it drops), stops
//!    writing on omx and sends `FALLBACK` to the parent's connection, after its data;
//! 3. the parent (a thread of its own, whatever its program does) ends its omx writes
//!    with a zero-length message and sends back (`BOUNCE`) what the peer wrote and
//!    nobody read, in order, ended by a zero-length message;
//! 4. the peer writes the bounced bytes on TCP before any new byte (so the child reads
//!    them first), and reads the parent's omx writes up to their end before the
//!    child's TCP bytes.
//!
//! `exec` passes connections on the same way (`before_exec`): the new image gets plain
//! TCP sockets. In the process that owns the endpoint, which the new image replaces,
//! the `exec` itself plays the parent's part before it proceeds.

use super::{claims, poll_one, send_all_tcp, Conn, Rx, RxMode, TxMode, CHUNK, PEER_CHECK};
use crate::fabric::{self, BOUNCE, CONTROL, FALLBACK};
use crate::{fds, real};
use omx_proto::StatusCode;
use omx_runtime::Segment;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::{Error, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Written on TCP by a child taking a connection back to TCP. Its first byte is not a
/// zero, so a peer tells it from probe bytes.
pub const MAGIC: &[u8; 8] = b"OMXBACK1";

/// Every connection of this process by id, including those the program closed that a
/// forked child may still use (`Conn::release`).
static BY_ID: Mutex<Option<HashMap<u32, Arc<Conn>>>> = Mutex::new(None);

pub fn register(id: u32, conn: &Arc<Conn>) {
    BY_ID
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(id, conn.clone());
}

pub fn unregister(id: u32) {
    if let Some(m) = BY_ID.lock().as_mut() {
        m.remove(&id);
    }
}

fn by_id(id: u32) -> Option<Arc<Conn>> {
    BY_ID.lock().as_ref()?.get(&id).cloned()
}

/// In a forked child, the first use of a connection its parent carries: back to TCP.
/// False when that cannot be done exactly (a client that had not heard the server's
/// hello yet, or state a parent thread held at the fork): the connection then fails
/// with `ECONNRESET` in the child (`Conn::check_owner`). Makes no system call but
/// `write`, so a sandboxed child may do it.
pub fn leave_in_child(conn: &Conn) -> bool {
    // Taken back by another child already: nothing of this copy's state is needed (a
    // lock a parent thread held at the fork, sending back for that child, stays held
    // in this copy).
    if claims::is_claimed(conn.id) {
        // Our bytes on the kernel socket must follow the claimant's marker.
        claims::wait_marked(conn.id);
        conn.fell_back.store(true, Ordering::Release);
        fds::forget(conn);
        return true;
    }
    let (Some(rx), Some(tx)) = (conn.rx.try_lock(), conn.tx.try_lock()) else {
        return false;
    };
    let settled = matches!(rx.mode, RxMode::Omx | RxMode::TcpFirst { .. })
        && matches!(tx.mode, TxMode::Omx { .. });
    drop((rx, tx));
    if !settled {
        return false;
    }
    // Another child (or an exec, or the parent's close) took it back already: the peer
    // is on TCP, where this one now shares the socket as the kernel's processes would.
    if claims::claim(conn.id) {
        let written = write_all(conn.sock(), MAGIC);
        claims::mark_written(conn.id);
        if written.is_err() {
            return false;
        }
    } else {
        claims::wait_marked(conn.id);
    }
    conn.fell_back.store(true, Ordering::Release);
    fds::forget(conn);
    // Nothing printed here: sshd's child may not write to a file (RLIMIT_FSIZE 0 raises
    // SIGXFSZ); the parent reports it (`send_back`).
    true
}

/// How long an `exec` or the exit of the process owning the endpoint waits for the
/// peers to take its connections back to TCP (a peer answers as soon as it reads,
/// writes or polls).
pub(super) const HAND_BACK_WAIT: Duration = Duration::from_secs(10);

/// In the process that owns the endpoint: claims a carried connection and writes
/// `MAGIC`, so that the peer moves to TCP and asks us (`FALLBACK`) for what we hold
/// (`Conn::send_back`). False when the connection is not carried in a settled state
/// (then nothing was written) or another process took it back first.
pub(super) fn start_take_back(conn: &Conn) -> bool {
    if conn.fell_back.load(Ordering::Acquire)
        || !matches!(conn.tx.lock().mode, TxMode::Omx { .. })
        || conn
            .rx
            .try_lock()
            .is_some_and(|rx| !matches!(rx.mode, RxMode::Omx | RxMode::TcpFirst { .. }))
        || !claims::claim(conn.id)
    {
        return false;
    }
    let written = write_all(conn.sock(), MAGIC).is_ok();
    claims::mark_written(conn.id);
    written
}

/// Before `exec` replaces this image: each carried connection the new image inherits
/// goes back to TCP, as in a forked child (whose parent sends back what it holds). In
/// the process that owns the endpoint, whose memory and endpoint the new image
/// replaces, the exec sends back what it holds itself, after the peer's `FALLBACK`
/// (up to `HAND_BACK_WAIT`; past it the peer's connection is reset), and its endpoint
/// lingers until the peers acknowledged everything (`Endpoint::linger`).
pub fn before_exec() {
    let forked = fabric::in_forked_child();
    let deadline = Instant::now() + HAND_BACK_WAIT;
    let mut sent_back = finish_urgent(deadline);
    for conn in fds::inherited_by_exec() {
        if forked {
            let _ = leave_in_child(&conn);
            continue;
        }
        if start_take_back(&conn) {
            conn.send_back(Some(deadline));
            sent_back = true;
        }
    }
    if sent_back {
        linger();
    }
}

/// The endpoint dies with this process image: its last acknowledgements (of the
/// peers' `FALLBACK` requests among them) must leave first.
pub(super) fn linger() {
    if let Some(fab) = fabric::fabric() {
        fab.ep.linger();
    }
}

/// Connections this process took back to TCP for urgent data (`Conn::leave_for_urgent`)
/// whose peer has not asked yet (`FALLBACK`) for what they hold.
static URGENT: Mutex<Vec<Arc<Conn>>> = Mutex::new(Vec::new());

/// Before the endpoint goes (exit, exec): the connections taken back for urgent data
/// send back what they hold once their peers ask, up to `deadline`. True when any did.
pub(super) fn finish_urgent(deadline: Instant) -> bool {
    let left: Vec<Arc<Conn>> = std::mem::take(&mut *URGENT.lock());
    for c in &left {
        c.send_back(Some(deadline));
    }
    !left.is_empty()
}

impl Conn {
    /// Before `send(MSG_OOB)` (or `sendto`, `sendmsg`): urgent data is TCP's alone, so
    /// the connection goes back to kernel TCP for good, as for a forked child that uses
    /// it (`leave_in_child`): `MAGIC` on the kernel socket, then every descriptor of it
    /// is plain, and the caller makes its call on the kernel socket at once (the urgent
    /// byte follows `MAGIC`; the peer reads our omx writes before both). What we hold of
    /// the peer's bytes goes back when it asks (`on_fallback_request`), without
    /// blocking this call: a peer that only waits for `POLLPRI` still gets it.
    /// An error (nothing sent) when the connection cannot leave omx exactly.
    pub fn leave_for_urgent(self: &Arc<Self>) -> Result<()> {
        self.check_owner()?;
        self.await_hello_before_first_write();
        if !self.settle_client(false)? || self.fell_back.load(Ordering::Acquire) {
            // Plain TCP already.
            return Ok(());
        }
        // The peer left omx first (its `MAGIC` is here): follow it (our writes go on
        // TCP from now on, the urgent one among them) rather than write ours, which
        // its reads, on the kernel socket already, would take for data. (A reader of
        // ours at work follows it itself.)
        if let Some(mut rx) = self.rx.try_lock() {
            if matches!(rx.mode, RxMode::Omx) && self.peer_left_omx() {
                self.fall_back(&mut rx)?;
            }
        }
        match self.tx.lock().mode {
            TxMode::FellBack => return Ok(()),
            TxMode::Broken => return Err(super::os_err(libc::EPIPE)),
            // A client whose server's hello has not come yet: its bytes are counted
            // on TCP, and an urgent byte would be missing from the count where the
            // server does not read inline. Rare (the first write waited for the hello).
            TxMode::Tcp { .. } => return Err(super::os_err(libc::EAGAIN)),
            TxMode::Omx { .. } => {}
        }
        if !start_take_back(self) {
            if !claims::is_claimed(self.id) {
                // Not settled (the peer is handing its side back): try again.
                return Err(super::os_err(libc::EAGAIN));
            }
            // Another process of ours (a forked child) took it back: our bytes on
            // the kernel socket follow its `MAGIC`.
            claims::wait_marked(self.id);
        }
        URGENT.lock().push(self.clone());
        self.fell_back.store(true, Ordering::Release);
        // A reader of ours blocked on omx goes to the kernel socket.
        self.ready.add();
        fds::forget(self);
        if fabric::verbose() {
            eprintln!(
                "omx_sockets: conn {:#x} back on TCP for urgent data",
                self.id
            );
        }
        Ok(())
    }

    /// For `ioctl(SIOCATMARK)`: bytes that came over omx are still unread (the mark,
    /// in the kernel's stream, lies behind them). Takes the peer's `MAGIC` and the end
    /// of its omx writes first when nothing else is left, so that a connection
    /// whose omx bytes were all read answers as the kernel does.
    pub fn omx_bytes_unread(&self) -> bool {
        if self.fell_back.load(Ordering::Acquire) {
            return false;
        }
        self.poll_in();
        if self.fell_back.load(Ordering::Acquire) {
            return false;
        }
        // A reader at work: the kernel's answer.
        let Some(rx) = self.rx.try_lock() else {
            return false;
        };
        rx.offset < rx.leftover.len() || self.message_waiting(&rx)
    }
}

/// `write` only (see `leave_in_child`).
fn write_all(fd: i32, mut bytes: &[u8]) -> Result<()> {
    while !bytes.is_empty() {
        // SAFETY: bytes is a valid slice.
        let n = unsafe { real::write(fd, bytes.as_ptr() as *const libc::c_void, bytes.len()) };
        if n < 0 {
            let e = Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => {
                    poll_one(fd, libc::POLLOUT, -1);
                    continue;
                }
                _ => return Err(e),
            }
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Called by the progress thread when a `FALLBACK` arrives for connection `id`: the
/// answer waits on the network, so it runs on a thread of its own.
pub fn on_fallback_request(id: u32) {
    let _ = std::thread::Builder::new()
        .name("omx-sockets-back".into())
        .spawn(move || {
            if let Some(conn) = by_id(id) {
                conn.send_back(None);
                URGENT.lock().retain(|c| c.id != id);
                // A connection the program closed is on the closing thread's list,
                // which closes its kernel socket now (`Conn::release`).
                super::close::wake_closer();
            }
        });
}

impl Conn {
    /// Bytes on the kernel socket while carried: the peer's probe bytes (zeros,
    /// dropped) or `MAGIC` (consumed: true).
    pub(super) fn peer_left_omx(&self) -> bool {
        // Shared with a child forked since: bytes on TCP may be the child's to read.
        if self.maybe_shared() {
            return false;
        }
        let mut buf = [0u8; 64];
        let n = self.peek_tcp(&mut buf);
        let zeros = buf[..n].iter().take_while(|&&b| b == 0).count();
        let rest = &buf[zeros..n];
        let (drop_bytes, magic) = if rest.starts_with(MAGIC) {
            (zeros + MAGIC.len(), true)
        } else if MAGIC.starts_with(rest) {
            // The rest of MAGIC is on its way.
            (zeros, false)
        } else {
            // Not ours: dropped as probe bytes always were.
            (n, false)
        };
        let mut sink = [0u8; 64];
        let _ = self.recv_tcp(&mut sink[..drop_bytes], 0, false);
        magic
    }

    /// Whether a read finds something now, when `poll` saw the kernel socket or the
    /// readiness descriptor readable: bytes that only the library reads (probes, the
    /// peer's `MAGIC`, the end of its omx writes) are taken here instead, so that a
    /// read after `POLLIN` never answers `EAGAIN`.
    pub fn poll_in(&self) -> bool {
        if self.fell_back.load(Ordering::Acquire) {
            return true;
        }
        // A reader is at work: it sorts these bytes out itself.
        let Some(mut rx) = self.rx.try_lock() else {
            return true;
        };
        if rx.offset < rx.leftover.len() {
            return true;
        }
        if matches!(rx.mode, RxMode::AwaitHello) {
            // The server's hello makes the kernel socket readable, but it is ours to
            // read: take it now (the stream moves to omx) and report only the stream's
            // own bytes, as TCP's POLLIN does. A plain stream's bytes are the program's.
            match self.look_for_hello(&mut rx, false) {
                Ok(true) if matches!(rx.mode, RxMode::AwaitHello) => return false,
                Ok(true) => {}
                _ => return true,
            }
        }
        match rx.mode {
            RxMode::Omx => {
                if self.message_waiting(&rx) {
                    return true;
                }
                match self.tcp_state() {
                    super::TcpState::Data => {
                        if !self.peer_left_omx() || self.fall_back(&mut rx).is_err() {
                            return false;
                        }
                    }
                    super::TcpState::Empty => return false,
                    _ => return true,
                }
            }
            RxMode::OmxThenTcp => {}
            _ => return true,
        }
        // After `fall_back`: the peer's omx writes first, then TCP.
        if self.take_end_marker(&rx) {
            self.end_fallback(&mut rx);
            return !matches!(self.tcp_state(), super::TcpState::Empty);
        }
        self.message_waiting(&rx)
    }

    /// A client that has not looked for the server's hello yet (its kernel socket's
    /// readiness may be the hello's, see `poll_in`).
    pub fn settling(&self) -> bool {
        self.rx
            .try_lock()
            .is_some_and(|rx| matches!(rx.mode, RxMode::AwaitHello))
    }

    /// A child forked since the connection was made may use its kernel socket.
    pub(super) fn maybe_shared(&self) -> bool {
        fabric::forks() != self.forks_at_creation
    }

    fn peek_tcp(&self, buf: &mut [u8]) -> usize {
        self.recv_tcp(buf, libc::MSG_PEEK, false).unwrap_or(0)
    }

    /// The peer's process went back to TCP (`peer_left_omx`): stop writing on omx, ask
    /// it for what it holds of ours and write that on TCP first. The caller holds `rx`.
    pub(super) fn fall_back(&self, rx: &mut Rx) -> Result<()> {
        let mut tx = self.tx.lock();
        let TxMode::Omx { partner, peer_conn } = tx.mode else {
            return Ok(());
        };
        let ep = &self.fab.ep;
        let none = Segment::memory(std::ptr::NonNull::<u8>::dangling().as_ptr(), 0);
        // SAFETY: a zero-length message.
        let ask = unsafe { ep.isend(&[none], partner, FALLBACK | peer_conn as u64, 0, false) }
            .map_err(|e| Error::other(e.to_string()))?;
        rx.mode = RxMode::OmxThenTcp;
        let mut asked = false;
        let mut buf = vec![0u8; CHUNK];
        // Kept until the last one arrived, then written on TCP: the process sending
        // them back may be an exec that reads TCP only in its new image, after its
        // sends completed (bounded by what we had posted: our window).
        let mut returned: Vec<Vec<u8>> = Vec::new();
        loop {
            let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
            // SAFETY: buf outlives the wait below.
            let r = unsafe { ep.irecv(&[seg], BOUNCE | self.id as u64, !0, 0) }
                .map_err(|e| Error::other(e.to_string()))?;
            let got = loop {
                if let Some(c) = ep.wait(r, Some(PEER_CHECK)) {
                    break c;
                }
                if !asked {
                    if let Some(c) = ep.test(ask) {
                        asked = true;
                        if c.status.code != StatusCode::Success {
                            // The process that held our bytes is gone.
                            let _ = ep.cancel(r);
                            tx.mode = TxMode::Broken;
                            return Err(super::os_err(libc::ECONNRESET));
                        }
                    }
                }
            };
            let len = got.status.xfer_length as usize;
            if got.status.code != StatusCode::Success {
                tx.mode = TxMode::Broken;
                return Err(super::os_err(libc::ECONNRESET));
            }
            if len == 0 {
                break;
            }
            returned.push(buf[..len].to_vec());
        }
        let mut rewritten = 0;
        for bytes in returned {
            send_all_tcp(self.sock(), &bytes)?;
            rewritten += bytes.len();
        }
        if !asked {
            ep.wait(ask, None);
        }
        // The parent received all of ours before answering: our sends are complete.
        while let Some(&(r, ..)) = tx.pending.front() {
            if let Some(c) = ep.wait(r, None) {
                let _ = self.completed(&mut tx, c);
            }
        }
        tx.mode = TxMode::FellBack;
        if fabric::verbose() {
            eprintln!(
                "omx_sockets: conn {:#x}: the peer's process went back to TCP ({rewritten} bytes rewritten on TCP)",
                self.id
            );
        }
        Ok(())
    }

    /// Reader after `fall_back`: the peer's omx writes ended (the zero-length message
    /// was taken); the connection is plain TCP from now on.
    pub(super) fn end_fallback(&self, rx: &mut Rx) {
        rx.mode = RxMode::Omx;
        self.fell_back.store(true, Ordering::Release);
        self.forget();
    }

    /// Takes the next data message if it is the zero-length end of the peer's omx writes
    /// (never behind messages read ahead: those came first).
    pub(super) fn take_end_marker(&self, rx: &Rx) -> bool {
        if !rx.ahead.is_empty() {
            return false;
        }
        let m = self.id as u64;
        if self.fab.ep.iprobe(m, !0).is_some_and(|s| s.msg_length == 0) {
            return self.receive_into(m, &mut []).is_ok();
        }
        false
    }

    /// A writer or flush saw bytes on TCP: the peer's process may have gone back to TCP.
    /// True when the connection is now on TCP.
    pub(super) fn follow_peer_to_tcp(&self) -> Result<bool> {
        let mut rx = self.rx.lock();
        // Only a settled stream's TCP bytes are probes or `MAGIC`: before (the peer's
        // bytes ahead of our hello) and after (behind its omx writes) they are data.
        if !matches!(rx.mode, RxMode::Omx) {
            return Ok(false);
        }
        if self.peer_left_omx() {
            self.fall_back(&mut rx)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Parent side of a `FALLBACK`: end our omx writes, send back what the peer wrote
    /// and nobody read, then the connection is plain TCP here too. `deadline` bounds
    /// every wait (an exec's or an exit's: past it what is left is not sent back and the
    /// peer's connection is reset); without one the `FALLBACK` has arrived already.
    pub(super) fn send_back(&self, deadline: Option<Instant>) {
        // A reader of ours blocked on this connection goes to the kernel socket.
        self.fell_back.store(true, Ordering::Release);
        self.ready.add();
        let left = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let (Some(mut rx), Some(mut tx)) = (match deadline {
            None => (Some(self.rx.lock()), Some(self.tx.lock())),
            Some(d) => (self.rx.try_lock_until(d), self.tx.try_lock_until(d)),
        }) else {
            return;
        };
        let TxMode::Omx { peer_conn, .. } = tx.mode else {
            return;
        };
        let ep = &self.fab.ep;
        let none = Segment::memory(std::ptr::NonNull::<u8>::dangling().as_ptr(), 0);
        // SAFETY: a zero-length receive of the request itself.
        if let Ok(r) = unsafe { ep.irecv(&[none], FALLBACK | self.id as u64, !0, 0) } {
            if ep.wait(r, left()).is_none() {
                let _ = ep.cancel(r);
                tx.mode = TxMode::Broken;
                if fabric::verbose() {
                    eprintln!(
                        "omx_sockets: conn {:#x}: the peer did not take it back to TCP",
                        self.id
                    );
                }
                return;
            }
        }
        let peer = peer_conn as u64;
        let mut back = Vec::new();
        if rx.offset < rx.leftover.len() {
            back.push(rx.leftover[rx.offset..].to_vec());
        }
        // Then what was read ahead (the connection existed before the fork).
        back.extend(self.drain_ahead(&mut rx));
        rx.leftover = Vec::new();
        rx.offset = 0;
        // A count the client sent and nobody read: the child reads its TCP bytes itself.
        if ep.iprobe(CONTROL | self.id as u64, !0).is_some() {
            let mut count = [0u8; 8];
            let _ = self.receive_control(CONTROL | self.id as u64, &mut count);
        }
        while let Some(st) = ep.iprobe(self.id as u64, !0) {
            let mut v = vec![0u8; st.msg_length as usize];
            if self.receive_into(self.id as u64, &mut v).is_err() {
                break;
            }
            back.push(v);
        }
        let returned: usize = back.iter().map(Vec::len).sum();
        // Before the bytes go: the child cannot finish reading before this is printed.
        if fabric::verbose() {
            eprintln!(
                "omx_sockets: conn {:#x} back on TCP for a forked child or exec ({returned} bytes returned)",
                self.id
            );
        }
        // Our omx writes end here; then what goes back, ended the same way.
        let mut posted = self.post(&mut tx, Vec::new(), peer);
        for v in back {
            posted = posted.and_then(|()| self.post(&mut tx, v, BOUNCE | peer));
        }
        posted = posted.and_then(|()| self.post(&mut tx, Vec::new(), BOUNCE | peer));
        drop(rx);
        while let Some(&(r, ..)) = tx.pending.front() {
            match ep.wait(r, left()) {
                Some(c) => {
                    let _ = self.completed(&mut tx, c);
                }
                None => break,
            }
        }
        tx.mode = TxMode::FellBack;
        drop(tx);
        self.forget();
        if let Err(e) = posted {
            if fabric::verbose() {
                eprintln!("omx_sockets: conn {:#x}: sending back failed: {e}", self.id);
            }
        }
    }
}
