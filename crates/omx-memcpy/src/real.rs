//! The C library's own functions, found with `dlsym(RTLD_NEXT)`: the library's own
//! copies and system calls go through these, never through its interposed symbols.

use std::sync::atomic::{AtomicUsize, Ordering};

use omx_runtime::preload::resolve_next as resolve;
use omx_runtime::real_fns;

use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t, FILE};

real_fns! {
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
    fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: i64) -> ssize_t;
    fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: i64) -> ssize_t;
    fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t;
    fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t;
    fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t;
    fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t;
    fn recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
    fn sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const sockaddr, len: socklen_t) -> ssize_t;
    fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
    fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
    fn fread(buf: *mut c_void, size: size_t, n: size_t, f: *mut FILE) -> size_t;
    fn fwrite(buf: *const c_void, size: size_t, n: size_t, f: *mut FILE) -> size_t;
    fn munmap(p: *mut c_void, n: size_t) -> c_int;
    fn mremap(p: *mut c_void, old: size_t, new: size_t, flags: c_int, new_addr: *mut c_void) -> *mut c_void;
    fn madvise(p: *mut c_void, n: size_t, advice: c_int) -> c_int;
    fn mprotect(p: *mut c_void, n: size_t, prot: c_int) -> c_int;
    fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int;
}

type CopyFn = unsafe extern "C" fn(*mut c_void, *const c_void, size_t) -> *mut c_void;

static MEMCPY: AtomicUsize = AtomicUsize::new(0);
static MEMMOVE: AtomicUsize = AtomicUsize::new(0);

/// Resolves the copy functions (from the library's constructor: `dlsym` itself may copy).
pub fn init() {
    resolve(&MEMCPY, b"memcpy\0");
    resolve(&MEMMOVE, b"memmove\0");
}

/// Copies byte by byte, through volatile accesses so that the compiler cannot turn
/// the loop back into a call of `memcpy` (used only before `init`).
unsafe extern "C" fn bytewise(dst: *mut c_void, src: *const c_void, n: size_t) -> *mut c_void {
    let (d, s) = (dst as *mut u8, src as *const u8);
    if (d as usize) < (s as usize) {
        for i in 0..n {
            d.add(i).write_volatile(s.add(i).read_volatile());
        }
    } else {
        for i in (0..n).rev() {
            d.add(i).write_volatile(s.add(i).read_volatile());
        }
    }
    dst
}

#[inline(always)]
fn copy_fn(slot: &AtomicUsize) -> CopyFn {
    match slot.load(Ordering::Relaxed) {
        0 => bytewise,
        // SAFETY: the slot holds the address of the C library's function.
        f => unsafe { std::mem::transmute::<usize, CopyFn>(f) },
    }
}

/// The C library's `memcpy`.
#[inline(always)]
pub unsafe fn memcpy(dst: *mut c_void, src: *const c_void, n: size_t) -> *mut c_void {
    copy_fn(&MEMCPY)(dst, src, n)
}

/// The C library's `memmove`.
#[inline(always)]
pub unsafe fn memmove(dst: *mut c_void, src: *const c_void, n: size_t) -> *mut c_void {
    copy_fn(&MEMMOVE)(dst, src, n)
}
