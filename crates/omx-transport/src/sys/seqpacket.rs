//! Unix sequenced-packet sockets: the daemon's relay connections and their
//! credentials (see `crate::relay`). Part of `sys`, the crate's one home for `unsafe`.

use super::cvt;
use std::io;
use std::mem::zeroed;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A `sockaddr_un` for `path` and its length. A path starting with `@` names an
/// abstract socket (Linux): no file, one name space per network namespace, gone
/// with the socket. Names that do not fit (107 bytes) are refused.
fn unix_addr(path: &std::path::Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut a: libc::sockaddr_un = unsafe { zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    // The abstract name is the bytes after the `@`, stored after a NUL.
    let (name, at) = match bytes.strip_prefix(b"@") {
        Some(name) => (name, 1),
        None => (bytes, 0),
    };
    if name.is_empty() || at + name.len() >= a.sun_path.len() || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unix socket name {} is empty or too long", path.display()),
        ));
    }
    for (d, s) in a.sun_path[at..].iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    // Abstract names are compared over exactly the length given, so both ends
    // pass the name's own length; a path may pass the whole structure.
    let len = if at == 1 {
        std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len()
    } else {
        size_of::<libc::sockaddr_un>()
    };
    Ok((a, len as libc::socklen_t))
}

/// Whether `path` names an abstract unix socket (see [`unix_addr`]).
pub fn is_abstract_socket(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().starts_with(b"@")
}

fn seqpacket_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall, no pointers.
    let fd =
        cvt(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A listening `AF_UNIX`/`SOCK_SEQPACKET` socket bound at `path` (blocking).
pub fn seqpacket_listen(path: &std::path::Path, backlog: i32) -> io::Result<OwnedFd> {
    let fd = seqpacket_socket()?;
    let (a, len) = unix_addr(path)?;
    // SAFETY: `a` is a valid sockaddr_un and `len` does not exceed its size.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    // SAFETY: plain syscall on a socket we own.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), backlog) })?;
    Ok(fd)
}

/// Accepts one connection (blocking; the new descriptor is close-on-exec).
pub fn seqpacket_accept(listener: RawFd) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: null address pointers are allowed by accept4(2).
        let r = unsafe {
            libc::accept4(
                listener,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        match cvt(r) {
            // SAFETY: accept4 returned a new descriptor owned by nobody else.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Connects a blocking `SOCK_SEQPACKET` socket to `path`.
pub fn seqpacket_connect(path: &std::path::Path) -> io::Result<OwnedFd> {
    let fd = seqpacket_socket()?;
    let (a, len) = unix_addr(path)?;
    // SAFETY: `a` is a valid sockaddr_un and `len` does not exceed its size.
    cvt(unsafe { libc::connect(fd.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    Ok(fd)
}

/// The pid, uid and gid of the process at the other end of a unix socket, as
/// the kernel recorded them at `connect` time (`SO_PEERCRED`: not forgeable).
pub fn peer_cred(fd: RawFd) -> io::Result<(u32, u32, u32)> {
    // SAFETY: ucred is plain old data.
    let mut c: libc::ucred = unsafe { zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` is writable and `len` is its size.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok((c.pid as u32, c.uid, c.gid))
}

/// Sends one message on a connected socket (blocking unless the socket is not).
pub fn send_message(fd: RawFd, msg: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: `msg` is readable for its length.
        let r = unsafe { libc::send(fd, msg.as_ptr().cast(), msg.len(), libc::MSG_NOSIGNAL) };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message into `buf` (blocking); `Ok(0)` at end of stream.
pub fn recv_message(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is writable for its length.
        let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
