//! One-copy transfers between address spaces of the same host ("cross-memory
//! attach"): `process_vm_readv` / `process_vm_writev`.
//!
//! A large message between two processes of the host moves with one copy: the
//! receiver reads the sender's buffer straight into its own. The kernel allows
//! it when the caller may ptrace the target (same user and, with Yama,
//! `ptrace_scope` 0, or `CAP_SYS_PTRACE`); otherwise [`CmaError::PermissionDenied`]
//! tells the caller to fall back to copying through the shared-memory ring.
//! [`probe`] answers that question up front.
//!
//! When the target is the calling process itself, the data is copied with
//! `memmove` over the segments, without a system call.

#![deny(unsafe_op_in_unsafe_fn)]

use std::fmt;
use std::io;

/// Most iovecs per system call (`UIO_MAXIOV`).
pub const IOV_MAX: usize = 1024;
/// Most bytes per system call (keeps the `ssize_t` result far from overflow).
const MAX_CALL_BYTES: usize = 1 << 30;

/// One segment of the other process's memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteIov {
    pub addr: u64,
    pub len: u64,
}

/// Why a transfer failed.
#[derive(Debug)]
pub enum CmaError {
    /// `EPERM`: not allowed to access the other process (other user, Yama
    /// ptrace scope, ...): fall back to another copy path.
    PermissionDenied,
    /// `ESRCH`: the process does not exist (any more).
    ProcessGone,
    /// `EFAULT`: a remote segment is not mapped (or not accessible in the
    /// requested direction), or a segment's address range overflows.
    BadAddress,
    /// `offset + len` goes beyond the total length of the remote or local list.
    OutOfRange,
    /// Any other error.
    Io(io::Error),
}

impl fmt::Display for CmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmaError::PermissionDenied => f.write_str("cross-memory access not permitted"),
            CmaError::ProcessGone => f.write_str("process does not exist"),
            CmaError::BadAddress => f.write_str("bad address in the remote process"),
            CmaError::OutOfRange => f.write_str("range beyond the segment lists"),
            CmaError::Io(e) => write!(f, "cross-memory transfer: {e}"),
        }
    }
}

impl std::error::Error for CmaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CmaError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<CmaError> for io::Error {
    fn from(e: CmaError) -> io::Error {
        match e {
            CmaError::PermissionDenied => io::Error::from_raw_os_error(libc::EPERM),
            CmaError::ProcessGone => io::Error::from_raw_os_error(libc::ESRCH),
            CmaError::BadAddress => io::Error::from_raw_os_error(libc::EFAULT),
            CmaError::OutOfRange => io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
            CmaError::Io(e) => e,
        }
    }
}

fn map_errno(e: io::Error) -> CmaError {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => CmaError::PermissionDenied,
        Some(libc::ESRCH) => CmaError::ProcessGone,
        Some(libc::EFAULT) => CmaError::BadAddress,
        _ => CmaError::Io(e),
    }
}

/// Position in a list of `(address, length)` segments.
#[derive(Clone, Copy)]
struct Cursor<'a> {
    segs: &'a [(usize, usize)],
    idx: usize,
    off: usize,
}

impl<'a> Cursor<'a> {
    fn new(segs: &'a [(usize, usize)]) -> Self {
        Cursor {
            segs,
            idx: 0,
            off: 0,
        }
    }

    /// Address and bytes left of the current segment (skipping empty ones).
    fn peek(&mut self) -> Option<(usize, usize)> {
        while let Some(&(addr, len)) = self.segs.get(self.idx) {
            if self.off < len {
                return Some((addr + self.off, len - self.off));
            }
            self.idx += 1;
            self.off = 0;
        }
        None
    }

    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some((_, left)) = self.peek() else { return };
            let step = left.min(n);
            self.off += step;
            n -= step;
        }
    }
}

/// Converts segment lists to `(usize, usize)` after checking that no segment's
/// address range overflows and that `offset + len` fits into the total.
fn check_list<T>(
    segs: &[T],
    get: impl Fn(&T) -> (u64, u64),
    offset: u64,
    len: usize,
) -> Result<(), CmaError> {
    let mut total: u64 = 0;
    for s in segs {
        let (addr, l) = get(s);
        if addr.checked_add(l).is_none() || usize::try_from(addr.saturating_add(l)).is_err() {
            return Err(CmaError::BadAddress);
        }
        total = total.saturating_add(l);
    }
    match offset.checked_add(len as u64) {
        Some(end) if end <= total => Ok(()),
        _ => Err(CmaError::OutOfRange),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Read,
    Write,
}

/// Copies `len` bytes from the remote process `pid`'s segment list (starting
/// `offset` bytes into it) into the local segment list (starting
/// `local_offset` bytes into it), with `process_vm_readv`: at most
/// [`IOV_MAX`] iovecs per side and call, looping on partial transfers. When
/// `pid` is the calling process, a plain `memmove` per piece.
///
/// # Safety
/// Every local segment must be valid for writes of its length and not be
/// accessed by anything else during the call. When `pid` is the calling
/// process, every remote segment must in addition be valid for reads of its
/// length (it is dereferenced directly; with another process the kernel checks
/// it and a bad address is [`CmaError::BadAddress`]).
pub unsafe fn read_from(
    pid: u32,
    remote: &[RemoteIov],
    offset: u64,
    local: &[(*mut u8, usize)],
    local_offset: u64,
    len: usize,
) -> Result<(), CmaError> {
    // SAFETY: forwarded from the caller (see above).
    unsafe {
        transfer(
            pid,
            remote,
            offset,
            local.iter().map(|&(p, l)| (p as usize, l)),
            local.len(),
            local_offset,
            len,
            Dir::Read,
            pid == std::process::id(),
        )
    }
}

/// The reverse of [`read_from`]: copies `len` bytes from the local segment
/// list (from `local_offset`) into the remote process's list (from `offset`)
/// with `process_vm_writev`.
///
/// # Safety
/// Every local segment must be valid for reads of its length. When `pid` is
/// the calling process, every remote segment must be valid for writes of its
/// length and not be accessed by anything else during the call.
pub unsafe fn write_to(
    pid: u32,
    remote: &[RemoteIov],
    offset: u64,
    local: &[(*const u8, usize)],
    local_offset: u64,
    len: usize,
) -> Result<(), CmaError> {
    // SAFETY: forwarded from the caller (see above).
    unsafe {
        transfer(
            pid,
            remote,
            offset,
            local.iter().map(|&(p, l)| (p as usize, l)),
            local.len(),
            local_offset,
            len,
            Dir::Write,
            pid == std::process::id(),
        )
    }
}

/// Whether `process_vm_readv` to `pid` is permitted: a one-byte read of
/// address 0, which passes the permission check and then fails with `EFAULT`
/// (allowed) or fails it with `EPERM` (denied) or `ESRCH` (no such process).
pub fn probe(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    let mut byte = 0u8;
    let local = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 1,
    };
    // SAFETY: the local iovec points at `byte`, one writable byte that lives
    // across the call; the remote one is only interpreted in the other process.
    let r = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    r >= 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT)
}

#[allow(clippy::too_many_arguments)]
unsafe fn transfer(
    pid: u32,
    remote: &[RemoteIov],
    offset: u64,
    local: impl Iterator<Item = (usize, usize)>,
    local_count: usize,
    local_offset: u64,
    len: usize,
    dir: Dir,
    same_process: bool,
) -> Result<(), CmaError> {
    // Small lists (the common case) stay on the stack.
    let mut rbuf = [(0usize, 0usize); 16];
    let mut lbuf = [(0usize, 0usize); 16];
    let rvec: Vec<(usize, usize)>;
    let lvec: Vec<(usize, usize)>;
    check_list(remote, |r| (r.addr, r.len), offset, len)?;
    let rsegs: &[(usize, usize)] = if remote.len() <= rbuf.len() {
        for (d, r) in rbuf.iter_mut().zip(remote) {
            *d = (r.addr as usize, r.len as usize);
        }
        &rbuf[..remote.len()]
    } else {
        rvec = remote
            .iter()
            .map(|r| (r.addr as usize, r.len as usize))
            .collect();
        &rvec
    };
    let lsegs: &[(usize, usize)] = if local_count <= lbuf.len() {
        let mut n = 0;
        for (d, l) in lbuf.iter_mut().zip(local) {
            *d = l;
            n += 1;
        }
        &lbuf[..n]
    } else {
        lvec = local.collect();
        &lvec
    };
    check_list(lsegs, |&(a, l)| (a as u64, l as u64), local_offset, len)?;
    if len == 0 {
        return Ok(());
    }
    let mut rc = Cursor::new(rsegs);
    rc.advance(offset as usize);
    let mut lc = Cursor::new(lsegs);
    lc.advance(local_offset as usize);
    if same_process {
        // SAFETY: the segments are valid per the caller's contract.
        unsafe { copy_local(rc, lc, len, dir) };
        Ok(())
    } else {
        vm_rw(pid, rc, lc, len, dir)
    }
}

/// Same address space: copies piece by piece where both lists are contiguous.
unsafe fn copy_local(mut rc: Cursor<'_>, mut lc: Cursor<'_>, mut len: usize, dir: Dir) {
    while len > 0 {
        let (Some((ra, rl)), Some((la, ll))) = (rc.peek(), lc.peek()) else {
            return;
        };
        let n = rl.min(ll).min(len);
        let (src, dst) = match dir {
            Dir::Read => (ra, la),
            Dir::Write => (la, ra),
        };
        // SAFETY: the caller guarantees both segments are valid for `n` bytes
        // in the needed direction; `copy` tolerates overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
        rc.advance(n);
        lc.advance(n);
        len -= n;
    }
}

/// Another process: batches of at most `IOV_MAX` iovecs per side.
fn vm_rw(
    pid: u32,
    mut rc: Cursor<'_>,
    mut lc: Cursor<'_>,
    mut len: usize,
    dir: Dir,
) -> Result<(), CmaError> {
    if pid == 0 || pid > i32::MAX as u32 {
        return Err(CmaError::ProcessGone);
    }
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut riov = [empty; IOV_MAX];
    let mut liov = [empty; IOV_MAX];
    while len > 0 {
        let (r0, l0) = (rc, lc);
        let want = len.min(MAX_CALL_BYTES);
        let (mut nr, mut nl, mut total) = (0usize, 0usize, 0usize);
        while total < want {
            let (Some((ra, rl)), Some((la, ll))) = (rc.peek(), lc.peek()) else {
                break;
            };
            let n = rl.min(ll).min(want - total);
            let r_ext = nr > 0 && riov[nr - 1].iov_base as usize + riov[nr - 1].iov_len == ra;
            let l_ext = nl > 0 && liov[nl - 1].iov_base as usize + liov[nl - 1].iov_len == la;
            if (!r_ext && nr == IOV_MAX) || (!l_ext && nl == IOV_MAX) {
                break;
            }
            if r_ext {
                riov[nr - 1].iov_len += n;
            } else {
                riov[nr] = libc::iovec {
                    iov_base: ra as *mut libc::c_void,
                    iov_len: n,
                };
                nr += 1;
            }
            if l_ext {
                liov[nl - 1].iov_len += n;
            } else {
                liov[nl] = libc::iovec {
                    iov_base: la as *mut libc::c_void,
                    iov_len: n,
                };
                nl += 1;
            }
            rc.advance(n);
            lc.advance(n);
            total += n;
        }
        if total == 0 {
            // Cannot happen after check_list; never loop forever.
            return Err(CmaError::OutOfRange);
        }
        // SAFETY: `liov[..nl]` and `riov[..nr]` are initialized iovecs living
        // across the call; the local ones describe memory the caller vouched
        // for (see `read_from`/`write_to`), the remote ones are checked by the
        // kernel in the other address space.
        let r = unsafe {
            match dir {
                Dir::Read => libc::process_vm_readv(
                    pid as libc::pid_t,
                    liov.as_ptr(),
                    nl as libc::c_ulong,
                    riov.as_ptr(),
                    nr as libc::c_ulong,
                    0,
                ),
                Dir::Write => libc::process_vm_writev(
                    pid as libc::pid_t,
                    liov.as_ptr(),
                    nl as libc::c_ulong,
                    riov.as_ptr(),
                    nr as libc::c_ulong,
                    0,
                ),
            }
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                (rc, lc) = (r0, l0);
                continue;
            }
            return Err(map_errno(e));
        }
        let done = r as usize;
        if done == 0 {
            // No progress (a remote page vanished between calls): an error.
            return Err(CmaError::BadAddress);
        }
        if done < total {
            // Partial transfer (stops at an iovec boundary): resume after it.
            (rc, lc) = (r0, l0);
            rc.advance(done);
            lc.advance(done);
        }
        len -= done;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(seed: u8, n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| seed.wrapping_add((i * 7 + i / 251) as u8))
            .collect()
    }

    fn remote_of(bufs: &[Vec<u8>]) -> Vec<RemoteIov> {
        bufs.iter()
            .map(|b| RemoteIov {
                addr: b.as_ptr() as u64,
                len: b.len() as u64,
            })
            .collect()
    }

    fn local_of(bufs: &mut [Vec<u8>]) -> Vec<(*mut u8, usize)> {
        bufs.iter_mut().map(|b| (b.as_mut_ptr(), b.len())).collect()
    }

    /// What the local buffers must hold after copying `len` bytes from
    /// `src[offset..]` to `dst[local_offset..]` (flattened lists).
    fn expected(
        src: &[Vec<u8>],
        dst: &[Vec<u8>],
        offset: usize,
        local_offset: usize,
        len: usize,
    ) -> Vec<u8> {
        let flat_src: Vec<u8> = src.concat();
        let mut flat_dst: Vec<u8> = dst.concat();
        flat_dst[local_offset..local_offset + len].copy_from_slice(&flat_src[offset..offset + len]);
        flat_dst
    }

    fn fork_sleeper() -> libc::pid_t {
        // SAFETY: the child only calls `pause` until it is killed.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            loop {
                // SAFETY: async-signal-safe; waits for SIGKILL.
                unsafe { libc::pause() };
            }
        }
        pid
    }

    fn kill_and_reap(pid: libc::pid_t) {
        // SAFETY: our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        }
    }

    const SRC_SIZES: [usize; 4] = [1000, 1, 0, 4097];
    const DST_SIZES: [usize; 5] = [10, 3000, 0, 7, 2100];

    fn cases() -> Vec<(usize, usize, usize)> {
        let total = SRC_SIZES.iter().sum::<usize>();
        vec![
            (0, 0, total),
            (999, 5, 1500),
            (1001, 12, 4097),
            (5, 3100, 1),
            (0, 17, 0),
            (3, 2, total - 3),
        ]
    }

    #[test]
    fn own_process_multi_segment_with_offsets() {
        let src: Vec<Vec<u8>> = SRC_SIZES
            .iter()
            .enumerate()
            .map(|(i, &n)| pattern(i as u8 * 50, n))
            .collect();
        for (offset, local_offset, len) in cases() {
            for syscall in [false, true] {
                let mut dst: Vec<Vec<u8>> = DST_SIZES.iter().map(|&n| vec![0xAA; n]).collect();
                let want = expected(&src, &dst, offset, local_offset, len);
                let local = local_of(&mut dst);
                let local: Vec<(usize, usize)> =
                    local.iter().map(|&(p, l)| (p as usize, l)).collect();
                // SAFETY: `src` and `dst` buffers are live and exclusively ours.
                unsafe {
                    transfer(
                        std::process::id(),
                        &remote_of(&src),
                        offset as u64,
                        local.iter().copied(),
                        local.len(),
                        local_offset as u64,
                        len,
                        Dir::Read,
                        !syscall,
                    )
                }
                .unwrap();
                assert_eq!(
                    dst.concat(),
                    want,
                    "{offset} {local_offset} {len} {syscall}"
                );
            }
        }
    }

    #[test]
    fn more_segments_than_iov_max() {
        // 3000 remote pieces of 5 bytes, 8 bytes apart (never merged), into
        // 2500 local pieces of 6 bytes, 9 bytes apart.
        let src = pattern(3, 3000 * 8);
        let remote: Vec<RemoteIov> = (0..3000)
            .map(|i| RemoteIov {
                addr: src.as_ptr() as u64 + i * 8,
                len: 5,
            })
            .collect();
        let want: Vec<u8> = (0..3000)
            .flat_map(|i| &src[i * 8..i * 8 + 5])
            .copied()
            .collect();
        for syscall in [false, true] {
            let mut dst = vec![0u8; 2500 * 9];
            let base = dst.as_mut_ptr() as usize;
            let local: Vec<(usize, usize)> = (0..2500).map(|i| (base + i * 9, 6)).collect();
            // SAFETY: every piece lies inside `src` / `dst`.
            unsafe {
                transfer(
                    std::process::id(),
                    &remote,
                    0,
                    local.iter().copied(),
                    local.len(),
                    0,
                    15_000,
                    Dir::Read,
                    !syscall,
                )
            }
            .unwrap();
            let got: Vec<u8> = (0..2500)
                .flat_map(|i| &dst[i * 9..i * 9 + 6])
                .copied()
                .collect();
            assert_eq!(got, want);
            assert!((0..2500).all(|i| dst[i * 9 + 6..i * 9 + 9] == [0, 0, 0]));
        }
    }

    #[test]
    fn out_of_range_and_bad_addresses() {
        let src = pattern(1, 100);
        let mut dst = vec![0u8; 100];
        let remote = [RemoteIov {
            addr: src.as_ptr() as u64,
            len: 100,
        }];
        let local = [(dst.as_mut_ptr(), 100)];
        let me = std::process::id();
        // SAFETY: all ranges that are accessed lie inside `src` / `dst`.
        unsafe {
            assert!(matches!(
                read_from(me, &remote, 1, &local, 0, 100),
                Err(CmaError::OutOfRange)
            ));
            assert!(matches!(
                read_from(me, &remote, 0, &local, 50, 51),
                Err(CmaError::OutOfRange)
            ));
            let wrap = [RemoteIov {
                addr: u64::MAX - 5,
                len: 10,
            }];
            assert!(matches!(
                read_from(me, &wrap, 0, &local, 0, 1),
                Err(CmaError::BadAddress)
            ));
            read_from(me, &remote, 0, &local, 0, 0).unwrap();
        }
        assert!(probe(me));
    }

    #[test]
    fn forked_child_read_write_and_gone() {
        let src: Vec<Vec<u8>> = SRC_SIZES
            .iter()
            .enumerate()
            .map(|(i, &n)| pattern(i as u8 * 13 + 1, n))
            .collect();
        let original = src.clone();
        let mut src = src;
        let child = fork_sleeper();
        // The child keeps the original bytes at the same addresses; change ours.
        for b in &mut src {
            b.fill(0);
        }
        let remote = remote_of(&src);
        assert!(probe(child as u32));
        for (offset, local_offset, len) in cases() {
            let mut dst: Vec<Vec<u8>> = DST_SIZES.iter().map(|&n| vec![0x55; n]).collect();
            let want = expected(&original, &dst, offset, local_offset, len);
            let local = local_of(&mut dst);
            // SAFETY: `dst` buffers are live and exclusively ours.
            unsafe {
                read_from(
                    child as u32,
                    &remote,
                    offset as u64,
                    &local,
                    local_offset as u64,
                    len,
                )
            }
            .unwrap();
            assert_eq!(dst.concat(), want, "{offset} {local_offset} {len}");
        }
        // Write into the child, read it back.
        let data = pattern(200, 3000);
        let local = [(data.as_ptr(), 1000), (data[1000..].as_ptr(), 2000)];
        // SAFETY: `data` is live; the remote side is another process.
        unsafe { write_to(child as u32, &remote, 500, &local, 0, 3000) }.unwrap();
        let mut back = vec![0u8; 3000];
        // SAFETY: `back` is live and ours.
        unsafe {
            read_from(
                child as u32,
                &remote,
                500,
                &[(back.as_mut_ptr(), 3000)],
                0,
                3000,
            )
        }
        .unwrap();
        assert_eq!(back, data);
        // An unmapped remote address.
        let bad = [RemoteIov { addr: 16, len: 8 }];
        // SAFETY: as above.
        let r = unsafe { read_from(child as u32, &bad, 0, &[(back.as_mut_ptr(), 8)], 0, 8) };
        assert!(matches!(r, Err(CmaError::BadAddress)), "{r:?}");

        kill_and_reap(child);
        assert!(!probe(child as u32));
        // SAFETY: as above.
        let r = unsafe { read_from(child as u32, &remote, 0, &[(back.as_mut_ptr(), 8)], 0, 8) };
        assert!(matches!(r, Err(CmaError::ProcessGone)), "{r:?}");
        assert!(!probe(0));
    }

    #[test]
    fn permission_denied_maps_to_eperm() {
        // SAFETY: plain getters.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            // pid 1 belongs to root: not ours to read.
            assert!(!probe(1));
            let mut b = [0u8; 1];
            let r = unsafe {
                read_from(
                    1,
                    &[RemoteIov { addr: 16, len: 1 }],
                    0,
                    &[(b.as_mut_ptr(), 1)],
                    0,
                    1,
                )
            };
            assert!(matches!(r, Err(CmaError::PermissionDenied)), "{r:?}");
            return;
        }
        let parent = std::process::id();
        let secret = [7u8; 8];
        let addr = secret.as_ptr() as u64;
        // SAFETY: the child drops to an unprivileged user, tries to read the
        // parent (no allocation) and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = unsafe {
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    libc::_exit(10);
                }
                let mut b = [0u8; 8];
                let r = read_from(
                    parent,
                    &[RemoteIov { addr, len: 8 }],
                    0,
                    &[(b.as_mut_ptr(), 8)],
                    0,
                    8,
                );
                match (probe(parent), r) {
                    (false, Err(CmaError::PermissionDenied)) => 0,
                    (true, _) => 11,
                    _ => 12,
                }
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}
