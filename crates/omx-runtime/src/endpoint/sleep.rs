//! Waiting: spinning, then sleeping in the kernel on the sockets, the eventfd and the
//! shared-memory doorbell, with the wake-up coalescing policies.

use super::direct_rx::take_late_replies;
use super::{Core, CoreGuard, EndpointInner, RX_BATCH};
use crate::config::Coalescing;
use omx_proto::*;
use omx_transport::DirectRx;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Which wake-up descriptors fired during a sleep.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Fired {
    /// The eventfd (another thread's completion or `wakeup`).
    pub(super) event: bool,
    /// The shared-memory inbox's doorbell FIFO.
    pub(super) doorbell: bool,
}

/// Without frames for this long an endpoint counts as idle (wake-up policies).
pub(super) const TRAFFIC_IDLE: Time = 1_000_000;

/// Busy-poll without yielding for this long at the start of a wait.
pub(super) const TIGHT_SPIN: Duration = Duration::from_micros(5);
/// Then yield the CPU this often while spinning (runtime ns).
pub(super) const YIELD_EVERY: Time = 3_000;

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
pub(super) fn frames_waiting(core: &Core) -> bool {
    core.sock.readable().unwrap_or(false)
        || (core.engine.pulling() && core.direct_rx.as_ref().is_some_and(DirectRx::readable))
}

impl EndpointInner {
    pub(super) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes to our eventfd.
        unsafe {
            libc::write(
                self.wake_fd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }

    pub(super) fn drain_signal(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes from our non-blocking eventfd.
        unsafe {
            libc::read(
                self.wake_fd.as_raw_fd(),
                &mut v as *mut u64 as *mut libc::c_void,
                8,
            )
        };
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
        let mut next = core
            .engine
            .poll_timeout()
            .unwrap_or(u64::MAX)
            .min(core.next_publish);
        if let Some(d) = &core.discovery {
            next = next.min(d.deadline());
        }
        Duration::from_nanos(next.saturating_sub(now)).min(cap)
    }

    /// Sleeps until a watched descriptor is ready or `timeout`; returns which of the
    /// eventfd and the shared-memory doorbell fired (they need draining).
    pub(super) fn poll_fds(&self, timeout: Duration) -> Fired {
        let active = self.coalescing != Coalescing::Off
            && self
                .rt
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
        let mut fds = [
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
                fd: self.wake_fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.shm_fd.unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
            // Pull replies wake like the data socket they bypass.
            libc::pollfd {
                fd: if data_fd >= 0 {
                    self.direct_fd.unwrap_or(-1)
                } else {
                    -1
                },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        self.sleeps.fetch_add(1, Ordering::Relaxed);
        // SAFETY: five valid pollfds (a negative fd is ignored) and a valid timespec.
        let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 5, &ts, std::ptr::null()) };
        if n > 0 {
            self.woken_by_io.fetch_add(1, Ordering::Relaxed);
            if fds[0].revents != 0 || fds[1].revents != 0 || fds[4].revents != 0 {
                // (The wake socket only rings: frames come from the data ring, and its
                // marks are drained before the next sleep.)
                if self.coalescing == Coalescing::Stream {
                    let until = self.rt.now() + self.coalescing_ns / 2;
                    self.linger_until.store(until, Ordering::Relaxed);
                }
            }
        } else {
            self.woken_by_timer.fetch_add(1, Ordering::Relaxed);
        }
        Fired {
            event: fds[2].revents != 0,
            doorbell: fds[3].revents != 0,
        }
    }

    /// Sleeps in `poll_fds` with the shared-memory doorbell armed (unless a record
    /// arrived meanwhile). Called with the core lock held; releases it.
    pub(super) fn sleep_unlocked(&self, mut core: CoreGuard<'_>, timeout: Duration) -> Fired {
        if core.direct_rx.is_some() {
            take_late_replies(&mut core, self.rt.now());
        }
        if let Some(w) = &self.wake_sock {
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
        let fired = self.poll_fds(timeout);
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
        mut check: impl FnMut(&mut Core, Option<Completion>) -> Option<T>,
    ) -> Option<T> {
        // Already there: return without a progress pass, so that streams of
        // early-completed sends keep accumulating into shared frames.
        let mut core = self.app_lock();
        if let Some(x) = check(&mut core, None) {
            return Some(x);
        }
        drop(core);
        let start = self.rt.now();
        self.app_active.fetch_add(1, Ordering::SeqCst);
        let deadline = timeout.map(|t| start.saturating_add(t.as_nanos() as u64));
        let spin_until = start + self.rt.cfg.wait_spin_for.as_nanos() as u64;
        let mut next_yield = start + TIGHT_SPIN.as_nanos() as u64;
        let wakeups = self.wakeups.load(Ordering::SeqCst);
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
                break Some(x);
            }
            if self.wakeups.load(Ordering::SeqCst) != wakeups
                || self.closing.load(Ordering::SeqCst)
                || deadline.is_some_and(|d| now >= d)
            {
                break None;
            }
            // Work another thread does for us on this CPU: the copy thread, or omxd.
            let core_copies = core.copier.pending() > 0 || core.sock.is_relay();
            let lingering = now < self.linger_until.load(Ordering::Relaxed);
            if self.rt.cfg.wait_spin || now < spin_until || core_copies || lingering {
                drop(core);
                // Past a short tight spin, yield now and then: a waker placed on this
                // CPU (wake-affine scheduling) then runs soon instead of after the whole
                // spin budget, which otherwise locks both sides into slow waits.
                if now > next_yield || core_copies {
                    std::thread::yield_now();
                    next_yield = now + YIELD_EVERY;
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let left = Duration::from_nanos(deadline.map_or(1_000_000_000, |d| d - now));
            let budget = self.sleep_budget(&core, left);
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            let fired = self.sleep_unlocked(core, budget);
            if self.sleepers.fetch_sub(1, Ordering::SeqCst) == 1 && fired.event {
                self.drain_signal();
            }
        };
        self.app_active.fetch_sub(1, Ordering::SeqCst);
        result
    }
}
