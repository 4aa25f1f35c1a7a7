//! The kinds of segment a request may name, and each kind's copy-in and copy-out:
//! plain copies for this process's memory, `pread`/`pwrite` between a file and the
//! frame (no buffer in between), `process_vm_readv`/`writev` for another process's
//! memory (the kernel's own ptrace-access check decides who may).

use omx_transport::cma::{self, CmaError, RemoteIov};
use std::fmt;
use std::fs::File;
use std::mem::ManuallyDrop;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::fs::FileExt;

/// One contiguous piece of a request's buffer. The original MX API's address types
/// map onto these kinds (docs/API.md, "Typed segments").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    /// This process's memory (what the MX API passes).
    Memory { ptr: *mut u8, len: usize },
    /// `len` bytes of an open file from `offset`: a send reads them with `pread`, a
    /// receive writes them with `pwrite` (the file grows as needed).
    File { fd: RawFd, offset: u64, len: usize },
    /// `len` bytes at `addr` in process `pid`, for a service acting for local clients;
    /// allowed when the kernel lets this process ptrace `pid` (same user, Yama scope).
    Process { pid: u32, addr: u64, len: usize },
}

// Segments are plain addresses (and descriptors) handed over by the application;
// moving them between the application thread and the progress thread is what MX does
// with its buffers.
unsafe impl Send for Segment {}

/// Why a typed segment cannot be used, at post time or during a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentError {
    /// A memory segment with bytes but a null pointer.
    NullPointer,
    /// A send's file range goes beyond the end of the file.
    ShortFile { size: u64, end: u64 },
    /// The descriptor cannot be used for this direction (errno: `EBADF` when not
    /// open for it, `ESPIPE` when not a regular file or block device, or what
    /// `fstat`, `pread` or `pwrite` said).
    File { errno: i32 },
    /// The process does not exist (`ESRCH`).
    ProcessGone,
    /// The kernel refuses this process access to the other's memory (`EPERM`).
    ProcessDenied,
    /// The range is not mapped in the other process (`EFAULT`).
    BadAddress,
}

impl fmt::Display for SegmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SegmentError::NullPointer => write!(f, "null segment pointer"),
            SegmentError::ShortFile { size, end } => {
                write!(
                    f,
                    "file range ends at {end}, beyond the file's {size} bytes"
                )
            }
            SegmentError::File { errno } => write!(
                f,
                "file segment: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            SegmentError::ProcessGone => write!(f, "process segment: no such process"),
            SegmentError::ProcessDenied => write!(
                f,
                "process segment: access to the process's memory not permitted"
            ),
            SegmentError::BadAddress => write!(f, "process segment: address not mapped"),
        }
    }
}

impl std::error::Error for SegmentError {}

/// Which way a request moves its segments' bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A send: the bytes are read from the segments.
    Read,
    /// A receive: the bytes are written into the segments.
    Write,
}

impl From<CmaError> for SegmentError {
    fn from(e: CmaError) -> Self {
        match e {
            CmaError::PermissionDenied => SegmentError::ProcessDenied,
            CmaError::ProcessGone => SegmentError::ProcessGone,
            CmaError::BadAddress | CmaError::OutOfRange => SegmentError::BadAddress,
            CmaError::Io(e) => SegmentError::File {
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            },
        }
    }
}

fn errno_of(e: std::io::Error) -> SegmentError {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => SegmentError::File {
            errno: libc::ENODATA,
        },
        _ => SegmentError::File {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
        },
    }
}

impl Segment {
    pub const EMPTY: Segment = Segment::Memory {
        ptr: std::ptr::null_mut(),
        len: 0,
    };

    /// `len` bytes of this process's memory at `ptr`.
    pub fn memory(ptr: *mut u8, len: usize) -> Segment {
        Segment::Memory { ptr, len }
    }

    /// `len` bytes of the file open as `fd`, from `offset`.
    pub fn file(fd: RawFd, offset: u64, len: usize) -> Segment {
        Segment::File { fd, offset, len }
    }

    /// `len` bytes at `addr` in process `pid`.
    pub fn process(pid: u32, addr: u64, len: usize) -> Segment {
        Segment::Process { pid, addr, len }
    }

    pub fn len(&self) -> usize {
        match *self {
            Segment::Memory { len, .. }
            | Segment::File { len, .. }
            | Segment::Process { len, .. } => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This process's memory at the segment's byte `at`, if it is a memory segment.
    #[inline]
    pub(crate) fn memory_at(&self, at: usize) -> Option<*mut u8> {
        match *self {
            // SAFETY (of the pointer arithmetic): callers pass `at` within the segment.
            Segment::Memory { ptr, .. } => Some(ptr.wrapping_add(at)),
            _ => None,
        }
    }

    /// Checks, when a request is posted, that the segment can be used for `access`,
    /// so that a bad one fails the post with nothing sent: a null pointer; a file
    /// descriptor that is not open for the direction, not seekable, or (for a send)
    /// shorter than the range; a process that is gone, refuses access, or has
    /// nothing mapped at either end of the range.
    pub fn check(&self, access: Access) -> Result<(), SegmentError> {
        match *self {
            Segment::Memory { ptr, len } => {
                if len > 0 && ptr.is_null() {
                    return Err(SegmentError::NullPointer);
                }
                Ok(())
            }
            Segment::File { fd, offset, len } => check_file(fd, offset, len, access),
            Segment::Process { pid, addr, len } => {
                if len == 0 {
                    return Ok(());
                }
                if pid == 0 || pid > i32::MAX as u32 {
                    return Err(SegmentError::ProcessGone);
                }
                let last = addr
                    .checked_add(len as u64 - 1)
                    .ok_or(SegmentError::BadAddress)?;
                for a in [addr, last] {
                    let mut byte = 0u8;
                    let remote = [RemoteIov { addr: a, len: 1 }];
                    // SAFETY: one byte into a local variable.
                    unsafe { cma::read_from(pid, &remote, 0, &[(&mut byte, 1)], 0, 1)? };
                }
                Ok(())
            }
        }
    }

    /// Copies `out.len()` bytes from the segment's byte `at` on.
    ///
    /// # Safety
    /// `at + out.len()` lies within the segment, and a memory segment is valid for
    /// reads (the lending contract).
    pub(crate) unsafe fn read_at(&self, at: usize, out: &mut [u8]) -> Result<(), SegmentError> {
        match *self {
            Segment::Memory { ptr, .. } => {
                // SAFETY: see the contract above.
                unsafe { std::ptr::copy_nonoverlapping(ptr.add(at), out.as_mut_ptr(), out.len()) };
                Ok(())
            }
            Segment::File { fd, offset, .. } => borrow_file(fd)
                .read_exact_at(out, offset + at as u64)
                .map_err(errno_of),
            Segment::Process { pid, addr, len } => {
                let remote = [RemoteIov {
                    addr,
                    len: len as u64,
                }];
                let n = out.len();
                // SAFETY: `out` is ours to write; the kernel checks the remote side.
                unsafe { cma::read_from(pid, &remote, at as u64, &[(out.as_mut_ptr(), n)], 0, n) }
                    .map_err(Into::into)
            }
        }
    }

    /// Copies `data` into the segment from its byte `at` on.
    ///
    /// # Safety
    /// `at + data.len()` lies within the segment, and a memory segment is valid for
    /// writes and lent to us (the lending contract).
    pub(crate) unsafe fn write_at(&self, at: usize, data: &[u8]) -> Result<(), SegmentError> {
        match *self {
            Segment::Memory { ptr, .. } => {
                // SAFETY: see the contract above.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.add(at), data.len()) };
                Ok(())
            }
            Segment::File { fd, offset, .. } => borrow_file(fd)
                .write_all_at(data, offset + at as u64)
                .map_err(errno_of),
            Segment::Process { pid, addr, len } => {
                let remote = [RemoteIov {
                    addr,
                    len: len as u64,
                }];
                let n = data.len();
                // SAFETY: `data` is only read; the kernel checks the remote side.
                unsafe { cma::write_to(pid, &remote, at as u64, &[(data.as_ptr(), n)], 0, n) }
                    .map_err(Into::into)
            }
        }
    }
}

/// The application's descriptor as a `File` that is never closed here.
fn borrow_file(fd: RawFd) -> ManuallyDrop<File> {
    // SAFETY: the descriptor stays the application's (never closed: ManuallyDrop); a
    // descriptor closed meanwhile makes the calls fail with EBADF.
    ManuallyDrop::new(unsafe { File::from_raw_fd(fd) })
}

fn check_file(fd: RawFd, offset: u64, len: usize, access: Access) -> Result<(), SegmentError> {
    let bad = |errno| Err(SegmentError::File { errno });
    if fd < 0 {
        return bad(libc::EBADF);
    }
    // SAFETY: F_GETFL on any descriptor number only reads its flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(errno_of(std::io::Error::last_os_error()));
    }
    let mode = flags & libc::O_ACCMODE;
    let allowed = match access {
        Access::Read => mode == libc::O_RDONLY || mode == libc::O_RDWR,
        Access::Write => mode == libc::O_WRONLY || mode == libc::O_RDWR,
    };
    if !allowed {
        return bad(libc::EBADF);
    }
    let meta = borrow_file(fd).metadata().map_err(errno_of)?;
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if !kind.is_file() && !kind.is_block_device() {
        return bad(libc::ESPIPE);
    }
    let end = offset
        .checked_add(len as u64)
        .filter(|&e| e <= i64::MAX as u64)
        .ok_or(SegmentError::File {
            errno: libc::EOVERFLOW,
        })?;
    if access == Access::Read && kind.is_file() && end > meta.len() {
        return Err(SegmentError::ShortFile {
            size: meta.len(),
            end,
        });
    }
    Ok(())
}
