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
//! ([`DirectRx::recv_batch_into`], one `recvmmsg` for many frames). The caller
//! names where it expects each frame's payload (the next missing frames of its
//! pulls, in order): the kernel writes the head of frame *i* into a buffer, its
//! payload into the *i*-th expected place, and anything beyond into the rest of
//! that buffer. The caller checks each head against the guess; from the first
//! frame that does not match, every frame of the batch is rebuilt whole in its
//! buffer ([`DirectRx::rebuild`]) before any is placed, so a wrong guess costs a
//! copy, never data. Either way the kernel's copy is made by the receiving CPU, in
//! the call, rather than by the sender's CPU in its softirq as with the ring.
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

/// Where the payload of one expected frame goes (see [`DirectRx::recv_batch_into`]).
#[derive(Clone, Copy, Debug)]
pub struct ReplyPlace {
    /// Destination pieces (address, length), in order; `count` of them are used.
    pub pieces: [(*mut u8, usize); DIRECT_MAX_PIECES],
    pub count: usize,
    /// Payload bytes expected (the sum of the pieces).
    pub len: usize,
}

impl ReplyPlace {
    /// Whether any byte of this place is also one of `other`'s: two receives posted
    /// into one buffer at once give such places, which one batch must never hold
    /// together (a frame received into one and then rebuilt would read the other's).
    pub fn overlaps(&self, other: &ReplyPlace) -> bool {
        fn used(p: &ReplyPlace) -> &[(*mut u8, usize)] {
            &p.pieces[..p.count.min(DIRECT_MAX_PIECES)]
        }
        used(self).iter().any(|&(a, al)| {
            used(other).iter().any(|&(b, bl)| {
                let (a, b) = (a as usize, b as usize);
                al > 0 && bl > 0 && a < b + bl && b < a + al
            })
        })
    }

    /// No expectation: the whole frame goes into the batch's buffer.
    pub const NONE: ReplyPlace = ReplyPlace {
        pieces: [(std::ptr::null_mut(), 0); DIRECT_MAX_PIECES],
        count: 0,
        len: 0,
    };
}

/// iovecs of one frame of a batch: head, places, rest of the buffer.
const IOVS_PER_FRAME: usize = DIRECT_MAX_PIECES + 2;

/// Buffers of the batched mode: one frame-sized buffer per frame of a batch, which
/// receives the frame's head, then whatever goes beyond its expected place.
struct Batch {
    head_len: usize,
    slot: usize,
    bufs: Vec<u8>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_ll>,
    hdrs: Vec<libc::mmsghdr>,
    /// The place each frame of the last batch was received into.
    places: Vec<ReplyPlace>,
}

// SAFETY: the pointers in `iovs`/`hdrs` target this value's own heap buffers (which
// move with it) or places that `recv_batch_into`'s caller vouches for during the call.
unsafe impl Send for Batch {}

impl Batch {
    fn new(n: usize, slot: usize, head_len: usize) -> Batch {
        Batch {
            head_len,
            slot,
            bufs: vec![0u8; n * slot],
            // SAFETY (zeroed): plain C structs for which all-zero is valid.
            iovs: vec![unsafe { std::mem::zeroed() }; n * IOVS_PER_FRAME],
            addrs: vec![unsafe { std::mem::zeroed() }; n],
            hdrs: vec![unsafe { std::mem::zeroed() }; n],
            places: vec![ReplyPlace::NONE; n],
        }
    }

    /// Frame `i` of the last batch: its length and whether it is wanted (neither for
    /// another host nor longer than its buffers).
    fn status(&self, i: usize, accept_other_host: bool) -> (usize, bool, bool) {
        let h = &self.hdrs[i];
        let len = h.msg_len as usize;
        let cut = len > self.slot || h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        (
            len,
            ring::wanted(self.addrs[i].sll_pkttype, accept_other_host),
            cut,
        )
    }
}

/// The pull-reply socket of one endpoint.
pub struct DirectRx {
    fd: OwnedFd,
    accept_other_host: bool,
    /// Frames taken whole (bad or unwanted pull replies, passed to the ordinary path).
    frame_buf: Vec<u8>,
    /// Buffers of the batched mode (`None`: frames are placed one by one).
    batch: Option<Batch>,
    /// Frames in the last batch.
    batch_len: usize,
    /// Frames received, placed or not.
    pub received: u64,
    /// Frames for another host (bridge flooding) thrown away.
    pub skipped: u64,
    /// Frames longer than expected (cut short by the receive buffers), thrown away:
    /// the pull asks for them again.
    pub truncated: u64,
    /// Batched mode: frames not received where they were expected (or after one that
    /// was not), rebuilt and copied to their place.
    pub rebuilt_frames: u64,
}

impl std::fmt::Debug for DirectRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectRx")
            .field("fd", &self.fd)
            .field("batched", &self.batched())
            .field("received", &self.received)
            .field("skipped", &self.skipped)
            .field("truncated", &self.truncated)
            .field("rebuilt_frames", &self.rebuilt_frames)
            .finish()
    }
}

impl DirectRx {
    /// Opens the direct socket of `endpoint` on `iface`. `buf_bytes` is the socket's
    /// receive buffer: it holds every frame of the pulls in flight until taken.
    /// `batch` > 0 selects the batched mode with that many frame buffers, whose
    /// frames' first `head_len` bytes are their heads ([`DirectRx::recv_batch_into`]);
    /// 0 the placed mode ([`DirectRx::peek`] and [`DirectRx::recv_into`]).
    pub fn open(
        iface: &Interface,
        ethertype: u16,
        endpoint: u8,
        buf_bytes: usize,
        batch: usize,
        head_len: usize,
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
            batch: (batch > 0).then(|| Batch::new(batch, iface.max_frame_len(), head_len)),
            batch_len: 0,
            received: 0,
            skipped: 0,
            truncated: 0,
            rebuilt_frames: 0,
        })
    }

    /// Whether the socket is drained in batches ([`DirectRx::recv_batch`]).
    pub fn batched(&self) -> bool {
        self.batch.is_some()
    }

    /// Batched mode: one `recvmmsg` of up to `max` frames (at most the batch size).
    /// Frame *i*'s first `head_len` bytes go into its buffer, the next
    /// `places[i].len` into `places[i]` (none past `places.len()`), the rest into its
    /// buffer after the place's length. Returns how many frames came (0 when none
    /// waited, or in the placed mode). Then [`DirectRx::head`] tells each frame's
    /// head, and [`DirectRx::rebuild`] puts a frame whole into its buffer.
    ///
    /// # Safety
    /// Every piece of every place must be writable memory of its length that nothing
    /// else reads or writes until the frames of this batch are handled (and, for
    /// [`DirectRx::rebuild`], unchanged since this call).
    pub unsafe fn recv_batch_into(
        &mut self,
        max: usize,
        places: &[ReplyPlace],
    ) -> io::Result<usize> {
        self.batch_len = 0;
        let fd = self.fd.as_raw_fd();
        let Some(b) = self.batch.as_mut() else {
            return Ok(0);
        };
        let n = max.min(b.hdrs.len());
        let base = b.bufs.as_mut_ptr();
        for i in 0..n {
            let p = places.get(i).copied().unwrap_or(ReplyPlace::NONE);
            b.places[i] = p;
            // Pointer arithmetic only, within frame i's buffer.
            let buf = base.wrapping_add(i * b.slot);
            let iovs = &mut b.iovs[i * IOVS_PER_FRAME..(i + 1) * IOVS_PER_FRAME];
            iovs[0] = libc::iovec {
                iov_base: buf.cast(),
                iov_len: b.head_len,
            };
            let mut k = 1;
            for &(ptr, len) in &p.pieces[..p.count.min(DIRECT_MAX_PIECES)] {
                iovs[k] = libc::iovec {
                    iov_base: ptr.cast(),
                    iov_len: len,
                };
                k += 1;
            }
            let used = (b.head_len + p.len).min(b.slot);
            iovs[k] = libc::iovec {
                iov_base: buf.wrapping_add(used).cast(),
                iov_len: b.slot - used,
            };
            let h = &mut b.hdrs[i];
            h.msg_hdr.msg_iov = iovs.as_mut_ptr();
            h.msg_hdr.msg_iovlen = k + 1;
            h.msg_hdr.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_ll).cast();
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: the first `n` headers name iovecs into this batch's buffers (of the
        // lengths given) and into the places the caller vouches for.
        let got = unsafe { sys::recvmmsg_nonblocking(fd, &mut b.hdrs[..n])? };
        for i in 0..got {
            match b.status(i, self.accept_other_host) {
                (_, false, _) => self.skipped += 1,
                (_, true, true) => self.truncated += 1,
                _ => self.received += 1,
            }
        }
        self.batch_len = got;
        Ok(got)
    }

    /// Frame `i` of the last batch: its head and whole length, or `None` when it was
    /// dropped (for another host, or longer than its buffers; counted).
    pub fn head(&self, i: usize) -> Option<(&[u8], usize)> {
        let b = self.batch.as_ref().filter(|_| i < self.batch_len)?;
        let (len, wanted, cut) = b.status(i, self.accept_other_host);
        if !wanted || cut {
            return None;
        }
        let start = i * b.slot;
        Some((&b.bufs[start..start + len.min(b.head_len)], len))
    }

    /// Makes frame `i` of the last batch whole in its buffer: the part that went to its
    /// place is copied back behind the head (then [`DirectRx::rebuilt`] lends it).
    /// Nothing to do for a dropped frame ([`DirectRx::head`] is `None`).
    ///
    /// # Safety
    /// The places of the last [`DirectRx::recv_batch_into`] must still hold what the
    /// kernel wrote there (rebuild every frame concerned before placing any).
    pub unsafe fn rebuild(&mut self, i: usize) {
        let accept_other_host = self.accept_other_host;
        let Some(b) = self.batch.as_mut().filter(|_| i < self.batch_len) else {
            return;
        };
        let (len, wanted, cut) = b.status(i, accept_other_host);
        if !wanted || cut {
            return;
        }
        self.rebuilt_frames += 1;
        let p = b.places[i];
        let start = i * b.slot;
        let mut at = start + b.head_len;
        let mut left = len.saturating_sub(b.head_len).min(p.len);
        for &(ptr, n) in &p.pieces[..p.count.min(DIRECT_MAX_PIECES)] {
            let c = n.min(left);
            if c == 0 {
                break;
            }
            // SAFETY: `ptr..ptr + c` is part of a place the caller vouched for, and
            // `at + c <= start + len <= start + slot` lies in frame i's buffer.
            unsafe { std::ptr::copy_nonoverlapping(ptr, b.bufs[at..at + c].as_mut_ptr(), c) };
            at += c;
            left -= c;
        }
    }

    /// Frame `i` of the last batch, whole once [`DirectRx::rebuild`] ran (or when it
    /// had no place); `None` as for [`DirectRx::head`].
    pub fn rebuilt(&self, i: usize) -> Option<&[u8]> {
        let b = self.batch.as_ref().filter(|_| i < self.batch_len)?;
        let (len, wanted, cut) = b.status(i, self.accept_other_host);
        (wanted && !cut).then(|| &b.bufs[i * b.slot..i * b.slot + len])
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

#[cfg(test)]
mod tests {
    use super::*;

    fn place(pieces: &[(usize, usize)]) -> ReplyPlace {
        let mut p = ReplyPlace::NONE;
        for (i, &(a, l)) in pieces.iter().enumerate() {
            p.pieces[i] = (a as *mut u8, l);
            p.len += l;
        }
        p.count = pieces.len();
        p
    }

    #[test]
    fn places_overlap_only_when_a_byte_is_shared() {
        let a = place(&[(0x1000, 0x100)]);
        assert!(a.overlaps(&place(&[(0x10ff, 1)])));
        assert!(a.overlaps(&place(&[(0x800, 0x900)])));
        assert!(!a.overlaps(&place(&[(0x1100, 0x100)])));
        assert!(!a.overlaps(&place(&[(0xf00, 0x100)])));
        // Any piece of either, and empty pieces never.
        assert!(a.overlaps(&place(&[(0x3000, 8), (0x1080, 8)])));
        assert!(!a.overlaps(&place(&[(0x1080, 0)])));
        assert!(!a.overlaps(&ReplyPlace::NONE));
    }
}
