//! The host-wide copy service (`omx_copyd`): one thread on one core copies for every
//! process of the host that connects to it (the MCNI design), so that their copies
//! leave their own cores.
//!
//! It runs beside `omxd`, not inside it: `omxd` is per network namespace (an
//! abstract socket) and needs the network, while copies are per host and need
//! neither; a separate, unprivileged process can also run as the user it serves.
//!
//! A process connects to the service's unix socket (`OMX_COPY_SERVICE`, default
//! `omx-copyd.sock` in the state directory) and hands over its rings
//! ([`omx_transport::copyring`]); the kernel tells the service who it is
//! (`SO_PEERCRED`). The service then reads requests, copies with cross-memory
//! calls (`process_vm_readv` into a bounce buffer, `process_vm_writev` out of it,
//! a chunk per turn and client in round robin) and completes them in order.
//!
//! Rules the service enforces:
//! - a client names other processes only if it could access them itself: same real,
//!   effective and saved uid and gid, and dumpable (`/proc/PID` owned by the uid),
//!   or the client is root; otherwise the request completes `REFUSED`;
//! - requests are checked when first seen (cookie in sequence, non-null, no
//!   wrap-around, no overlap within one process, at most the bound of outstanding
//!   bytes) and the checked copy is what runs, whatever the client writes later;
//!   failures complete with a status and are counted;
//! - a ring whose counters make no sense, or a client whose socket hangs up, is
//!   dropped with everything the service held for it (no file exists to remove).

pub mod client;
pub mod stack;

use omx_transport::cma::{self, CmaError, RemoteIov};
use omx_transport::copyring::{self, status, CopyRing, Request};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// First message of a client (with its ring descriptor).
pub(crate) const HELLO: &[u8] = b"OMXCOPY1";
/// Bytes copied per client per turn (fairness between clients).
const CHUNK: usize = 256 << 10;
/// Idle passes before the service announces it may sleep.
const IDLE_PASSES: u32 = 2000;

#[derive(Clone, Debug)]
pub struct ServiceConfig {
    pub socket: PathBuf,
    /// Core to run on (`OMX_COPY_CPU`); `None`: the least-loaded at start.
    pub cpu: Option<usize>,
    /// Bytes one client may have posted and not completed.
    pub max_bytes: u64,
    pub verbose: bool,
}

/// What the service did (for `omx_copyd -v` and tests).
#[derive(Default, Debug)]
pub struct Stats {
    pub clients: AtomicU64,
    pub connected: AtomicU64,
    pub copies: AtomicU64,
    pub bytes: AtomicU64,
    pub malformed: AtomicU64,
    pub refused: AtomicU64,
    pub over_limit: AtomicU64,
    pub failed: AtomicU64,
    pub dropped: AtomicU64,
}

struct Client {
    sock: OwnedFd,
    ring: CopyRing,
    pid: u32,
    uid: u32,
    gid: u32,
    /// Requests read and checked (ring positions below this).
    seen: u64,
    /// Checked requests in order, with their verdict (0: to copy) and bytes done.
    queue: VecDeque<(Request, u64)>,
    at: u64,
    outstanding: u64,
}

/// A running service: its listening socket and clients.
pub struct Service {
    cfg: ServiceConfig,
    listener: OwnedFd,
    clients: Vec<Client>,
    bounce: Vec<u8>,
    pub stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
}

impl Service {
    /// Listens at `cfg.socket` (a stale socket file left by a dead service is replaced).
    pub fn bind(cfg: ServiceConfig) -> io::Result<Service> {
        if copyring::seqpacket_connect(&cfg.socket).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "a copy service already answers there",
            ));
        }
        let _ = std::fs::remove_file(&cfg.socket);
        let listener = copyring::seqpacket_listen(&cfg.socket, 64)?;
        // Every process of the host may connect; the rules above protect them.
        let _ = std::fs::set_permissions(
            &cfg.socket,
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        );
        copyring::set_nonblocking(listener.as_raw_fd(), true)?;
        Ok(Service {
            cfg,
            listener,
            clients: Vec::new(),
            bounce: vec![0u8; CHUNK],
            stats: Arc::default(),
            stop: Arc::default(),
        })
    }

    /// Set to stop [`run`](Self::run) (checked at least every 100 ms).
    pub fn stopper(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Serves until stopped, pinned to its core.
    pub fn run(mut self) {
        let cpu = self.cfg.cpu.unwrap_or_else(least_loaded_cpu);
        crate::copy::pin_to(cpu);
        if self.cfg.verbose {
            eprintln!(
                "omx_copyd: serving on CPU {cpu} at {}",
                self.cfg.socket.display()
            );
        }
        let mut idle = 0u32;
        while !self.stop.load(Ordering::Relaxed) {
            if self.pass() {
                idle = 0;
                continue;
            }
            idle += 1;
            if idle < IDLE_PASSES {
                std::hint::spin_loop();
                continue;
            }
            idle = 0;
            self.sleep();
        }
        let _ = std::fs::remove_file(&self.cfg.socket);
    }

    /// One round: new clients, then a chunk of each client's oldest copy. Whether
    /// anything was done.
    fn pass(&mut self) -> bool {
        let mut busy = self.accept();
        let mut i = 0;
        while i < self.clients.len() {
            match self.serve(i) {
                Ok(did) => {
                    busy |= did;
                    i += 1;
                }
                Err(why) => self.drop_client(i, why),
            }
        }
        busy
    }

    /// Blocks until a client rings, connects or hangs up (or 100 ms pass).
    fn sleep(&mut self) {
        for c in &self.clients {
            c.ring.set_sleeping(true);
        }
        let pending = self
            .clients
            .iter()
            .any(|c| !c.queue.is_empty() || c.ring.requests().1 != c.seen);
        if !pending {
            let mut fds = vec![(self.listener.as_raw_fd(), libc::POLLIN)];
            fds.extend(
                self.clients
                    .iter()
                    .map(|c| (c.sock.as_raw_fd(), libc::POLLIN)),
            );
            let _ = copyring::poll_many(&fds, Some(Duration::from_millis(100)));
        }
        let mut i = 0;
        while i < self.clients.len() {
            let c = &self.clients[i];
            c.ring.set_sleeping(false);
            if drain(c.sock.as_raw_fd()) {
                i += 1;
            } else {
                self.drop_client(i, "hung up");
            }
        }
    }

    fn accept(&mut self) -> bool {
        let Ok(sock) = copyring::seqpacket_accept(self.listener.as_raw_fd()) else {
            return false;
        };
        match self.hello(sock) {
            Ok(c) => {
                if self.cfg.verbose {
                    eprintln!("omx_copyd: client pid {} uid {}", c.pid, c.uid);
                }
                self.clients.push(c);
                self.stats.connected.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .clients
                    .store(self.clients.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                if self.cfg.verbose {
                    eprintln!("omx_copyd: refused a client: {e}");
                }
            }
        }
        true
    }

    fn hello(&self, sock: OwnedFd) -> io::Result<Client> {
        let (pid, uid, gid) = copyring::peer_cred(sock.as_raw_fd())?;
        // A client that connects and says nothing must not stall every other one.
        let ev = copyring::poll_many(
            &[(sock.as_raw_fd(), libc::POLLIN)],
            Some(Duration::from_secs(1)),
        )?;
        if ev[0] & libc::POLLIN == 0 {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no hello"));
        }
        let mut buf = [0u8; 16];
        let (n, fd) = copyring::recv_fd(sock.as_raw_fd(), &mut buf)?;
        let refuse = |why: &str| {
            let _ = copyring::send_message(sock.as_raw_fd(), &[1]);
            io::Error::new(io::ErrorKind::InvalidData, why.to_string())
        };
        if &buf[..n] != HELLO {
            return Err(refuse("bad hello"));
        }
        let Some(fd) = fd else {
            return Err(refuse("no ring descriptor"));
        };
        let ring = CopyRing::attach(fd.as_raw_fd()).map_err(|e| refuse(&e.to_string()))?;
        let mut reply = [0u8; 9];
        reply[1..9].copy_from_slice(&self.cfg.max_bytes.to_le_bytes());
        copyring::send_message(sock.as_raw_fd(), &reply)?;
        copyring::set_nonblocking(sock.as_raw_fd(), true)?;
        let seen = ring.requests().0;
        Ok(Client {
            sock,
            ring,
            pid,
            uid,
            gid,
            seen,
            queue: VecDeque::new(),
            at: 0,
            outstanding: 0,
        })
    }

    fn drop_client(&mut self, i: usize, why: &str) {
        let c = self.clients.swap_remove(i);
        if self.cfg.verbose {
            eprintln!("omx_copyd: client pid {} dropped: {why}", c.pid);
        }
        if why != "hung up" {
            self.stats.malformed.fetch_add(1, Ordering::Relaxed);
        }
        self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        self.stats
            .clients
            .store(self.clients.len() as u64, Ordering::Relaxed);
    }

    /// Checks new requests of client `i` and copies a chunk of its oldest.
    fn serve(&mut self, i: usize) -> Result<bool, &'static str> {
        let max = self.cfg.max_bytes;
        let c = &mut self.clients[i];
        let (head, tail) = c.ring.requests();
        let entries = u64::from(c.ring.entries());
        if tail < c.seen || tail - head > entries {
            return Err("request ring counters make no sense");
        }
        let mut busy = false;
        while c.seen < tail {
            let r = c.ring.request(c.seen);
            let verdict = check(&r, c.seen + 1, c.outstanding, max);
            match verdict {
                0 => c.outstanding += r.len,
                status::OVER_LIMIT => {
                    self.stats.over_limit.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                }
            }
            c.queue.push_back((r, verdict));
            c.seen += 1;
            busy = true;
        }
        let Some(&(r, verdict)) = c.queue.front() else {
            return Ok(busy);
        };
        match c.ring.completion_room() {
            None => return Err("completion ring counters make no sense"),
            Some(0) => return Ok(busy),
            Some(_) => {}
        }
        let mut st = verdict;
        if st == 0 {
            let who = |p: u32| if p == 0 { c.pid } else { p };
            let (src_pid, dst_pid) = (who(r.src_pid), who(r.dst_pid));
            st = may_access(c.pid, c.uid, c.gid, src_pid)
                .and_then(|()| may_access(c.pid, c.uid, c.gid, dst_pid))
                .map_or_else(|e| e, |()| 0);
            if st == 0 {
                let n = (r.len - c.at).min(CHUNK as u64) as usize;
                st = copy_chunk(
                    &mut self.bounce[..n],
                    src_pid,
                    r.src + c.at,
                    dst_pid,
                    r.dst + c.at,
                );
                if st == 0 {
                    c.at += n as u64;
                    self.stats.bytes.fetch_add(n as u64, Ordering::Relaxed);
                    if c.at < r.len {
                        return Ok(true);
                    }
                    st = status::DONE;
                }
            }
            c.outstanding -= r.len;
        }
        match st {
            status::DONE => self.stats.copies.fetch_add(1, Ordering::Relaxed),
            status::REFUSED => self.stats.refused.fetch_add(1, Ordering::Relaxed),
            status::GONE | status::FAULT => self.stats.failed.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        c.ring.complete(r.cookie, st);
        c.queue.pop_front();
        c.at = 0;
        Ok(true)
    }
}

/// The verdict on a new request: 0 (to copy) or the status it completes with.
fn check(r: &Request, cookie: u64, outstanding: u64, max: u64) -> u64 {
    let ends = (r.src.checked_add(r.len), r.dst.checked_add(r.len));
    let overlap = r.src_pid == r.dst_pid
        && matches!(ends, (Some(se), Some(de)) if r.src < de && r.dst < se && r.len > 0);
    if r.cookie != cookie
        || ends.0.is_none()
        || ends.1.is_none()
        || (r.len > 0 && (r.src == 0 || r.dst == 0))
        || overlap
        || r.len > max
    {
        return status::MALFORMED;
    }
    if outstanding + r.len > max {
        return status::OVER_LIMIT;
    }
    0
}

/// Whether a client (`pid`, `uid`, `gid`) may access process `target` under the
/// same-user ptrace rule; the status to complete with when not.
fn may_access(pid: u32, uid: u32, gid: u32, target: u32) -> Result<(), u64> {
    if target == pid || uid == 0 {
        return Ok(());
    }
    let dir = PathBuf::from(format!("/proc/{target}"));
    let Ok(meta) = std::fs::metadata(&dir) else {
        return Err(status::GONE);
    };
    let Ok(text) = std::fs::read_to_string(dir.join("status")) else {
        return Err(status::GONE);
    };
    let all_are = |key: &str, want: u32| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .is_some_and(|ids| {
                let v: Vec<&str> = ids.split_whitespace().collect();
                !v.is_empty() && v.iter().all(|x| x.parse() == Ok(want))
            })
    };
    // A process that is not dumpable has its /proc directory owned by root.
    if meta.uid() == uid && all_are("Uid:", uid) && all_are("Gid:", gid) {
        Ok(())
    } else {
        Err(status::REFUSED)
    }
}

/// Copies `buf.len()` bytes from `src` in `src_pid` to `dst` in `dst_pid` through
/// `buf`; 0 or the failure status.
fn copy_chunk(buf: &mut [u8], src_pid: u32, src: u64, dst_pid: u32, dst: u64) -> u64 {
    let n = buf.len();
    let code = |e: CmaError| match e {
        CmaError::PermissionDenied => status::REFUSED,
        CmaError::ProcessGone => status::GONE,
        _ => status::FAULT,
    };
    let remote = |addr| {
        [RemoteIov {
            addr,
            len: n as u64,
        }]
    };
    // SAFETY: `buf` is ours; the remote ranges are checked by the kernel.
    if let Err(e) =
        unsafe { cma::read_from(src_pid, &remote(src), 0, &[(buf.as_mut_ptr(), n)], 0, n) }
    {
        return code(e);
    }
    // SAFETY: as above.
    if let Err(e) = unsafe { cma::write_to(dst_pid, &remote(dst), 0, &[(buf.as_ptr(), n)], 0, n) } {
        return code(e);
    }
    0
}

/// Reads a socket empty; `false` when the peer hung up.
fn drain(fd: i32) -> bool {
    let mut b = [0u8; 64];
    loop {
        // SAFETY: `b` is writable for its length.
        let r = unsafe { libc::recv(fd, b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT) };
        if r == 0 {
            return false;
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            return matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            );
        }
    }
}

/// The CPU with the most idle time over a short sample of `/proc/stat`.
pub fn least_loaded_cpu() -> usize {
    let sample = || -> Vec<(usize, u64)> {
        std::fs::read_to_string("/proc/stat")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let cpu = f.next()?.strip_prefix("cpu")?.parse().ok()?;
                let idle = f.nth(3)?.parse().ok()?;
                Some((cpu, idle))
            })
            .collect()
    };
    let a = sample();
    std::thread::sleep(Duration::from_millis(100));
    let b = sample();
    b.iter()
        .filter_map(|&(cpu, idle)| {
            let before = a.iter().find(|x| x.0 == cpu)?.1;
            Some((idle.saturating_sub(before), cpu))
        })
        .max()
        .map_or(0, |(_, cpu)| cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(cookie: u64, dst: u64, src: u64, len: u64) -> Request {
        Request {
            cookie,
            dst_pid: 0,
            src_pid: 0,
            dst,
            src,
            len,
        }
    }

    #[test]
    fn malformed_requests_are_recognised() {
        assert_eq!(check(&req(1, 4096, 8192, 100), 1, 0, 1 << 20), 0);
        assert_eq!(
            check(&req(2, 4096, 8192, 100), 1, 0, 1 << 20),
            status::MALFORMED
        );
        assert_eq!(
            check(&req(1, 0, 8192, 100), 1, 0, 1 << 20),
            status::MALFORMED
        );
        assert_eq!(check(&req(1, 0, 0, 0), 1, 0, 1 << 20), 0, "empty copy");
        assert_eq!(
            check(&req(1, u64::MAX, 8192, 2), 1, 0, 1 << 20),
            status::MALFORMED
        );
        assert_eq!(
            check(&req(1, 4096, 4100, 100), 1, 0, 1 << 20),
            status::MALFORMED
        );
        assert_eq!(
            check(&req(1, 4096, 8192, 2 << 20), 1, 0, 1 << 20),
            status::MALFORMED
        );
        assert_eq!(
            check(&req(1, 4096, 8 << 20, 600 << 10), 1, 600 << 10, 1 << 20),
            status::OVER_LIMIT
        );
        let mut between = req(1, 4096, 4100, 100);
        between.src_pid = 42;
        assert_eq!(
            check(&between, 1, 0, 1 << 20),
            0,
            "other process: no overlap"
        );
    }

    #[test]
    fn access_follows_the_same_user_rule() {
        let me = std::process::id();
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        assert_eq!(may_access(me, uid, gid, me), Ok(()));
        // pid 1 runs as root: only root may name it.
        if uid != 0 {
            assert_eq!(may_access(me, uid, gid, 1), Err(status::REFUSED));
        }
        assert_eq!(may_access(me, 12345, 12345, 1), Err(status::REFUSED));
        assert_eq!(may_access(me, 0, 0, 1), Ok(()));
        assert_eq!(
            may_access(me, 12345, 12345, u32::MAX / 2),
            Err(status::GONE)
        );
    }
}
