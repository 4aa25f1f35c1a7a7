//! One AF_XDP socket (XSK): its umem (frames shared with the kernel), the four rings
//! (fill and completion of the umem, rx and tx of the socket), copy or zero-copy
//! mode, with `need_wakeup`, so an idle socket costs nothing and a busy one rarely enters the kernel.
//!
//! Umem frames are split once: the first `rx_frames` belong to receive (always either
//! in the fill ring, with the kernel, or in the rx ring), the rest to send (free,
//! queued in the tx ring, or waiting in the completion ring). [`XskCounts`] shows
//! where they are, so tests can check that none leaks.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Umem chunk: one page (copy mode and most zero-copy drivers need chunk <= page).
pub const CHUNK: usize = 4096;
/// Bytes the kernel keeps in front of a received frame in its chunk.
const XDP_PACKET_HEADROOM: usize = 256;
/// Longest frame a chunk takes on receive.
pub const MAX_FRAME: usize = CHUNK - XDP_PACKET_HEADROOM;
/// Give up a flush after this long without the kernel taking a frame.
const SEND_STALL_LIMIT: Duration = Duration::from_secs(5);

/// An anonymous or ring mapping, unmapped on drop.
struct Map {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone; the port using it is driven by one
// thread at a time (`&mut self`).
unsafe impl Send for Map {}

impl Map {
    fn new(fd: RawFd, len: usize, offset: u64) -> io::Result<Map> {
        let (flags, fd) = if fd < 0 {
            (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
            )
        } else {
            (libc::MAP_SHARED | libc::MAP_POPULATE, fd)
        };
        // SAFETY: a fresh mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; nothing borrows it past the owner.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A single-producer / single-consumer ring shared with the kernel; we are the
/// producer of fill and tx, the consumer of rx and completion.
struct Ring {
    _map: Map,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
    /// Our side's index (producer or consumer, by role), published on `publish`.
    local: u32,
}

// SAFETY: see `Map`.
unsafe impl Send for Ring {}

impl Ring {
    fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        entries: u32,
        entry_len: usize,
        pgoff: u64,
    ) -> io::Result<Ring> {
        let len = off.desc as usize + entries as usize * entry_len;
        let map = Map::new(fd, len, pgoff)?;
        let at = |o: u64| map.ptr.wrapping_add(o as usize);
        Ok(Ring {
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            desc: at(off.desc),
            mask: entries - 1,
            local: 0,
            _map: map,
        })
    }
    fn load(p: *const AtomicU32) -> u32 {
        // SAFETY: the pointer lies in the live ring mapping, 4-byte aligned by the kernel.
        unsafe { (*p).load(Ordering::Acquire) }
    }
    fn store(p: *const AtomicU32, v: u32) {
        // SAFETY: as in `load`.
        unsafe { (*p).store(v, Ordering::Release) }
    }
    /// Entries the kernel produced that we have not consumed (consumer role).
    fn available(&self) -> u32 {
        Self::load(self.producer).wrapping_sub(self.local)
    }
    /// Entries produced and not yet taken by the kernel (producer role).
    fn unconsumed(&self) -> u32 {
        self.local.wrapping_sub(Self::load(self.consumer))
    }
    fn publish_producer(&self) {
        Self::store(self.producer, self.local);
    }
    fn publish_consumer(&self) {
        Self::store(self.consumer, self.local);
    }
    fn needs_wakeup(&self) -> bool {
        Self::load(self.flags) & libc::XDP_RING_NEED_WAKEUP != 0
    }
    fn addr_slot(&self, i: u32) -> *mut u64 {
        self.desc.wrapping_add((i & self.mask) as usize * 8).cast()
    }
    fn desc_slot(&self, i: u32) -> *mut libc::xdp_desc {
        self.desc.wrapping_add((i & self.mask) as usize * 16).cast()
    }
}

/// Where the umem frames are (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XskCounts {
    pub rx_frames: u32,
    pub tx_frames: u32,
    /// Receive frames given to the kernel through the fill ring (the rest are being
    /// handed to the caller right now; between calls this equals `rx_frames`).
    pub rx_with_kernel: u32,
    /// Send frames free for the next frame.
    pub tx_free: u32,
    /// Send frames in the tx ring or not yet reported complete.
    pub tx_in_flight: u32,
}

/// Kernel counters of an XSK (`XDP_STATISTICS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XskKernelStats {
    pub rx_dropped: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty: u64,
    pub tx_invalid: u64,
}

pub struct XskPort {
    fd: OwnedFd,
    umem: Map,
    fill: Ring,
    comp: Ring,
    rx: Ring,
    tx: Ring,
    rx_frames: u32,
    tx_frames: u32,
    rx_with_kernel: u32,
    free_tx: Vec<u64>,
    /// Descriptors written to the tx ring since the last flush.
    queued: usize,
    batch: usize,
    pub(crate) sent: u64,
    pub(crate) send_retries: u64,
    pub(crate) received: u64,
}

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: v points to a live T of the given size for the duration of the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn getsockopt<T: Copy>(fd: RawFd, opt: libc::c_int, v: &mut T) -> io::Result<()> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: v is a writable T of `len` bytes.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_XDP, opt, (v as *mut T).cast(), &mut len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl XskPort {
    /// Opens an XSK on queue `queue` of interface `ifindex` with `need_wakeup`, in
    /// zero-copy mode (refused by drivers without it) or copy mode, with `rx_frames`
    /// and `tx_frames` umem frames (powers of two).
    pub fn open(
        ifindex: u32,
        queue: u32,
        rx_frames: u32,
        tx_frames: u32,
        batch: usize,
        zero_copy: bool,
    ) -> io::Result<XskPort> {
        assert!(rx_frames.is_power_of_two() && tx_frames.is_power_of_two());
        // SAFETY: plain socket creation.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let total = (rx_frames + tx_frames) as usize;
        let umem = Map::new(-1, total * CHUNK, 0)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr as u64,
            len: (total * CHUNK) as u64,
            chunk_size: CHUNK as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(raw, libc::XDP_UMEM_REG, &reg)?;
        setsockopt(raw, libc::XDP_UMEM_FILL_RING, &rx_frames)?;
        setsockopt(raw, libc::XDP_UMEM_COMPLETION_RING, &tx_frames)?;
        setsockopt(raw, libc::XDP_RX_RING, &rx_frames)?;
        setsockopt(raw, libc::XDP_TX_RING, &tx_frames)?;
        // SAFETY: all-zero is a valid xdp_mmap_offsets (plain integers).
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        getsockopt(raw, libc::XDP_MMAP_OFFSETS, &mut off)?;
        let fill = Ring::map(raw, &off.fr, rx_frames, 8, libc::XDP_UMEM_PGOFF_FILL_RING)?;
        let comp = Ring::map(
            raw,
            &off.cr,
            tx_frames,
            8,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
        )?;
        let rx = Ring::map(raw, &off.rx, rx_frames, 16, libc::XDP_PGOFF_RX_RING as u64)?;
        let tx = Ring::map(raw, &off.tx, tx_frames, 16, libc::XDP_PGOFF_TX_RING as u64)?;
        let mut port = XskPort {
            fd,
            umem,
            fill,
            comp,
            rx,
            tx,
            rx_frames,
            tx_frames,
            rx_with_kernel: 0,
            free_tx: (rx_frames..rx_frames + tx_frames)
                .map(|i| i as u64 * CHUNK as u64)
                .collect(),
            queued: 0,
            batch: batch.max(1),
            sent: 0,
            send_retries: 0,
            received: 0,
        };
        for i in 0..rx_frames {
            port.give_rx(i as u64 * CHUNK as u64);
        }
        port.fill.publish_producer();
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_USE_NEED_WAKEUP
                | if zero_copy {
                    libc::XDP_ZEROCOPY
                } else {
                    libc::XDP_COPY
                },
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: sa is a valid sockaddr_xdp for the call.
        let r = unsafe {
            libc::bind(
                raw,
                (&sa as *const libc::sockaddr_xdp).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(port)
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Puts a receive frame back in the fill ring (published by the caller).
    fn give_rx(&mut self, addr: u64) {
        let slot = self.fill.addr_slot(self.fill.local);
        // SAFETY: the slot is ours (room is guaranteed: a ring holds every rx frame).
        unsafe { slot.write(addr & !(CHUNK as u64 - 1)) };
        self.fill.local = self.fill.local.wrapping_add(1);
        self.rx_with_kernel += 1;
    }

    /// Whether the rx ring holds a frame (one load).
    #[inline]
    pub fn rx_ready(&self) -> bool {
        self.rx.available() > 0
    }

    /// Hands up to `max` received frames to `f`, then returns their chunks to the
    /// fill ring (kicking the kernel if it asked to be woken).
    pub fn recv(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let n = self.rx.available().min(max as u32);
        for _ in 0..n {
            // SAFETY: the kernel produced this descriptor (Acquire load in `available`).
            let d = unsafe { self.rx.desc_slot(self.rx.local).read() };
            self.rx.local = self.rx.local.wrapping_add(1);
            self.rx_with_kernel -= 1;
            let (addr, len) = (d.addr as usize, d.len as usize);
            if addr + len <= self.umem.len {
                // SAFETY: in the umem; the kernel does not write a chunk it handed out
                // until we give it back below.
                let frame = unsafe { std::slice::from_raw_parts(self.umem.ptr.add(addr), len) };
                f(frame);
            }
            self.give_rx(d.addr);
        }
        if n > 0 {
            self.rx.publish_consumer();
            self.fill.publish_producer();
            self.received += n as u64;
            if self.fill.needs_wakeup() {
                self.kick_rx();
            }
        }
        n as usize
    }

    fn kick_rx(&self) {
        // SAFETY: a zero-length receive only wakes the driver.
        unsafe {
            libc::recvfrom(
                self.fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }

    /// Moves completed send frames back to the free list.
    fn reclaim(&mut self) {
        let n = self.comp.available();
        for _ in 0..n {
            // SAFETY: a completion entry the kernel produced.
            let addr = unsafe { self.comp.addr_slot(self.comp.local).read() };
            self.comp.local = self.comp.local.wrapping_add(1);
            self.free_tx.push(addr & !(CHUNK as u64 - 1));
        }
        if n > 0 {
            self.comp.publish_consumer();
        }
    }

    /// A free send chunk, flushing (and waiting for completions) if none is free.
    fn take_tx(&mut self) -> io::Result<u64> {
        if self.free_tx.is_empty() {
            self.reclaim();
        }
        if self.free_tx.is_empty() {
            self.flush()?;
            let since = Instant::now();
            while self.free_tx.is_empty() {
                self.kick_tx()?;
                self.reclaim();
                if since.elapsed() > SEND_STALL_LIMIT {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "XDP send stalled: no completion",
                    ));
                }
            }
        }
        Ok(self.free_tx.pop().expect("a free send frame"))
    }

    /// Queues a frame of `len` bytes (at most [`CHUNK`]) written by `fill`; flushes
    /// when `batch` frames are queued.
    pub fn queue_send(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> io::Result<()> {
        debug_assert!(len <= CHUNK);
        let addr = self.take_tx()?;
        // SAFETY: the chunk is ours (taken from the free list) and lies in the umem.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.umem.ptr.add(addr as usize), len) };
        fill(buf);
        // The tx ring has an entry per send frame, so there is room.
        let slot = self.tx.desc_slot(self.tx.local);
        // SAFETY: a slot of ours in the tx ring.
        unsafe {
            slot.write(libc::xdp_desc {
                addr,
                len: len as u32,
                options: 0,
            })
        };
        self.tx.local = self.tx.local.wrapping_add(1);
        self.queued += 1;
        if self.queued >= self.batch {
            self.flush()?;
        }
        Ok(())
    }

    pub fn pending(&self) -> usize {
        self.queued
    }

    /// Publishes queued frames and has the kernel send them all (copy mode sends
    /// within the `sendto` call, a bounded number per call).
    pub fn flush(&mut self) -> io::Result<()> {
        if self.queued == 0 {
            return Ok(());
        }
        self.tx.publish_producer();
        let since = Instant::now();
        while self.tx.unconsumed() > 0 {
            if !self.tx.needs_wakeup() {
                std::hint::spin_loop();
            } else {
                self.kick_tx()?;
            }
            if self.tx.unconsumed() > 0 && since.elapsed() > SEND_STALL_LIMIT {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "XDP send stalled"));
            }
        }
        self.sent += self.queued as u64;
        self.queued = 0;
        self.reclaim();
        Ok(())
    }

    fn kick_tx(&mut self) -> io::Result<()> {
        // SAFETY: a zero-length send only asks the kernel to process the tx ring.
        let r = unsafe {
            libc::sendto(
                self.fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)
                | Some(libc::EINTR) => {
                    self.send_retries += 1;
                    std::thread::yield_now();
                }
                _ => return Err(e),
            }
        }
        Ok(())
    }

    pub fn counts(&mut self) -> XskCounts {
        self.reclaim();
        XskCounts {
            rx_frames: self.rx_frames,
            tx_frames: self.tx_frames,
            rx_with_kernel: self.rx_with_kernel,
            tx_free: self.free_tx.len() as u32,
            tx_in_flight: self.tx_frames - self.free_tx.len() as u32,
        }
    }

    pub fn kernel_stats(&self) -> io::Result<XskKernelStats> {
        // SAFETY: all-zero is a valid xdp_statistics.
        let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        getsockopt(self.fd(), libc::XDP_STATISTICS, &mut s)?;
        Ok(XskKernelStats {
            rx_dropped: s.rx_dropped,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty: s.rx_fill_ring_empty_descs,
            tx_invalid: s.tx_invalid_descs,
        })
    }

    pub fn rx_frames(&self) -> u32 {
        self.rx_frames
    }
}
