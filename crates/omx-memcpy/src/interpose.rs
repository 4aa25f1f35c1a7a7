//! The interposed C library functions. Copies above the limit may become
//! asynchronous; calls that hand memory to the kernel or give it back first wait for
//! the copies touching it, so they never see a protected page (no `EFAULT`) and no
//! engine copies into memory that is gone.

use crate::{copy, fault, real, settle};
use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t, FILE};

#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut c_void, src: *const c_void, n: size_t) -> *mut c_void {
    if copy(dst as usize, src as usize, n) {
        return dst;
    }
    real::memcpy(dst, src, n)
}

#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut c_void, src: *const c_void, n: size_t) -> *mut c_void {
    if copy(dst as usize, src as usize, n) {
        return dst;
    }
    real::memmove(dst, src, n)
}

/// Fortified builds (`_FORTIFY_SOURCE`) call these instead.
#[no_mangle]
pub unsafe extern "C" fn __memcpy_chk(
    dst: *mut c_void,
    src: *const c_void,
    n: size_t,
    room: size_t,
) -> *mut c_void {
    if n > room {
        libc::abort();
    }
    memcpy(dst, src, n)
}

#[no_mangle]
pub unsafe extern "C" fn __memmove_chk(
    dst: *mut c_void,
    src: *const c_void,
    n: size_t,
    room: size_t,
) -> *mut c_void {
    if n > room {
        libc::abort();
    }
    memmove(dst, src, n)
}

unsafe fn settle_iov(iov: *const iovec, n: c_int) {
    if iov.is_null() || n <= 0 {
        return;
    }
    for v in std::slice::from_raw_parts(iov, n as usize) {
        settle(v.iov_base as usize, v.iov_len);
    }
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    settle(buf as usize, n);
    real::read(fd, buf, n)
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    settle(buf as usize, n);
    real::write(fd, buf, n)
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: i64) -> ssize_t {
    settle(buf as usize, n);
    real::pread64(fd, buf, n, off)
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: i64) -> ssize_t {
    pread64(fd, buf, n, off)
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: i64) -> ssize_t {
    settle(buf as usize, n);
    real::pwrite64(fd, buf, n, off)
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: i64) -> ssize_t {
    pwrite64(fd, buf, n, off)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    settle_iov(iov, n);
    real::readv(fd, iov, n)
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    settle_iov(iov, n);
    real::writev(fd, iov, n)
}

#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    settle(buf as usize, n);
    real::recv(fd, buf, n, flags)
}

#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    settle(buf as usize, n);
    real::send(fd, buf, n, flags)
}

#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    settle(buf as usize, n);
    real::recvfrom(fd, buf, n, flags, addr, len)
}

#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    settle(buf as usize, n);
    real::sendto(fd, buf, n, flags, addr, len)
}

#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if !msg.is_null() {
        settle_iov((*msg).msg_iov, (*msg).msg_iovlen as c_int);
    }
    real::recvmsg(fd, msg, flags)
}

#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if !msg.is_null() {
        settle_iov((*msg).msg_iov, (*msg).msg_iovlen as c_int);
    }
    real::sendmsg(fd, msg, flags)
}

/// Stdio writes large blocks with the C library's internal `write`.
#[no_mangle]
pub unsafe extern "C" fn fread(buf: *mut c_void, size: size_t, n: size_t, f: *mut FILE) -> size_t {
    settle(buf as usize, size.saturating_mul(n));
    real::fread(buf, size, n, f)
}

#[no_mangle]
pub unsafe extern "C" fn fwrite(
    buf: *const c_void,
    size: size_t,
    n: size_t,
    f: *mut FILE,
) -> size_t {
    settle(buf as usize, size.saturating_mul(n));
    real::fwrite(buf, size, n, f)
}

extern "C" {
    fn __libc_free(p: *mut c_void);
    fn __libc_realloc(p: *mut c_void, n: size_t) -> *mut c_void;
    fn malloc_usable_size(p: *mut c_void) -> size_t;
}

/// A freed block may be unmapped at once: its copies end first. Calls the C
/// library's own alias, which needs no look-up (the look-up itself may free).
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if !p.is_null() && crate::pending::any_pending() {
        settle(p as usize - 16, malloc_usable_size(p) + 16);
    }
    __libc_free(p)
}

#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, n: size_t) -> *mut c_void {
    if !p.is_null() && crate::pending::any_pending() {
        settle(p as usize - 16, malloc_usable_size(p) + 16);
    }
    __libc_realloc(p, n)
}

#[no_mangle]
pub unsafe extern "C" fn munmap(p: *mut c_void, n: size_t) -> c_int {
    settle(p as usize, n);
    real::munmap(p, n)
}

#[no_mangle]
pub unsafe extern "C" fn mremap(
    p: *mut c_void,
    old: size_t,
    new: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    settle(p as usize, old);
    real::mremap(p, old, new, flags, new_addr)
}

#[no_mangle]
pub unsafe extern "C" fn madvise(p: *mut c_void, n: size_t, advice: c_int) -> c_int {
    settle(p as usize, n);
    real::madvise(p, n, advice)
}

#[no_mangle]
pub unsafe extern "C" fn mprotect(p: *mut c_void, n: size_t, prot: c_int) -> c_int {
    settle(p as usize, n);
    real::mprotect(p, n, prot)
}

#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    fault::sigaction(sig, act, old)
}

#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    fault::signal(sig, h)
}
