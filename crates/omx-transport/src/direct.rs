//! Direct receive of pull replies.
//!
//! A ring socket costs two copies per received byte: the kernel copies each frame
//! into a ring slot (under veth, in the sender's softirq, on the sender's CPU) and
//! the library copies the payload out of the slot. A [`DirectRx`] is a second packet
//! socket of one endpoint, without a ring, whose filter takes only that endpoint's
//! pull replies (the bulk of a large message); the data socket's filter leaves them
//! out ([`EndpointFilter::direct`]). Each frame is peeked for its header, then
//! received with one `recvmsg` whose iovecs put the payload straight into the
//! receive buffer: one copy, made by the receiving CPU.
//!
//! That costs two system calls per frame, which only large frames repay. For
//! smaller ones (MTU 9000) the socket is drained in batches instead
//! ([`DirectRx::recv_batch`], one `recvmmsg` for many frames): the library still
//! copies each payload out of a buffer, but the kernel's copy into that buffer is
//! made by the receiving CPU, in the call, rather than by the sender's CPU in its
//! softirq as with the ring. Under veth the sending CPU is the bottleneck of a
//! large transfer, so moving that copy off it is what counts.
//!
//! Frames with a checksum trailer stay on the data socket: their bytes must be
//! verified before any of them is placed.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::filter::EndpointFilter;
use crate::iface::Interface;
use crate::ring;
use crate::sys;

/// Largest number of destination pieces of one frame (see [`DirectRx::recv_into`]).
pub const DIRECT_MAX_PIECES: usize = sys::MAX_GATHER;

/// The pull-reply socket of one endpoint.
pub struct DirectRx {
    fd: OwnedFd,
    accept_other_host: bool,
    /// Frames taken whole (bad or unwanted pull replies, passed to the ordinary path).
    frame_buf: Vec<u8>,
    /// Buffers of the batched mode (`None`: frames are placed one by one).
    batch: Option<sys::RecvBatch>,
    /// Frames received, placed or not.
    pub received: u64,
    /// Frames for another host (bridge flooding) thrown away.
    pub skipped: u64,
    /// Frames longer than expected (cut short by the receive buffers), thrown away:
    /// the pull asks for them again.
    pub truncated: u64,
}

impl std::fmt::Debug for DirectRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectRx")
            .field("fd", &self.fd)
            .field("batched", &self.batched())
            .field("received", &self.received)
            .field("skipped", &self.skipped)
            .field("truncated", &self.truncated)
            .finish()
    }
}

impl DirectRx {
    /// Opens the direct socket of `endpoint` on `iface`. `buf_bytes` is the socket's
    /// receive buffer: it holds every frame of the pulls in flight until taken.
    /// `batch` > 0 selects the batched mode with that many frame buffers
    /// ([`DirectRx::recv_batch`]); 0 the placed mode ([`DirectRx::peek`] and
    /// [`DirectRx::recv_into`]).
    pub fn open(
        iface: &Interface,
        ethertype: u16,
        endpoint: u8,
        buf_bytes: usize,
        batch: usize,
    ) -> io::Result<DirectRx> {
        let fd = sys::packet_socket()?;
        let raw = fd.as_raw_fd();
        let _ = sys::setsockopt_int(raw, sys::SOL_PACKET, sys::PACKET_IGNORE_OUTGOING, 1);
        sys::attach_filter(raw, &EndpointFilter::compile_direct(ethertype, endpoint))?;
        let n = buf_bytes.min(i32::MAX as usize) as libc::c_int;
        // FORCE needs CAP_NET_ADMIN; otherwise the sysctl cap applies.
        if sys::setsockopt_int(raw, libc::SOL_SOCKET, sys::SO_RCVBUFFORCE, n).is_err() {
            let _ = sys::setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, n);
        }
        sys::bind_packet(raw, iface.index, ethertype)?;
        Ok(DirectRx {
            fd,
            accept_other_host: iface.loopback,
            frame_buf: vec![0u8; iface.max_frame_len() + 64],
            batch: (batch > 0).then(|| sys::RecvBatch::new(batch, iface.max_frame_len())),
            received: 0,
            skipped: 0,
            truncated: 0,
        })
    }

    /// Whether the socket is drained in batches ([`DirectRx::recv_batch`]).
    pub fn batched(&self) -> bool {
        self.batch.is_some()
    }

    /// Batched mode: one `recvmmsg` of up to `max` frames, each lent to `f` in
    /// arrival order. Returns how many frames were taken (0 when none waited, or in
    /// the placed mode). Frames for another host and frames cut short are dropped
    /// and counted.
    pub fn recv_batch(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> io::Result<usize> {
        let Some(b) = self.batch.as_mut() else {
            return Ok(0);
        };
        let n = b.recv(self.fd.as_raw_fd(), max)?;
        for i in 0..n {
            let (frame, pkttype, cut) = b.frame(i);
            if !ring::wanted(pkttype, self.accept_other_host) {
                self.skipped += 1;
            } else if cut {
                self.truncated += 1;
            } else {
                self.received += 1;
                f(frame);
            }
        }
        Ok(n)
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Whether a frame waits (one `poll`, no wait).
    pub fn readable(&self) -> bool {
        sys::poll_fd(self.fd(), libc::POLLIN, Some(Duration::ZERO)).is_ok_and(|r| r != 0)
    }

    /// Copies the first `head.len()` bytes of the next frame into `head`, leaving the
    /// frame queued, and returns its whole length; `None` when none waits. Frames
    /// for another host are dropped on the way.
    pub fn peek(&mut self, head: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            let mut iov = [libc::iovec {
                iov_base: head.as_mut_ptr().cast(),
                iov_len: head.len(),
            }];
            // SAFETY: the iovec names `head`, borrowed mutably for the call.
            let Some((len, pkttype)) =
                (unsafe { sys::recv_frame_into(self.fd(), &mut iov, true)? })
            else {
                return Ok(None);
            };
            if ring::wanted(pkttype, self.accept_other_host) {
                return Ok(Some(len));
            }
            self.skip()?;
            self.skipped += 1;
        }
    }

    /// Receives the next frame: its first `head.len()` bytes into `head`, the rest
    /// into `pieces` (address, length) in order. Returns the frame's whole length
    /// (larger than what was stored if the pieces were too short), or `None` when no
    /// frame waited.
    ///
    /// # Safety
    /// Every piece must be writable memory of its length that nothing else reads or
    /// writes during the call.
    pub unsafe fn recv_into(
        &mut self,
        head: &mut [u8],
        pieces: &[(*mut u8, usize)],
    ) -> io::Result<Option<usize>> {
        let mut iovs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; DIRECT_MAX_PIECES + 1];
        let n = pieces.len().min(DIRECT_MAX_PIECES);
        iovs[0] = libc::iovec {
            iov_base: head.as_mut_ptr().cast(),
            iov_len: head.len(),
        };
        for (iov, &(p, l)) in iovs[1..].iter_mut().zip(&pieces[..n]) {
            *iov = libc::iovec {
                iov_base: p.cast(),
                iov_len: l,
            };
        }
        // SAFETY: `head` is borrowed mutably; the pieces are writable per the contract.
        let r = unsafe { sys::recv_frame_into(self.fd(), &mut iovs[..=n], false)? };
        if r.is_some() {
            self.received += 1;
        }
        Ok(r.map(|(len, _)| len))
    }

    /// Receives the next frame whole and lends it to `f` (a pull reply that cannot
    /// be placed: the ordinary path counts and drops it). `false` when none waited.
    pub fn recv_owned(&mut self, f: impl FnOnce(&[u8])) -> io::Result<bool> {
        let mut iov = [libc::iovec {
            iov_base: self.frame_buf.as_mut_ptr().cast(),
            iov_len: self.frame_buf.len(),
        }];
        // SAFETY: the iovec names `frame_buf`, owned by `self`, borrowed for the call.
        let Some((len, _)) = (unsafe { sys::recv_frame_into(self.fd(), &mut iov, false)? }) else {
            return Ok(false);
        };
        self.received += 1;
        if len <= self.frame_buf.len() {
            f(&self.frame_buf[..len]);
        }
        Ok(true)
    }

    /// Throws the next frame away.
    fn skip(&mut self) -> io::Result<()> {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }];
        // SAFETY: a zero-length iovec: nothing is written.
        unsafe { sys::recv_frame_into(self.fd(), &mut iov, false)? };
        Ok(())
    }
}
