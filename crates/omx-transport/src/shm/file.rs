//! The inbox file: its shared mapping (every access to the shared bytes), names,
//! unlinking and the liveness of the processes named in it.

use std::fs;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use super::WAKE_SUFFIX;

/// A shared mapping of a whole file. All accesses go through the accessors
/// below, whose offsets the callers derive from a validated [`Layout`].
pub(crate) struct Mapping {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
}

// SAFETY: the mapping is plain shared memory; every access through `Mapping`
// is either atomic or to bytes that the ring protocol hands to one side at a
// time, so sharing or moving the handle between threads adds no hazard.
unsafe impl Send for Mapping {}
// SAFETY: see above; `&Mapping` only allows atomic accesses and reads.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn map(fd: RawFd, len: usize, writable: bool) -> io::Result<Mapping> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: asks the kernel for a new shared mapping of `fd`; no existing
        // memory is affected.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        match NonNull::new(p.cast::<u8>()) {
            Some(ptr) => Ok(Mapping { ptr, len }),
            None => Err(io::Error::other("mmap returned a null mapping")),
        }
    }

    #[inline(always)]
    pub(crate) fn u64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: in bounds and 8-byte aligned (the mapping is page aligned and
        // every offset used is a multiple of 8 inside the validated layout);
        // the word is only ever accessed atomically by this crate.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU64>() }
    }

    #[inline(always)]
    pub(crate) fn u32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: as for `u64`, with 4-byte alignment.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() }
    }

    /// Record bytes in place: the consumer's view of a published record.
    #[inline(always)]
    pub(super) fn bytes(&self, off: usize, len: usize) -> &[u8] {
        debug_assert!(off + len <= self.len);
        // SAFETY: in bounds (checked by the caller against the ring); the ring
        // protocol guarantees the producer does not write these bytes until the
        // consumer moves its head past them, which happens after this borrow
        // ends. (A misbehaving process could still write them: the bytes are
        // then merely wrong, which the caller's decoding must tolerate.)
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// Free ring bytes being filled by the producer.
    ///
    /// # Safety
    /// The caller must own `off..off + len` exclusively under the ring protocol
    /// (the producer, between its tail and the consumer's head) and
    /// must not create another reference to it while the slice lives.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn bytes_mut(&self, off: usize, len: usize) -> &mut [u8] {
        debug_assert!(off + len <= self.len);
        // SAFETY: in bounds; exclusivity is the caller's contract above.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region mapped in `map`; no reference into
        // it can outlive `self` (all borrows are tied to `&self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
/// Whether process `pid` exists (`kill(pid, 0)` is not `ESRCH`). Invalid pids
/// (0, negative as `pid_t`) count as dead; so never signal a process group.
pub(super) fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}
pub(super) fn euid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

pub(super) fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.contains('\0')
        || name.ends_with(WAKE_SUFFIX)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid inbox name {name:?}"),
        ));
    }
    Ok(())
}
pub(super) fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Unlinks `path` if it is still the file identified by `(dev, ino)`.
pub(super) fn unlink_if_same(path: &Path, id: (u64, u64)) -> bool {
    match fs::symlink_metadata(path) {
        Ok(m) if (m.dev(), m.ino()) == id => fs::remove_file(path).is_ok(),
        _ => false,
    }
}
