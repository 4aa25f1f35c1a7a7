//! `sendmmsg`, `recvmmsg` and `splice` on a carried connection: answered through the
//! library's own writes and reads, as the kernel answers them for a TCP socket. Left
//! to the kernel, they wrote into the kernel socket beside the omx stream (the peer
//! dropped those bytes as probes) or read its end of file while the data waited on
//! omx.

use super::{ret, scatter, send_on, set_errno};
use crate::fds::lookup;
use crate::real;
use crate::stream::Conn;
use libc::{c_int, c_uint, c_void, mmsghdr, size_t, ssize_t, timespec};
use std::time::{Duration, Instant};

/// Bytes one `splice` moves at most on a carried connection (a pipe's default size).
const SPLICE_MAX: usize = 64 * 1024;

/// # Safety
/// As the C library's `sendmmsg`: each message is a write of its bytes, in order; the
/// first that fails ends the batch (its error reported when it was the first).
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(fd: c_int, msgs: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int {
    let Some(c) = lookup(fd) else {
        return real::sendmmsg(fd, msgs, n, flags);
    };
    let mut done = 0;
    for i in 0..n as usize {
        let m = &mut *msgs.add(i);
        let bytes =
            match super::gather_iov(m.msg_hdr.msg_iov, super::iov_count(m.msg_hdr.msg_iovlen)) {
                Ok(b) => b,
                Err(e) if done == 0 => {
                    set_errno(e);
                    return -1;
                }
                Err(_) => return done,
            };
        let r = send_on(&c, &bytes, flags);
        if r < 0 {
            return if done == 0 { -1 } else { done };
        }
        m.msg_len = r as c_uint;
        done += 1;
        if (r as usize) < bytes.len() {
            break;
        }
    }
    done
}

/// # Safety
/// As the C library's `recvmmsg`: each message is a read (as `recvmsg`), the first
/// with `flags`, the next ones too (`MSG_WAITFORONE`: without waiting); an error after
/// the first ends the batch, as the kernel's, and the timeout is looked at after each
/// message, as the kernel's.
#[no_mangle]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut mmsghdr,
    n: c_uint,
    flags: c_int,
    timeout: *mut timespec,
) -> c_int {
    let Some(c) = lookup(fd) else {
        return real::recvmmsg(fd, msgs, n, flags, timeout);
    };
    let deadline = timeout.as_ref().map(|t| {
        Instant::now()
            + Duration::new(
                t.tv_sec.max(0) as u64,
                t.tv_nsec.clamp(0, 999_999_999) as u32,
            )
    });
    let wait_for_one = flags & libc::MSG_WAITFORONE != 0;
    let mut flags = flags & !libc::MSG_WAITFORONE;
    let mut done = 0;
    for i in 0..n as usize {
        let m = &mut *msgs.add(i);
        m.msg_hdr.msg_controllen = 0;
        m.msg_hdr.msg_flags = 0;
        m.msg_hdr.msg_namelen = 0;
        let r = scatter(
            &c,
            m.msg_hdr.msg_iov,
            super::iov_count(m.msg_hdr.msg_iovlen),
            flags,
        );
        if r < 0 {
            return if done == 0 { -1 } else { done };
        }
        m.msg_len = r as c_uint;
        done += 1;
        if wait_for_one {
            flags |= libc::MSG_DONTWAIT;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    done
}

/// A carried connection's side of a `splice`: the offset of a socket must be null.
unsafe fn no_offset(off: *mut libc::loff_t) -> bool {
    if !off.is_null() {
        set_errno(libc::ESPIPE);
        return false;
    }
    true
}

/// From the pipe `input` to the carried `c`: the bytes are looked at (`tee` into a
/// scratch pipe), written, and only what was written is taken from `input`, so a
/// short write loses nothing.
unsafe fn splice_to(c: &Conn, input: c_int, len: size_t, flags: c_uint) -> ssize_t {
    let mut scratch = [0; 2];
    if libc::pipe2(scratch.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
        return -1;
    }
    let close = |p: [c_int; 2]| {
        real::close(p[0]);
        real::close(p[1]);
    };
    let peeked = real::tee(
        input,
        scratch[1],
        len.min(SPLICE_MAX),
        flags & libc::SPLICE_F_NONBLOCK,
    );
    if peeked <= 0 {
        let e = *libc::__errno_location();
        close(scratch);
        set_errno(e);
        return peeked;
    }
    let mut buf = vec![0u8; peeked as usize];
    let got = real::read(scratch[0], buf.as_mut_ptr() as *mut c_void, buf.len());
    close(scratch);
    if got <= 0 {
        return -1;
    }
    buf.truncate(got as usize);
    let sent = send_on(c, &buf, 0);
    if sent > 0 {
        // Taken from the pipe: exactly what was written (it is there: tee saw it).
        let mut left = sent as usize;
        while left > 0 {
            let r = real::read(input, buf.as_mut_ptr() as *mut c_void, left);
            if r <= 0 {
                break;
            }
            left -= r as usize;
        }
    }
    sent
}

/// From the carried `c` to the pipe `output`: the bytes are peeked, written to the
/// pipe, and only what the pipe took is read from the connection.
unsafe fn splice_from(c: &Conn, output: c_int, len: size_t, flags: c_uint) -> ssize_t {
    let mut buf = vec![0u8; len.min(SPLICE_MAX)];
    let dontwait = if flags & libc::SPLICE_F_NONBLOCK != 0 {
        libc::MSG_DONTWAIT
    } else {
        0
    };
    let got = match c.recv(&mut buf, libc::MSG_PEEK | dontwait) {
        Ok(0) => return 0,
        Ok(n) => n,
        Err(e) => return ret(Err(e)),
    };
    let put = real::write(output, buf.as_ptr() as *const c_void, got);
    if put > 0 {
        let mut taken = vec![0u8; put as usize];
        let _ = c.recv(&mut taken, libc::MSG_WAITALL);
    }
    put
}

/// # Safety
/// As the C library's `splice`.
#[no_mangle]
pub unsafe extern "C" fn splice(
    input: c_int,
    off_in: *mut libc::loff_t,
    output: c_int,
    off_out: *mut libc::loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if let Some(c) = lookup(output) {
        if !no_offset(off_out) {
            return -1;
        }
        return splice_to(&c, input, len, flags);
    }
    if let Some(c) = lookup(input) {
        if !no_offset(off_in) {
            return -1;
        }
        return splice_from(&c, output, len, flags);
    }
    real::splice(input, off_in, output, off_out, len, flags)
}
