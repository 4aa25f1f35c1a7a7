//! Every `unsafe` block of the crate lives here, behind small safe wrappers.
//!
//! The rest of the crate only sees owned file descriptors, a bounds-checked
//! view of the shared RX ring ([`Mmap`]) and two batch objects ([`RecvBatch`],
//! [`SendBatch`]) that own both the frame buffers and the `mmsghdr`/`iovec`
//! arrays pointing into them, so no caller can hand the kernel a dangling
//! pointer.
//!
//! Soundness argument common to all the FFI calls below: every pointer passed
//! to the kernel points into memory owned by `self` or by a local that
//! outlives the call, and every length passed is the length of that memory.

use std::ffi::CStr;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

// Linux UAPI values, spelled out so the crate does not depend on which libc
// release exports which of them. They are ABI and never change.
pub const SOL_PACKET: libc::c_int = 263;
pub const PACKET_RX_RING: libc::c_int = 5;
pub const PACKET_STATISTICS: libc::c_int = 6;
pub const PACKET_VERSION: libc::c_int = 10;
pub const PACKET_QDISC_BYPASS: libc::c_int = 20;
pub const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
pub const TPACKET_V2: libc::c_int = 1;
pub const SO_BUSY_POLL: libc::c_int = 46;
pub const SO_ATTACH_FILTER: libc::c_int = 26;
pub const SO_DETACH_FILTER: libc::c_int = 27;
pub const SO_RCVBUFFORCE: libc::c_int = 33;
pub const SO_SNDBUFFORCE: libc::c_int = 32;
pub const PACKET_OTHERHOST: u8 = 3;
pub const PACKET_OUTGOING: u8 = 4;
pub const ARPHRD_ETHER: u16 = 1;
pub const IFF_UP: u32 = 0x1;
pub const IFF_LOOPBACK: u32 = 0x8;

/// One classic BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockFilter {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const SockFilter,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct TpacketStats {
    packets: u32,
    drops: u32,
}

mod seqpacket;
pub use seqpacket::*;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `socket(AF_PACKET, SOCK_RAW, 0)`, non-blocking. Protocol 0 means the socket
/// receives nothing until [`bind_packet`] names the EtherType, which lets the
/// caller attach the filter and ring first without a window of unfiltered frames.
pub fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall, no pointers.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt_raw<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: `val` points to `size_of::<T>()` readable bytes for the call.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `setsockopt` with an `int` value.
pub fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    setsockopt_raw(fd, level, name, &val)
}

/// Binds an AF_PACKET socket to one interface and one EtherType (host order).
pub fn bind_packet(fd: RawFd, ifindex: u32, ethertype: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ethertype.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a valid sockaddr_ll and its exact size is passed.
    cvt(unsafe {
        libc::bind(
            fd,
            (&sll as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Attaches a classic BPF program (`SO_ATTACH_FILTER`); replaces any previous one atomically.
pub fn attach_filter(fd: RawFd, prog: &[SockFilter]) -> io::Result<()> {
    let len = libc::c_ushort::try_from(prog.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
    let fprog = SockFprog {
        len,
        filter: prog.as_ptr(),
    };
    // The kernel copies the program during the call; `prog` outlives it.
    setsockopt_raw(fd, libc::SOL_SOCKET, SO_ATTACH_FILTER, &fprog)
}

/// Removes the socket filter; "no filter attached" is not an error.
pub fn detach_filter(fd: RawFd) -> io::Result<()> {
    match setsockopt_int(fd, libc::SOL_SOCKET, SO_DETACH_FILTER, 0) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        r => r,
    }
}

/// Reads and resets the kernel's `PACKET_STATISTICS` counters: (packets, drops).
/// The kernel counts dropped frames in `packets` too.
pub fn packet_stats(fd: RawFd) -> io::Result<(u32, u32)> {
    let mut st = TpacketStats::default();
    let mut len = size_of::<TpacketStats>() as libc::socklen_t;
    // SAFETY: `st` is writable for `len` bytes and `len` is a valid in/out pointer.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            SOL_PACKET,
            PACKET_STATISTICS,
            (&mut st as *mut TpacketStats).cast(),
            &mut len,
        )
    })?;
    Ok((st.packets, st.drops))
}

/// Configures a TPACKET_V2 RX ring of `block_nr` blocks of `block_size`
/// bytes, each holding `block_size / frame_size` frame slots.
pub fn setup_rx_ring(fd: RawFd, block_size: u32, block_nr: u32, frame_size: u32) -> io::Result<()> {
    setsockopt_int(fd, SOL_PACKET, PACKET_VERSION, TPACKET_V2)?;
    let req = TpacketReq {
        block_size,
        block_nr,
        frame_size,
        frame_nr: (block_size / frame_size) * block_nr,
    };
    setsockopt_raw(fd, SOL_PACKET, PACKET_RX_RING, &req)
}

/// Waits for `events` on `fd`; `None` waits forever. Returns the reported
/// events (0 on timeout). Uses `ppoll` for sub-millisecond timeouts and
/// restarts on `EINTR` with the remaining time.
pub fn poll_fd(
    fd: RawFd,
    events: libc::c_short,
    timeout: Option<Duration>,
) -> io::Result<libc::c_short> {
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        let ts = deadline.map(|d| {
            let left = d.saturating_duration_since(std::time::Instant::now());
            libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            }
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: one valid pollfd; `ts_ptr` is null or points to a live timespec.
        let r = unsafe { libc::ppoll(&mut pfd, 1, ts_ptr, std::ptr::null()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(if r > 0 { pfd.revents } else { 0 });
    }
}

/// Fetches and clears the socket's pending error (`SO_ERROR`), e.g. the
/// `ENETDOWN` a packet socket gets when its interface goes down.
pub fn take_socket_error(fd: RawFd) -> io::Result<Option<io::Error>> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` is a writable int and `len` its size.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok((v != 0).then(|| io::Error::from_raw_os_error(v)))
}

/// Read-write shared mapping of a packet socket's ring, unmapped on drop.
///
/// All accessors are bounds-checked. The status words are accessed
/// atomically: they are the handoff point with the kernel (acquire when we
/// take a slot, release when we give it back), which is what makes the
/// non-atomic frame bytes safe to read in between.
pub struct Mmap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned exclusively by this value (no aliasing handles
// exist in Rust code); moving it to another thread is fine.
unsafe impl Send for Mmap {}
// SAFETY: shared use only loads and stores status words atomically and borrows slots
// that user space owns (a held slot is read by one copy at a time, never written).
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Maps `len` bytes of the socket's ring.
    pub fn map_ring(fd: RawFd, len: usize) -> io::Result<Mmap> {
        // SAFETY: asking the kernel for a fresh mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: ptr.cast(),
            len,
        })
    }

    fn check(&self, off: usize, n: usize) {
        assert!(
            off.checked_add(n).is_some_and(|e| e <= self.len),
            "ring access out of bounds"
        );
    }

    fn atomic(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4);
        assert!(off % 4 == 0, "unaligned ring status word");
        // SAFETY: in bounds, 4-byte aligned (the mapping is page aligned), and
        // the kernel only accesses this word as a whole u32.
        unsafe { &*(self.ptr.add(off) as *const AtomicU32) }
    }

    /// Acquire-load of the u32 at `off` (a slot status word).
    #[inline]
    pub fn load_acquire(&self, off: usize) -> u32 {
        self.atomic(off).load(Ordering::Acquire)
    }

    /// Release-store of the u32 at `off` (hands a slot back to the kernel).
    #[inline]
    pub fn store_release(&self, off: usize, v: u32) {
        self.atomic(off).store(v, Ordering::Release)
    }

    /// Plain read of `N` bytes at `off` (header fields of a slot we own).
    #[inline]
    pub fn read<const N: usize>(&self, off: usize) -> [u8; N] {
        self.slice(off, N).try_into().expect("length checked")
    }

    /// Borrow `len` bytes at `off`; only for slots currently owned by user space.
    #[inline]
    pub fn slice(&self, off: usize, len: usize) -> &[u8] {
        self.check(off, len);
        // SAFETY: in bounds of a live mapping; the kernel does not write a
        // slot while its status says TP_STATUS_USER, and callers only borrow
        // such slots, for no longer than `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr.add(off), len) }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping created in `map_ring`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One non-blocking `recvmmsg` into `hdrs`; `Ok(0)` when no frame is queued.
/// `MSG_TRUNC` makes each `msg_len` the real frame length, so that a frame longer
/// than its iovecs can be told apart.
///
/// # Safety
/// Every header must name iovecs of writable memory of the lengths they claim, and an
/// address buffer of `msg_namelen` bytes (or none), valid for the call.
pub unsafe fn recvmmsg_nonblocking(fd: RawFd, hdrs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    // SAFETY: per the contract; `hdrs` is borrowed mutably for the call.
    let r = unsafe {
        libc::recvmmsg(
            fd,
            hdrs.as_mut_ptr(),
            hdrs.len() as libc::c_uint,
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(0)
        } else {
            Err(e)
        };
    }
    Ok(r as usize)
}

/// Preallocated `recvmmsg` state: `n` buffers of `slot` bytes each, plus the
/// headers, iovecs and source addresses that point into them.
pub struct RecvBatch {
    bufs: Vec<u8>,
    slot: usize,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_ll>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iovs`/`hdrs` point only into this value's own
// heap buffers, which move with it.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    pub fn new(n: usize, slot: usize) -> RecvBatch {
        let mut b = RecvBatch {
            bufs: vec![0u8; n * slot],
            slot,
            // SAFETY (zeroed): iovec, sockaddr_ll and mmsghdr are plain C
            // structs for which all-zero (null pointers, zero lengths) is valid.
            iovs: vec![unsafe { zeroed() }; n],
            addrs: vec![unsafe { zeroed() }; n],
            hdrs: vec![unsafe { zeroed() }; n],
        };
        let base = b.bufs.as_mut_ptr();
        for i in 0..n {
            b.iovs[i] = libc::iovec {
                // Pointer arithmetic only; stays within `bufs`.
                iov_base: base.wrapping_add(i * slot).cast(),
                iov_len: slot,
            };
            b.hdrs[i].msg_hdr.msg_iov = &mut b.iovs[i];
            b.hdrs[i].msg_hdr.msg_iovlen = 1;
            b.hdrs[i].msg_hdr.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_ll).cast();
        }
        b
    }

    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// One non-blocking `recvmmsg` of up to `n` frames; `Ok(0)` when none is queued.
    pub fn recv(&mut self, fd: RawFd, n: usize) -> io::Result<usize> {
        let n = n.min(self.hdrs.len());
        for h in &mut self.hdrs[..n] {
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: the first `n` headers point at live iovecs/buffers/addresses
        // of the sizes they claim (see `new`).
        unsafe { recvmmsg_nonblocking(fd, &mut self.hdrs[..n]) }
    }

    /// Frame `i` of the last `recv`: (bytes, packet type, truncated).
    #[inline]
    pub fn frame(&self, i: usize) -> (&[u8], u8, bool) {
        let h = &self.hdrs[i];
        let real = h.msg_len as usize;
        let truncated = real > self.slot || h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let len = real.min(self.slot);
        (
            &self.bufs[i * self.slot..i * self.slot + len],
            self.addrs[i].sll_pkttype,
            truncated,
        )
    }
}

/// Most pieces of user memory one gathered frame may name (see
/// [`SendBatch::push_gathered`]); a payload in more pieces is copied instead.
pub const MAX_GATHER: usize = 6;
/// iovecs per frame: the header from the slot, up to [`MAX_GATHER`] payload pieces,
/// and a trailer from the slot.
const IOVS_PER_FRAME: usize = MAX_GATHER + 2;

/// Preallocated `sendmmsg` state: up to `n` queued frames of at most `slot`
/// bytes. Frames `done..queued` are still to be sent, so a flush interrupted
/// by an error can resume without losing or repeating any frame.
///
/// A frame is either whole in its slot, or gathered: header and trailer in the
/// slot, payload read by the kernel straight from memory the caller lent
/// ([`SendBatch::push_gathered`]), which saves one copy of every large payload.
pub struct SendBatch {
    bufs: Vec<u8>,
    slot: usize,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    queued: usize,
    done: usize,
    /// Some pending frame points at lent memory (cleared when the batch empties).
    lent: bool,
}

// SAFETY: as for RecvBatch, all pointers target this value's own heap memory, except
// the payload pieces of gathered frames, whose validity `push_gathered`'s caller
// guarantees whatever thread sends them.
unsafe impl Send for SendBatch {}

impl SendBatch {
    pub fn new(n: usize, slot: usize) -> SendBatch {
        let mut b = SendBatch {
            bufs: vec![0u8; n * slot],
            slot,
            // SAFETY (zeroed): see RecvBatch::new.
            iovs: vec![unsafe { zeroed() }; n * IOVS_PER_FRAME],
            hdrs: vec![unsafe { zeroed() }; n],
            queued: 0,
            done: 0,
            lent: false,
        };
        let base = b.bufs.as_mut_ptr();
        for i in 0..n {
            b.iovs[i * IOVS_PER_FRAME].iov_base = base.wrapping_add(i * slot).cast();
            b.hdrs[i].msg_hdr.msg_iov = &mut b.iovs[i * IOVS_PER_FRAME];
            b.hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        b
    }

    pub fn slot_size(&self) -> usize {
        self.slot
    }
    /// Frames queued and not yet sent.
    #[inline]
    pub fn pending(&self) -> usize {
        self.queued - self.done
    }
    pub fn is_full(&self) -> bool {
        self.queued == self.hdrs.len()
    }
    /// Whether a pending frame reads lent memory ([`SendBatch::push_gathered`]).
    pub fn holds_lent(&self) -> bool {
        self.lent
    }

    /// Reserves the next slot with length `len` and returns it for filling.
    /// Caller checks `!is_full()` and `len <= slot_size()`.
    pub fn push(&mut self, len: usize) -> &mut [u8] {
        let i = self.queued;
        assert!(i < self.hdrs.len() && len <= self.slot);
        self.iovs[i * IOVS_PER_FRAME].iov_len = len;
        self.hdrs[i].msg_hdr.msg_iovlen = 1;
        self.queued += 1;
        &mut self.bufs[i * self.slot..i * self.slot + len]
    }

    /// Reserves the next slot for a frame made of `head_len` bytes from the slot, the
    /// `payload` pieces (address, length) in order, then `tail_len` bytes from the slot;
    /// returns the head and the tail for filling. Caller checks `!is_full()`,
    /// `head_len + tail_len + payload bytes <= slot_size()` and
    /// `payload.len() <= MAX_GATHER`.
    ///
    /// # Safety
    /// Every piece must stay readable until the frame is sent or dropped: until
    /// [`SendBatch::pending`] is 0 or [`SendBatch::discard`] ran.
    pub unsafe fn push_gathered(
        &mut self,
        head_len: usize,
        payload: &[(*const u8, usize)],
        tail_len: usize,
    ) -> (&mut [u8], &mut [u8]) {
        let i = self.queued;
        assert!(i < self.hdrs.len() && payload.len() <= MAX_GATHER);
        assert!(head_len + tail_len <= self.slot);
        let slot_start = i * self.slot;
        let iovs = &mut self.iovs[i * IOVS_PER_FRAME..(i + 1) * IOVS_PER_FRAME];
        iovs[0].iov_len = head_len;
        let mut n = 1;
        for &(p, len) in payload.iter().filter(|(_, len)| *len > 0) {
            // The kernel only reads through iov_base on send.
            iovs[n] = libc::iovec {
                iov_base: p as *mut libc::c_void,
                iov_len: len,
            };
            n += 1;
        }
        if tail_len > 0 {
            iovs[n] = libc::iovec {
                // Pointer arithmetic only; stays within this frame's slot.
                iov_base: self
                    .bufs
                    .as_mut_ptr()
                    .wrapping_add(slot_start + head_len)
                    .cast(),
                iov_len: tail_len,
            };
            n += 1;
        }
        self.hdrs[i].msg_hdr.msg_iovlen = n;
        self.queued += 1;
        self.lent = true;
        let (head, rest) =
            self.bufs[slot_start..slot_start + head_len + tail_len].split_at_mut(head_len);
        (head, rest)
    }

    /// One `sendmmsg` of the pending frames. Returns how many the kernel took
    /// (at least 1 on success); they are marked done.
    pub fn send(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.pending();
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: headers `done..queued` point at live iovecs whose lengths were set
        // by `push` and lie within `bufs`, or (gathered frames) at lent memory that
        // `push_gathered`'s caller keeps readable while the frame is pending.
        let r = unsafe {
            libc::sendmmsg(
                fd,
                self.hdrs.as_mut_ptr().add(self.done),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        self.advance(r as usize);
        Ok(r as usize)
    }

    /// Marks `n` pending frames done without sending them (a frame the kernel
    /// rejected outright); empties the batch once everything is done.
    pub fn advance(&mut self, n: usize) {
        self.done = (self.done + n).min(self.queued);
        if self.done == self.queued {
            self.done = 0;
            self.queued = 0;
            self.lent = false;
        }
    }

    /// Drops every pending frame unsent.
    pub fn discard(&mut self) {
        self.advance(self.pending());
    }
}

/// Interface (index, name) pairs of the calling thread's network namespace,
/// via `if_nameindex(3)` (netlink underneath, so per-thread `setns` is honoured,
/// unlike `/sys/class/net` which shows the namespace sysfs was mounted in).
pub fn if_nameindex() -> io::Result<Vec<(u32, String)>> {
    // SAFETY: plain libc call returning an owned array or null.
    let head = unsafe { libc::if_nameindex() };
    if head.is_null() {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    loop {
        // SAFETY: `p` walks the array returned above, which ends with a
        // {0, NULL} entry; names are valid NUL-terminated strings.
        let e = unsafe { &*p };
        if e.if_index == 0 || e.if_name.is_null() {
            break;
        }
        let name = unsafe { CStr::from_ptr(e.if_name) }
            .to_string_lossy()
            .into_owned();
        out.push((e.if_index, name));
        p = p.wrapping_add(1);
    }
    // SAFETY: `head` came from if_nameindex and is freed exactly once.
    unsafe { libc::if_freenameindex(head) };
    Ok(out)
}

/// Per-interface facts read with SIOCGIF* ioctls: (flags, mtu, hw type, mac).
pub struct IfCtl(OwnedFd);

impl IfCtl {
    /// An AF_INET datagram socket used only as an ioctl handle; it lives in
    /// the calling thread's network namespace.
    pub fn new() -> io::Result<IfCtl> {
        // SAFETY: plain syscall.
        let fd =
            cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: fresh descriptor owned by nobody else.
        Ok(IfCtl(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ioctl(&self, name: &str, req: libc::c_ulong) -> io::Result<libc::ifreq> {
        // SAFETY: ifreq is plain old data; all-zero is valid.
        let mut ifr: libc::ifreq = unsafe { zeroed() };
        let bytes = name.as_bytes();
        if bytes.len() >= ifr.ifr_name.len() || bytes.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad interface name",
            ));
        }
        for (d, s) in ifr.ifr_name.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // SAFETY: `ifr` is a valid, NUL-terminated ifreq the kernel may fill.
        cvt(unsafe { libc::ioctl(self.0.as_raw_fd(), req as _, &mut ifr) })?;
        Ok(ifr)
    }

    pub fn flags(&self, name: &str) -> io::Result<u32> {
        let ifr = self.ioctl(name, libc::SIOCGIFFLAGS as libc::c_ulong)?;
        // SAFETY: SIOCGIFFLAGS fills the `ifru_flags` member of the union.
        Ok(unsafe { ifr.ifr_ifru.ifru_flags } as u16 as u32)
    }

    pub fn mtu(&self, name: &str) -> io::Result<u32> {
        let ifr = self.ioctl(name, libc::SIOCGIFMTU as libc::c_ulong)?;
        // SAFETY: SIOCGIFMTU fills the `ifru_mtu` member.
        Ok(unsafe { ifr.ifr_ifru.ifru_mtu } as u32)
    }

    /// The interface's interrupt coalescing settings (`ETHTOOL_GCOALESCE`): the 22
    /// fields of `struct ethtool_coalesce` after its command word, in kernel order.
    /// Virtual interfaces (veth, lo) answer `EOPNOTSUPP`.
    pub fn coalesce(&self, name: &str) -> io::Result<[u32; 22]> {
        const ETHTOOL_GCOALESCE: u32 = 0x0e;
        self.ethtool(name, ETHTOOL_GCOALESCE)
    }

    /// Receive queues of the interface (`ETHTOOL_GCHANNELS`: rx + combined channels);
    /// 1 for drivers that do not say.
    pub fn rx_queues(&self, name: &str) -> io::Result<u32> {
        const ETHTOOL_GCHANNELS: u32 = 0x3c;
        match self.ethtool::<8>(name, ETHTOOL_GCHANNELS) {
            // struct ethtool_channels: max_{rx,tx,other,combined}, {rx,tx,other,combined}_count.
            Ok(c) => Ok((c[4] + c[7]).max(1)),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(1),
            Err(e) => Err(e),
        }
    }

    /// An ethtool "get" command whose structure is the command word and `N` u32 fields.
    fn ethtool<const N: usize>(&self, name: &str, cmd: u32) -> io::Result<[u32; N]> {
        const SIOCETHTOOL: libc::c_ulong = 0x8946;
        let mut buf = vec![0u32; N + 1];
        buf[0] = cmd;
        // SAFETY: ifreq is plain old data; all-zero is valid.
        let mut ifr: libc::ifreq = unsafe { zeroed() };
        let bytes = name.as_bytes();
        if bytes.len() >= ifr.ifr_name.len() || bytes.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad interface name",
            ));
        }
        for (d, s) in ifr.ifr_name.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = buf.as_mut_ptr() as *mut libc::c_char;
        // SAFETY: `ifr` names the interface and points at a buffer the size of the
        // command's structure, which the kernel fills.
        cvt(unsafe { libc::ioctl(self.0.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) })?;
        let mut out = [0u32; N];
        out.copy_from_slice(&buf[1..]);
        Ok(out)
    }

    /// (ARPHRD_* hardware type, first 6 address bytes).
    pub fn hwaddr(&self, name: &str) -> io::Result<(u16, [u8; 6])> {
        let ifr = self.ioctl(name, libc::SIOCGIFHWADDR as libc::c_ulong)?;
        // SAFETY: SIOCGIFHWADDR fills the `ifru_hwaddr` sockaddr member.
        let sa = unsafe { ifr.ifr_ifru.ifru_hwaddr };
        let mut mac = [0u8; 6];
        for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
            *d = *s as u8;
        }
        Ok((sa.sa_family, mac))
    }
}

/// Moves the calling thread into the network namespace behind `ns_file`
/// (e.g. `/var/run/netns/NAME`). Only this thread changes namespace; sockets
/// it opens afterwards stay in that namespace wherever they are used.
pub fn setns_net(ns_file: &std::fs::File) -> io::Result<()> {
    // SAFETY: plain syscall on a valid descriptor.
    cvt(unsafe { libc::setns(ns_file.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

/// Effective user id of the process.
pub fn geteuid() -> u32 {
    // SAFETY: always succeeds, no arguments.
    unsafe { libc::geteuid() }
}

/// System page size (ring blocks must be multiples of it).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Sets or clears `O_NONBLOCK`.
pub fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns; no pointers.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    let new = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, new) }).map(drop)
}

/// Waits on several descriptors at once; returns their `revents` (all 0 on timeout).
pub fn poll_many(
    fds: &[(RawFd, libc::c_short)],
    timeout: Option<Duration>,
) -> io::Result<Vec<libc::c_short>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&(fd, events)| libc::pollfd {
            fd,
            events,
            revents: 0,
        })
        .collect();
    let ts = timeout.map(|left| libc::timespec {
        tv_sec: left.as_secs() as libc::time_t,
        tv_nsec: left.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `pfds` holds `len` valid pollfds; `ts_ptr` is null or a live timespec.
    let r = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![0; fds.len()]);
        }
        return Err(e);
    }
    Ok(pfds.iter().map(|p| p.revents).collect())
}

/// Whether this process may open packet sockets (CAP_NET_RAW in its network namespace).
pub fn can_open_packet_socket() -> bool {
    packet_socket().is_ok()
}

/// One non-blocking `recvmsg` of the next frame into `iovs` (`MSG_PEEK` leaves it
/// queued). Returns `None` when no frame waits, else the frame's whole length
/// (`MSG_TRUNC`: may exceed what the iovecs hold) and its packet type.
///
/// # Safety
/// Every iovec must name writable memory of its length, not otherwise borrowed
/// during the call.
pub unsafe fn recv_frame_into(
    fd: RawFd,
    iovs: &mut [libc::iovec],
    peek: bool,
) -> io::Result<Option<(usize, u8)>> {
    // SAFETY: sockaddr_ll and msghdr are plain C structs; all-zero is valid.
    let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&mut addr as *mut libc::sockaddr_ll).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    msg.msg_iov = iovs.as_mut_ptr();
    msg.msg_iovlen = iovs.len();
    let flags = libc::MSG_DONTWAIT | libc::MSG_TRUNC | if peek { libc::MSG_PEEK } else { 0 };
    // SAFETY: `msg` names `addr` and the caller's iovecs, all live for the call.
    let r = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some((r as usize, addr.sll_pkttype)))
}

/// A second descriptor (close-on-exec) for the same open socket or file.
pub fn dup_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is a new descriptor nobody else owns.
    let d = cvt(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) })?;
    // SAFETY: see above.
    Ok(unsafe { OwnedFd::from_raw_fd(d) })
}
