//! The rings between a process and the host's copy service: one request ring (the
//! process produces, the service consumes) and one completion ring (the reverse) in
//! one anonymous shared mapping (`memfd`) that the process creates and hands to the
//! service over a unix socket ([`send_fd`]). Nothing is named in the file system, so
//! nothing outlives the two processes.
//!
//! # Layout (version [`VERSION`], native endianness)
//!
//! ```text
//! 0     magic u64 "OMXCPYRG"   8 version u32   12 entries u32 (power of two)
//! 128   request tail u64       (written by the process)
//! 256   request head u64       (written by the service)
//! 384   completion tail u64    (written by the service)
//! 512   completion head u64    (written by the process)
//! 640   sleeping u32           (service: 0 polling, 1 may sleep, 2 rung)
//! 4096  requests:    entries x 64 B {cookie, dst_pid u32 | src_pid u32 << 32, dst, src, len}
//! ...   completions: entries x 16 B {cookie, status}
//! ```
//!
//! Every word is accessed atomically; each counter has its own 128-byte block. A
//! request at position `p` has cookie `p + 1`; entries are published by the
//! Release store of the tail and completed in order. The process keeps at most
//! `entries` requests not yet reaped from the completion ring, so the service
//! never finds the completion ring full unless the process misbehaves.
//!
//! The doorbell follows the inbox protocol of [`crate::shm`]: the service sets
//! `sleeping` (SeqCst store and fence) and checks every ring again before it blocks
//! on the clients' sockets; a process publishes, issues a SeqCst fence and writes one
//! byte to its socket only if it moves the flag from 1 to 2.
//!
//! Everything the service reads is untrusted: counters and entries are validated
//! by the service (see `omx_runtime::copy_service`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, Ordering};

use crate::shm::file::Mapping;
/// The unix-socket calls both sides need.
pub use crate::sys::{
    peer_cred, poll_many, send_message, seqpacket_accept, seqpacket_connect, seqpacket_listen,
    set_nonblocking,
};

pub const MAGIC: u64 = u64::from_le_bytes(*b"OMXCPYRG");
pub const VERSION: u32 = 1;
/// Default and largest number of entries per ring.
pub const DEFAULT_ENTRIES: u32 = 256;
pub const MAX_ENTRIES: u32 = 4096;

const O_MAGIC: usize = 0;
const O_VERSION: usize = 8;
const O_ENTRIES: usize = 12;
const O_REQ_TAIL: usize = 128;
const O_REQ_HEAD: usize = 256;
const O_COMP_TAIL: usize = 384;
const O_COMP_HEAD: usize = 512;
const O_SLEEPING: usize = 640;
const REQS: usize = 4096;
const REQ_STRIDE: usize = 64;
const COMP_STRIDE: usize = 16;

const AWAKE: u32 = 0;
const ASLEEP: u32 = 1;
const RUNG: u32 = 2;

/// Completion status of a request.
pub mod status {
    pub const DONE: u64 = 1;
    /// A process the client may not access (other user, not dumpable).
    pub const REFUSED: u64 = 2;
    /// A process named in the request does not exist.
    pub const GONE: u64 = 3;
    /// A range is not mapped (or not writable).
    pub const FAULT: u64 = 4;
    /// The entry was malformed (cookie out of order, null or wrapping or
    /// overlapping ranges, too long).
    pub const MALFORMED: u64 = 5;
    /// The client's outstanding bytes exceeded its bound.
    pub const OVER_LIMIT: u64 = 6;
}

/// One copy request: `len` bytes from `src` in process `src_pid` to `dst` in
/// `dst_pid` (pid 0: the client itself).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub cookie: u64,
    pub dst_pid: u32,
    pub src_pid: u32,
    pub dst: u64,
    pub src: u64,
    pub len: u64,
}

/// Bytes of a ring mapping with `entries` entries.
fn size_for(entries: u32) -> usize {
    REQS + entries as usize * (REQ_STRIDE + COMP_STRIDE)
}

/// One process's rings, seen from either side.
pub struct CopyRing {
    map: Mapping,
    entries: u32,
}

impl CopyRing {
    /// Creates the rings in a new memfd (the process's side); the descriptor goes to
    /// the service.
    pub fn create(entries: u32) -> io::Result<(CopyRing, OwnedFd)> {
        if !entries.is_power_of_two() || entries > MAX_ENTRIES {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // SAFETY: the name is a NUL-terminated literal.
        let fd = unsafe {
            libc::memfd_create(
                c"omx-copy-ring".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = size_for(entries);
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // Sealed against shrinking: the service's mapping can then never fault.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let map = Mapping::map(fd.as_raw_fd(), size, true)?;
        map.u32(O_VERSION).store(VERSION, Ordering::Relaxed);
        map.u32(O_ENTRIES).store(entries, Ordering::Relaxed);
        map.u64(O_MAGIC).store(MAGIC, Ordering::Release);
        Ok((CopyRing { map, entries }, fd))
    }

    /// Maps rings a process created (the service's side), checking the header and
    /// the descriptor's size against it.
    pub fn attach(fd: RawFd) -> io::Result<CopyRing> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        // SAFETY: stat is plain old data, filled by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is writable.
        if unsafe { libc::fstat(fd, &mut st) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: plain syscall.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(bad("copy ring not sealed against shrinking"));
        }
        if (st.st_size as usize) < REQS {
            return Err(bad("copy ring smaller than its header"));
        }
        let head = Mapping::map(fd, REQS, false)?;
        if head.u64(O_MAGIC).load(Ordering::Acquire) != MAGIC
            || head.u32(O_VERSION).load(Ordering::Relaxed) != VERSION
        {
            return Err(bad("not a copy ring of this version"));
        }
        let entries = head.u32(O_ENTRIES).load(Ordering::Relaxed);
        if !entries.is_power_of_two() || entries > MAX_ENTRIES {
            return Err(bad("bad entry count"));
        }
        let size = size_for(entries);
        if (st.st_size as usize) < size {
            return Err(bad("copy ring smaller than its entries"));
        }
        let map = Mapping::map(fd, size, true)?;
        Ok(CopyRing { map, entries })
    }

    pub fn entries(&self) -> u32 {
        self.entries
    }

    fn req_off(&self, pos: u64) -> usize {
        REQS + (pos as usize & (self.entries as usize - 1)) * REQ_STRIDE
    }

    fn comp_off(&self, pos: u64) -> usize {
        REQS + self.entries as usize * REQ_STRIDE
            + (pos as usize & (self.entries as usize - 1)) * COMP_STRIDE
    }

    // ---- process side -------------------------------------------------------

    /// Requests posted so far (the next cookie is this + 1).
    pub fn posted(&self) -> u64 {
        self.map.u64(O_REQ_TAIL).load(Ordering::Relaxed)
    }

    /// Requests posted and not yet reaped from the completion ring.
    pub fn unreaped(&self) -> u64 {
        self.posted() - self.map.u64(O_COMP_HEAD).load(Ordering::Relaxed)
    }

    /// Publishes `r` (its cookie must be [`posted`](Self::posted) + 1); `false` when
    /// the rings are full (reap completions first).
    pub fn try_post(&self, r: &Request) -> bool {
        if self.unreaped() >= u64::from(self.entries) {
            return false;
        }
        let tail = self.posted();
        let o = self.req_off(tail);
        let m = &self.map;
        m.u64(o).store(r.cookie, Ordering::Relaxed);
        m.u64(o + 8).store(
            u64::from(r.dst_pid) | u64::from(r.src_pid) << 32,
            Ordering::Relaxed,
        );
        m.u64(o + 16).store(r.dst, Ordering::Relaxed);
        m.u64(o + 24).store(r.src, Ordering::Relaxed);
        m.u64(o + 32).store(r.len, Ordering::Relaxed);
        m.u64(O_REQ_TAIL).store(tail + 1, Ordering::Release);
        true
    }

    /// After posting: whether the service announced it may sleep (then write one byte
    /// to the socket). Moves the flag to "rung" so a burst rings once.
    pub fn needs_doorbell(&self) -> bool {
        fence(Ordering::SeqCst);
        let flag = self.map.u32(O_SLEEPING);
        flag.load(Ordering::Relaxed) == ASLEEP
            && flag
                .compare_exchange(ASLEEP, RUNG, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// The oldest completion not yet reaped, as (cookie, status).
    pub fn reap(&self) -> Option<(u64, u64)> {
        let head = self.map.u64(O_COMP_HEAD).load(Ordering::Relaxed);
        if self.map.u64(O_COMP_TAIL).load(Ordering::Acquire) == head {
            return None;
        }
        let o = self.comp_off(head);
        let c = (
            self.map.u64(o).load(Ordering::Relaxed),
            self.map.u64(o + 8).load(Ordering::Relaxed),
        );
        self.map.u64(O_COMP_HEAD).store(head + 1, Ordering::Release);
        Some(c)
    }

    // ---- service side -------------------------------------------------------

    /// (head, tail) of the request ring; the tail is the client's and unchecked.
    pub fn requests(&self) -> (u64, u64) {
        (
            self.map.u64(O_REQ_HEAD).load(Ordering::Relaxed),
            self.map.u64(O_REQ_TAIL).load(Ordering::Acquire),
        )
    }

    /// The request at position `pos` (between head and a validated tail).
    pub fn request(&self, pos: u64) -> Request {
        let o = self.req_off(pos);
        let m = &self.map;
        let pids = m.u64(o + 8).load(Ordering::Relaxed);
        Request {
            cookie: m.u64(o).load(Ordering::Relaxed),
            dst_pid: pids as u32,
            src_pid: (pids >> 32) as u32,
            dst: m.u64(o + 16).load(Ordering::Relaxed),
            src: m.u64(o + 24).load(Ordering::Relaxed),
            len: m.u64(o + 32).load(Ordering::Relaxed),
        }
    }

    /// Completion-ring room: `None` when the client's head is nonsense.
    pub fn completion_room(&self) -> Option<u64> {
        let tail = self.map.u64(O_COMP_TAIL).load(Ordering::Relaxed);
        let head = self.map.u64(O_COMP_HEAD).load(Ordering::Acquire);
        let used = tail.checked_sub(head)?;
        u64::from(self.entries).checked_sub(used)
    }

    /// Completes the request at the head (call only with [`completion_room`] > 0).
    ///
    /// [`completion_room`]: Self::completion_room
    pub fn complete(&self, cookie: u64, status: u64) {
        let tail = self.map.u64(O_COMP_TAIL).load(Ordering::Relaxed);
        let o = self.comp_off(tail);
        self.map.u64(o).store(cookie, Ordering::Relaxed);
        self.map.u64(o + 8).store(status, Ordering::Relaxed);
        self.map.u64(O_COMP_TAIL).store(tail + 1, Ordering::Release);
        let head = self.map.u64(O_REQ_HEAD);
        head.store(head.load(Ordering::Relaxed) + 1, Ordering::Release);
    }

    /// The service's sleep announcement (see the module documentation).
    pub fn set_sleeping(&self, sleeping: bool) {
        let flag = self.map.u32(O_SLEEPING);
        if sleeping {
            flag.store(ASLEEP, Ordering::SeqCst);
            fence(Ordering::SeqCst);
        } else {
            flag.store(AWAKE, Ordering::Release);
        }
    }
}

/// Sends `msg` with descriptor `fd` attached (`SCM_RIGHTS`).
pub fn send_fd(sock: RawFd, msg: &[u8], fd: RawFd) -> io::Result<()> {
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // SAFETY: msghdr is plain old data; the pointers set below outlive the call.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    h.msg_control = cbuf.as_mut_ptr().cast();
    h.msg_controllen = space as _;
    // SAFETY: the control buffer holds one header with room for one descriptor.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&h);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
    }
    // SAFETY: `h` describes valid buffers.
    if unsafe { libc::sendmsg(sock, &h, libc::MSG_NOSIGNAL) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one message into `buf` and the descriptor attached to it, if any.
pub fn recv_fd(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as in send_fd.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    h.msg_control = cbuf.as_mut_ptr().cast();
    h.msg_controllen = space as _;
    // SAFETY: `h` describes valid buffers.
    let n = unsafe { libc::recvmsg(sock, &mut h, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fd = None;
    // SAFETY: the kernel filled the control buffer; walk it with the CMSG macros.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
            c = libc::CMSG_NXTHDR(&h, c);
        }
    }
    Ok((n as usize, fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_completions_pass_between_two_mappings() {
        let (client, fd) = CopyRing::create(4).unwrap();
        let service = CopyRing::attach(fd.as_raw_fd()).unwrap();
        for i in 1..=4 {
            let r = Request {
                cookie: i,
                dst_pid: 0,
                src_pid: 7,
                dst: 100 * i,
                src: 200 * i,
                len: i,
            };
            assert!(client.try_post(&r));
        }
        assert!(!client.try_post(&Request::default()), "four unreaped: full");
        assert_eq!(service.requests(), (0, 4));
        assert_eq!(service.request(1).src_pid, 7);
        assert_eq!(service.request(1).dst, 200);
        assert_eq!(service.completion_room(), Some(4));
        service.complete(1, status::DONE);
        assert_eq!(service.requests(), (1, 4));
        assert_eq!(client.reap(), Some((1, status::DONE)));
        assert_eq!(client.reap(), None);
        assert!(client.try_post(&Request {
            cookie: 5,
            ..Default::default()
        }));
        // The doorbell rings once per sleep.
        assert!(!client.needs_doorbell());
        service.set_sleeping(true);
        assert!(client.needs_doorbell());
        assert!(!client.needs_doorbell());
    }

    #[test]
    fn attach_refuses_what_is_not_a_ring() {
        // SAFETY: plain syscalls on a new descriptor.
        let fd = unsafe { libc::memfd_create(c"x".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: fd is ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: as above.
        unsafe { libc::ftruncate(fd.as_raw_fd(), 8192) };
        assert!(CopyRing::attach(fd.as_raw_fd()).is_err(), "not sealed");
        let (ring, fd) = CopyRing::create(4).unwrap();
        ring.map.u64(O_MAGIC).store(0, Ordering::Relaxed);
        assert!(CopyRing::attach(fd.as_raw_fd()).is_err(), "no magic");
        assert!(CopyRing::create(3).is_err(), "entries not a power of two");
    }

    #[test]
    fn a_descriptor_crosses_a_socket() {
        let mut sv = [0; 2];
        // SAFETY: sv is writable for two descriptors.
        assert_eq!(
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, sv.as_mut_ptr()) },
            0
        );
        let (_ring, fd) = CopyRing::create(8).unwrap();
        send_fd(sv[0], b"hello", fd.as_raw_fd()).unwrap();
        let mut buf = [0u8; 16];
        let (n, got) = recv_fd(sv[1], &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(
            CopyRing::attach(got.unwrap().as_raw_fd())
                .unwrap()
                .entries(),
            8
        );
        // SAFETY: closing our own descriptors.
        unsafe {
            libc::close(sv[0]);
            libc::close(sv[1]);
        }
    }
}
