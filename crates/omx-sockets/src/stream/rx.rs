//! The read path: the next message straight into the caller's buffer when it fits,
//! the rest of a partly read message kept, the readiness descriptor's count, and the
//! end of the stream from the kernel socket.

use super::ahead::READ_AHEAD_MIN;
use super::*;
use omx_runtime::Spin;

/// Unread bytes up to which `FIONREAD` takes the small messages that arrived (see
/// `readable_bytes`).
const FIONREAD_JOIN: usize = 64 * 1024;

impl Conn {
    pub fn recv(&self, out: &mut [u8], flags: i32) -> Result<usize> {
        self.check_owner()?;
        if flags & libc::MSG_TRUNC != 0 && !out.is_empty() {
            // TCP's MSG_TRUNC takes (or peeks) the bytes without copying them out.
            let mut scratch = vec![0u8; out.len()];
            return self.recv(&mut scratch, flags & !libc::MSG_TRUNC);
        }
        let peek = flags & libc::MSG_PEEK != 0;
        let block = flags & libc::MSG_DONTWAIT == 0 && !self.nonblocking();
        let waitall = flags & libc::MSG_WAITALL != 0 && !peek;
        // TCP's peek with MSG_WAITALL waits until the whole length is queued, across
        // the peer's writes (see `gather`).
        let gather = flags & libc::MSG_WAITALL != 0 && peek;
        // As TCP's (tcp(7), socket(7)): a blocking read waits for min(SO_RCVLOWAT,
        // len) bytes, across the peer's writes (the end of the stream, an error, a
        // signal or SO_RCVTIMEO end it with fewer); a non-blocking one takes what is
        // there.
        let lowat = self.lowat().min(out.len()).max(1);
        if peek && !gather && block && lowat > 1 {
            // A peek waits for them too: the messages join (see `gather`), then the
            // whole length peeks at what is there.
            let n = self.recv_some(&mut out[..lowat], true, true, true)?;
            if n < lowat {
                return Ok(n);
            }
            return Ok(self.recv_some(out, true, false, false).unwrap_or(n).max(n));
        }
        let target = if waitall { out.len() } else { lowat };
        let mut got = 0;
        while got < out.len() || out.is_empty() {
            match self.recv_some(&mut out[got..], peek, gather, block && got < target) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if got > 0 && e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if got == 0 => return Err(e),
                Err(_) => break,
            }
            if peek || got >= target || out.is_empty() {
                break;
            }
        }
        Ok(got)
    }

    /// `SO_RCVLOWAT` as the program last set it (1 by default).
    pub fn lowat(&self) -> usize {
        self.lowat.load(Ordering::Relaxed)
    }

    /// Reads `SO_RCVLOWAT` back from the kernel socket (after the program set it: the
    /// kernel caps it) for the reads and readiness of this connection.
    pub fn update_lowat(&self) {
        let mut v: libc::c_int = 1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: one int into a local.
        let r = unsafe {
            libc::getsockopt(
                self.sock(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                &mut v as *mut libc::c_int as *mut libc::c_void,
                &mut len,
            )
        };
        if r == 0 {
            self.lowat.store(v.max(1) as usize, Ordering::Relaxed);
        }
    }

    /// For `poll`/`select`/`epoll` of a connection readable by its count: false while
    /// `SO_RCVLOWAT` is above 1 and fewer bytes than it are there, the stream neither
    /// ended nor failed (TCP reports `POLLIN` only then). True when it cannot tell (a
    /// reader is at work, the connection is not plain omx).
    pub fn lowat_met(&self) -> bool {
        let lowat = self.lowat();
        if lowat <= 1 || self.fell_back.load(Ordering::Acquire) {
            return true;
        }
        let Some(mut rx) = self.rx.try_lock() else {
            return true;
        };
        if !matches!(rx.mode, RxMode::Omx) || self.readable_in(&mut rx, lowat) >= lowat {
            return true;
        }
        drop(rx);
        matches!(self.tcp_state(), TcpState::Eof | TcpState::Failed(_))
    }

    pub(super) fn recv_some(
        &self,
        out: &mut [u8],
        peek: bool,
        gather: bool,
        block: bool,
    ) -> Result<usize> {
        let tcp_flags = match (peek, gather) {
            (false, _) => 0,
            (true, false) => libc::MSG_PEEK,
            (true, true) => libc::MSG_PEEK | libc::MSG_WAITALL,
        };
        let mut rx = self.rx.lock();
        let mut deadline: Option<Option<Instant>> = None;
        // When the read first waited (see `FIRST_WAIT`).
        let mut waited: Option<Instant> = None;
        loop {
            if self.fell_back.load(Ordering::Acquire) {
                drop(rx);
                return self.recv_tcp(out, tcp_flags, block);
            }
            // Noted before looking: a message that arrives after the look moves it.
            let seen = fabric::arrivals();
            // A peek that waits for the whole length, short of bytes: wait below.
            let short = gather
                && rx.offset < rx.leftover.len()
                && self.gather(&mut rx, out.len(), block)?;
            if !short && rx.offset < rx.leftover.len() {
                let mut n = out.len().min(rx.leftover.len() - rx.offset);
                out[..n].copy_from_slice(&rx.leftover[rx.offset..rx.offset + n]);
                if !peek {
                    rx.offset += n;
                    if rx.offset >= rx.leftover.len() {
                        n = self.take_small(&mut rx, out, n);
                    }
                }
                self.flag_leftover(&mut rx);
                return Ok(n);
            }
            if !short {
                match rx.mode {
                    RxMode::AwaitHello => {
                        if !self.look_for_hello(&mut rx, block)? {
                            drop(rx);
                            self.forget();
                            return self.recv_tcp(out, tcp_flags, block);
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
                            self.tcp_bytes_ours.store(false, Ordering::Release);
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
                        self.await_stored(&rx);
                        // The peer's last omx bytes were read: the rest is on TCP.
                        if self.take_end_marker(&rx) {
                            self.end_fallback(&mut rx);
                            continue;
                        }
                        if let Some(n) = self.take_data(&mut rx, out, peek)? {
                            return Ok(n);
                        }
                    }
                    RxMode::Omx => {
                        self.await_stored(&rx);
                        if let Some(n) = self.take_data(&mut rx, out, peek)? {
                            if gather && n > 0 && n < out.len() {
                                // The message is kept whole: the next ones join it.
                                continue;
                            }
                            return Ok(n);
                        }
                        // A read about to wait for the first time watches the kernel
                        // socket in that wait (its FIN, reset or bytes end the wait, at
                        // the spin's first look): the look before it, one system call per
                        // message of a ping-pong, is left to the wait.
                        let wait_looks = block && waited.is_none() && !self.maybe_shared();
                        match if wait_looks {
                            TcpState::Empty
                        } else {
                            self.tcp_state()
                        } {
                            TcpState::Eof => {
                                // Everything sent before the FIN has arrived: one last look.
                                return match self.take_data(&mut rx, out, peek)? {
                                    Some(n) => Ok(n),
                                    None => {
                                        // Writes from now on look at the kernel socket
                                        // (see `peer_ended`).
                                        self.peer_ended.store(true, Ordering::Relaxed);
                                        Ok(0)
                                    }
                                };
                            }
                            TcpState::Failed(e) => {
                                return match self.take_data(&mut rx, out, peek)? {
                                    Some(n) => Ok(n),
                                    None => {
                                        // As TCP's: once a read reported the reset, writes
                                        // fail with EPIPE (not one in `TCP_LOOK_EVERY`).
                                        let mut tx = self.tx.lock();
                                        if matches!(tx.mode, TxMode::Omx { .. }) {
                                            tx.mode = TxMode::Broken;
                                        }
                                        Err(e)
                                    }
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
            // SO_RCVTIMEO is read once a first wait of `FIRST_WAIT` found nothing (a
            // system call per message of a ping-pong otherwise): a timeout shorter
            // than that ends up to `FIRST_WAIT` late, within the kernel's own
            // granularity for it (a jiffy).
            let started = *waited.get_or_insert_with(Instant::now);
            let since = started.elapsed();
            let left = if since < FIRST_WAIT {
                Some(FIRST_WAIT - since)
            } else {
                match *deadline.get_or_insert_with(|| self.receive_deadline().map(|d| d - since)) {
                    None => None,
                    Some(d) => {
                        let left = d.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            // SO_RCVTIMEO passed, as TCP says it.
                            return Err(os_err(libc::EAGAIN));
                        }
                        Some(left)
                    }
                }
            };
            // The kernel socket unwatched: its end is looked at every PEER_CHECK.
            let left = if watch[1].fd < 0 {
                Some(left.map_or(PEER_CHECK, |l| l.min(PEER_CHECK)))
            } else {
                left
            };
            let handlers = crate::signals::no_restart_count();
            let spin = self.wait_spin();
            // The wait holds no lock of the connection: another thread's FIONREAD,
            // non-blocking read or poll answers at once meanwhile, as TCP's (they
            // waited for this read to end).
            drop(rx);
            let woke = fabric::watching(&[&self.ready], || {
                fabric::block_with(&watch, left, seen, spin)
            });
            rx = self.rx.lock();
            if woke.is_err() {
                // As the kernel's read interrupted by a signal handler (signal(7)): it
                // goes on when the handler has SA_RESTART and no SO_RCVTIMEO is set.
                if self.receive_deadline().is_some() || !crate::signals::restarts(handlers) {
                    return Err(os_err(libc::EINTR));
                }
            }
        }
    }

    /// For `recv(MSG_PEEK | MSG_WAITALL)`: appends the next messages to the unread
    /// bytes until `want` are there (TCP's peek looks across the peer's writes); true
    /// if the read should wait for more (the stream goes on and nothing more arrived).
    /// A non-blocking peek takes what arrived; the stream's end or reset, the peer's
    /// move back to TCP, or a mode other than plain omx give what is there.
    fn gather(&self, rx: &mut Rx, want: usize, block: bool) -> Result<bool> {
        while rx.leftover.len() - rx.offset < want {
            if !matches!(rx.mode, RxMode::Omx) {
                return Ok(false);
            }
            self.await_stored(rx);
            let next = match rx.ahead_len() {
                Some(len) => Some(len),
                None => self
                    .fab
                    .ep
                    .iprobe(self.id as u64, !0)
                    .map(|s| s.msg_length as usize),
            };
            match next {
                // The end of the peer's omx writes: the read after this one sees it.
                Some(0) => return Ok(false),
                Some(_) => {
                    if !self.append_next(rx) {
                        return Ok(false);
                    }
                }
                None if !block => return Ok(false),
                None => match self.tcp_state() {
                    // Everything sent before the FIN or reset has arrived: one more
                    // look, then what is there.
                    TcpState::Eof | TcpState::Failed(_) => {
                        if !self.message_waiting(rx) {
                            return Ok(false);
                        }
                    }
                    TcpState::Data if self.peer_left_omx() => return Ok(false),
                    TcpState::Data | TcpState::Empty => return Ok(true),
                },
            }
        }
        Ok(false)
    }

    /// Takes the next message whole behind the unread bytes; false if none could be
    /// taken (a reset: the next read reports it).
    fn append_next(&self, rx: &mut Rx) -> bool {
        // The unread bytes set aside (still flagged on the readiness descriptor) while
        // the next message is taken whole.
        let unread = rx.leftover[rx.offset..].to_vec();
        rx.leftover.clear();
        rx.offset = 0;
        let taken = self.take_data(rx, &mut [], true);
        let msg = std::mem::replace(&mut rx.leftover, unread);
        let ok = matches!(taken, Ok(Some(_)));
        if ok {
            rx.leftover.extend_from_slice(&msg);
        }
        rx.recycle(msg);
        self.flag_leftover(rx);
        ok
    }

    /// When a blocking receive gives up: `SO_RCVTIMEO` from now, or never.
    pub(super) fn receive_deadline(&self) -> Option<Instant> {
        self.timeout_deadline(libc::SO_RCVTIMEO)
    }

    /// When a blocking write gives up: `SO_SNDTIMEO` from now, or never.
    pub(super) fn send_deadline(&self) -> Option<Instant> {
        self.timeout_deadline(libc::SO_SNDTIMEO)
    }

    /// Reads back whether `SO_SNDTIMEO` is set on the kernel socket (after the program
    /// set it, and when the connection is made: it may come from the listener).
    pub fn update_send_timeout(&self) {
        let set = self.timeout_deadline(libc::SO_SNDTIMEO).is_some();
        self.send_timeout.store(set, Ordering::Relaxed);
    }

    /// `SO_SNDTIMEO` is set: a write must be able to give up at it.
    pub(super) fn has_send_timeout(&self) -> bool {
        self.send_timeout.load(Ordering::Relaxed)
    }

    /// `SO_RCVTIMEO` or `SO_SNDTIMEO` (`opt`) of the kernel socket from now, or never.
    fn timeout_deadline(&self, opt: libc::c_int) -> Option<Instant> {
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
                opt,
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
        // A client that has not looked for the server's hello yet looks now: the
        // kernel socket's count would be the hello's 21 bytes, not the stream's.
        if matches!(self.rx.lock().mode, RxMode::AwaitHello) && self.settle_client(false).is_err() {
            return 0;
        }
        let mut rx = self.rx.lock();
        self.readable_in(&mut rx, FIONREAD_JOIN)
    }

    /// `readable_bytes` with `rx` held; the small messages that arrived join the unread
    /// bytes up to `join` bytes.
    fn readable_in(&self, rx: &mut Rx, join: usize) -> usize {
        // TCP counts every byte queued: the small messages that arrived join the
        // unread bytes (a program waiting until FIONREAD counts a header written in
        // pieces would wait forever on the first piece's count).
        let join = join.max(FIONREAD_JOIN);
        if matches!(rx.mode, RxMode::Omx) && !self.maybe_shared() {
            self.await_stored(rx);
            while rx.ahead.is_empty()
                && rx.leftover.len() - rx.offset < join
                && self.small_next().is_some()
                && self.append_next(rx)
            {}
        }
        if rx.offset < rx.leftover.len() {
            let unread = rx.leftover.len() - rx.offset;
            // A large message behind (read ahead or announced) counts whole, as before.
            let next = match rx.ahead_len() {
                Some(len) => len,
                None if matches!(rx.mode, RxMode::Omx) => self
                    .fab
                    .ep
                    .iprobe(self.id as u64, !0)
                    .map_or(0, |s| s.msg_length as usize),
                None => 0,
            };
            return unread + next;
        }
        if let Some(len) = rx.ahead_len() {
            return len;
        }
        match rx.mode {
            RxMode::Omx => {
                self.await_stored(rx);
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

    pub(super) fn take_control(&self) -> Option<u64> {
        let m = CONTROL | self.id as u64;
        self.fab.ep.iprobe(m, !0)?;
        let mut count = [0u8; 8];
        self.receive_control(m, &mut count).ok()?;
        Some(u64::from_be_bytes(count))
    }

    /// Receives the control message (`CONTROL` kind, `match_info`) into `count`: not
    /// counted in the readiness (see `fabric::wake_receiver`), so not taken from it.
    pub(super) fn receive_control(&self, match_info: u64, count: &mut [u8; 8]) -> Result<usize> {
        // SAFETY: count outlives the wait below.
        let r = unsafe { self.post_receive(match_info, count.as_mut_ptr(), count.len()) }?;
        self.await_receive_with(r, false)
    }

    /// Receives the next message matching `match_info` into `buf`; its length.
    pub(super) fn receive_into(&self, match_info: u64, buf: &mut [u8]) -> Result<usize> {
        // SAFETY: buf outlives the wait below.
        let r = unsafe { self.post_receive(match_info, buf.as_mut_ptr(), buf.len()) }?;
        self.await_receive(r)
    }

    /// Posts a receive of the next message matching `match_info` into `len` bytes at
    /// `ptr`.
    ///
    /// # Safety
    /// The memory must stay valid, untouched, until the request completes.
    pub(super) unsafe fn post_receive(
        &self,
        match_info: u64,
        ptr: *mut u8,
        len: usize,
    ) -> Result<ReqId> {
        let seg = Segment::memory(ptr, len);
        // SAFETY: as the caller promises.
        unsafe { self.fab.ep.irecv(&[seg], match_info, !0, 0) }
            .map_err(|e| Error::other(e.to_string()))
    }

    /// Waits for a posted receive; the length it took.
    pub(super) fn await_receive(&self, r: ReqId) -> Result<usize> {
        self.await_receive_with(r, true)
    }

    /// [`Self::await_receive`] of a message counted in the readiness (`counted`) or not.
    fn await_receive_with(&self, r: ReqId, counted: bool) -> Result<usize> {
        // A pull under way keeps the spin, on bulk streams too: its replies come a few
        // µs apart (measured: skipping it here cost up to half the rate at MTU 9000,
        // pinned; docs/SOCKETS.md, helper 25s).
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
        // One message fewer waits: the readiness counts them.
        if counted {
            self.ready.take();
        }
        self.bulk.store(
            c.status.xfer_length as usize >= READ_AHEAD_MIN,
            Ordering::Relaxed,
        );
        if c.status.code != StatusCode::Success {
            return Err(os_err(libc::ECONNRESET));
        }
        Ok(c.status.xfer_length as usize)
    }

    /// How a wait for this connection's next message spins: not at all while the peer
    /// streams bulk data (see `bulk`), whose messages come at the pace of its pulls
    /// (tens of µs): the spin only took the CPU from the peer on a shared machine
    /// (iperf3's slow mode, docs/SOCKETS.md). A ping-pong of small messages keeps it.
    pub fn wait_spin(&self) -> Spin {
        if self.bulk.load(Ordering::Relaxed) {
            Spin::Skip
        } else {
            Spin::Adaptive
        }
    }

    /// The peer's process is gone: forget its omx partner (what is under way with it
    /// fails; a new connection connects afresh).
    pub(super) fn drop_dead_peer(&self) {
        let mut tx = self.tx.lock();
        if let TxMode::Omx { partner, .. } = tx.mode {
            self.fab.forget_partner(partner);
            tx.mode = TxMode::Broken;
        }
    }

    pub(super) fn take_data(
        &self,
        rx: &mut Rx,
        out: &mut [u8],
        peek: bool,
    ) -> Result<Option<usize>> {
        if let Some(got) = self.take_ahead(rx) {
            let mut n = self.keep_rest(rx, got?, out, peek);
            // As TCP's read takes every byte queued that fits: the next messages read
            // ahead that arrived whole follow in the same read (a write cut into a
            // direct part and a copied tail is two messages, read as one).
            while !peek && n < out.len() && rx.offset >= rx.leftover.len() && self.ahead_done(rx) {
                match self.take_ahead(rx) {
                    Some(Ok(msg)) => n += self.keep_rest(rx, msg, &mut out[n..], false),
                    // The next read finds the connection's end (its reset).
                    Some(Err(_)) | None => break,
                }
            }
            if !peek && rx.ahead.is_empty() && rx.offset >= rx.leftover.len() {
                n = self.take_small(rx, out, n);
            }
            self.read_ahead(rx);
            return Ok(Some(n));
        }
        let m = self.id as u64;
        let Some(status) = self.fab.ep.iprobe(m, !0) else {
            // Drained: an idle connection holds no spare memory.
            rx.spare.clear();
            return Ok(None);
        };
        let len = status.msg_length as usize;
        let n = if !peek && len <= out.len() {
            let direct = &mut out[..len];
            // SAFETY: `direct` outlives the wait below.
            let r = unsafe { self.post_receive(m, direct.as_mut_ptr(), len) }?;
            self.read_ahead(rx);
            let n = self.await_receive(r)?;
            self.take_small(rx, out, n)
        } else {
            let mut whole = rx.buffer(len);
            // SAFETY: `whole` outlives the wait below.
            let r = unsafe { self.post_receive(m, whole.as_mut_ptr(), len) }?;
            self.read_ahead(rx);
            let got = self.await_receive(r)?;
            whole.truncate(got);
            self.keep_rest(rx, whole, out, peek)
        };
        self.flag_leftover(rx);
        Ok(Some(n))
    }

    /// The length of the next message when it is small (in the endpoint already, not
    /// read ahead) and not the end of the peer's omx writes (zero bytes).
    fn small_next(&self) -> Option<usize> {
        let len = self.fab.ep.iprobe(self.id as u64, !0)?.msg_length as usize;
        (len > 0 && len < READ_AHEAD_MIN).then_some(len)
    }

    /// After a read took `n` bytes into `out` and nothing of its message is left: as
    /// TCP's read takes every byte queued that fits, the small messages that arrived
    /// behind follow in the same read (the last one may be cut, its rest kept). The
    /// bytes in `out` now.
    fn take_small(&self, rx: &mut Rx, out: &mut [u8], mut n: usize) -> usize {
        if !matches!(rx.mode, RxMode::Omx) || self.maybe_shared() {
            return n;
        }
        while n < out.len() && rx.offset >= rx.leftover.len() && rx.ahead.is_empty() {
            let Some(len) = self.small_next() else {
                break;
            };
            let m = self.id as u64;
            if len <= out.len() - n {
                let direct = &mut out[n..n + len];
                // SAFETY: `direct` outlives the wait below.
                let Ok(r) = (unsafe { self.post_receive(m, direct.as_mut_ptr(), len) }) else {
                    break;
                };
                match self.await_receive(r) {
                    Ok(got) => n += got,
                    // The next read finds the connection's end (its reset).
                    Err(_) => break,
                }
            } else {
                let mut whole = rx.buffer(len);
                // SAFETY: `whole` outlives the wait below.
                let Ok(r) = (unsafe { self.post_receive(m, whole.as_mut_ptr(), len) }) else {
                    break;
                };
                match self.await_receive(r) {
                    Ok(got) => {
                        whole.truncate(got);
                        n += self.keep_rest(rx, whole, &mut out[n..], false);
                    }
                    Err(_) => break,
                }
            }
        }
        n
    }

    /// Copies the head of a received message into `out` and keeps the rest (all of it
    /// for a peek) for the next reads; the bytes copied.
    fn keep_rest(&self, rx: &mut Rx, msg: Vec<u8>, out: &mut [u8], peek: bool) -> usize {
        let n = out.len().min(msg.len());
        out[..n].copy_from_slice(&msg[..n]);
        // (Only called once the previous message was read out.)
        let read_out = std::mem::take(&mut rx.leftover);
        rx.recycle(read_out);
        if !peek && n == msg.len() {
            rx.offset = 0;
            rx.recycle(msg);
        } else {
            rx.offset = if peek { 0 } else { n };
            rx.leftover = msg;
        }
        self.flag_leftover(rx);
        n
    }

    /// A message whose arrival was counted (the readiness descriptor) is stored a moment
    /// later: waits for that moment, so that readiness and the next read agree.
    pub(super) fn await_stored(&self, rx: &Rx) {
        if !rx.ahead.is_empty() {
            return;
        }
        let until = Instant::now() + Duration::from_millis(10);
        while self.fab.ep.iprobe(self.id as u64, !0).is_none() && Instant::now() < until {
            if !self.ready.pending() {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// The readiness descriptor counts the messages that arrived and were not taken
    /// (the progress thread adds one as each arrives, just before it is stored), plus
    /// one while a taken message has bytes left to read.
    pub(super) fn flag_leftover(&self, rx: &mut Rx) {
        let left = rx.offset < rx.leftover.len();
        if left != rx.flagged {
            if left {
                self.ready.add();
            } else {
                self.ready.take();
            }
            rx.flagged = left;
        }
    }

    pub(super) fn recv_tcp(&self, out: &mut [u8], flags: i32, block: bool) -> Result<usize> {
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
        byte_count(n)
    }
}
