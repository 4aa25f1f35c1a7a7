//! The C library functions this library takes over (found first through `LD_PRELOAD`).
//! Descriptors that are not carried connections go straight to the real functions.

mod bulk;
mod exec;
mod ready;

use crate::fabric::fabric;
use crate::fds::{self, lookup};
use crate::handshake::{encode_ip_option, encode_ipv6_dstopts, OmxAddr};
use crate::real;
use crate::stream;
use libc::{
    c_int, c_void, epoll_event, fd_set, iovec, msghdr, nfds_t, pollfd, size_t, sockaddr, socklen_t,
    ssize_t, timeval,
};
use std::io::Result;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn set_errno(code: c_int) {
    // SAFETY: the thread's errno.
    unsafe { *libc::__errno_location() = code };
}

fn ret(r: Result<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            -1
        }
    }
}

fn sockopt_int(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: v and len are locals of the right size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut v as *mut c_int as *mut c_void,
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

fn is_tcp(fd: c_int) -> bool {
    sockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE) == Some(libc::SOCK_STREAM)
        && sockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) == Some(libc::IPPROTO_TCP)
}

/// The IP family of a client's SYN, which decides where its omx option goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SynFamily {
    V4,
    V6,
}

/// Whether a connect may be carried (TCP, not loopback nor unspecified), and in which
/// family its SYN leaves: `AF_INET` and IPv4-mapped `AF_INET6` addresses send an IPv4
/// SYN, other `AF_INET6` ones an IPv6 SYN.
unsafe fn carried_destination(
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> Option<SynFamily> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sockaddr_in>() {
        return None;
    }
    let (ip, family) = match (*addr).sa_family as c_int {
        libc::AF_INET => {
            let v4 = u32::from_be((*(addr as *const libc::sockaddr_in)).sin_addr.s_addr);
            (
                std::net::IpAddr::from(std::net::Ipv4Addr::from(v4)),
                SynFamily::V4,
            )
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            let a = (*(addr as *const libc::sockaddr_in6)).sin6_addr.s6_addr;
            match std::net::Ipv6Addr::from(a).to_ipv4_mapped() {
                Some(v4) => (v4.into(), SynFamily::V4),
                None => (std::net::Ipv6Addr::from(a).into(), SynFamily::V6),
            }
        }
        _ => return None,
    };
    (!ip.is_loopback() && !ip.is_unspecified() && is_tcp(fd)).then_some(family)
}

/// Sets (or, with an empty `opts`, clears) the options every IP packet of `fd` carries:
/// IPv4 options, or an IPv6 destination-options header.
unsafe fn set_ip_options(fd: c_int, family: SynFamily, opts: &[u8]) -> bool {
    let (level, name) = match family {
        SynFamily::V4 => (libc::IPPROTO_IP, libc::IP_OPTIONS),
        SynFamily::V6 => (libc::IPPROTO_IPV6, libc::IPV6_DSTOPTS),
    };
    libc::setsockopt(
        fd,
        level,
        name,
        opts.as_ptr() as *const c_void,
        opts.len() as socklen_t,
    ) == 0
}

/// # Safety
/// As the C library's `connect`.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // A connect again on a socket whose connect is under way or done (hiredis, after a
    // non-blocking connect: `EALREADY`, 0 or `EISCONN` from the kernel) is the kernel's
    // alone: it once set the connection up afresh under a new id, and the server's
    // messages, sent to the id the SYN offered, went to nobody (`connect-again`).
    let again = fds::carried(fd);
    let offer = (!again)
        .then(|| carried_destination(fd, addr, len))
        .flatten()
        .and_then(|family| {
            fabric().and_then(|fab| {
                let (id, evfd) = stream::reserve_client(fab)?;
                let me = OmxAddr {
                    nic: fab.nic,
                    endpoint: fab.index,
                    conn: id,
                };
                // Needs CAP_NET_RAW (an unregistered option): without it, plain TCP.
                let set = match family {
                    SynFamily::V4 => set_ip_options(fd, family, &encode_ip_option(me)),
                    SynFamily::V6 => set_ip_options(fd, family, &encode_ipv6_dstopts(me)),
                };
                if set {
                    Some((fab, id, evfd, family))
                } else {
                    stream::unreserve(id, evfd);
                    None
                }
            })
        });
    let r = real::connect(fd, addr, len);
    if let Some((fab, id, evfd, family)) = offer {
        let errno = *libc::__errno_location();
        if r == 0 {
            // Later segments need no option: the SYN carried it.
            set_ip_options(fd, family, &[]);
        }
        if r == 0 || errno == libc::EINPROGRESS {
            stream::adopt_client(fd, fab, id, evfd);
        } else {
            stream::unreserve(id, evfd);
        }
        set_errno(errno);
    }
    r
}

/// # Safety
/// As the C library's `socket`.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    let fd = real::socket(domain, kind, protocol);
    if fd >= 0 {
        fds::fresh(fd, true);
    }
    fd
}

/// # Safety
/// As the C library's `listen`.
#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    if is_tcp(fd) {
        // Keep each SYN: the accepted connection's client may offer omx in it.
        let one: c_int = 1;
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_SAVE_SYN,
            &one as *const c_int as *const c_void,
            4,
        );
    }
    real::listen(fd, backlog)
}

/// An accepted connection is decided at once in a process that has its endpoint already
/// (the client then hears the hello without waiting); otherwise on its first use
/// (`fds::lookup`), by whichever process uses it first (a forking server's child).
fn accepted(fd: c_int) -> c_int {
    if fd >= 0 {
        let errno = unsafe { *libc::__errno_location() };
        fds::fresh(fd, false);
        fds::accepted_here(fd);
        if crate::fabric::is_open() {
            lookup(fd);
        }
        set_errno(errno);
    }
    fd
}

/// # Safety
/// As the C library's `accept`.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    accepted(real::accept(fd, addr, len))
}

/// # Safety
/// As the C library's `accept4`.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    accepted(real::accept4(fd, addr, len, flags))
}

/// The caller's buffer; `None` (`EFAULT`, as the kernel answers) when it is null with
/// a length.
unsafe fn out_slice<'a>(buf: *mut c_void, n: size_t) -> Option<&'a mut [u8]> {
    if n == 0 {
        Some(&mut [])
    } else if buf.is_null() {
        None
    } else {
        Some(std::slice::from_raw_parts_mut(buf as *mut u8, n))
    }
}

unsafe fn in_slice<'a>(buf: *const c_void, n: size_t) -> Option<&'a [u8]> {
    if n == 0 {
        Some(&[])
    } else if buf.is_null() {
        None
    } else {
        Some(std::slice::from_raw_parts(buf as *const u8, n))
    }
}

/// -1 with `EFAULT` (a null buffer with a length).
fn fault() -> ssize_t {
    set_errno(libc::EFAULT);
    -1
}

/// Most iovecs a call takes (`IOV_MAX`): more, or fewer than none, is `EINVAL`.
const IOV_MAX: usize = 1024;

/// An iovec count as given (a `size_t` of `msghdr`): past `IOV_MAX` it stays invalid.
fn iov_count(n: usize) -> c_int {
    n.min(IOV_MAX + 1) as c_int
}

/// The iovecs `iov[..n]`, checked as the kernel does: `EINVAL` for a count out of
/// range, `EFAULT` for a null base with a length.
unsafe fn iovecs<'a>(iov: *const iovec, n: c_int) -> std::result::Result<&'a [iovec], c_int> {
    if n < 0 || n as usize > IOV_MAX {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    let v = std::slice::from_raw_parts(iov, n as usize);
    if v.iter().any(|io| io.iov_base.is_null() && io.iov_len > 0) {
        return Err(libc::EFAULT);
    }
    Ok(v)
}

/// Sends like TCP: EPIPE raises SIGPIPE unless MSG_NOSIGNAL.
fn send_on(c: &stream::Conn, buf: &[u8], flags: c_int) -> ssize_t {
    let r = c.send(buf, flags);
    if matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EPIPE))
        && flags & libc::MSG_NOSIGNAL == 0
    {
        // SAFETY: raising a signal.
        unsafe { libc::raise(libc::SIGPIPE) };
    }
    ret(r)
}

/// # Safety
/// As the C library's `read`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    match lookup(fd) {
        Some(c) => out_slice(buf, n).map_or_else(fault, |b| ret(c.recv(b, 0))),
        None => real::read(fd, buf, n),
    }
}

/// # Safety
/// As the C library's `__read_chk` (fortified `read`).
#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    _buflen: size_t,
) -> ssize_t {
    read(fd, buf, n)
}

/// # Safety
/// As the C library's `write`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    match lookup(fd) {
        Some(c) => in_slice(buf, n).map_or_else(fault, |b| send_on(&c, b, 0)),
        None => real::write(fd, buf, n),
    }
}

/// Urgent data (`MSG_OOB`) is TCP's: a carried connection goes back to kernel TCP
/// before a send with it (`Conn::leave_for_urgent`), and the call then finds the
/// descriptor plain. False (errno set, nothing sent) when it cannot. Reads with
/// `MSG_OOB` go to the kernel socket as they are: the urgent byte is never in the
/// stream a carried connection holds.
fn urgent_on_tcp(fd: c_int, flags: c_int) -> bool {
    if flags & libc::MSG_OOB == 0 {
        return true;
    }
    match lookup(fd).map(|c| c.leave_for_urgent()) {
        Some(Err(e)) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            false
        }
        _ => true,
    }
}

/// # Safety
/// As the C library's `recv`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    if flags & libc::MSG_OOB != 0 {
        return real::recv(fd, buf, n, flags);
    }
    match lookup(fd) {
        Some(c) => out_slice(buf, n).map_or_else(fault, |b| ret(c.recv(b, flags))),
        None => real::recv(fd, buf, n, flags),
    }
}

/// # Safety
/// As the C library's `__recv_chk`.
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    _buflen: size_t,
    flags: c_int,
) -> ssize_t {
    recv(fd, buf, n, flags)
}

/// # Safety
/// As the C library's `send`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    if !urgent_on_tcp(fd, flags) {
        return -1;
    }
    match lookup(fd) {
        Some(c) => in_slice(buf, n).map_or_else(fault, |b| send_on(&c, b, flags)),
        None => real::send(fd, buf, n, flags),
    }
}

/// # Safety
/// As the C library's `recvfrom`.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    if flags & libc::MSG_OOB != 0 {
        return real::recvfrom(fd, buf, n, flags, addr, len);
    }
    match lookup(fd) {
        Some(c) => {
            // As the kernel's TCP: a connected stream names no source (length 0).
            if !addr.is_null() && !len.is_null() {
                *len = 0;
            }
            out_slice(buf, n).map_or_else(fault, |b| ret(c.recv(b, flags)))
        }
        None => real::recvfrom(fd, buf, n, flags, addr, len),
    }
}

/// # Safety
/// As the C library's `__recvfrom_chk`.
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    _buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    recvfrom(fd, buf, n, flags, addr, len)
}

/// # Safety
/// As the C library's `sendto` (the address of a connected stream is ignored, as TCP does).
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    if !urgent_on_tcp(fd, flags) {
        return -1;
    }
    match lookup(fd) {
        Some(c) => in_slice(buf, n).map_or_else(fault, |b| send_on(&c, b, flags)),
        None => real::sendto(fd, buf, n, flags, addr, len),
    }
}

/// The bytes of `v`, at most `max` of them, in one buffer.
unsafe fn gather(v: &[iovec], max: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.iter().map(|io| io.iov_len).sum::<usize>().min(max));
    for io in v {
        let b = in_slice(io.iov_base, io.iov_len).unwrap_or(&[]);
        let k = b.len().min(max - out.len());
        out.extend_from_slice(&b[..k]);
        if out.len() == max {
            break;
        }
    }
    out
}

/// The bytes of `iov[..n]` in one buffer; the errno of a bad vector (see `iovecs`).
unsafe fn gather_iov(iov: *const iovec, n: c_int) -> std::result::Result<Vec<u8>, c_int> {
    Ok(gather(iovecs(iov, n)?, usize::MAX))
}

/// [`iovecs`], with the errno of a bad vector set (`None`).
unsafe fn iovecs_or_errno<'a>(iov: *const iovec, n: c_int) -> Option<&'a [iovec]> {
    iovecs(iov, n).map_err(set_errno).ok()
}

/// The one iovec of `v` with bytes, when no other has any.
fn single(v: &[iovec]) -> Option<&iovec> {
    let mut with_bytes = v.iter().filter(|io| io.iov_len > 0);
    let first = with_bytes.next();
    with_bytes.next().is_none().then_some(first).flatten()
}

/// `send_on` of `iov[..n]`; -1 with the errno of a bad vector. One buffer is sent as it
/// is; several are gathered first, a non-blocking write's only as far as the window
/// could take (it takes at most that): a program that `writev`s all it has left on a
/// non-blocking socket (node's `res.end` of 100 MB, through libuv) had the whole of it
/// copied at each call, 25 times for 100 MB (6x slower than TCP).
unsafe fn send_gathered(c: &stream::Conn, iov: *const iovec, n: c_int, flags: c_int) -> ssize_t {
    let Some(v) = iovecs_or_errno(iov, n) else {
        return -1;
    };
    if let Some(io) = single(v) {
        return send_on(c, in_slice(io.iov_base, io.iov_len).unwrap_or(&[]), flags);
    }
    let max = if flags & libc::MSG_DONTWAIT != 0 || c.nonblocking() {
        stream::WINDOW
    } else {
        usize::MAX
    };
    send_on(c, &gather(v, max), flags)
}

unsafe fn scatter(c: &stream::Conn, iov: *const iovec, n: c_int, flags: c_int) -> ssize_t {
    let Some(v) = iovecs_or_errno(iov, n) else {
        return -1;
    };
    // One buffer is read into as it is (a fresh zeroed buffer of its size at each call
    // otherwise).
    if let Some(io) = single(v) {
        return match out_slice(io.iov_base, io.iov_len) {
            Some(out) => ret(c.recv(out, flags)),
            None => fault(),
        };
    }
    let total: usize = v.iter().map(|io| io.iov_len).sum();
    let mut tmp = vec![0u8; total];
    match c.recv(&mut tmp, flags) {
        Ok(got) => {
            let mut off = 0;
            for io in v {
                let k = io.iov_len.min(got - off);
                if let Some(out) = out_slice(io.iov_base, k) {
                    out.copy_from_slice(&tmp[off..off + k]);
                }
                off += k;
            }
            got as ssize_t
        }
        Err(e) => ret(Err(e)),
    }
}

/// # Safety
/// As the C library's `readv`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    match lookup(fd) {
        Some(c) => scatter(&c, iov, n, 0),
        None => real::readv(fd, iov, n),
    }
}

/// # Safety
/// As the C library's `writev`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    match lookup(fd) {
        Some(c) => send_gathered(&c, iov, n, 0),
        None => real::writev(fd, iov, n),
    }
}

/// # Safety
/// As the C library's `recvmsg` (no ancillary data on a carried stream).
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if flags & libc::MSG_OOB != 0 {
        return real::recvmsg(fd, msg, flags);
    }
    match lookup(fd) {
        Some(c) => {
            let m = &mut *msg;
            m.msg_controllen = 0;
            m.msg_flags = 0;
            m.msg_namelen = 0;
            scatter(&c, m.msg_iov, iov_count(m.msg_iovlen), flags)
        }
        None => real::recvmsg(fd, msg, flags),
    }
}

/// # Safety
/// As the C library's `sendmsg`.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if !urgent_on_tcp(fd, flags) {
        return -1;
    }
    match lookup(fd) {
        Some(c) => send_gathered(&c, (*msg).msg_iov, iov_count((*msg).msg_iovlen), flags),
        None => real::sendmsg(fd, msg, flags),
    }
}

/// # Safety
/// As the C library's `shutdown`.
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    if let Some(c) = lookup(fd) {
        if (how == libc::SHUT_WR || how == libc::SHUT_RDWR) && !c.shutdown_write() {
            // The FIN follows the data still under way (the closing thread sends it).
            return match how {
                libc::SHUT_RDWR => real::shutdown(fd, libc::SHUT_RD),
                _ => 0,
            };
        }
    }
    real::shutdown(fd, how)
}

/// # Safety
/// As the C library's `close`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    crate::epoll::closed(fd);
    if !fds::known_plain(fd) {
        if let Some(c) = fds::detach(fd) {
            c.release();
        }
    }
    real::close(fd)
}

/// `to` is a new name of `fd`'s socket (the connection it named before, if any, lost it).
fn duplicated(fd: c_int, to: c_int) {
    if to < 0 || to == fd {
        return;
    }
    // What `to` named before is closed (an epoll set, a member of sets).
    crate::epoll::closed(to);
    if let Some(c) = fds::detach(to) {
        c.release();
    }
    // An undecided socket stays so under its new name: duplicating is no use (a
    // forking server's child moves the socket to stdin before exec, and the exec'd
    // program is the one that uses it, sshd's re-exec).
    if fds::undecided(fd) {
        fds::undecided_duplicated();
        return;
    }
    match lookup(fd) {
        Some(c) => {
            fds::attach(to, &c);
        }
        None => fds::mark_plain(to),
    }
}

/// # Safety
/// As the C library's `dup`.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let to = real::dup(fd);
    duplicated(fd, to);
    to
}

/// # Safety
/// As the C library's `dup2`.
#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    let r = real::dup2(fd, to);
    duplicated(fd, r);
    r
}

/// # Safety
/// As the C library's `dup3`.
#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    let r = real::dup3(fd, to, flags);
    duplicated(fd, r);
    r
}

/// # Safety
/// As the C library's `fcntl` (variadic in C; its one optional argument is passed as a
/// word either way): `F_DUPFD` and `F_DUPFD_CLOEXEC` are duplications.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int {
    let r = real::fcntl(fd, cmd, arg);
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        duplicated(fd, r);
    }
    if cmd == libc::F_SETFL {
        stream::status_flags_changed();
    }
    r
}

/// # Safety
/// As the C library's `fcntl64` (the name under `_FILE_OFFSET_BITS=64`).
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int {
    fcntl(fd, cmd, arg)
}

/// # Safety
/// As the C library's `setsockopt`: `SO_RCVLOWAT` of a carried connection is kept for
/// its reads and readiness (the kernel socket holds no stream bytes), and whether
/// `SO_SNDTIMEO` is set for its writes.
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    let r = real::setsockopt(fd, level, name, val, len);
    if r == 0 && level == libc::SOL_SOCKET {
        match name {
            libc::SO_RCVLOWAT => {
                if let Some(c) = lookup(fd) {
                    c.update_lowat();
                }
            }
            libc::SO_SNDTIMEO => {
                if let Some(c) = lookup(fd) {
                    c.update_send_timeout();
                }
            }
            _ => {}
        }
    }
    r
}

/// `SIOCATMARK` (asm-generic/sockios.h; the libc crate does not name it).
const SIOCATMARK: libc::c_ulong = 0x8905;

/// # Safety
/// As the C library's `ioctl` (variadic in C, one word argument): `FIONREAD` on a
/// carried connection counts what waits on omx.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: libc::c_ulong, arg: libc::c_ulong) -> c_int {
    if request == libc::FIONREAD && arg != 0 {
        if let Some(c) = lookup(fd) {
            *(arg as *mut c_int) = c.readable_bytes().min(c_int::MAX as usize) as c_int;
            return 0;
        }
    }
    // Not at the urgent mark while bytes that came over omx, which precede it, are
    // unread; otherwise the kernel's answer.
    if request == SIOCATMARK && arg != 0 {
        if let Some(c) = lookup(fd) {
            if c.omx_bytes_unread() {
                *(arg as *mut c_int) = 0;
                return 0;
            }
        }
    }
    let r = real::ioctl(fd, request, arg);
    if request == libc::FIONBIO as libc::c_ulong {
        stream::status_flags_changed();
    }
    r
}

/// Sends up to `count` bytes of the file `input` on a carried connection (read, then
/// written like `write`; the file offset moves by what was sent).
unsafe fn sendfile_carried(
    c: &stream::Conn,
    input: c_int,
    offset: Option<&mut i64>,
    count: size_t,
) -> ssize_t {
    let mut buf = vec![0u8; count.min(1 << 20)];
    let got = match offset {
        Some(ref off) => libc::pread64(input, buf.as_mut_ptr() as *mut c_void, buf.len(), **off),
        None => real::read(input, buf.as_mut_ptr() as *mut c_void, buf.len()),
    };
    if got <= 0 {
        return got;
    }
    let sent = send_on(c, &buf[..got as usize], 0);
    if sent >= 0 {
        match offset {
            Some(off) => *off += sent as i64,
            // Give back what was read and not sent.
            None if sent < got => {
                libc::lseek64(input, (sent - got) as i64, libc::SEEK_CUR);
            }
            None => {}
        }
    } else if offset.is_none() {
        libc::lseek64(input, -(got as i64), libc::SEEK_CUR);
    }
    sent
}

/// # Safety
/// As the C library's `sendfile`.
#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    input: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    match lookup(out) {
        Some(c) => sendfile_carried(&c, input, offset.as_mut(), count),
        None => real::sendfile(out, input, offset, count),
    }
}

/// # Safety
/// As the C library's `sendfile64`.
#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    input: c_int,
    offset: *mut libc::off64_t,
    count: size_t,
) -> ssize_t {
    match lookup(out) {
        Some(c) => sendfile_carried(&c, input, offset.as_mut(), count),
        None => real::sendfile64(out, input, offset, count),
    }
}
