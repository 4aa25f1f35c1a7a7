//! A process's side of the copy service: its rings, cookies and failures.

use crate::memcpy::MemcpyError;
use omx_transport::copyring::{self, status, CopyRing, Request};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where the service listens: `OMX_COPY_SERVICE` (a path; `0` or `off`: do not use
/// a service), by default `omx-copyd.sock` in the state directory.
pub fn socket_path() -> Option<PathBuf> {
    match crate::config::settings::text("OMX_COPY_SERVICE")
        .as_deref()
        .map(str::trim)
    {
        Some("0") | Some("off") => None,
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => Some(crate::config::state_dir().join("omx-copyd.sock")),
    }
}

pub struct ServiceClient {
    inner: Mutex<Inner>,
}

struct Inner {
    sock: OwnedFd,
    ring: CopyRing,
    /// Requests completed (cookies up to this are done).
    completed: u64,
    /// Cookies whose request failed, with the status.
    failed: BTreeSet<u64>,
    /// Copies split into several requests: last cookie -> first cookie.
    split: BTreeMap<u64, u64>,
    /// Bytes of requests posted and not completed, oldest first.
    lens: std::collections::VecDeque<u64>,
    outstanding: u64,
    max_bytes: u64,
    /// The service went away: copies not reported failed, later ones run inline.
    dead: bool,
    /// Copies run inline after the service went away (cookies go on from the ring's).
    inline: u64,
    /// Calls without progress since the service's socket was last checked.
    idle: u32,
}

impl ServiceClient {
    /// Connects to the service at the default place, if one answers.
    pub fn connect_default() -> Option<ServiceClient> {
        ServiceClient::connect(&socket_path()?).ok()
    }

    pub fn connect(path: &Path) -> io::Result<ServiceClient> {
        let sock = copyring::seqpacket_connect(path)?;
        let (ring, fd) = CopyRing::create(copyring::DEFAULT_ENTRIES)?;
        copyring::send_fd(sock.as_raw_fd(), super::HELLO, fd.as_raw_fd())?;
        let mut reply = [0u8; 16];
        let (n, _) = copyring::recv_fd(sock.as_raw_fd(), &mut reply)?;
        if n != 9 || reply[0] != 0 {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "the copy service refused this process",
            ));
        }
        let max_bytes = u64::from_le_bytes(reply[1..9].try_into().expect("8 bytes"));
        Ok(ServiceClient {
            inner: Mutex::new(Inner {
                sock,
                ring,
                completed: 0,
                failed: BTreeSet::new(),
                split: BTreeMap::new(),
                lens: Default::default(),
                outstanding: 0,
                max_bytes: max_bytes.max(1),
                dead: false,
                inline: 0,
                idle: 0,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy within this process.
    pub fn post(&self, dst: usize, src: usize, len: usize) -> Result<u64, MemcpyError> {
        self.post_between(0, dst as u64, 0, src as u64, len as u64)
    }

    /// A copy from `src` in process `src_pid` to `dst` in `dst_pid` (0: this one).
    /// Copies longer than half the service's bound go as several requests.
    pub fn post_between(
        &self,
        dst_pid: u32,
        dst: u64,
        src_pid: u32,
        src: u64,
        len: u64,
    ) -> Result<u64, MemcpyError> {
        let mut g = self.lock();
        if g.dead {
            return g.copy_inline(dst_pid, dst, src_pid, src, len);
        }
        let piece = (g.max_bytes / 2).max(1);
        let first = g.ring.posted() + 1;
        let mut off = 0;
        loop {
            let n = (len - off).min(piece);
            let cookie = g.ring.posted() + 1;
            if !g.post_one(Request {
                cookie,
                dst_pid,
                src_pid,
                dst: dst + off,
                src: src + off,
                len: n,
            }) {
                // The service died while we waited for room.
                return g.copy_inline(dst_pid, dst + off, src_pid, src + off, len - off);
            }
            off += n;
            if off >= len {
                break;
            }
        }
        let last = g.ring.posted();
        if last != first {
            g.split.insert(last, first);
        }
        Ok(last)
    }

    /// Whether `cookie` is done (`Err(Fault)` when the service could not copy it).
    pub fn test(&self, cookie: u64) -> Result<bool, MemcpyError> {
        let mut g = self.lock();
        if cookie == 0 || cookie > g.posted() {
            return Err(MemcpyError::UnknownCookie);
        }
        g.reap();
        if g.completed < cookie {
            g.idle += 1;
            if g.idle.is_multiple_of(1024) {
                g.check_alive();
            }
            if g.completed < cookie {
                return Ok(false);
            }
        }
        let first = g.split.get(&cookie).copied().unwrap_or(cookie);
        if g.failed.range(first..=cookie).next().is_some() {
            return Err(MemcpyError::Fault);
        }
        Ok(true)
    }
}

/// Where a posted range of requests stands ([`ServiceClient::range_status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeStatus {
    Pending,
    Done,
    /// At least one request failed (or the service died before reporting it).
    Failed,
}

impl ServiceClient {
    /// Posts every request of `pieces` (dst_pid, dst, src_pid, src, len), or none:
    /// `None` when the rings or the bound of outstanding bytes have no room for all
    /// of them now, or the service is gone. Never waits (the stack copies inline
    /// then). Gives the first and last cookie.
    pub fn try_post_all(&self, pieces: &[(u32, u64, u32, u64, u64)]) -> Option<(u64, u64)> {
        let mut g = self.lock();
        if g.dead || pieces.is_empty() {
            return None;
        }
        g.reap();
        let bytes: u64 = pieces.iter().map(|p| p.4).sum();
        let room = u64::from(g.ring.entries()) - g.ring.unreaped();
        let fits = g.outstanding == 0 || g.outstanding + bytes <= g.max_bytes;
        if room < pieces.len() as u64 || !fits || bytes > g.max_bytes {
            return None;
        }
        let first = g.ring.posted() + 1;
        for &(dst_pid, dst, src_pid, src, len) in pieces {
            let r = Request {
                cookie: g.ring.posted() + 1,
                dst_pid,
                src_pid,
                dst,
                src,
                len,
            };
            let posted = g.ring.try_post(&r);
            debug_assert!(posted, "room checked above");
            g.lens.push_back(len);
            g.outstanding += len;
        }
        g.ring_doorbell();
        Some((first, g.ring.posted()))
    }

    /// Whether the requests `first..=last` completed, and how. `check_alive`: also
    /// look whether the service hung up (a system call; then everything it did not
    /// report is failed).
    pub fn range_status(&self, first: u64, last: u64, check_alive: bool) -> RangeStatus {
        let mut g = self.lock();
        g.reap();
        if g.completed < last && check_alive {
            g.check_alive();
        }
        if g.completed < last {
            return RangeStatus::Pending;
        }
        let failed = g.failed.range(first..=last).next().is_some();
        // Failures before this range are never asked for again.
        g.failed = g.failed.split_off(&(last + 1));
        if failed {
            RangeStatus::Failed
        } else {
            RangeStatus::Done
        }
    }

    /// Whether the service went away (found by a post or a check).
    pub fn is_dead(&self) -> bool {
        self.lock().dead
    }
}

impl Inner {
    fn posted(&self) -> u64 {
        self.ring.posted() + self.inline
    }

    /// Once the service's socket hung up: copies not reported are lost (failed), and
    /// every later copy is made inline, so nothing waits forever.
    fn check_alive(&mut self) {
        let gone = match copyring::poll_many(
            &[(self.sock.as_raw_fd(), libc::POLLIN)],
            Some(std::time::Duration::ZERO),
        ) {
            Ok(ev) => ev[0] & (libc::POLLHUP | libc::POLLERR) != 0,
            Err(_) => true,
        };
        if !gone {
            return;
        }
        self.reap();
        let posted = self.ring.posted();
        for c in self.completed + 1..=posted {
            self.failed.insert(c);
        }
        self.completed = posted;
        self.outstanding = 0;
        self.lens.clear();
        self.dead = true;
    }

    fn copy_inline(
        &mut self,
        dst_pid: u32,
        dst: u64,
        src_pid: u32,
        src: u64,
        len: u64,
    ) -> Result<u64, MemcpyError> {
        if dst_pid != 0 || src_pid != 0 {
            return Err(MemcpyError::NoEngine);
        }
        // SAFETY: the caller checked the ranges (non-null, no overlap) and keeps them
        // valid, as for a copy on the service.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src as usize as *const u8,
                dst as usize as *mut u8,
                len as usize,
            )
        };
        self.inline += 1;
        self.completed = self.posted();
        Ok(self.completed)
    }

    fn reap(&mut self) {
        while let Some((cookie, st)) = self.ring.reap() {
            self.completed = cookie;
            self.outstanding -= self.lens.pop_front().unwrap_or(0).min(self.outstanding);
            if st != status::DONE {
                self.failed.insert(cookie);
            }
        }
        // Split records of completed copies are kept while a failure may refer to them.
        if self.failed.is_empty() {
            let done = self.completed;
            self.split.retain(|&last, _| last > done);
        }
    }

    /// Posts one request, waiting while the rings are full or the bound of
    /// outstanding bytes would be passed; `false` if the service died meanwhile.
    fn post_one(&mut self, r: Request) -> bool {
        let mut waits = 0u32;
        loop {
            self.reap();
            let fits = self.outstanding == 0 || self.outstanding + r.len <= self.max_bytes;
            if fits && self.ring.try_post(&r) {
                break;
            }
            self.ring_doorbell();
            waits += 1;
            if waits.is_multiple_of(1024) {
                self.check_alive();
                if self.dead {
                    return false;
                }
            }
            std::thread::yield_now();
        }
        self.lens.push_back(r.len);
        self.outstanding += r.len;
        self.ring_doorbell();
        true
    }

    fn ring_doorbell(&self) {
        if self.ring.needs_doorbell() {
            // SAFETY: one byte from a live buffer; a dead service only makes it fail.
            unsafe {
                libc::send(
                    self.sock.as_raw_fd(),
                    [1u8].as_ptr().cast(),
                    1,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
        }
    }
}
