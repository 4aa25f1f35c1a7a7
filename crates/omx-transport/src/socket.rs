//! The AF_PACKET socket of one board: receive through an mmap ring (or
//! `recvmmsg`), send in `sendmmsg` batches.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::filter::{EndpointFilter, StripeFilter};
use crate::iface::Interface;
use crate::ring::{self, RingLayout, RxCounters, RxFrame, RxRing};
use crate::sys::{self, RecvBatch, SendBatch, SockFilter};
use crate::xdp::{XdpOptions, XdpPort, XskCounts};

/// Tuning knobs of a [`PacketSocket`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketOptions {
    /// Approximate size of the mmap RX ring (TPACKET_V2, slots sized from
    /// the interface MTU; see the `ring` module for why not V3); 0 = no
    /// ring, receive with `recvmmsg`.
    pub rx_ring_bytes: usize,
    /// Send with `PACKET_QDISC_BYPASS`: skip the qdisc layer (lower latency, no
    /// traffic shaping; a full device queue then shows as `ENOBUFS`, which is retried).
    pub qdisc_bypass: bool,
    /// `SO_BUSY_POLL` microseconds (0 = off). Setting it may need
    /// CAP_NET_ADMIN; refusal (`EPERM`) is ignored.
    pub busy_poll_us: u32,
    /// Frames queued by `queue_send` before an automatic flush.
    pub send_batch: usize,
    /// Frames fetched per `recvmmsg` call (non-ring path).
    pub recv_batch: usize,
    /// `SO_RCVBUF` / `SO_SNDBUF` request in bytes (forced past the sysctl
    /// caps when privileged); 0 leaves the system defaults.
    pub socket_buf_bytes: usize,
    /// Also deliver frames addressed to another MAC (`PACKET_OTHERHOST`).
    /// Off by default: they only arrive through bridge flooding or
    /// promiscuous mode, and a NIC would have dropped them. Always on for
    /// loopback interfaces, where no other host exists.
    pub accept_other_host: bool,
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            rx_ring_bytes: 8 << 20,
            qdisc_bypass: false,
            busy_poll_us: 0,
            send_batch: 64,
            recv_batch: 64,
            socket_buf_bytes: 4 << 20,
            accept_other_host: false,
        }
    }
}

/// Counters of a [`PacketSocket`]; kernel ones are cumulative since open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Frames the kernel passed to this socket after filtering (`PACKET_STATISTICS`
    /// `tp_packets`, which includes the kernel drops).
    pub packets: u64,
    /// Frames lost on receive: `kernel_drops + truncated`.
    pub drops: u64,
    /// Frames the kernel dropped for lack of ring or buffer space.
    pub kernel_drops: u64,
    /// Frames longer than the receive slot (ring slot or recvmmsg buffer),
    /// discarded rather than handed out cut.
    pub truncated: u64,
    /// Frames given to `recv_batch` callbacks.
    pub frames_received: u64,
    /// Frames accepted by the kernel for sending.
    pub frames_sent: u64,
    /// `sendmmsg` calls that hit `EAGAIN`/`ENOBUFS` and were retried.
    pub send_retries: u64,
    /// Frames the kernel refused outright (e.g. `EMSGSIZE`, `ENETDOWN`); dropped.
    pub send_errors: u64,
    /// Received frames not handed out: our own echoed transmissions, frames for other hosts.
    pub skipped: u64,
}

enum Rx {
    Ring(RxRing),
    Mmsg(RecvBatch),
    /// AF_XDP: receive and send both go through the XSK (see [`crate::xdp`]).
    Xdp(Box<XdpPort>),
}

/// An AF_PACKET `SOCK_RAW` socket bound to one interface and one EtherType.
///
/// Not `Sync`: one thread drives it (receive and send take `&mut self`).
pub struct PacketSocket {
    fd: OwnedFd,
    iface: Interface,
    ethertype: u16,
    rx: Rx,
    tx: SendBatch,
    rxc: RxCounters,
    accept_other_host: bool,
    sent: u64,
    send_retries: u64,
    send_errors: u64,
    kernel_packets: u64,
    kernel_drops: u64,
    /// A relay connection to or from `omxd` (see [`crate::relay`]), not a packet
    /// socket: every message is a wanted frame and there are no kernel statistics.
    relay: bool,
}

/// Give up a flush after this long without the kernel taking a single frame;
/// the frames stay queued, so a later `flush` resumes where this one stopped.
const SEND_STALL_LIMIT: Duration = Duration::from_secs(5);

/// Extra bytes on receive buffers beyond MTU + header, so that a frame a
/// little too large (e.g. a VLAN tag) is still seen whole.
const RX_SLACK: usize = 4;

impl PacketSocket {
    /// A socket around its descriptor and receive path, counters at zero.
    fn assemble(
        fd: OwnedFd,
        iface: &Interface,
        ethertype: u16,
        rx: Rx,
        tx: SendBatch,
        accept_other_host: bool,
        relay: bool,
    ) -> PacketSocket {
        PacketSocket {
            fd,
            iface: iface.clone(),
            ethertype,
            rx,
            tx,
            rxc: RxCounters::default(),
            accept_other_host,
            sent: 0,
            send_retries: 0,
            send_errors: 0,
            kernel_packets: 0,
            kernel_drops: 0,
            relay,
        }
    }

    /// Opens a socket on `iface` for `ethertype` frames with no filter (all
    /// frames of the EtherType). See [`PacketSocket::open_filtered`].
    pub fn open(
        iface: &Interface,
        ethertype: u16,
        opts: &SocketOptions,
    ) -> io::Result<PacketSocket> {
        Self::open_filtered(iface, ethertype, opts, None)
    }

    /// Opens a socket whose filter is in place before the first frame can be
    /// queued: the socket is created with protocol 0 (receives nothing),
    /// configured, and only then bound to the EtherType and interface.
    ///
    /// Other EtherTypes (IP...) never reach the socket. Frames we send come
    /// back to packet sockets of the sending host as `PACKET_OUTGOING`; they
    /// are suppressed with `PACKET_IGNORE_OUTGOING` and skipped anyway if seen.
    /// If the RX ring cannot be set up (memory, old kernel) the socket falls
    /// back to `recvmmsg`; [`PacketSocket::uses_ring`] tells which.
    pub fn open_filtered(
        iface: &Interface,
        ethertype: u16,
        opts: &SocketOptions,
        filter: Option<&EndpointFilter>,
    ) -> io::Result<PacketSocket> {
        let prog = filter.map(|f| f.compile(ethertype));
        Self::open_with_program(iface, ethertype, opts, prog.as_deref())
    }

    /// As [`PacketSocket::open_filtered`], for an endpoint's socket on one of its
    /// other boards: it takes only the striped frames [`StripeFilter`] selects.
    pub fn open_stripe(
        iface: &Interface,
        ethertype: u16,
        opts: &SocketOptions,
        filter: &StripeFilter,
    ) -> io::Result<PacketSocket> {
        Self::open_with_program(iface, ethertype, opts, Some(&filter.compile(ethertype)))
    }

    fn open_with_program(
        iface: &Interface,
        ethertype: u16,
        opts: &SocketOptions,
        filter: Option<&[SockFilter]>,
    ) -> io::Result<PacketSocket> {
        let slot = iface.max_frame_len() + RX_SLACK;
        let mut fd = Self::configured_fd(opts, filter)?;
        let mut rx = None;
        if opts.rx_ring_bytes > 0 {
            match RxRing::setup(
                fd.as_raw_fd(),
                RingLayout::for_mtu(iface.mtu, opts.rx_ring_bytes),
            ) {
                Ok(r) => rx = Some(Rx::Ring(r)),
                // A half-configured ring cannot be undone portably: start over.
                Err(_) => fd = Self::configured_fd(opts, filter)?,
            }
        }
        let rx = rx.unwrap_or_else(|| Rx::Mmsg(RecvBatch::new(opts.recv_batch.max(1), slot)));
        sys::bind_packet(fd.as_raw_fd(), iface.index, ethertype)?;
        Ok(Self::assemble(
            fd,
            iface,
            ethertype,
            rx,
            SendBatch::new(opts.send_batch.max(1), iface.max_frame_len()),
            opts.accept_other_host || iface.loopback,
            false,
        ))
    }

    /// Wraps a connected `SOCK_SEQPACKET` relay connection (one message per
    /// Ethernet frame, see [`crate::relay`]) as a socket of `iface`, so that the
    /// daemon and its clients batch, flush and wait exactly as on a packet socket.
    pub fn from_relay(
        fd: OwnedFd,
        iface: &Interface,
        ethertype: u16,
        opts: &SocketOptions,
    ) -> io::Result<PacketSocket> {
        sys::set_nonblocking(fd.as_raw_fd(), true)?;
        let slot = iface.max_frame_len() + RX_SLACK;
        Ok(Self::assemble(
            fd,
            iface,
            ethertype,
            Rx::Mmsg(RecvBatch::new(opts.recv_batch.max(1), slot)),
            SendBatch::new(opts.send_batch.max(1), iface.max_frame_len()),
            true,
            true,
        ))
    }

    /// Opens an AF_XDP socket on `iface` instead of a packet socket (see [`crate::xdp`]):
    /// the frames `filter` selects arrive through the XSK, sends go out through it,
    /// and every other call behaves as on a packet socket. Fails where XDP cannot
    /// serve (driver, privileges, MTU, another user of the interface): the caller
    /// then opens a packet socket.
    pub fn open_xdp(
        iface: &Interface,
        ethertype: u16,
        xopts: &XdpOptions,
        filter: &EndpointFilter,
    ) -> io::Result<PacketSocket> {
        let port = XdpPort::open(iface, ethertype, xopts, filter)?;
        // The socket's own descriptor stays with the port; this copy is for poll.
        let fd = sys::dup_fd(port.xsk_ref().fd())?;
        Ok(Self::assemble(
            fd,
            iface,
            ethertype,
            Rx::Xdp(Box::new(port)),
            SendBatch::new(1, 0),
            true,
            false,
        ))
    }

    /// Whether this socket is an AF_XDP one ([`PacketSocket::open_xdp`]), and in
    /// which mode: `Some(true)` native, `Some(false)` generic.
    pub fn xdp_native(&self) -> Option<bool> {
        match &self.rx {
            Rx::Xdp(p) => Some(p.native()),
            _ => None,
        }
    }

    /// Where the umem frames of an AF_XDP socket are (leak checks).
    pub fn xdp_counts(&mut self) -> Option<XskCounts> {
        match &mut self.rx {
            Rx::Xdp(p) => Some(p.xsk().counts()),
            _ => None,
        }
    }

    /// Whether this is a relay connection rather than a packet socket.
    pub fn is_relay(&self) -> bool {
        self.relay
    }

    fn configured_fd(opts: &SocketOptions, filter: Option<&[SockFilter]>) -> io::Result<OwnedFd> {
        let fd = sys::packet_socket()?;
        let raw = fd.as_raw_fd();
        // Best effort: kernels before 4.20 lack it; received OUTGOING frames are skipped anyway.
        let _ = sys::setsockopt_int(raw, sys::SOL_PACKET, sys::PACKET_IGNORE_OUTGOING, 1);
        if let Some(f) = filter {
            sys::attach_filter(raw, f)?;
        }
        if opts.socket_buf_bytes > 0 {
            let n = opts.socket_buf_bytes.min(i32::MAX as usize) as libc::c_int;
            for (force, plain) in [
                (sys::SO_RCVBUFFORCE, libc::SO_RCVBUF),
                (sys::SO_SNDBUFFORCE, libc::SO_SNDBUF),
            ] {
                // FORCE needs CAP_NET_ADMIN; otherwise the sysctl cap applies.
                if sys::setsockopt_int(raw, libc::SOL_SOCKET, force, n).is_err() {
                    let _ = sys::setsockopt_int(raw, libc::SOL_SOCKET, plain, n);
                }
            }
        }
        if opts.qdisc_bypass {
            match sys::setsockopt_int(raw, sys::SOL_PACKET, sys::PACKET_QDISC_BYPASS, 1) {
                Err(e) if e.raw_os_error() != Some(libc::ENOPROTOOPT) => return Err(e),
                _ => {}
            }
        }
        if opts.busy_poll_us > 0 {
            let v = opts.busy_poll_us.min(i32::MAX as u32) as libc::c_int;
            match sys::setsockopt_int(raw, libc::SOL_SOCKET, sys::SO_BUSY_POLL, v) {
                Err(e) if e.raw_os_error() != Some(libc::EPERM) => return Err(e),
                _ => {}
            }
        }
        Ok(fd)
    }

    /// Installs (`Some`) or removes (`None`: accept every frame of the
    /// EtherType) the endpoint filter. The swap is atomic in the kernel;
    /// frames already queued were judged by the previous filter
    /// ([`EndpointFilter::accepts`] can re-check them).
    pub fn set_filter(&mut self, filter: Option<&EndpointFilter>) -> io::Result<()> {
        if self.relay {
            // The daemon filters for its clients; they cannot change it.
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the filter of a relayed endpoint belongs to omxd",
            ));
        }
        if let Rx::Xdp(p) = &mut self.rx {
            let all;
            let f = match filter {
                Some(f) => f,
                None => {
                    all = EndpointFilter::new(0..=u8::MAX, true);
                    &all
                }
            };
            return p.set_filter(f);
        }
        match filter {
            Some(f) => sys::attach_filter(self.fd.as_raw_fd(), &f.compile(self.ethertype)),
            None => sys::detach_filter(self.fd.as_raw_fd()),
        }
    }

    /// Receives up to `max` frames without blocking, calling `f` with each
    /// whole Ethernet frame. On the ring path the slice is the ring slot
    /// itself (zero copy), valid only during the call. Returns the count.
    #[inline]
    pub fn recv_batch(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> io::Result<usize> {
        self.recv_frames(max, |fr| f(fr.data()))
    }

    /// As [`PacketSocket::recv_batch`], showing each frame as an [`RxFrame`]: on the
    /// ring path it may be held past the call ([`RxFrame::hold`]).
    #[inline]
    pub fn recv_frames(&mut self, max: usize, mut f: impl FnMut(RxFrame<'_>)) -> io::Result<usize> {
        let aoh = self.accept_other_host;
        let relay = self.relay;
        match &mut self.rx {
            Rx::Ring(r) => Ok(r.drain(max, aoh, &mut self.rxc, f)),
            Rx::Xdp(p) => {
                let n = p.xsk().recv(max, |d| f(RxFrame::borrowed(d)));
                self.rxc.received += n as u64;
                Ok(n)
            }
            Rx::Mmsg(b) => {
                let fd = self.fd.as_raw_fd();
                let mut n = 0;
                while n < max {
                    let want = (max - n).min(b.capacity());
                    let got = b.recv(fd, want)?;
                    for i in 0..got {
                        let (frame, pkttype, truncated) = b.frame(i);
                        if relay && frame.is_empty() {
                            // End of stream: the other side of the relay is gone.
                            self.rxc.received += n as u64;
                            return Err(io::Error::new(
                                io::ErrorKind::ConnectionAborted,
                                "relay connection closed",
                            ));
                        }
                        if truncated {
                            self.rxc.truncated += 1;
                        } else if !relay && !ring::wanted(pkttype, aoh) {
                            self.rxc.skipped += 1;
                        } else {
                            f(RxFrame::borrowed(frame));
                            n += 1;
                        }
                    }
                    if got < want {
                        break;
                    }
                }
                self.rxc.received += n as u64;
                Ok(n)
            }
        }
    }

    /// Queues one frame of `len` bytes (Ethernet header included) written by
    /// `fill` into the send batch, flushing first if the batch is full and
    /// right after if this frame fills it. `len` may not exceed MTU + 14.
    #[inline]
    pub fn queue_send(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> io::Result<()> {
        if let Rx::Xdp(p) = &mut self.rx {
            if len > self.iface.max_frame_len() {
                return Err(oversized(len, &self.iface));
            }
            return p.xsk().queue_send(len, fill);
        }
        if len > self.tx.slot_size() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "frame of {len} bytes exceeds {} (MTU {} + header)",
                    self.tx.slot_size(),
                    self.iface.mtu
                ),
            ));
        }
        if self.tx.is_full() {
            self.flush()?;
        }
        fill(self.tx.push(len));
        if self.tx.is_full() {
            self.flush()?;
        }
        Ok(())
    }

    /// Queues one frame made of a `head_len`-byte header, the `payload` pieces
    /// (address, length), which the kernel reads where they are (no copy into the
    /// batch), and a `tail_len`-byte trailer; `fill` writes header and trailer.
    /// Flushes first if the batch is full. Fails without queuing if the frame exceeds
    /// MTU + 14 or has more than [`crate::sys::MAX_GATHER`] pieces.
    ///
    /// # Safety
    /// Every piece must stay readable until the next [`PacketSocket::flush`] returns
    /// (or the socket is dropped): a flush never returns with such a frame queued.
    #[inline]
    #[allow(unsafe_code)] // Passes on the contract of `SendBatch::push_gathered`.
    pub unsafe fn queue_send_gathered(
        &mut self,
        head_len: usize,
        payload: &[(*const u8, usize)],
        tail_len: usize,
        fill: impl FnOnce(&mut [u8], &mut [u8]),
    ) -> io::Result<()> {
        let len = head_len + tail_len + payload.iter().map(|p| p.1).sum::<usize>();
        if let Rx::Xdp(_) = self.rx {
            // Copied into a umem frame now: the pieces are not read after the call.
            return self.queue_send(len, |b| {
                let (head, rest) = b.split_at_mut(head_len);
                let (mid, tail) = rest.split_at_mut(len - head_len - tail_len);
                let mut at = 0;
                for &(ptr, n) in payload {
                    // SAFETY: the caller guarantees each piece is readable for `n` bytes.
                    let piece = unsafe { std::slice::from_raw_parts(ptr, n) };
                    mid[at..at + n].copy_from_slice(piece);
                    at += n;
                }
                fill(head, tail);
            });
        }
        if len > self.tx.slot_size() || payload.len() > sys::MAX_GATHER {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("gathered frame of {len} bytes in {} pieces", payload.len()),
            ));
        }
        if self.tx.is_full() {
            self.flush()?;
        }
        // SAFETY: the caller keeps the pieces readable until the next flush returns,
        // and `flush` sends or discards every pending frame before returning.
        let (head, tail) = unsafe { self.tx.push_gathered(head_len, payload, tail_len) };
        fill(head, tail);
        if self.tx.is_full() {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends every queued frame with as few `sendmmsg` calls as possible.
    ///
    /// Frames that read lent memory ([`PacketSocket::queue_send_gathered`]) never
    /// stay queued past the return: if the kernel stalls, they are dropped (the
    /// protocol resends them), as are the frames queued with them.
    #[inline]
    pub fn flush(&mut self) -> io::Result<()> {
        if let Rx::Xdp(p) = &mut self.rx {
            if p.xsk_ref().pending() == 0 {
                return Ok(());
            }
            return p.xsk().flush();
        }
        // Called on every poll of a busy-polling wait: nothing queued is the rule, so
        // only this test is inlined into the caller.
        if self.tx.pending() == 0 {
            return Ok(());
        }
        self.flush_pending()
    }

    #[cold]
    fn flush_pending(&mut self) -> io::Result<()> {
        let r = self.flush_queued();
        if self.tx.holds_lent() {
            self.send_errors += self.tx.pending() as u64;
            self.tx.discard();
        }
        r
    }

    /// The sending part of [`PacketSocket::flush`]: `EAGAIN`/`ENOBUFS` (socket buffer or device queue full) are waited out
    /// and retried, so frames are not lost to transient congestion. A frame
    /// the kernel rejects outright is dropped (counted in `send_errors`), the
    /// rest still go out, and the first such error is returned. If no frame
    /// is accepted for 5 s, returns `TimedOut` with the frames still queued.
    fn flush_queued(&mut self) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        let mut first_err = None;
        let mut stalled_since: Option<Instant> = None;
        let mut spins = 0u32;
        while self.tx.pending() > 0 {
            match self.tx.send(fd) {
                Ok(n) => {
                    self.sent += n as u64;
                    stalled_since = None;
                    spins = 0;
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                        self.send_retries += 1;
                        let since = *stalled_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > SEND_STALL_LIMIT {
                            return Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "send stalled; frames kept queued",
                            ));
                        }
                        if e.raw_os_error() == Some(libc::EAGAIN) {
                            // Socket send buffer full: it signals POLLOUT when space frees.
                            sys::poll_fd(fd, libc::POLLOUT, Some(Duration::from_millis(1)))?;
                        } else {
                            // Device queue full: nothing to poll on; yield, then back off.
                            spins += 1;
                            if spins < 16 {
                                std::thread::yield_now();
                            } else {
                                std::thread::sleep(Duration::from_micros(50));
                            }
                        }
                    }
                    _ => {
                        self.send_errors += 1;
                        self.tx.advance(1);
                        first_err.get_or_insert(e);
                    }
                },
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Queues `frame` and flushes.
    pub fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.queue_send(frame.len(), |b| b.copy_from_slice(frame))?;
        self.flush()
    }

    /// The socket descriptor, for poll/epoll (readable = a frame is waiting).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// False only when `recv_batch` would surely find nothing: the ring's next
    /// slot is the kernel's (one load). The `recvmmsg` path always says true.
    #[inline]
    pub fn may_have_rx(&self) -> bool {
        match &self.rx {
            Rx::Ring(r) => r.ready(),
            Rx::Xdp(p) => p.xsk_ref().rx_ready(),
            Rx::Mmsg(_) => true,
        }
    }

    /// Whether a frame is waiting, without a syscall on the ring path (on
    /// the `recvmmsg` path, a zero-timeout poll).
    pub fn readable(&self) -> io::Result<bool> {
        match &self.rx {
            Rx::Ring(r) => Ok(r.ready()),
            Rx::Xdp(p) => Ok(p.xsk_ref().rx_ready()),
            Rx::Mmsg(_) => Ok(sys::poll_fd(self.fd(), libc::POLLIN, Some(Duration::ZERO))? != 0),
        }
    }

    /// Blocks until a frame is readable or `timeout` passes (`None` = forever).
    /// May report a frame that `recv_batch` then skips (e.g. one of ours).
    /// A pending socket error (e.g. `ENETDOWN`) is returned and cleared.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        if self.readable_now() {
            return Ok(true);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let ev = sys::poll_fd(self.fd(), libc::POLLIN, left)?;
            if ev & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                if let Some(e) = sys::take_socket_error(self.fd())? {
                    return Err(e);
                }
                if self.relay && ev & libc::POLLIN == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "omxd closed the relay connection",
                    ));
                }
            }
            match &self.rx {
                Rx::Mmsg(_) => return Ok(ev & libc::POLLIN != 0),
                Rx::Ring(_) | Rx::Xdp(_) if self.readable_now() => return Ok(true),
                Rx::Ring(_) | Rx::Xdp(_) => {
                    if ev == 0 || deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// A frame is waiting in the ring or XSK (never true on the `recvmmsg` path).
    fn readable_now(&self) -> bool {
        match &self.rx {
            Rx::Ring(r) => r.ready(),
            Rx::Xdp(p) => p.xsk_ref().rx_ready(),
            Rx::Mmsg(_) => false,
        }
    }

    /// Kernel `PACKET_STATISTICS` (which the kernel resets on every read, so
    /// they are accumulated here) plus this socket's own counters.
    pub fn stats(&mut self) -> io::Result<SocketStats> {
        let (packets, drops) = if self.relay {
            (0, 0)
        } else if let Rx::Xdp(p) = &mut self.rx {
            // XDP_STATISTICS are cumulative: keep the totals as the deltas below expect.
            let k = p.xsk_ref().kernel_stats()?;
            let drops = k.rx_dropped + k.rx_ring_full;
            let packets = self.rxc.received + drops;
            self.sent = p.xsk_ref().sent;
            self.send_retries = p.xsk_ref().send_retries;
            (
                (packets - self.kernel_packets) as u32,
                (drops - self.kernel_drops) as u32,
            )
        } else {
            sys::packet_stats(self.fd())?
        };
        self.kernel_packets += packets as u64;
        self.kernel_drops += drops as u64;
        Ok(SocketStats {
            packets: self.kernel_packets,
            drops: self.kernel_drops + self.rxc.truncated,
            kernel_drops: self.kernel_drops,
            truncated: self.rxc.truncated,
            frames_received: self.rxc.received,
            frames_sent: self.sent,
            send_retries: self.send_retries,
            send_errors: self.send_errors,
            skipped: self.rxc.skipped,
        })
    }

    /// The interface this socket is bound to (as it was at open time).
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// Whether receive uses the mmap ring (else `recvmmsg`).
    pub fn uses_ring(&self) -> bool {
        matches!(self.rx, Rx::Ring(_))
    }

    /// Ring slots still held by frames lent past a receive call (0 without a ring).
    pub fn rx_held(&mut self) -> usize {
        match &mut self.rx {
            Rx::Ring(r) => r.held(),
            Rx::Xdp(_) | Rx::Mmsg(_) => 0,
        }
    }

    /// Geometry of the RX ring, if one is in use.
    pub fn ring_layout(&self) -> Option<RingLayout> {
        match &self.rx {
            Rx::Ring(r) => Some(r.layout()),
            Rx::Xdp(_) | Rx::Mmsg(_) => None,
        }
    }

    /// Frames the receive side can hold before the kernel drops (ring slots or XSK
    /// receive frames); `None` on the `recvmmsg` path.
    pub fn rx_capacity(&self) -> Option<usize> {
        match &self.rx {
            Rx::Ring(r) => Some(r.layout().frame_nr()),
            Rx::Xdp(p) => Some(p.xsk_ref().rx_frames() as usize),
            Rx::Mmsg(_) => None,
        }
    }

    /// Whether a queued frame reads memory lent by the caller
    /// ([`PacketSocket::queue_send_gathered`]): the next flush must not wait.
    pub fn holds_lent(&self) -> bool {
        self.tx.holds_lent()
    }

    /// Frames queued and not yet flushed.
    pub fn pending_sends(&self) -> usize {
        match &self.rx {
            Rx::Xdp(p) => p.xsk_ref().pending(),
            _ => self.tx.pending(),
        }
    }
}

fn oversized(len: usize, iface: &Interface) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "frame of {len} bytes exceeds {} (MTU {} + header)",
            iface.max_frame_len(),
            iface.mtu
        ),
    )
}

impl Drop for PacketSocket {
    /// Best-effort flush so frames queued just before closing still leave.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl std::fmt::Debug for PacketSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("iface", &self.iface.name)
            .field("ethertype", &format_args!("{:#06x}", self.ethertype))
            .field("ring", &self.ring_layout())
            .finish()
    }
}
