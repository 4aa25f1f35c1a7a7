//! Waiting: spinning, then sleeping in the kernel on the sockets, the eventfd and the
//! shared-memory doorbell, with the wake-up coalescing policies.

use super::direct_rx::take_late_replies;
use super::spin::SpinAdvisor;
use super::{Core, CoreGuard, EndpointInner, Spin, RX_BATCH};
use crate::config::Coalescing;
use crate::runtime::Runtime;
use omx_proto::*;
use omx_transport::{DirectRx, PacketSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Which wake-up descriptors fired during a sleep.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Fired {
    /// The eventfd (another thread's completion or `wakeup`).
    pub(super) event: bool,
    /// The shared-memory inbox's doorbell FIFO.
    pub(super) doorbell: bool,
    /// A signal handler ran during the sleep (`EINTR`).
    pub(super) interrupted: bool,
    /// One of the caller's own descriptors (`Endpoint::wait_watching`) is ready.
    pub(super) watched: bool,
}

/// How a wait ended without its condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// The timeout passed, `wakeup()` was called or the endpoint closes.
    Timeout,
    /// One of the caller's descriptors is ready.
    Watched,
    /// A signal interrupted the sleep.
    Interrupted,
}

/// Whether one of `watch` is ready now (a look without waiting).
fn watched_ready(watch: &mut [libc::pollfd]) -> bool {
    // SAFETY: valid pollfds, no wait.
    !watch.is_empty()
        && unsafe { libc::poll(watch.as_mut_ptr(), watch.len() as libc::nfds_t, 0) } > 0
}

/// Descriptors a sleep watches: the wake and data sockets, the eventfd, the doorbell,
/// the direct socket and the sockets on the other boards.
const POLL_FDS: usize = 5 + omx_wire::STRIPE_BOARDS_MAX;

/// Without frames for this long an endpoint counts as idle (wake-up policies).
const TRAFFIC_IDLE: Time = 1_000_000;

/// Busy-poll without yielding for this long at the start of a wait.
const TIGHT_SPIN: Duration = Duration::from_micros(5);
/// Then yield the CPU this often while spinning (runtime ns).
const YIELD_EVERY: Time = 3_000;

impl Core {
    /// Work that finishes or becomes possible without any descriptor waking a sleeper:
    /// copies on the copy thread (microseconds), messages waiting for ring space (the
    /// peer frees it silently), frames held back by the fault injector. Sleeps stay
    /// short while there is some.
    pub(super) fn work_without_wakeup(&self) -> bool {
        self.copier.pending() > 0
            || self.local.as_ref().is_some_and(|s| s.has_backlog())
            || self.faults.as_ref().is_some_and(|f| f.has_held())
    }
}

/// Whether a received frame waits on the data socket, or, during a pull, on the
/// direct socket.
fn frames_waiting(core: &Core) -> bool {
    core.sock.readable().unwrap_or(false)
        || (core.engine.pulling() && core.direct_rx.as_ref().is_some_and(DirectRx::readable))
        || core.stripes.iter().any(|s| s.readable().unwrap_or(false))
}

/// Sleeping threads and what wakes them: the descriptors a sleep watches, the
/// coalescing policy, and how sleeps ended.
pub(super) struct Wake {
    /// Threads asleep in a wait (they need a signal when a completion arrives).
    pub(super) sleepers: AtomicUsize,
    /// Eventfd rung by another thread's completion or by `wakeup`.
    event_fd: OwnedFd,
    sock_fd: RawFd,
    /// The direct pull-reply socket, watched with the data socket.
    pub(super) direct_fd: Option<RawFd>,
    /// Doorbell of the shared-memory inbox, when there is one.
    shm_fd: Option<RawFd>,
    /// The sockets on the other boards (`OMX_STRIPE`), watched with the data socket.
    stripe_fds: Vec<RawFd>,
    /// Wake-up policy and its timer.
    coalescing: Coalescing,
    coalescing_ns: u64,
    /// Socket that only receives this endpoint's latency-sensitive frames: what
    /// sleeping threads watch under the `marked` and `stream` policies.
    wake_sock: Option<Mutex<PacketSocket>>,
    /// `stream` policy: after a wake-up by a frame, keep polling until then (runtime ns).
    linger_until: AtomicU64,
    /// When frames last arrived (runtime ns): coalescing applies while traffic flows;
    /// an idle endpoint sleeps on its data socket, so it is never woken by the timer.
    pub(super) last_rx: AtomicU64,
    /// `wakeup` calls: waits in progress return when this moves.
    pub(super) wakeups: AtomicU64,
    pub(super) stats: WakeStats,
    /// How long blocking waits spin before they sleep.
    pub(super) spin: SpinAdvisor,
    /// The descriptor handed to applications that wait in their own `poll`/`epoll`
    /// (created on first request): readable after a completion once armed.
    pub(super) notify: Notify,
}

/// An eventfd outside the runtime's own sleeps: armed ([`Notify::arm_at`]) it rings
/// once the count of completions reaches the armed target, so applications sleep in
/// `poll` on it and are woken by the thread that completes their requests (the
/// progress thread, while they sleep): at the next completion, or once the `n` they
/// need (a writer waiting for a third of its window) are done.
#[derive(Default)]
pub(super) struct Notify {
    fd: std::sync::OnceLock<OwnedFd>,
    armed: std::sync::atomic::AtomicBool,
    /// Completions made so far (the done table's count, published by each pass that
    /// completed something).
    done: AtomicU64,
    /// The count at which an armed descriptor rings.
    target: AtomicU64,
}

impl Notify {
    /// The descriptor, created on first use.
    pub(super) fn fd(&self) -> std::io::Result<RawFd> {
        if let Some(fd) = self.fd.get() {
            return Ok(fd.as_raw_fd());
        }
        // SAFETY: eventfd returns a new descriptor or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor we own.
        let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        // Another thread may have won the race: its descriptor stays, ours closes.
        Ok(self.fd.get_or_init(|| owned).as_raw_fd())
    }

    /// The completions counted so far.
    pub(super) fn mark(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    /// Forgets earlier signals and asks for one once the count reaches `target` (at
    /// once if it has). Called with the endpoint's lock held, as `completed` is: the
    /// two never cross, so neither needs a fence (a completion costs no locked
    /// instruction while nothing is armed).
    pub(super) fn arm_at(&self, target: u64) {
        if let Some(fd) = self.fd.get() {
            let mut v: u64 = 0;
            // SAFETY: reading 8 bytes from our non-blocking eventfd.
            unsafe { libc::read(fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
            self.target.store(target, Ordering::Relaxed);
            self.armed.store(true, Ordering::SeqCst);
            // Completions counted already: ring for them.
            if self.done.load(Ordering::Relaxed) >= target {
                self.ring();
            }
        }
    }

    pub(super) fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// Completions happened, `done` made so far: rings the descriptor once per arming,
    /// when the count reached its target. Called with the endpoint's lock held (the
    /// count only grows).
    #[inline]
    fn completed(&self, done: u64) {
        self.done.store(done, Ordering::Release);
        if self.armed.load(Ordering::Relaxed) && done >= self.target.load(Ordering::Relaxed) {
            self.ring();
        }
    }

    fn ring(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            if let Some(fd) = self.fd.get() {
                let one: u64 = 1;
                // SAFETY: writing 8 bytes to our eventfd.
                unsafe {
                    libc::write(fd.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8)
                };
            }
        }
    }
}

/// The endpoint's network sockets a sleep watches for frames.
pub(super) struct NetFds {
    /// The data socket.
    pub(super) sock: RawFd,
    /// The direct pull-reply socket.
    pub(super) direct: Option<RawFd>,
    /// The sockets on the other boards (`OMX_STRIPE`).
    pub(super) stripes: Vec<RawFd>,
}

/// Sleeps, and how they ended: by a frame or doorbell, or by the timer.
#[derive(Default)]
pub(super) struct WakeStats {
    pub(super) sleeps: AtomicU64,
    pub(super) woken_by_io: AtomicU64,
    pub(super) woken_by_timer: AtomicU64,
}

impl Wake {
    pub(super) fn new(
        event_fd: OwnedFd,
        net: NetFds,
        shm_fd: Option<RawFd>,
        coalescing: Coalescing,
        coalescing_ns: u64,
        wake_sock: Option<Mutex<PacketSocket>>,
    ) -> Wake {
        Wake {
            sleepers: AtomicUsize::new(0),
            event_fd,
            sock_fd: net.sock,
            direct_fd: net.direct,
            shm_fd,
            stripe_fds: net.stripes,
            coalescing,
            coalescing_ns,
            wake_sock,
            linger_until: AtomicU64::new(0),
            last_rx: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            stats: WakeStats::default(),
            spin: SpinAdvisor::default(),
            notify: Notify::default(),
        }
    }

    /// Rings the eventfd: sleepers wake.
    pub(super) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes to our eventfd.
        unsafe {
            libc::write(
                self.event_fd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }

    /// Rings the eventfd if a thread sleeps (a completion it may wait for arrived),
    /// and the notify descriptor when its count is reached (`done`: the completions
    /// made so far, `Completions::filed`).
    #[inline]
    pub(super) fn signal_sleepers(&self, done: u64) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.signal();
        }
        self.notify.completed(done);
    }

    pub(super) fn drain_signal(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes from our non-blocking eventfd.
        unsafe {
            libc::read(
                self.event_fd.as_raw_fd(),
                &mut v as *mut u64 as *mut libc::c_void,
                8,
            )
        };
    }

    /// Sleeps until a watched descriptor (the endpoint's, or one of the caller's
    /// `watch`) is ready or `timeout`; returns which of the eventfd and the
    /// shared-memory doorbell fired (they need draining) and whether `watch` did.
    fn poll_fds(&self, rt: &Runtime, timeout: Duration, watch: &[libc::pollfd]) -> Fired {
        let active = self.coalescing != Coalescing::Off
            && rt
                .now()
                .saturating_sub(self.last_rx.load(Ordering::Relaxed))
                < TRAFFIC_IDLE;
        let coalesce = timeout.min(Duration::from_nanos(self.coalescing_ns));
        let wake_fd = self
            .wake_sock
            .as_ref()
            .map_or(-1, |s| s.lock().unwrap_or_else(|p| p.into_inner()).fd());
        // (socket that wakes at once, data socket, timeout)
        let (net_fd, data_fd, timeout) = match (self.coalescing, active) {
            (Coalescing::Off, _) | (_, false) => (wake_fd, self.sock_fd, timeout),
            (Coalescing::Timer, true) => (-1, -1, coalesce),
            (Coalescing::Marked | Coalescing::Stream, true) => (wake_fd, -1, coalesce),
        };
        let watched = |fd: Option<RawFd>| libc::pollfd {
            fd: if data_fd >= 0 { fd.unwrap_or(-1) } else { -1 },
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = [watched(None); POLL_FDS];
        let fixed = [
            libc::pollfd {
                fd: net_fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: data_fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.event_fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.shm_fd.unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
            // Pull replies wake like the data socket they bypass.
            watched(self.direct_fd),
        ];
        fds[..fixed.len()].copy_from_slice(&fixed);
        // Striped frames too (their sockets are `STRIPE_BOARDS_MAX` at most).
        for (slot, &fd) in fds[fixed.len()..].iter_mut().zip(&self.stripe_fds) {
            *slot = watched(Some(fd));
        }
        let nfds = fixed.len() + self.stripe_fds.len().min(POLL_FDS - fixed.len());
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        self.stats.sleeps.fetch_add(1, Ordering::Relaxed);
        let ppoll = |all: &mut [libc::pollfd]| {
            // SAFETY: valid pollfds (a negative fd is ignored) and a valid timespec.
            unsafe {
                libc::ppoll(
                    all.as_mut_ptr(),
                    all.len() as libc::nfds_t,
                    &ts,
                    std::ptr::null(),
                )
            }
        };
        // The caller's descriptors follow the endpoint's (allocated only for them).
        let (n, watched) = if watch.is_empty() {
            (ppoll(&mut fds[..nfds]), false)
        } else {
            let mut all = fds[..nfds].to_vec();
            all.extend_from_slice(watch);
            let n = ppoll(&mut all);
            fds[..nfds].copy_from_slice(&all[..nfds]);
            (n, all[nfds..].iter().any(|f| f.revents != 0))
        };
        let interrupted =
            n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
        if n > 0 {
            self.stats.woken_by_io.fetch_add(1, Ordering::Relaxed);
            // A socket whose interface went down (a striping link, `ip link set down`)
            // reports ENETDOWN until the error is read: read it, or every sleep after
            // would end at once.
            for f in fds[..nfds]
                .iter()
                .filter(|f| f.revents & libc::POLLERR != 0)
            {
                let _ = omx_transport::take_socket_error(f.fd);
            }
            let data = [0, 1].into_iter().chain(4..nfds);
            if data.into_iter().any(|i| fds[i].revents != 0) {
                // (The wake socket only rings: frames come from the data ring, and its
                // marks are drained before the next sleep.)
                if self.coalescing == Coalescing::Stream {
                    let until = rt.now() + self.coalescing_ns / 2;
                    self.linger_until.store(until, Ordering::Relaxed);
                }
            }
        } else {
            self.stats.woken_by_timer.fetch_add(1, Ordering::Relaxed);
        }
        Fired {
            event: fds[2].revents != 0,
            doorbell: fds[3].revents != 0,
            interrupted,
            watched,
        }
    }
}

impl EndpointInner {
    /// Earliest deadline of the engine or discovery, as a poll timeout from now.
    pub(super) fn sleep_budget(&self, core: &Core, cap: Duration) -> Duration {
        let cap = if core.work_without_wakeup() {
            cap.min(Duration::from_micros(50))
        } else {
            cap
        };
        let now = self.rt.now();
        let next = core.next_deadline();
        Duration::from_nanos(next.saturating_sub(now)).min(cap)
    }

    /// Sleeps in `poll_fds` with the shared-memory doorbell armed (unless a record
    /// arrived meanwhile). Called with the core lock held; releases it.
    pub(super) fn sleep_unlocked(
        &self,
        mut core: CoreGuard<'_>,
        timeout: Duration,
        watch: &[libc::pollfd],
    ) -> Fired {
        if core.direct_rx.is_some() {
            take_late_replies(&mut core, self.rt.now());
        }
        if let Some(w) = &self.wake.wake_sock {
            // A frame already waits: no sleep, and no system call.
            if frames_waiting(&core) {
                return Fired::default();
            }
            // Forget the marks of frames already taken, then make sure none arrived
            // since the last pass (its mark would have been drained with them).
            let _ = w
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .recv_batch(RX_BATCH, |_| {});
            if frames_waiting(&core) {
                return Fired::default();
            }
        }
        let armed = match core.local.as_mut() {
            Some(sh) => {
                if !sh.prepare_sleep() {
                    return Fired::default();
                }
                true
            }
            None => false,
        };
        drop(core);
        let fired = self.wake.poll_fds(&self.rt, timeout, watch);
        if armed {
            if let Some(sh) = self.lock().local.as_mut() {
                sh.after_sleep(fired.doorbell);
            }
        }
        fired
    }

    /// Adaptive wait: make progress and spin for the configured budget (a reply that
    /// arrives then costs no wake-up), then sleep in the kernel on the socket, a signal
    /// from another thread, or the next timer.
    /// `check(core, completion of want if this pass produced it)`.
    pub(super) fn wait_for<T>(
        &self,
        timeout: Option<Duration>,
        want: Option<ReqId>,
        check: impl FnMut(&mut Core, Option<Completion>) -> Option<T>,
    ) -> Option<T> {
        self.wait_watching(timeout, want, &[], Spin::Adaptive, false, check)
            .ok()
    }

    /// `wait_for` that also ends when one of the caller's descriptors `watch` is ready:
    /// looked at whenever the spin yields, and watched in every sleep beside the
    /// endpoint's own (so the thread that sleeps is the one the frame wakes). A signal
    /// ends it too, when there are such descriptors or `end_on_signal` says so. `spin`: whether it spins before
    /// it sleeps (see [`Spin`]).
    pub(super) fn wait_watching<T>(
        &self,
        timeout: Option<Duration>,
        want: Option<ReqId>,
        watch: &[libc::pollfd],
        spin: Spin,
        end_on_signal: bool,
        mut check: impl FnMut(&mut Core, Option<Completion>) -> Option<T>,
    ) -> Result<T, Ended> {
        let mut looked = watch.to_vec();
        // Already there: return without a progress pass, so that streams of
        // early-completed sends keep accumulating into shared frames.
        let mut core = self.app_lock();
        if let Some(x) = check(&mut core, None) {
            return Ok(x);
        }
        drop(core);
        let start = self.rt.now();
        self.activity.app_active.fetch_add(1, Ordering::SeqCst);
        let deadline = timeout.map(|t| start.saturating_add(t.as_nanos() as u64));
        let cfg = &self.rt.cfg;
        let spin_for = self
            .wake
            .spin
            .budget_of(spin, cfg.wait_spin_for, cfg.wait_spin_max);
        let spin_until = start + spin_for.as_nanos() as u64;
        let mut next_yield = start + TIGHT_SPIN.as_nanos() as u64;
        let wakeups = self.wake.wakeups.load(Ordering::SeqCst);
        let result = loop {
            let (mut core, now) = self.app_lock_now();
            let got = match want {
                Some(req) => self.progress_for(&mut core, Some(now), req),
                None => {
                    self.progress_at(&mut core, Some(now), true);
                    None
                }
            };
            let mut core = self.run_handlers(core);
            if let Some(x) = check(&mut core, got) {
                // A wait that did not spin says nothing of how long spins should be.
                if spin == Spin::Adaptive {
                    self.wake.spin.record(now.saturating_sub(start));
                }
                break Ok(x);
            }
            if self.wake.wakeups.load(Ordering::SeqCst) != wakeups
                || self.activity.closing.load(Ordering::SeqCst)
                || deadline.is_some_and(|d| now >= d)
            {
                break Err(Ended::Timeout);
            }
            // Work another thread does for us on this CPU: the copy thread, or omxd.
            let core_copies = core.copier.pending() > 0 || core.sock.is_relay();
            let lingering = now < self.wake.linger_until.load(Ordering::Relaxed);
            if self.rt.cfg.wait_spin || now < spin_until || core_copies || lingering {
                drop(core);
                // Past a short tight spin, yield now and then: a waker placed on this
                // CPU (wake-affine scheduling) then runs soon instead of after the whole
                // spin budget, which otherwise locks both sides into slow waits.
                if now > next_yield || core_copies {
                    if watched_ready(&mut looked) {
                        break Err(Ended::Watched);
                    }
                    std::thread::yield_now();
                    next_yield = now + YIELD_EVERY;
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let left = Duration::from_nanos(deadline.map_or(1_000_000_000, |d| d - now));
            let budget = self.sleep_budget(&core, left);
            self.wake.sleepers.fetch_add(1, Ordering::SeqCst);
            let fired = self.sleep_unlocked(core, budget, watch);
            if self.wake.sleepers.fetch_sub(1, Ordering::SeqCst) == 1 && fired.event {
                self.wake.drain_signal();
            }
            // OMX_WAITINTR: a signal ends the wait as a timeout would.
            if fired.interrupted && (self.rt.cfg.wait_intr || end_on_signal || !watch.is_empty()) {
                break Err(Ended::Interrupted);
            }
            if fired.watched {
                break Err(Ended::Watched);
            }
        };
        self.activity.leave_wait();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::Notify;

    /// Whether the notify descriptor is readable now (and drains it).
    fn rang(n: &Notify) -> bool {
        let fd = n.fd().expect("eventfd");
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes from a non-blocking eventfd.
        let r = unsafe { libc::read(fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
        r == 8 && v > 0
    }

    #[test]
    fn notify_rings_once_its_count_is_reached_not_at_each_completion() {
        let n = Notify::default();
        n.fd().expect("eventfd");
        n.completed(3);
        assert_eq!(n.mark(), 3);
        n.arm_at(n.mark() + 4);
        for done in 4..=6 {
            n.completed(done);
            assert!(!rang(&n), "rang at {done}, before its target 7");
            assert!(n.is_armed());
        }
        // A pass that completed several at once passes the target: one ring.
        n.completed(9);
        assert!(rang(&n));
        assert!(!n.is_armed());
        n.completed(10);
        assert!(!rang(&n), "one ring per arming");
    }

    #[test]
    fn notify_armed_at_a_count_already_reached_rings_at_once() {
        let n = Notify::default();
        n.fd().expect("eventfd");
        let mark = n.mark();
        // Completions counted between the caller's mark and its arming.
        n.completed(mark + 2);
        n.arm_at(mark + 2);
        assert!(rang(&n));
        assert!(!n.is_armed());
    }

    #[test]
    fn notify_arming_forgets_earlier_rings_and_next_completion_rings() {
        let n = Notify::default();
        n.fd().expect("eventfd");
        n.arm_at(n.mark() + 1);
        n.completed(1);
        // Re-armed before the ring was read: the old ring is forgotten.
        n.arm_at(n.mark() + 1);
        assert!(!rang(&n));
        n.completed(2);
        assert!(rang(&n));
    }

    #[test]
    fn notify_without_descriptor_never_arms() {
        let n = Notify::default();
        n.arm_at(1);
        assert!(!n.is_armed());
        n.completed(5);
        assert_eq!(n.mark(), 5);
    }
}
