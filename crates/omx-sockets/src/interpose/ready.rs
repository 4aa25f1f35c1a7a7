//! Readiness: `poll`, `ppoll`, `select`, `epoll_ctl`, `epoll_wait` and `epoll_pwait` on
//! sets that may hold carried connections beside kernel descriptors. A carried
//! connection is watched through its readiness descriptor and its window (see `poll`);
//! sets without one go straight to the real functions.

use super::*;

/// # Safety
/// As the C library's `poll`. A carried connection is readable when its readiness
/// descriptor is (watched beside it) and writable when its window has room (the
/// endpoint's completion notifier rings then: the kernel socket itself is always
/// writable). The thread waits in the endpoint (`fabric::block`; for room in a window, in
/// the kernel on the set and the notifier: `fabric::sleep_on`), the rest of the set
/// beside it.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    if fds.is_null() || n == 0 {
        return real::poll(fds, n, timeout);
    }
    let set = std::slice::from_raw_parts_mut(fds, n as usize);
    // An epoll set polled has a waiter its hub must ring for.
    crate::epoll::polled(set.iter().map(|p| p.fd));
    let carried: Vec<(usize, Arc<stream::Conn>)> = set
        .iter()
        .enumerate()
        .filter_map(|(i, p)| lookup(p.fd).map(|c| (i, c)))
        .collect();
    if carried.is_empty() {
        return real::poll(fds, n, timeout);
    }
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    // The readers' readiness descriptors hold their counts while the call looks.
    let readers: Vec<&crate::fabric::Readiness> = carried
        .iter()
        .filter(|(i, _)| set[*i].events & libc::POLLIN != 0)
        .map(|(_, c)| &*c.ready)
        .collect();
    crate::fabric::watching(&readers, || poll_carried(set, &carried, deadline))
}

/// `poll` of a set with carried connections (`carried`: their places and connections).
unsafe fn poll_carried(
    set: &mut [pollfd],
    carried: &[(usize, Arc<stream::Conn>)],
    deadline: Option<Instant>,
) -> c_int {
    let n = set.len();
    loop {
        let seen = crate::fabric::arrivals();
        let mut all: Vec<pollfd> = set.to_vec();
        let mut full = Vec::new();
        for (i, c) in carried {
            if set[*i].events & libc::POLLOUT != 0 && !c.writable() {
                all[*i].events &= !libc::POLLOUT;
                full.push((*i, c));
            }
        }
        // A full window gains room at a send's completion: the endpoint's notify
        // descriptor rings then (armed before the look below); with one full window,
        // once enough of its sends completed for it to be writable, not at each.
        let notify = match full.as_slice() {
            [(_, c)] => c.room_notifier(),
            more => more.first().and_then(|(_, c)| c.completion_notifier()),
        };
        if let Some(fd) = notify {
            all.push(pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let first_reader = all.len();
        let readers: Vec<(usize, &stream::Conn)> = carried
            .iter()
            .filter(|(i, _)| set[*i].events & libc::POLLIN != 0)
            .map(|(i, c)| {
                all.push(pollfd {
                    fd: c.evfd,
                    events: libc::POLLIN,
                    revents: 0,
                });
                (*i, &**c)
            })
            .collect();
        let r = real::poll(all.as_mut_ptr(), all.len() as nfds_t, 0);
        if r < 0 {
            return r;
        }
        // Readable: its descriptor says so, or (a message this thread took in from the
        // network itself, see `fabric::Readiness`) its count does.
        for (k, &(i, c)) in readers.iter().enumerate() {
            if all[first_reader + k].revents & libc::POLLIN != 0 || c.ready.pending() {
                all[i].revents |= libc::POLLIN;
            }
        }
        // Bytes only the library reads (probes, a hand-back to TCP) make no POLLIN;
        // nor do fewer bytes than `SO_RCVLOWAT` (as TCP's), whose count is then left
        // out of the next wait (it stays readable) and looked at every `LOWAT_LOOK`.
        let mut short = Vec::new();
        for (i, c) in carried {
            if all[*i].revents & libc::POLLIN != 0 && !c.poll_in() {
                all[*i].revents &= !libc::POLLIN;
            }
            if all[*i].revents & libc::POLLIN != 0 && !c.lowat_met() {
                all[*i].revents &= !libc::POLLIN;
                short.push(c.evfd);
            }
        }
        for (i, c) in &full {
            if c.writable() {
                all[*i].revents |= libc::POLLOUT;
            }
        }
        let ready = all[..n].iter().filter(|a| a.revents != 0).count();
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if ready > 0 || left.is_some_and(|l| l.is_zero()) {
            for (p, a) in set.iter_mut().zip(&all) {
                p.revents = a.revents;
            }
            return ready as c_int;
        }
        // Several threads arming one notifier may miss a ring, so a full window is
        // looked at again every 10 ms at least (1 ms without the notifier).
        let slice = match (full.is_empty(), notify.is_some()) {
            (true, _) => left,
            (false, true) => Some(left.map_or(FULL_LOOK, |l| l.min(FULL_LOOK))),
            (false, false) => Some(left.map_or(FULL_LOOK_BLIND, |l| l.min(FULL_LOOK_BLIND))),
        };
        let slice = if short.is_empty() {
            slice
        } else {
            Some(slice.map_or(LOWAT_LOOK, |l| l.min(LOWAT_LOOK)))
        };
        for a in all.iter_mut() {
            a.revents = 0;
            if short.contains(&a.fd) {
                a.fd = -1;
            }
        }
        // A wait for room in a window sleeps in the kernel on the set and the armed
        // notifier, the progress thread driving the endpoint meanwhile (it rings the
        // notifier at the completion, and the readiness descriptors of the readers
        // watched here at each arrival): room comes at the pace of the peer's pulls,
        // tens of µs or more, which the endpoint's spin would burn (see
        // docs/SOCKETS.md, "Not yet": iperf3's slow mode).
        // Readers of a bulk stream sleep at once (see `Conn::wait_spin`).
        let spin = readers
            .iter()
            .map(|(_, c)| c.wait_spin())
            .find(|s| *s == omx_runtime::Spin::Skip)
            .unwrap_or(omx_runtime::Spin::Adaptive);
        let waited = if notify.is_some() {
            crate::fabric::sleep_on(&mut all, slice)
        } else {
            crate::fabric::block_with(&all, slice, seen, spin)
        };
        if waited.is_err() {
            set_errno(libc::EINTR);
            return -1;
        }
    }
}

/// How often a wait looks at a full window again (the notifier may miss a ring).
const FULL_LOOK: Duration = Duration::from_millis(10);
const FULL_LOOK_BLIND: Duration = Duration::from_millis(1);
/// How often a wait looks again at a connection readable with fewer bytes than its
/// `SO_RCVLOWAT` (its readiness descriptor stays readable, so the wait leaves it out:
/// the thread still wakes at once for the messages it takes in itself).
pub(crate) const LOWAT_LOOK: Duration = Duration::from_millis(2);

/// # Safety
/// As the C library's `ppoll` (ssh's): with a carried connection in the set it is
/// answered by `poll` under the given signal mask.
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    ts: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    if !fds.is_null() {
        crate::epoll::polled(
            std::slice::from_raw_parts(fds, n as usize)
                .iter()
                .map(|p| p.fd),
        );
    }
    let any_carried = !fds.is_null()
        && std::slice::from_raw_parts(fds, n as usize)
            .iter()
            .any(|p| lookup(p.fd).is_some());
    if !any_carried {
        return real::ppoll(fds, n, ts, mask);
    }
    let timeout =
        match ts.as_ref() {
            None => -1,
            Some(t) => (t.tv_sec * 1000 + (t.tv_nsec + 999_999) / 1_000_000)
                .clamp(0, c_int::MAX as i64) as c_int,
        };
    let mut old: libc::sigset_t = std::mem::zeroed();
    if !mask.is_null() {
        libc::pthread_sigmask(libc::SIG_SETMASK, mask, &mut old);
    }
    let r = poll(fds, n, timeout);
    if !mask.is_null() {
        let errno = *libc::__errno_location();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        set_errno(errno);
    }
    r
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
    let watched = |fd: c_int| isset(r, fd) || isset(w, fd);
    crate::epoll::polled((0..n.clamp(0, libc::FD_SETSIZE as c_int)).filter(|&fd| watched(fd)));
    if !(0..n.clamp(0, libc::FD_SETSIZE as c_int)).any(|fd| watched(fd) && lookup(fd).is_some()) {
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
/// As the C library's `epoll_ctl`: a carried connection's socket is registered as the
/// program asks (without `EPOLLOUT` once it writes on omx), and the set's record in
/// `crate::epoll` says what the kernel cannot know.
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> c_int {
    let Some(c) = lookup(fd) else {
        if op == libc::EPOLL_CTL_ADD {
            crate::epoll::added_elsewhere(fd);
        }
        return real::epoll_ctl(epfd, op, fd, ev);
    };
    crate::epoll::ctl(epfd, op, fd, ev, &c)
}

/// `epoll_wait`/`epoll_pwait`: a set with carried members is answered by
/// `epoll_wait_carried`, any other by the kernel (its hub's events taken out, if it has
/// one: a ring while the thread slept there means a carried member joined and may be
/// ready, so it looks again).
unsafe fn epoll_wait_any(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    if events.is_null() || max <= 0 {
        return real::epoll_pwait(epfd, events, max, timeout, mask);
    }
    let out = std::slice::from_raw_parts_mut(events, max as usize);
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        // Counted before the look, so a member added from now on rings the hub.
        let kernel = crate::epoll::KernelWaiting::new(epfd);
        if let Some(hub) = crate::epoll::hub_with_members(epfd) {
            drop(kernel);
            return epoll_wait_carried(epfd, hub, out, deadline, mask);
        }
        let ms = deadline.map_or(-1, |d| {
            let left = d.saturating_duration_since(Instant::now());
            left.as_micros().div_ceil(1000).min(c_int::MAX as u128) as c_int
        });
        let got = real::epoll_pwait(epfd, events, max, ms, mask);
        drop(kernel);
        if got <= 0 || !crate::epoll::hubbed(epfd) {
            return got;
        }
        let n = crate::epoll::strip_hub(out, got as usize);
        if n > 0 || ms == 0 {
            return n as c_int;
        }
    }
}

/// `epoll_wait` of a set with carried members: the kernel's events (its hub's taken
/// out) plus what the set's record says (`crate::epoll::add_ready`); the thread waits
/// in the endpoint, the epoll descriptor beside it (in the kernel, on the epoll
/// descriptor and the completion notifier, while it waits for room in a window: see
/// `poll_carried`). Other threads' arrivals ring the set's hub while this one waits.
unsafe fn epoll_wait_carried(
    epfd: c_int,
    hub: Arc<crate::epoll::Hub>,
    out: &mut [epoll_event],
    deadline: Option<Instant>,
    mask: *const libc::sigset_t,
) -> c_int {
    let _waiting = crate::epoll::Waiting::new(hub);
    loop {
        let seen = crate::fabric::arrivals();
        let got = real::epoll_pwait(epfd, out.as_mut_ptr(), out.len() as c_int, 0, mask);
        if got < 0 {
            return got;
        }
        let got = crate::epoll::strip_hub(out, got as usize);
        let (n, full) = crate::epoll::add_ready(epfd, out, got);
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if n > 0 || left.is_some_and(|l| l.is_zero()) {
            return n as c_int;
        }
        let mut watch = vec![pollfd {
            fd: epfd,
            events: libc::POLLIN,
            revents: 0,
        }];
        // A full window gains room at a send's completion (see `poll`).
        let waits_for_room = full.is_some();
        let notify = full.and_then(|c| c.completion_notifier());
        let slice = match (&notify, waits_for_room) {
            (_, false) => left,
            (Some(fd), true) => {
                watch.push(pollfd {
                    fd: *fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
                Some(left.map_or(FULL_LOOK, |l| l.min(FULL_LOOK)))
            }
            (None, true) => Some(left.map_or(FULL_LOOK_BLIND, |l| l.min(FULL_LOOK_BLIND))),
        };
        // Room in a window: a sleep in the kernel, as in `poll`.
        let waited = if notify.is_some() {
            crate::fabric::sleep_on(&mut watch, slice)
        } else {
            crate::fabric::block(&watch, slice, seen)
        };
        if waited.is_err() {
            set_errno(libc::EINTR);
            return -1;
        }
    }
}

/// # Safety
/// As the C library's `epoll_wait`.
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    epoll_wait_any(epfd, events, max, timeout, std::ptr::null())
}

/// # Safety
/// As the C library's `epoll_pwait` (the signal mask applies to the looks at the
/// kernel's set; the waits in the endpoint keep the thread's mask).
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    epoll_wait_any(epfd, events, max, timeout, mask)
}
