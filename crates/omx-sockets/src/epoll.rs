//! Carried connections in epoll sets. The kernel answers for their descriptors and for
//! the mirrored readiness descriptors; once a connection writes on omx its kernel
//! registration leaves `EPOLLOUT` out (the kernel socket is then always writable) and
//! this registry adds what the kernel cannot know, room in the window (`EPOLLOUT`,
//! level and edge). Until then (a client waiting for the hello, a non-blocking
//! connect) `EPOLLOUT` is the kernel's. It also tells `epoll_wait` which sets need the
//! thread to wait in the endpoint, and keeps `EPOLLONESHOT` exact: one member is two
//! kernel registrations (the socket and its readiness descriptor) plus the added
//! `EPOLLOUT`, so once any of them reports, all are disarmed until `EPOLL_CTL_MOD`.

use crate::stream::Conn;
use libc::epoll_event;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

struct Member {
    fd: i32,
    conn: Weak<Conn>,
    events: u32,
    data: u64,
    /// The kernel registration still asks for `EPOLLOUT` (set while the connection
    /// wrote on TCP; dropped at the first look once it writes on omx).
    kernel_out: bool,
    /// Edge-triggered: the connection's `full_hits` when `EPOLLOUT` was last reported
    /// (`None`: not since the descriptor was added or modified).
    reported: Option<u64>,
    /// `EPOLLONESHOT`: an event was reported since the last `EPOLL_CTL_ADD`/`MOD`.
    fired: bool,
}

impl Member {
    fn oneshot(&self) -> bool {
        self.events & libc::EPOLLONESHOT as u32 != 0
    }

    /// Disarms the member's kernel registrations (a fired `EPOLLONESHOT`: the one that
    /// reported is disarmed already, the other one could still report).
    fn disarm(&mut self, epfd: i32, conn: &Conn) {
        self.fired = true;
        for fd in [self.fd, conn.evfd] {
            let mut ev = epoll_event {
                events: libc::EPOLLONESHOT as u32,
                u64: self.data,
            };
            // SAFETY: a valid event for a descriptor of the set.
            unsafe { crate::real::epoll_ctl(epfd, libc::EPOLL_CTL_MOD, fd, &mut ev) };
        }
    }
}

/// Carried members of each epoll set, by epoll descriptor.
static SETS: Mutex<Option<HashMap<i32, Vec<Member>>>> = Mutex::new(None);
/// Sets in `SETS` (most programs have none: `closed` then takes no lock).
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// `epoll_ctl(epfd, op, fd, ev)` succeeded for the carried `conn`.
/// `kernel_out`: the kernel registration asks for `EPOLLOUT`.
pub fn changed(
    epfd: i32,
    op: i32,
    fd: i32,
    ev: Option<&epoll_event>,
    conn: &Arc<Conn>,
    kernel_out: bool,
) {
    let mut sets = SETS.lock();
    let map = sets.get_or_insert_with(HashMap::new);
    let members = map.entry(epfd).or_default();
    leave(members, |m| m.fd == fd);
    if let (Some(ev), true) = (ev, op != libc::EPOLL_CTL_DEL) {
        // A member's readiness descriptor holds its count (`fabric::Readiness`).
        conn.ready.watch_epoll();
        members.push(Member {
            fd,
            conn: Arc::downgrade(conn),
            events: ev.events,
            data: ev.u64,
            kernel_out,
            reported: None,
            fired: false,
        });
    }
    if members.is_empty() {
        map.remove(&epfd);
    }
    COUNT.store(map.len(), Ordering::Release);
}

/// A descriptor closed: as an epoll set it is gone, as a member it left every set (the
/// library keeps its own duplicate of the socket, so the kernel would keep it).
pub fn closed(fd: i32) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut sets = SETS.lock();
    let Some(map) = sets.as_mut() else { return };
    if let Some(mut gone) = map.remove(&fd) {
        leave(&mut gone, |_| true);
    }
    for members in map.values_mut() {
        leave(members, |m| m.fd == fd);
    }
    map.retain(|_, m| !m.is_empty());
    COUNT.store(map.len(), Ordering::Release);
}

/// Removes the members `which` picks; their connections are watched once less.
fn leave(members: &mut Vec<Member>, which: impl Fn(&Member) -> bool) {
    members.retain(|m| {
        if !which(m) {
            return true;
        }
        if let Some(c) = m.conn.upgrade() {
            c.ready.unwatch_epoll();
        }
        false
    });
}

/// True when `epfd` has carried members.
pub fn has_carried(epfd: i32) -> bool {
    COUNT.load(Ordering::Acquire) > 0 && SETS.lock().as_ref().is_some_and(|m| m.contains_key(&epfd))
}

/// Adds `EPOLLOUT` for the members with room in their window to the `n` events the
/// kernel gave (merged into a member's event when the kernel reported it too); returns
/// the new count. Level-triggered: whenever there is room; edge-triggered: once after
/// each time a write found the window full (and once after `EPOLL_CTL_ADD`/`MOD`).
/// Also returns a member whose window is full, whose room a wait must watch for.
/// A member's two kernel registrations may both report: their events are merged into
/// one, and an `EPOLLONESHOT` member that reported is disarmed everywhere. `EPOLLIN`
/// of a member with fewer bytes than its `SO_RCVLOWAT` is taken out (as TCP's); the
/// last value returned is true when that left a registration that stays readable (a
/// wait must not sleep on the set then).
pub fn add_writable(
    epfd: i32,
    events: &mut [epoll_event],
    n: usize,
) -> (usize, Option<Arc<Conn>>, bool) {
    let mut n = n;
    let mut full = None;
    let mut short = false;
    let mut sets = SETS.lock();
    let Some(members) = sets.as_mut().and_then(|m| m.get_mut(&epfd)) else {
        return (n, None, false);
    };
    for m in members.iter_mut() {
        let Some(conn) = m.conn.upgrade() else {
            continue;
        };
        n = merge_events_of(m.data, events, n);
        if m.fired {
            continue;
        }
        if conn.settling() {
            n = hello_only(m, &conn, events, n);
        }
        if conn.lowat() > 1 {
            n = below_lowat(epfd, m, &conn, events, n, &mut short);
        }
        if m.events & libc::EPOLLOUT as u32 != 0 {
            n = add_room(epfd, m, &conn, events, n, &mut full);
        }
        if m.oneshot() && events[..n].iter().any(|e| e.u64 == m.data) {
            m.disarm(epfd, &conn);
        }
    }
    (n, full, short)
}

/// A client's kernel socket readable with the server's hello only: the hello is taken
/// now (the stream moves to omx, `Conn::poll_in`) and `EPOLLIN` taken out of member
/// `m`'s event among the first `n`, as TCP reports nothing then; returns the new count.
fn hello_only(m: &Member, conn: &Conn, events: &mut [epoll_event], n: usize) -> usize {
    match input_event(m, events, n) {
        Some(at) if !conn.poll_in() => take_input(events, n, at),
        _ => n,
    }
}

const INPUT: u32 = (libc::EPOLLIN | libc::EPOLLRDNORM) as u32;

/// Where member `m`'s event among the first `n` reports input, if it does.
fn input_event(m: &Member, events: &[epoll_event], n: usize) -> Option<usize> {
    events[..n]
        .iter()
        .position(|e| e.u64 == m.data && e.events & INPUT != 0)
}

/// Takes the input bits out of event `at` among the first `n`, and the event out when
/// nothing is left of it; returns the new count.
fn take_input(events: &mut [epoll_event], n: usize, at: usize) -> usize {
    events[at].events &= !INPUT;
    if events[at].events != 0 {
        return n;
    }
    events.copy_within(at + 1..n, at);
    n - 1
}

/// Takes `EPOLLIN` out of member `m`'s event among the first `n` when fewer bytes than
/// its `SO_RCVLOWAT` are there (see `add_writable`); returns the new count and sets
/// `short` when the readiness descriptor stays readable for a wait.
fn below_lowat(
    epfd: i32,
    m: &Member,
    conn: &Conn,
    events: &mut [epoll_event],
    n: usize,
    short: &mut bool,
) -> usize {
    let Some(at) = input_event(m, events, n) else {
        return n;
    };
    if conn.lowat_met() {
        return n;
    }
    if m.oneshot() {
        // The readiness descriptor's registration fired and is disarmed: armed again.
        let mut mirror = epoll_event {
            events: m.events & !(libc::EPOLLOUT as u32),
            u64: m.data,
        };
        // SAFETY: a valid event for a descriptor of the set.
        unsafe { crate::real::epoll_ctl(epfd, libc::EPOLL_CTL_MOD, conn.evfd, &mut mirror) };
    }
    // Edge-triggered, the next arrival is a new edge; level-triggered (or re-armed)
    // the descriptor is readable again at once.
    if m.events & libc::EPOLLET as u32 == 0 || m.oneshot() {
        *short = true;
    }
    take_input(events, n, at)
}

/// Adds `EPOLLOUT` for member `m` (which asks for it) to the first `n` events when its
/// window has room (see `add_writable`); returns the new count, and sets `full` to the
/// connection when the window is full.
fn add_room(
    epfd: i32,
    m: &mut Member,
    conn: &Arc<Conn>,
    events: &mut [epoll_event],
    n: usize,
    full: &mut Option<Arc<Conn>>,
) -> usize {
    if m.kernel_out {
        if !conn.writes_on_omx() {
            return n;
        }
        let mut ev = epoll_event {
            events: m.events & !(libc::EPOLLOUT as u32),
            u64: m.data,
        };
        // SAFETY: a valid event for a descriptor of the set.
        unsafe { crate::real::epoll_ctl(epfd, libc::EPOLL_CTL_MOD, m.fd, &mut ev) };
        m.kernel_out = false;
    }
    let hits = conn.full_hits();
    if !conn.writable() {
        *full = Some(conn.clone());
        return n;
    }
    if m.events & libc::EPOLLET as u32 != 0 {
        if m.reported == Some(hits) {
            return n;
        }
        m.reported = Some(hits);
    }
    let room = n < events.len();
    match events[..n].iter_mut().find(|e| e.u64 == m.data) {
        Some(e) => {
            e.events |= libc::EPOLLOUT as u32;
            n
        }
        None if room => {
            events[n] = epoll_event {
                events: libc::EPOLLOUT as u32,
                u64: m.data,
            };
            n + 1
        }
        None => n,
    }
}

/// Folds the events carrying `data` among the first `n` into the first of them (the
/// socket and its readiness descriptor both reported); returns the new count.
fn merge_events_of(data: u64, events: &mut [epoll_event], n: usize) -> usize {
    let Some(first) = events[..n].iter().position(|e| e.u64 == data) else {
        return n;
    };
    let mut kept = first + 1;
    for i in first + 1..n {
        let e = events[i];
        if e.u64 == data {
            events[first].events |= e.events;
        } else {
            events[kept] = e;
            kept += 1;
        }
    }
    kept
}
