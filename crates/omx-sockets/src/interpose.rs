//! The C library functions this library takes over (found first through `LD_PRELOAD`).
//! Descriptors that are not carried connections go straight to the real functions.

use crate::fabric::fabric;
use crate::handshake::{encode_ip_option, parse_saved_syn, OmxAddr};
use crate::real;
use crate::stream::{self, lookup};
use libc::{
    c_int, c_void, epoll_event, fd_set, iovec, msghdr, nfds_t, pollfd, size_t, sockaddr, socklen_t,
    ssize_t, timeval,
};
use std::io::Result;

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

/// The IPv4 destination of a connect that may be carried (not loopback, TCP).
unsafe fn carried_destination(fd: c_int, addr: *const sockaddr, len: socklen_t) -> bool {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sockaddr_in>() {
        return false;
    }
    if (*addr).sa_family as c_int != libc::AF_INET {
        return false;
    }
    let sin = &*(addr as *const libc::sockaddr_in);
    let ip = u32::from_be(sin.sin_addr.s_addr);
    ip >> 24 != 127 && ip != 0 && is_tcp(fd)
}

unsafe fn set_ip_options(fd: c_int, opts: &[u8]) -> bool {
    libc::setsockopt(
        fd,
        libc::IPPROTO_IP,
        libc::IP_OPTIONS,
        opts.as_ptr() as *const c_void,
        opts.len() as socklen_t,
    ) == 0
}

/// # Safety
/// As the C library's `connect`.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let offer = if carried_destination(fd, addr, len) {
        fabric().and_then(|fab| {
            let id = fab.new_conn_id();
            let opt = encode_ip_option(OmxAddr {
                nic: fab.nic,
                endpoint: fab.index,
                conn: id,
            });
            // Needs CAP_NET_RAW (an unregistered option): without it, plain TCP.
            set_ip_options(fd, &opt).then_some((fab, id))
        })
    } else {
        None
    };
    let r = real::connect(fd, addr, len);
    if let Some((fab, id)) = offer {
        let errno = *libc::__errno_location();
        if r == 0 {
            // Later segments need no option: the SYN carried it.
            set_ip_options(fd, &[]);
        }
        if r == 0 || errno == libc::EINPROGRESS {
            stream::adopt_client(fd, fab, id);
        }
        set_errno(errno);
    }
    r
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

unsafe fn adopt_accepted(fd: c_int) -> c_int {
    if fd < 0 {
        return fd;
    }
    let errno = *libc::__errno_location();
    let mut syn = [0u8; 512];
    let mut len = syn.len() as socklen_t;
    if libc::getsockopt(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_SAVED_SYN,
        syn.as_mut_ptr() as *mut c_void,
        &mut len,
    ) == 0
    {
        if let Some(client) = parse_saved_syn(&syn[..len as usize]) {
            stream::adopt_server(fd, client);
        }
    }
    set_errno(errno);
    fd
}

/// # Safety
/// As the C library's `accept`.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    adopt_accepted(real::accept(fd, addr, len))
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
    adopt_accepted(real::accept4(fd, addr, len, flags))
}

unsafe fn out_slice<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    if n == 0 || buf.is_null() {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(buf as *mut u8, n)
    }
}

unsafe fn in_slice<'a>(buf: *const c_void, n: size_t) -> &'a [u8] {
    if n == 0 || buf.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(buf as *const u8, n)
    }
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
        Some(c) => ret(c.recv(out_slice(buf, n), 0)),
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
        Some(c) => send_on(&c, in_slice(buf, n), 0),
        None => real::write(fd, buf, n),
    }
}

/// # Safety
/// As the C library's `recv`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    match lookup(fd) {
        Some(c) => ret(c.recv(out_slice(buf, n), flags)),
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
    match lookup(fd) {
        Some(c) => send_on(&c, in_slice(buf, n), flags),
        None => real::send(fd, buf, n, flags),
    }
}

/// # Safety
/// As the C library's `recvfrom` (a connected stream has no source address to give).
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    match lookup(fd) {
        Some(c) => {
            if !addr.is_null() && !len.is_null() {
                libc::getpeername(fd, addr, len);
            }
            ret(c.recv(out_slice(buf, n), flags))
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
    match lookup(fd) {
        Some(c) => send_on(&c, in_slice(buf, n), flags),
        None => real::sendto(fd, buf, n, flags, addr, len),
    }
}

unsafe fn gather(iov: *const iovec, n: c_int) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..n.max(0) as usize {
        let io = &*iov.add(i);
        v.extend_from_slice(in_slice(io.iov_base, io.iov_len));
    }
    v
}

unsafe fn scatter(c: &stream::Conn, iov: *const iovec, n: c_int, flags: c_int) -> ssize_t {
    let total: usize = (0..n.max(0) as usize).map(|i| (*iov.add(i)).iov_len).sum();
    let mut tmp = vec![0u8; total];
    match c.recv(&mut tmp, flags) {
        Ok(got) => {
            let mut off = 0;
            for i in 0..n.max(0) as usize {
                let io = &*iov.add(i);
                let k = io.iov_len.min(got - off);
                out_slice(io.iov_base, k).copy_from_slice(&tmp[off..off + k]);
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
        Some(c) => send_on(&c, &gather(iov, n), 0),
        None => real::writev(fd, iov, n),
    }
}

/// # Safety
/// As the C library's `recvmsg` (no ancillary data on a carried stream).
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    match lookup(fd) {
        Some(c) => {
            let m = &mut *msg;
            m.msg_controllen = 0;
            m.msg_flags = 0;
            m.msg_namelen = 0;
            scatter(&c, m.msg_iov, m.msg_iovlen as c_int, flags)
        }
        None => real::recvmsg(fd, msg, flags),
    }
}

/// # Safety
/// As the C library's `sendmsg`.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    match lookup(fd) {
        Some(c) => send_on(
            &c,
            &gather((*msg).msg_iov, (*msg).msg_iovlen as c_int),
            flags,
        ),
        None => real::sendmsg(fd, msg, flags),
    }
}

/// # Safety
/// As the C library's `shutdown`.
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    if let Some(c) = lookup(fd) {
        if how == libc::SHUT_WR || how == libc::SHUT_RDWR {
            c.shutdown_write();
        }
    }
    real::shutdown(fd, how)
}

/// # Safety
/// As the C library's `close`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if lookup(fd).is_some() {
        if let Some(c) = stream::remove(fd) {
            c.close();
        }
    }
    real::close(fd)
}

/// # Safety
/// As the C library's `poll`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    if fds.is_null() || n == 0 {
        return real::poll(fds, n, timeout);
    }
    let set = std::slice::from_raw_parts_mut(fds, n as usize);
    let carried: Vec<(usize, i32)> = set
        .iter()
        .enumerate()
        .filter(|(_, p)| p.events & libc::POLLIN != 0)
        .filter_map(|(i, p)| lookup(p.fd).map(|c| (i, c.evfd)))
        .collect();
    if carried.is_empty() {
        return real::poll(fds, n, timeout);
    }
    // Each carried connection is also watched through its readiness descriptor.
    let mut all: Vec<pollfd> = set.to_vec();
    all.extend(carried.iter().map(|&(_, evfd)| pollfd {
        fd: evfd,
        events: libc::POLLIN,
        revents: 0,
    }));
    let r = real::poll(all.as_mut_ptr(), all.len() as nfds_t, timeout);
    if r < 0 {
        return r;
    }
    for (k, &(i, _)) in carried.iter().enumerate() {
        if all[n as usize + k].revents & libc::POLLIN != 0 {
            all[i].revents |= libc::POLLIN;
        }
    }
    let mut ready = 0;
    for (p, a) in set.iter_mut().zip(&all) {
        p.revents = a.revents;
        ready += (a.revents != 0) as c_int;
    }
    ready
}

/// # Safety
/// As the C library's `__poll_chk`.
#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: c_int,
    _fdslen: size_t,
) -> c_int {
    poll(fds, n, timeout)
}

/// # Safety
/// As the C library's `select`: with a carried connection in the sets it is answered
/// through `poll`.
#[no_mangle]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    t: *mut timeval,
) -> c_int {
    let isset = |s: *mut fd_set, fd: c_int| !s.is_null() && libc::FD_ISSET(fd, s);
    if !(0..n.clamp(0, libc::FD_SETSIZE as c_int)).any(|fd| isset(r, fd) && lookup(fd).is_some()) {
        return real::select(n, r, w, e, t);
    }
    let mut fds = Vec::new();
    for fd in 0..n.clamp(0, libc::FD_SETSIZE as c_int) {
        let mut events = 0;
        if isset(r, fd) {
            events |= libc::POLLIN;
        }
        if isset(w, fd) {
            events |= libc::POLLOUT;
        }
        if isset(e, fd) {
            events |= libc::POLLPRI;
        }
        if events != 0 {
            fds.push(pollfd {
                fd,
                events,
                revents: 0,
            });
        }
    }
    let timeout = if t.is_null() {
        -1
    } else {
        let t = &*t;
        (t.tv_sec * 1000 + (t.tv_usec + 999) / 1000) as c_int
    };
    let got = poll(fds.as_mut_ptr(), fds.len() as nfds_t, timeout);
    if got < 0 {
        return got;
    }
    for s in [r, w, e] {
        if !s.is_null() {
            libc::FD_ZERO(s);
        }
    }
    let mut count = 0;
    for p in &fds {
        let err = p.revents & (libc::POLLERR | libc::POLLHUP) != 0;
        for (s, bit) in [(r, libc::POLLIN), (w, libc::POLLOUT), (e, libc::POLLPRI)] {
            if p.events & bit != 0 && (p.revents & bit != 0 || (err && bit != libc::POLLPRI)) {
                libc::FD_SET(p.fd, s);
                count += 1;
            }
        }
    }
    count
}

/// # Safety
/// As the C library's `epoll_ctl`: a carried connection's readiness descriptor follows
/// it into the epoll set with the same data.
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> c_int {
    let r = real::epoll_ctl(epfd, op, fd, ev);
    if r == 0 {
        if let Some(c) = lookup(fd) {
            let errno = *libc::__errno_location();
            if op == libc::EPOLL_CTL_DEL || ev.is_null() {
                real::epoll_ctl(epfd, libc::EPOLL_CTL_DEL, c.evfd, std::ptr::null_mut());
            } else {
                let mut mirror = *ev;
                mirror.events &= !(libc::EPOLLOUT as u32);
                real::epoll_ctl(epfd, op, c.evfd, &mut mirror);
            }
            set_errno(errno);
        }
    }
    r
}
