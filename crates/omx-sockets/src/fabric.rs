//! The process's omx endpoint (opened on the first connection that may be carried), its
//! partners, the wake-up of a connection's readiness descriptor when a message for
//! it arrives, and the blocking waits of the program's threads.

use crate::real;
use omx_proto::{NicId, PartnerId, UnexpectedInfo};
use omx_runtime::{Endpoint, Runtime, Spin, WatchEnd};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Application key of every sockets endpoint.
pub const KEY: u32 = 0x534f_434b;
/// Match bits 32..40 say what a message is; the low 32 bits are the receiving
/// connection's id. Data messages have kind 0 (a zero-length one ends the sender's omx
/// writes, see docs/SOCKETS.md "Processes: fork and exec").
const KIND_SHIFT: u32 = 32;
/// The one control message: the count of bytes sent over TCP before the sender moved
/// to omx.
pub const CONTROL: u64 = 1 << KIND_SHIFT;
/// The peer's side moved back to TCP (a forked child took it): send back what was
/// received and not read.
pub const FALLBACK: u64 = 2 << KIND_SHIFT;
/// Bytes sent back after a `FALLBACK` (a zero-length one ends them).
pub const BOUNCE: u64 = 3 << KIND_SHIFT;
/// The peer's program closed its socket (a hint sent at its close, zero bytes, never
/// matched by a receive): this end's writes look at the kernel socket from then on
/// (its FIN, then the reset a write's probe brings), as TCP's second write after the
/// peer's close fails.
pub const CLOSED: u64 = 4 << KIND_SHIFT;
const KIND_MASK: u64 = 0xff << KIND_SHIFT;
/// How long setting up the omx partner of a new connection may take before the
/// connection stays on TCP.
const PARTNER_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Fabric {
    pub ep: Endpoint,
    pub nic: NicId,
    pub index: u8,
    partners: Mutex<HashMap<(NicId, u8), PartnerId>>,
    next_conn: AtomicU32,
}

/// Readiness of each carried connection, by connection id.
static WAKERS: Mutex<Option<HashMap<u32, Arc<Readiness>>>> = Mutex::new(None);
static FABRIC: OnceLock<Option<Fabric>> = OnceLock::new();
/// Set in a child forked after the endpoint opened: the endpoint's threads stayed in the
/// parent, so the child has no omx (its connections stay on TCP).
static FORKED: AtomicBool = AtomicBool::new(false);
/// Children forked by this process since its endpoint opened: a connection that existed
/// before a fork may be used by the child (see `Conn::release`).
static FORKS: AtomicU32 = AtomicU32::new(0);

extern "C" fn after_fork_in_child() {
    FORKED.store(true, Ordering::Release);
}

extern "C" fn after_fork_in_parent() {
    FORKS.fetch_add(1, Ordering::AcqRel);
}

pub fn forks() -> u32 {
    FORKS.load(Ordering::Acquire)
}

pub fn in_forked_child() -> bool {
    FORKED.load(Ordering::Acquire)
}

pub fn verbose() -> bool {
    static V: OnceLock<bool> = OnceLock::new();
    *V.get_or_init(|| {
        omx_runtime::config::settings::var("OMX_SOCKETS_VERBOSE").is_some_and(|v| v == "1")
    })
}

/// The endpoint, opened on first use; `None` when omx cannot run here (no board, no
/// privilege and no omxd): every connection then stays on TCP.
pub fn fabric() -> Option<&'static Fabric> {
    if in_forked_child() {
        return None;
    }
    FABRIC.get_or_init(open).as_ref()
}

/// True when this process has its endpoint already.
pub fn is_open() -> bool {
    !in_forked_child() && FABRIC.get().is_some_and(|f| f.is_some())
}

fn open() -> Option<Fabric> {
    let fail = |what: String| {
        if verbose() {
            eprintln!("omx_sockets: staying on TCP: {what}");
        }
        None
    };
    let rt = match Runtime::global() {
        Ok(rt) => rt,
        Err(e) => return fail(e),
    };
    if rt.boards.is_empty() {
        return fail("no omx board".into());
    }
    let ep = match Endpoint::open(&rt, 0, None, KEY) {
        Ok(ep) => ep,
        Err(e) => return fail(format!("cannot open an endpoint: {e}")),
    };
    ep.set_unexpected_handler(Some(Box::new(wake_receiver)));
    // A send completes once the peer's endpoint has it, not when posted: a closing
    // connection waits for its sends before the kernel socket's FIN, so the FIN can
    // never overtake the last bytes (the reader takes the FIN as the end of them).
    ep.set_zombie_max(0);
    let nic = ep.board().nic_id;
    let index = ep.index();
    crate::stream::claims::init();
    // SAFETY: flush_all_at_exit is an extern "C" fn without arguments.
    unsafe { libc::atexit(flush_all_at_exit) };
    // SAFETY: registers handlers that only store to atomics.
    unsafe { libc::pthread_atfork(None, Some(after_fork_in_parent), Some(after_fork_in_child)) };
    Some(Fabric {
        ep,
        nic,
        index,
        partners: Mutex::new(HashMap::new()),
        next_conn: AtomicU32::new(std::process::id().wrapping_mul(2_654_435_761)),
    })
}

extern "C" fn flush_all_at_exit() {
    crate::stream::flush_all();
    // Under OMX_FAULTS, what was injected (the tests check that faults happened).
    if let (true, Some(Some(fab))) = (verbose() && !in_forked_child(), FABRIC.get()) {
        if let Some(f) = fab.ep.fault_stats() {
            eprintln!(
                "omx_sockets: faults injected: {} dropped, {} duplicated, {} reordered",
                f.dropped_rx + f.dropped_tx,
                f.duplicated,
                f.reordered
            );
        }
    }
}

/// Messages for carried connections seen so far (any connection): a blocked thread
/// notes it, looks, then waits until it moves (see [`block`]).
static ARRIVALS: AtomicU64 = AtomicU64::new(0);

pub fn arrivals() -> u64 {
    ARRIVALS.load(Ordering::SeqCst)
}

/// Called, by whichever thread makes progress, for every message that no receive was
/// posted for (before it is stored).
fn wake_receiver(info: &UnexpectedInfo) -> bool {
    let id = info.match_info as u32;
    let wakers = WAKERS.lock();
    let Some(ready) = wakers.as_ref().and_then(|w| w.get(&id)) else {
        // No such connection (closed, or a stray message): drop it.
        return true;
    };
    match info.match_info & KIND_MASK {
        // What a read takes: counted in its readiness.
        0 => ready.add(),
        // Kept for the reader (how many bytes came over TCP first), but never makes the
        // connection readable: a read that takes it alone has nothing to return, so a
        // `select` that said readable was followed by `EAGAIN` (rsync's daemon child
        // then fails: "safe_read failed to read 1 bytes"; `control-not-readable`).
        CONTROL => {}
        // Taken by a thread of its own (it may wait on the network).
        FALLBACK => crate::stream::handover::on_fallback_request(id),
        // Taken by the thread that asked for it.
        BOUNCE => {}
        // A hint, dropped once noted.
        CLOSED => {
            ready.peer_closed.store(true, Ordering::Relaxed);
            return true;
        }
        // Unknown kind: drop it.
        _ => return true,
    }
    // Any kept message may be what a blocked thread waits for.
    ARRIVALS.fetch_add(1, Ordering::SeqCst);
    false
}

/// Why [`block`] returned early.
pub struct Interrupted;

/// Blocks the calling thread until one of `watch` is ready, a message for a carried
/// connection arrives after `seen` (a value of [`arrivals`] read before the caller last
/// looked), or `timeout`; `Err` on a signal. The thread waits in the endpoint itself
/// (its spin, then a sleep on the endpoint's descriptors with `watch` beside them), so
/// the frame that brings a message wakes this thread, which takes it: a single
/// wake-up per message. (Sleeping on the connections' eventfds instead needed the
/// progress thread to wake first, which naps while the program called in recently:
/// hundreds of microseconds per message.) A forked child has no endpoint: plain poll.
pub fn block(
    watch: &[libc::pollfd],
    timeout: Option<Duration>,
    seen: u64,
) -> Result<(), Interrupted> {
    block_with(watch, timeout, seen, Spin::Adaptive)
}

/// [`block`] whose spins (the yielding one and the endpoint's) are skipped with
/// `Spin::Skip`: a wait for a bulk stream's next message sleeps at once.
pub fn block_with(
    watch: &[libc::pollfd],
    timeout: Option<Duration>,
    seen: u64,
    spin: Spin,
) -> Result<(), Interrupted> {
    let Some(fab) = fabric() else {
        let mut fds = watch.to_vec();
        let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
        // SAFETY: valid pollfds.
        let r = unsafe { real::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        let eintr = r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
        return if eintr { Err(Interrupted) } else { Ok(()) };
    };
    // The yielding spin while it pays (the last one ended right after a yield that let
    // another thread run here: the peer shares this CPU), and every
    // `YIELDING_PROBE_EVERY`th wait to find out again.
    let (on, n) = YIELDING.try_with(Cell::get).unwrap_or((false, 1));
    let n = n.wrapping_add(1);
    let mut mode = on;
    // A wait that skips the spins leaves the yielding spin's state as it was.
    if spin == Spin::Adaptive && (on || n.is_multiple_of(YIELDING_PROBE_EVERY)) {
        let got = yielding_spin(fab, watch, timeout, seen);
        mode = match got {
            None => false,
            Some(None) => on,
            Some(Some(ran_other)) => ran_other,
        };
        let _ = YIELDING.try_with(|y| y.set((mode, n)));
        if got.is_some() {
            return Ok(());
        }
    } else {
        let _ = YIELDING.try_with(|y| y.set((mode, n)));
    }
    match fab
        .ep
        .wait_watching_with(timeout, watch, spin, || arrivals() != seen)
    {
        WatchEnd::Interrupted => Err(Interrupted),
        WatchEnd::Ready | WatchEnd::Watched | WatchEnd::TimedOut => Ok(()),
    }
}

/// Sleeps in the kernel until one of `watch` is ready or `timeout` passed, without
/// driving the endpoint (its progress thread does, see `arm_notify`).
pub fn sleep_on(watch: &mut [libc::pollfd], timeout: Option<Duration>) -> Result<(), Interrupted> {
    let ms = timeout.map_or(-1, |t| {
        // Rounded up: a wait of less than a millisecond must not become a busy loop.
        (t.as_micros().div_ceil(1000)).min(i32::MAX as u128) as i32
    });
    // SAFETY: valid pollfds.
    let r = unsafe { real::poll(watch.as_mut_ptr(), watch.len() as libc::nfds_t, ms) };
    for p in watch.iter_mut() {
        p.revents = 0;
    }
    if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
        return Err(Interrupted);
    }
    Ok(())
}

/// The yielding spin that starts a blocking wait lasts `OMX_WAITSPIN_US`, at most this.
const YIELDING_SPIN_MAX: Duration = Duration::from_micros(20);
/// It looks at the caller's descriptors every this many passes (a system call each).
const YIELDING_LOOK_EVERY: u32 = 4;
/// A yield that took this long let another thread run on this CPU.
const YIELD_RAN_OTHER: Duration = Duration::from_nanos(1_500);
/// A thread whose peer was not on its CPU tries the yielding spin again this often.
const YIELDING_PROBE_EVERY: u32 = 32;

thread_local! {
    /// (whether this thread's waits start with the yielding spin, waits so far)
    static YIELDING: Cell<(bool, u32)> = const { Cell::new((true, 0)) };
}

/// The start of a blocking wait: progress passes with the CPU yielded between them,
/// for `OMX_WAITSPIN_US` (20 µs at most); true once a message arrived after `seen` or
/// one of `watch` is ready. The runtime's own spin busy-polls 5 µs before its first
/// yield, then yields every 3 µs: when both ends of a ping-pong share one CPU (the
/// scheduler's choice on a busy machine) the peer that would answer runs only when the
/// spin yields, so every message waited that long (sockperf 16 B: 10-11 µs one way on
/// one CPU against 2.6 µs on two, measured with `taskset`). Yielding at every pass
/// lets a peer on this CPU run at once and costs a system call per pass otherwise
/// (and, on a busy machine, may hand the CPU to another program for a time slice), so
/// [`block`] keeps it for threads whose waits it ends. `None`: nothing arrived;
/// `Some(Some(true))`: it arrived during a yield that let another thread run here,
/// `Some(Some(false))` during a yield that did not, `Some(None)` before any yield.
fn yielding_spin(
    fab: &Fabric,
    watch: &[libc::pollfd],
    timeout: Option<Duration>,
    seen: u64,
) -> Option<Option<bool>> {
    let cfg = &fab.ep.runtime().cfg;
    let budget = cfg
        .wait_spin_for
        .min(YIELDING_SPIN_MAX)
        .min(timeout.unwrap_or(Duration::MAX));
    if budget.is_zero() {
        return None;
    }
    let start = std::time::Instant::now();
    let mut looked = watch.to_vec();
    let mut pass = 0u32;
    // How the last yield went (None before the first).
    let mut ran_other = None;
    loop {
        fab.ep.progress();
        if arrivals() != seen {
            return Some(ran_other);
        }
        pass += 1;
        if pass.is_multiple_of(YIELDING_LOOK_EVERY) && !looked.is_empty() {
            // SAFETY: valid pollfds, no wait.
            if unsafe { real::poll(looked.as_mut_ptr(), looked.len() as libc::nfds_t, 0) } > 0 {
                return Some(ran_other);
            }
        }
        let now = std::time::Instant::now();
        if now - start >= budget {
            return None;
        }
        std::thread::yield_now();
        ran_other = Some(now.elapsed() >= YIELD_RAN_OTHER);
    }
}

/// What a connection has for a read (messages arrived and not taken, plus one while a
/// taken message has bytes left), and its readiness descriptor: a semaphore eventfd
/// that `poll`/`select` and blocked reads watch beside the socket. The descriptor holds
/// the count only while someone may look at it (a `poll`/`select` under way, a read
/// blocked on the connection): it then holds 1 while `pending` is above 0, rung on
/// the edge from nothing to something and read back on the edge to nothing, so a
/// stream whose reader selects before every read (iperf3) makes no system call for the
/// messages between (it was a write at each `select` and a read at each take), except
/// a thread's own arrivals while it watches (it takes the frame itself and looks at
/// `pending` before it waits again). Epoll sets do not use the descriptor: they look
/// at `pending` and `arrivals` in memory, and an arrival rings the hub of each set
/// the connection is in when someone may sleep on it (`crate::epoll`).
pub struct Readiness {
    pub evfd: i32,
    id: u32,
    state: Mutex<ReadyState>,
    /// The peer's `CLOSED` came.
    peer_closed: AtomicBool,
}

#[derive(Default)]
struct ReadyState {
    /// What a read takes, as counted.
    pending: u64,
    /// What the eventfd holds (never more than `pending`).
    in_fd: u64,
    /// Messages counted so far (edge-triggered epoll reports each).
    arrivals: u64,
    /// `poll`/`select` calls and blocked reads under way.
    watchers: u32,
    /// Hubs of the epoll sets the connection is in (one per membership).
    hubs: Vec<Arc<crate::epoll::Hub>>,
}

impl ReadyState {
    /// What the eventfd should hold for its watchers: 1 while there is anything
    /// (level-triggered looks only).
    fn target(&self) -> u64 {
        self.pending.min(1)
    }
}

thread_local! {
    /// Connections the calling thread waits on (a `poll`, `select` or blocked read):
    /// arrivals it takes itself need not ring the eventfd it would wake from.
    static WATCHING: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

impl Readiness {
    fn new(id: u32, evfd: i32) -> Arc<Readiness> {
        Arc::new(Readiness {
            evfd,
            id,
            peer_closed: AtomicBool::new(false),
            state: Mutex::new(ReadyState::default()),
        })
    }

    /// One more for a read (a message arrived, a taken one has bytes left, a reader must
    /// look again).
    pub fn add(&self) {
        if in_forked_child() {
            return;
        }
        let mut st = self.state.lock();
        st.pending += 1;
        st.arrivals += 1;
        for hub in &st.hubs {
            hub.arrival();
        }
        // Only a sole watcher may be this thread (after the thread's locals are gone,
        // at exit, it rings as if another looked).
        let ring = match st.watchers {
            0 => false,
            1 => !WATCHING
                .try_with(|w| w.borrow().contains(&self.id))
                .unwrap_or(false),
            _ => true,
        };
        if ring && st.in_fd < st.target() {
            signal(self.evfd);
            st.in_fd += 1;
        }
    }

    /// One fewer for a read.
    pub fn take(&self) {
        if in_forked_child() {
            return;
        }
        let mut st = self.state.lock();
        st.pending = st.pending.saturating_sub(1);
        if st.in_fd > st.pending {
            take_one(self.evfd);
            st.in_fd -= 1;
        }
    }

    /// True while a read has something to take (or to look at). (A forked child never
    /// takes the lock: a thread of the parent may have held it at the fork; the
    /// child's messages go to the parent anyway.)
    pub fn pending(&self) -> bool {
        !in_forked_child() && self.state.lock().pending > 0
    }

    /// (`pending`, arrivals so far) for an epoll set's look; nothing in a forked child.
    pub fn counts(&self) -> (u64, u64) {
        if in_forked_child() {
            return (0, 0);
        }
        let st = self.state.lock();
        (st.pending, st.arrivals)
    }

    /// The peer's program closed its socket (its `CLOSED` came).
    pub fn peer_closed(&self) -> bool {
        self.peer_closed.load(Ordering::Relaxed)
    }

    /// A `poll`/`select` or a blocked read may look at the eventfd from now on: it is
    /// readable if there is anything.
    pub fn watch(&self) {
        if in_forked_child() {
            return;
        }
        let mut st = self.state.lock();
        st.watchers += 1;
        let target = st.target();
        if st.in_fd < target {
            let more = target - st.in_fd;
            // SAFETY: writes 8 bytes from a local to an eventfd.
            unsafe { real::write(self.evfd, &more as *const u64 as *const libc::c_void, 8) };
            st.in_fd = target;
        }
    }

    pub fn unwatch(&self) {
        if in_forked_child() {
            return;
        }
        let mut st = self.state.lock();
        st.watchers = st.watchers.saturating_sub(1);
    }

    /// The connection joined the epoll set of `hub`: arrivals ring it when needed.
    pub fn watch_epoll(&self, hub: &Arc<crate::epoll::Hub>) {
        if in_forked_child() {
            return;
        }
        self.state.lock().hubs.push(hub.clone());
    }

    /// The connection left the epoll set of `hub`.
    pub fn unwatch_epoll(&self, hub: &Arc<crate::epoll::Hub>) {
        if in_forked_child() {
            return;
        }
        let mut st = self.state.lock();
        if let Some(i) = st.hubs.iter().position(|h| Arc::ptr_eq(h, hub)) {
            st.hubs.swap_remove(i);
        }
    }
}

/// Runs `f` with the calling thread watching `ready` (see [`Readiness`]).
pub fn watching<R>(ready: &[&Readiness], f: impl FnOnce() -> R) -> R {
    for r in ready {
        r.watch();
    }
    // (`try_with`: the thread's locals are gone during `exit`, whose handlers may
    // wait; its arrivals then ring the descriptors.)
    let _ = WATCHING.try_with(|w| w.borrow_mut().extend(ready.iter().map(|r| r.id)));
    let out = f();
    let _ = WATCHING.try_with(|w| {
        let mut w = w.borrow_mut();
        for r in ready {
            if let Some(i) = w.iter().rposition(|&id| id == r.id) {
                w.swap_remove(i);
            }
        }
    });
    for r in ready {
        r.unwatch();
    }
    out
}

pub fn signal(evfd: i32) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a local to an eventfd.
    unsafe { real::write(evfd, &one as *const u64 as *const libc::c_void, 8) };
}

/// Takes one from a readiness descriptor's count (a semaphore eventfd).
pub fn take_one(evfd: i32) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a local from a non-blocking eventfd.
    unsafe { real::read(evfd, &mut v as *mut u64 as *mut libc::c_void, 8) };
}

/// Connection `id`'s readiness, with `evfd` as its descriptor (the one registered
/// already for `id` if it has that descriptor).
pub fn register_waker(id: u32, evfd: i32) -> Arc<Readiness> {
    let mut wakers = WAKERS.lock();
    let map = wakers.get_or_insert_with(HashMap::new);
    match map.get(&id) {
        Some(r) if r.evfd == evfd => r.clone(),
        _ => {
            let r = Readiness::new(id, evfd);
            map.insert(id, r.clone());
            r
        }
    }
}

pub fn unregister_waker(id: u32) {
    if let Some(w) = WAKERS.lock().as_mut() {
        w.remove(&id);
    }
}

impl Fabric {
    pub fn new_conn_id(&self) -> u32 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// A partner whose process died: its operations fail and it is connected afresh
    /// next time.
    pub fn forget_partner(&self, p: PartnerId) {
        self.partners.lock().retain(|_, &mut q| q != p);
        self.ep.disconnect(p);
    }

    /// The partner for the endpoint `(nic, index)`, connected once per process.
    pub fn partner(&self, nic: NicId, index: u8) -> Option<PartnerId> {
        if let Some(&p) = self.partners.lock().get(&(nic, index)) {
            return Some(p);
        }
        match self.ep.connect(nic, index, KEY, Some(PARTNER_TIMEOUT)) {
            Ok(Ok(p)) => {
                self.partners.lock().insert((nic, index), p);
                Some(p)
            }
            other => {
                if verbose() {
                    eprintln!("omx_sockets: no omx partner {nic:#x}:{index}: {other:?}");
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eventfd() -> i32 {
        // SAFETY: plain system call.
        let fd = unsafe {
            libc::eventfd(
                0,
                libc::EFD_NONBLOCK | libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE,
            )
        };
        assert!(fd >= 0);
        fd
    }

    /// What the eventfd holds, read without taking it (`/proc/self/fdinfo`).
    fn held(fd: i32) -> u64 {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        let hex = info
            .lines()
            .find_map(|l| l.strip_prefix("eventfd-count:"))
            .unwrap()
            .trim();
        u64::from_str_radix(hex, 16).unwrap()
    }

    #[test]
    fn an_epoll_set_looks_at_the_count_and_its_hub_rings_only_for_another_waiter() {
        use crate::epoll::{Hub, Waiting};
        let r = Readiness::new(0x7e57_0001, eventfd());
        let hub = Hub::for_test(eventfd(), false);
        r.watch_epoll(&hub);
        r.add();
        r.add();
        assert_eq!(r.counts(), (2, 2));
        assert_eq!(held(r.evfd), 0, "an epoll set does not use the eventfd");
        assert_eq!(held(hub.fd()), 0, "nobody waits on the set: no system call");
        {
            let _w = Waiting::new(hub.clone());
            r.add();
            assert_eq!(
                held(hub.fd()),
                0,
                "the waiting thread takes its own arrival"
            );
            std::thread::scope(|s| {
                s.spawn(|| r.add());
            });
            assert_eq!(
                held(hub.fd()),
                1,
                "another thread's arrival rings the waiter"
            );
        }
        // Another thread waits on the set while this one takes a frame in.
        let (waiting, done) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                let _w = Waiting::new(hub.clone());
                waiting.wait();
                done.wait();
            });
            waiting.wait();
            r.add();
            done.wait();
        });
        assert_eq!(held(hub.fd()), 2);
        r.take();
        assert_eq!(
            r.counts(),
            (4, 5),
            "a take leaves the arrivals as they were"
        );
        r.unwatch_epoll(&hub);
        {
            let _w = Waiting::new(hub.clone());
            std::thread::scope(|s| {
                s.spawn(|| r.add());
            });
        }
        assert_eq!(held(hub.fd()), 2, "out of the set: not rung");
        // A waiter we cannot see (the set was polled or nested): every arrival rings.
        let foreign = Hub::for_test(eventfd(), true);
        r.watch_epoll(&foreign);
        r.add();
        assert_eq!(held(foreign.fd()), 1);
        r.unwatch_epoll(&foreign);
        // A thread in the kernel's epoll_wait on the set (the test hub's descriptor is
        // -1, counted with the large ones): rung while it is there only.
        let kernel = Hub::for_test(eventfd(), false);
        r.watch_epoll(&kernel);
        {
            let _k = crate::epoll::KernelWaiting::new(-1);
            r.add();
        }
        r.add();
        assert_eq!(held(kernel.fd()), 1);
        r.unwatch_epoll(&kernel);
    }

    #[test]
    fn poll_and_select_see_one_while_anything_waits_rung_on_its_edges_only() {
        let r = Readiness::new(0x7e57_0003, eventfd());
        r.add();
        r.add();
        r.watch();
        assert_eq!(held(r.evfd), 1, "readable: one is enough for poll");
        r.add();
        assert_eq!(held(r.evfd), 1, "already readable: not rung");
        r.take();
        r.take();
        assert_eq!(held(r.evfd), 1, "still something to read");
        r.take();
        assert!(!r.pending());
        assert_eq!(held(r.evfd), 0, "nothing left: not readable");
        // Another thread's arrival rings the edge from nothing to something.
        std::thread::scope(|s| {
            s.spawn(|| r.add());
        });
        assert_eq!(held(r.evfd), 1);
        r.unwatch();
        r.add();
        assert_eq!(held(r.evfd), 1, "unwatched: not rung");
        for left in [1, 0] {
            r.take();
            assert_eq!(held(r.evfd), left, "never more than the count");
        }
        assert!(!r.pending());
    }

    #[test]
    fn a_thread_does_not_ring_for_itself_but_for_another_watcher() {
        let r = Readiness::new(0x7e57_0002, eventfd());
        watching(&[&r], || {
            r.add();
            assert_eq!(held(r.evfd), 0, "the watching thread looks at the count");
        });
        assert!(r.pending());
        // Another thread watches too: it must see the message.
        r.watch();
        assert_eq!(held(r.evfd), 1);
        watching(&[&r], || r.add());
        assert_eq!(held(r.evfd), 1);
        r.take();
        r.take();
        r.unwatch();
        assert_eq!(held(r.evfd), 0);
        // Another thread's arrival rings for this thread's wait.
        watching(&[&r], || {
            std::thread::scope(|s| {
                s.spawn(|| r.add());
            });
            assert_eq!(held(r.evfd), 1);
        });
    }
}
