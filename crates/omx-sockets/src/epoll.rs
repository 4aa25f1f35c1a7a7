//! Carried connections in epoll sets. The kernel answers for each carried socket's own
//! registration (the program's events; once the connection writes on omx, without
//! `EPOLLOUT`: the kernel socket is then always writable), which brings `EPOLLRDHUP`,
//! `EPOLLHUP`, `EPOLLERR` and the bytes that still come over TCP. What only the
//! library knows is computed here, in user space, at each `epoll_wait`: `EPOLLIN` from
//! the connection's count of messages (`fabric::Readiness`) and `EPOLLOUT` from room
//! in its window, level-triggered while so, edge-triggered once per arrival (per
//! window that filled) since the last report, re-armed by `EPOLL_CTL_ADD`/`MOD`;
//! `EPOLLONESHOT` disarms the member (its kernel registration too) until `MOD`.
//!
//! A set with carried members has one wake-up descriptor, its hub: an eventfd
//! registered once in the set (edge-triggered, with `HUB_DATA`, taken out of the events
//! returned). An arrival rings the hubs of its connection's sets only when someone may
//! be asleep in the kernel on a set: another thread of ours waiting on it, a thread in
//! the kernel's `epoll_wait` on it (started before the set had a carried member), or a
//! waiter we cannot see (the epoll descriptor was polled, selected or nested in another
//! epoll set: from then on every arrival rings). The thread waiting on the set that takes the
//! frame in itself sees the count in memory and rings nothing. So an `epoll_ctl` on a
//! carried member costs one kernel `epoll_ctl` (none for a level-triggered `MOD` that
//! changes nothing the kernel holds), and a message no eventfd system call.

use crate::stream::Conn;
use libc::epoll_event;
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// The data of a hub's registration (a program's own event with this data would be
/// taken for the hub's).
const HUB_DATA: u64 = 0x6f6d_785f_6875_6221;
const IN: u32 = libc::EPOLLIN as u32;
const OUT: u32 = libc::EPOLLOUT as u32;
const ET: u32 = libc::EPOLLET as u32;
const ONESHOT: u32 = libc::EPOLLONESHOT as u32;
const INPUT: u32 = (libc::EPOLLIN | libc::EPOLLRDNORM) as u32;

/// One epoll set's wake-up descriptor (see the module's comment).
pub struct Hub {
    fd: i32,
    /// The set's epoll descriptor.
    epfd: i32,
    /// Threads of ours in `epoll_wait` on the set.
    waiters: AtomicU32,
    /// Someone we cannot see may wait on the set (it was polled or nested).
    foreign: AtomicBool,
}

thread_local! {
    /// The hub of the set the calling thread is in `epoll_wait` on (its address and
    /// the set's descriptor; 0 and -1: none): its own arrivals need not ring it, and
    /// its own sleep's `poll` of the set is no foreign look.
    static WAITING_ON: Cell<(usize, i32)> = const { Cell::new((0, -1)) };
}

impl Hub {
    /// A message for a member arrived: rings the hub if someone else may sleep on it.
    pub fn arrival(&self) {
        let me = self as *const Hub as usize;
        let mine = WAITING_ON.try_with(|w| w.get().0 == me).unwrap_or(false);
        if self.foreign.load(Ordering::SeqCst)
            || self.waiters.load(Ordering::SeqCst) > mine as u32
            || kernel_waiting(self.epfd)
        {
            crate::fabric::signal(self.fd);
        }
    }
}

/// Threads in the kernel's `epoll_wait` on each epoll descriptor (below `BITS`; the
/// others share `KERNEL_WAITERS_HIGH`): a set that gets a carried member while a
/// thread sleeps there rings its hub for it.
static KERNEL_WAITERS: [AtomicU32; BITS] = [const { AtomicU32::new(0) }; BITS];
static KERNEL_WAITERS_HIGH: AtomicU32 = AtomicU32::new(0);

fn kernel_waiters(epfd: i32) -> &'static AtomicU32 {
    usize::try_from(epfd)
        .ok()
        .and_then(|i| KERNEL_WAITERS.get(i))
        .unwrap_or(&KERNEL_WAITERS_HIGH)
}

fn kernel_waiting(epfd: i32) -> bool {
    kernel_waiters(epfd).load(Ordering::SeqCst) > 0
}

/// A thread in the kernel's `epoll_wait` on `epfd`, counted from before it looks
/// whether the set has carried members (so a member added meanwhile rings the hub).
pub struct KernelWaiting(i32);

impl KernelWaiting {
    pub fn new(epfd: i32) -> KernelWaiting {
        kernel_waiters(epfd).fetch_add(1, Ordering::SeqCst);
        KernelWaiting(epfd)
    }
}

impl Drop for KernelWaiting {
    fn drop(&mut self) {
        kernel_waiters(self.0).fetch_sub(1, Ordering::SeqCst);
    }
}

/// A waiter on a hub for the time of one `epoll_wait` (see `Hub::arrival`).
pub struct Waiting {
    hub: Arc<Hub>,
    before: (usize, i32),
}

impl Waiting {
    pub fn new(hub: Arc<Hub>) -> Waiting {
        hub.waiters.fetch_add(1, Ordering::SeqCst);
        let me = Arc::as_ptr(&hub) as usize;
        let before = WAITING_ON
            .try_with(|w| w.replace((me, hub.epfd)))
            .unwrap_or((0, -1));
        Waiting { hub, before }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let _ = WAITING_ON.try_with(|w| w.set(self.before));
        self.hub.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Member {
    fd: i32,
    conn: Weak<Conn>,
    /// The program's events and data.
    events: u32,
    data: u64,
    /// What the kernel registration of the socket asks for now.
    kernel_events: u32,
    /// The kernel registration still asks for `EPOLLOUT` (set while the connection
    /// wrote on TCP; dropped at the first look once it writes on omx).
    kernel_out: bool,
    /// Edge-triggered: the connection's `full_hits` when `EPOLLOUT` was last reported
    /// (`None`: not since the descriptor was added or modified).
    reported: Option<u64>,
    /// Edge-triggered: the connection's arrivals when `EPOLLIN` was last reported.
    reported_in: Option<u64>,
    /// `EPOLLONESHOT`: an event was reported since the last `EPOLL_CTL_ADD`/`MOD`.
    fired: bool,
}

impl Member {
    fn oneshot(&self) -> bool {
        self.events & ONESHOT != 0
    }

    /// Sets the kernel registration of the socket to `events` (with the member's data).
    fn kernel_mod(&mut self, epfd: i32, events: u32) {
        let mut ev = epoll_event {
            events,
            u64: self.data,
        };
        // SAFETY: a valid event for a descriptor of the set.
        unsafe { crate::real::epoll_ctl(epfd, libc::EPOLL_CTL_MOD, self.fd, &mut ev) };
        self.kernel_events = events;
    }
}

struct Set {
    hub: Arc<Hub>,
    members: Vec<Member>,
    /// Where each member's descriptor is in `members`.
    at: HashMap<i32, usize>,
    /// Where the next look starts (members take turns when the caller's array is small).
    next: usize,
}

impl Set {
    fn remove(&mut self, fd: i32) -> Option<Member> {
        let i = self.at.remove(&fd)?;
        let m = self.members.swap_remove(i);
        if let Some(moved) = self.members.get(i) {
            self.at.insert(moved.fd, i);
        }
        Some(m)
    }

    /// A waiter we cannot see starts looking (or a member joins while one may): the hub
    /// rings if a member is ready in user space now, as the kernel's set would be
    /// readable then.
    fn ring_if_ready(&self) {
        let ready = self.members.iter().any(|m| {
            let Some(c) = m.conn.upgrade().filter(|_| !m.fired) else {
                return false;
            };
            (m.events & INPUT != 0 && c.ready.counts().0 > 0)
                || (m.events & OUT != 0 && !m.kernel_out && c.writable())
        });
        if ready {
            crate::fabric::signal(self.hub.fd);
        }
    }

    fn leave_all(&mut self) {
        for m in self.members.drain(..) {
            if let Some(c) = m.conn.upgrade() {
                c.ready.unwatch_epoll(&self.hub);
            }
        }
        self.at.clear();
    }
}

/// Epoll sets that had carried members, by epoll descriptor (kept with their hub
/// until the descriptor closes: a program that takes its only member out and puts it
/// back at each request pays for no new hub).
static SETS: Mutex<Option<HashMap<i32, Set>>> = Mutex::new(None);
/// Sets in `SETS` (most programs have none: `closed` then takes no lock).
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Descriptors below this are in the bit maps below; a larger one counts as nested.
const BITS: usize = 65536;
/// Descriptors that are sets in `SETS` (a `poll` of one is a foreign waiter).
static HUBBED: [AtomicU64; BITS / 64] = [const { AtomicU64::new(0) }; BITS / 64];
/// Descriptors polled, selected or put in an epoll set by the program since they were
/// opened (if one is an epoll set, its waiters are foreign).
static NESTED: [AtomicU64; BITS / 64] = [const { AtomicU64::new(0) }; BITS / 64];

fn bit(map: &[AtomicU64], fd: i32, set: Option<bool>) -> bool {
    let Some(i) = usize::try_from(fd).ok().filter(|&i| i < BITS) else {
        return true;
    };
    let b = 1u64 << (i % 64);
    match set {
        Some(true) => map[i / 64].fetch_or(b, Ordering::SeqCst) & b != 0,
        Some(false) => map[i / 64].fetch_and(!b, Ordering::SeqCst) & b != 0,
        None => map[i / 64].load(Ordering::SeqCst) & b != 0,
    }
}

/// The program put `fd`, not a carried connection, in an epoll set (`EPOLL_CTL_ADD`):
/// if `fd` is an epoll set, it is nested, so its waiters are foreign.
pub fn added_elsewhere(fd: i32) {
    bit(&NESTED, fd, Some(true));
    foreign_if_set(fd);
}

/// The program polls (or selects) `fds`: those that are sets with carried members
/// have foreign waiters from now on.
pub fn polled(fds: impl Iterator<Item = i32>) {
    // The wait of this thread's own `epoll_wait` on a set polls the set (the runtime's
    // sleep calls `poll`, which is ours): not a foreign waiter.
    let own = WAITING_ON.try_with(|w| w.get().1).unwrap_or(-1);
    for fd in fds.filter(|&fd| fd != own) {
        if !bit(&NESTED, fd, None) {
            bit(&NESTED, fd, Some(true));
        }
        foreign_if_set(fd);
    }
}

fn foreign_if_set(fd: i32) {
    if COUNT.load(Ordering::Acquire) == 0
        || (fd >= 0 && (fd as usize) < BITS && !bit(&HUBBED, fd, None))
    {
        return;
    }
    if let Some(set) = SETS.lock().as_ref().and_then(|m| m.get(&fd)) {
        set.hub.foreign.store(true, Ordering::SeqCst);
        set.ring_if_ready();
    }
}

/// A new set for `epfd`, its hub registered in it; `Err(errno)` when that failed.
fn new_set(epfd: i32) -> Result<Set, i32> {
    // SAFETY: plain system call.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    crate::fds::mark_plain(fd);
    let mut ev = epoll_event {
        events: IN | ET,
        u64: HUB_DATA,
    };
    // SAFETY: a valid event for our own eventfd.
    if unsafe { crate::real::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        let e = errno();
        // SAFETY: our own descriptor.
        unsafe { crate::real::close(fd) };
        return Err(e);
    }
    let hub = Arc::new(Hub {
        fd,
        epfd,
        waiters: AtomicU32::new(0),
        foreign: AtomicBool::new(bit(&NESTED, epfd, None)),
    });
    bit(&HUBBED, epfd, Some(true));
    Ok(Set {
        hub,
        members: Vec::new(),
        at: HashMap::new(),
        next: 0,
    })
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn set_errno(e: i32) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// `epoll_ctl(epfd, op, fd, ev)` for the carried `conn`: the kernel registration of
/// the socket (without `EPOLLOUT` once it writes on omx; no system call for a
/// level-triggered `MOD` that changes nothing the kernel holds) and the set's record.
///
/// # Safety
/// `ev` is null or valid.
pub unsafe fn ctl(epfd: i32, op: i32, fd: i32, ev: *mut epoll_event, conn: &Arc<Conn>) -> i32 {
    let kernel_out = !conn.writes_on_omx();
    let program = (!ev.is_null()).then(|| *ev);
    let mut kernel = program;
    if let Some(k) = kernel.as_mut().filter(|_| !kernel_out) {
        k.events &= !OUT;
    }
    let mut sets = SETS.lock();
    let map = sets.get_or_insert_with(HashMap::new);
    let plain = |e: u32| e & (ET | ONESHOT) == 0;
    if let (libc::EPOLL_CTL_MOD, Some(p), Some(k)) = (op, program, kernel) {
        if let Some(m) = map.get_mut(&epfd).and_then(|s| {
            let i = *s.at.get(&fd)?;
            s.members.get_mut(i)
        }) {
            if m.kernel_events == k.events && m.data == k.u64 && plain(k.events) && plain(m.events)
            {
                // The kernel holds this registration already, level-triggered.
                m.events = p.events;
                m.kernel_out = kernel_out;
                m.reported = None;
                m.reported_in = None;
                m.fired = false;
                return 0;
            }
        }
    }
    let kernel_ptr = kernel
        .as_mut()
        .map_or(std::ptr::null_mut(), |k| k as *mut epoll_event);
    let r = crate::real::epoll_ctl(epfd, op, fd, kernel_ptr);
    if r != 0 {
        return r;
    }
    let errno_after = errno();
    let set = match map.entry(epfd) {
        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
        std::collections::hash_map::Entry::Vacant(_) if op == libc::EPOLL_CTL_DEL => return r,
        std::collections::hash_map::Entry::Vacant(v) => match new_set(epfd) {
            Ok(s) => v.insert(s),
            Err(e) => {
                if op == libc::EPOLL_CTL_ADD {
                    crate::real::epoll_ctl(epfd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
                }
                set_errno(e);
                return -1;
            }
        },
    };
    match (op, program, kernel) {
        (libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD, Some(p), Some(k)) => {
            let fresh = Member {
                fd,
                conn: Arc::downgrade(conn),
                events: p.events,
                data: p.u64,
                kernel_events: k.events,
                kernel_out,
                reported: None,
                reported_in: None,
                fired: false,
            };
            match set.at.get(&fd) {
                Some(&i) => set.members[i] = fresh,
                None => {
                    conn.ready.watch_epoll(&set.hub);
                    set.at.insert(fd, set.members.len());
                    set.members.push(fresh);
                }
            }
        }
        _ => {
            if let Some(m) = set.remove(fd) {
                if let Some(c) = m.conn.upgrade() {
                    c.ready.unwatch_epoll(&set.hub);
                }
            }
        }
    }
    if (set.hub.foreign.load(Ordering::SeqCst) || kernel_waiting(epfd)) && op != libc::EPOLL_CTL_DEL
    {
        set.ring_if_ready();
    }
    let sets_now = map.len();
    COUNT.store(sets_now, Ordering::Release);
    set_errno(errno_after);
    r
}

/// A descriptor closed: as an epoll set it is gone (its hub closed), as a member it
/// left every set (the library keeps its own duplicate of the socket, so the kernel
/// would keep it).
pub fn closed(fd: i32) {
    bit(&NESTED, fd, Some(false));
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut sets = SETS.lock();
    let Some(map) = sets.as_mut() else { return };
    if let Some(mut gone) = map.remove(&fd) {
        bit(&HUBBED, fd, Some(false));
        gone.leave_all();
        // SAFETY: the hub is ours.
        unsafe { crate::real::close(gone.hub.fd) };
    }
    for set in map.values_mut() {
        if let Some(m) = set.remove(fd) {
            if let Some(c) = m.conn.upgrade() {
                c.ready.unwatch_epoll(&set.hub);
            }
        }
    }
    COUNT.store(map.len(), Ordering::Release);
}

/// True when `epfd` may be a set with a hub (its events may hold the hub's).
pub fn hubbed(epfd: i32) -> bool {
    COUNT.load(Ordering::Acquire) > 0 && bit(&HUBBED, epfd, None)
}

/// The hub of `epfd` when it is a set with carried members now.
pub fn hub_with_members(epfd: i32) -> Option<Arc<Hub>> {
    if !hubbed(epfd) {
        return None;
    }
    SETS.lock()
        .as_ref()?
        .get(&epfd)
        .filter(|s| !s.members.is_empty())
        .map(|s| s.hub.clone())
}

/// Takes the hub's events out of the first `n` (a ring, seen once: the hub is
/// edge-triggered); returns the new count.
pub fn strip_hub(events: &mut [epoll_event], n: usize) -> usize {
    let mut kept = 0;
    for i in 0..n {
        let e = events[i];
        if e.u64 != HUB_DATA {
            events[kept] = e;
            kept += 1;
        }
    }
    kept
}

/// Adds what the kernel cannot know to the `n` events it gave (hub's taken out):
/// `EPOLLIN` for members with messages and `EPOLLOUT` for members with room in their
/// window (merged into a member's event when the kernel reported it too); returns the
/// new count, and a member whose window is full, whose room a wait must watch for.
/// `EPOLLIN` of a member with fewer bytes than its `SO_RCVLOWAT` is left out (as
/// TCP's); an `EPOLLONESHOT` member that reported is disarmed until `EPOLL_CTL_MOD`.
pub fn add_ready(epfd: i32, events: &mut [epoll_event], n: usize) -> (usize, Option<Arc<Conn>>) {
    let mut n = n;
    let mut full = None;
    let mut sets = SETS.lock();
    let Some(set) = sets.as_mut().and_then(|m| m.get_mut(&epfd)) else {
        return (n, None);
    };
    let len = set.members.len();
    if len == 0 {
        return (n, None);
    }
    let start = set.next % len;
    set.next = start + 1;
    for k in 0..len {
        let m = &mut set.members[(start + k) % len];
        let Some(conn) = m.conn.upgrade() else {
            continue;
        };
        n = merge_events_of(m.data, events, n);
        if m.fired {
            continue;
        }
        let kernel_said = events[..n].iter().any(|e| e.u64 == m.data);
        if conn.settling() {
            n = hello_only(m, &conn, events, n);
        }
        if conn.lowat() > 1 {
            n = below_lowat(m, &conn, events, n);
        }
        if m.events & INPUT != 0 {
            n = add_input(m, &conn, events, n);
        }
        if m.events & OUT != 0 {
            n = add_room(epfd, m, &conn, events, n, &mut full);
        }
        if m.oneshot() {
            let reports = events[..n].iter().any(|e| e.u64 == m.data);
            match (reports, kernel_said) {
                // The kernel disarmed its registration itself.
                (true, true) => m.fired = true,
                (true, false) => {
                    m.fired = true;
                    m.kernel_mod(epfd, ONESHOT);
                }
                // The kernel's event was taken out: its registration is armed again.
                (false, true) => m.kernel_mod(epfd, m.kernel_events),
                (false, false) => {}
            }
        }
    }
    (n, full)
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

/// Takes the kernel's `EPOLLIN` out of member `m`'s event among the first `n` when
/// fewer bytes than its `SO_RCVLOWAT` are there; returns the new count.
fn below_lowat(m: &Member, conn: &Conn, events: &mut [epoll_event], n: usize) -> usize {
    match input_event(m, events, n) {
        Some(at) if !conn.lowat_met() => take_input(events, n, at),
        _ => n,
    }
}

/// Puts `bits` in member `m`'s event among the first `n` (a new event if there is
/// room); returns the new count and whether they are in.
fn report(m: &Member, bits: u32, events: &mut [epoll_event], n: usize) -> (usize, bool) {
    let room = n < events.len();
    match events[..n].iter_mut().find(|e| e.u64 == m.data) {
        Some(e) => {
            e.events |= bits;
            (n, true)
        }
        None if room => {
            events[n] = epoll_event {
                events: bits,
                u64: m.data,
            };
            (n + 1, true)
        }
        None => (n, false),
    }
}

/// Adds `EPOLLIN` for member `m` (which asks for it) when its connection has messages
/// for a read (and `SO_RCVLOWAT` bytes): level-triggered while so, edge-triggered once
/// per arrival since the last report (or since `EPOLL_CTL_ADD`/`MOD`).
fn add_input(m: &mut Member, conn: &Conn, events: &mut [epoll_event], n: usize) -> usize {
    let (pending, arrivals) = conn.ready.counts();
    if pending == 0 {
        return n;
    }
    let edge = m.events & ET != 0;
    if edge && m.reported_in == Some(arrivals) {
        return n;
    }
    if conn.lowat() > 1 && !conn.lowat_met() {
        return n;
    }
    let (n, added) = report(m, m.events & INPUT, events, n);
    if added && edge {
        m.reported_in = Some(arrivals);
    }
    n
}

/// Adds `EPOLLOUT` for member `m` (which asks for it) to the first `n` events when its
/// window has room: level-triggered whenever there is room; edge-triggered once after
/// each time a write found the window full (and once after `EPOLL_CTL_ADD`/`MOD`).
/// Returns the new count, and sets `full` to the connection when the window is full.
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
        m.kernel_mod(epfd, m.events & !OUT);
        m.kernel_out = false;
    }
    let hits = conn.full_hits();
    if !conn.writable() {
        *full = Some(conn.clone());
        return n;
    }
    let edge = m.events & ET != 0;
    if edge && m.reported == Some(hits) {
        return n;
    }
    let (n, added) = report(m, OUT, events, n);
    if added && edge {
        m.reported = Some(hits);
    }
    n
}

/// Folds the events carrying `data` among the first `n` into the first of them;
/// returns the new count.
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

#[cfg(test)]
impl Hub {
    pub fn for_test(fd: i32, foreign: bool) -> Arc<Hub> {
        Arc::new(Hub {
            fd,
            epfd: -1,
            waiters: AtomicU32::new(0),
            foreign: AtomicBool::new(foreign),
        })
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }
}
