//! The progress pass, run by whichever thread needs progress, the unexpected handler
//! around it, and the background progress thread.

use super::{Core, CoreGuard, EndpointInner, UnexpectedHandler};
use crate::runtime::Runtime;
use omx_proto::*;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Longest nap of the progress thread while the application drives progress itself.
const APP_NAP_MAX: Duration = Duration::from_millis(1);

/// How long after the application's last call the progress thread takes over.
const APP_QUIET: Duration = Duration::from_micros(500);

/// Nap of the progress thread while an application thread sleeps in a wait (it takes
/// the endpoint's frames and timers itself; the thread is woken when a wait ends).
const APP_ASLEEP_NAP: Duration = Duration::from_millis(100);

/// Who drives progress: the progress thread stays out of the way while application
/// threads do.
#[derive(Default)]
pub(super) struct Activity {
    /// Application threads inside a wait.
    pub(super) app_active: AtomicUsize,
    /// Counts application entries into the library: the progress thread stays out of
    /// the way while this moves (the application is driving progress itself).
    pub(super) app_calls: AtomicU64,
    pub(super) closing: AtomicBool,
    /// `disable_progression`: no progress pass runs (neither in library calls nor on
    /// the progress thread) and no handler is called until it is cleared.
    pub(super) suspended: AtomicBool,
    /// Where the progress thread naps while the application drives progress.
    pub(super) idle: (Mutex<()>, Condvar),
    /// The progress thread naps `APP_ASLEEP_NAP`: a wait that ends wakes it.
    pub(super) long_nap: AtomicBool,
}

impl Activity {
    /// An application thread leaves a wait. A progress thread in a long nap (taken
    /// while this thread slept) is woken, so background progress resumes at once; the
    /// short naps are not (a futex wake per wait).
    pub(super) fn leave_wait(&self) {
        self.app_active.fetch_sub(1, Ordering::SeqCst);
        if self.long_nap.load(Ordering::SeqCst) {
            let _g = self.idle.0.lock().unwrap_or_else(|p| p.into_inner());
            self.idle.1.notify_all();
        }
    }
}

/// The application's unexpected-message handler and whether it is running.
#[derive(Default)]
pub(super) struct UnexpectedSlot {
    pub(super) handler: Option<UnexpectedHandler>,
    /// The handler is running: progression is paused (MX semantics).
    pub(super) running: bool,
}

/// The clock and the findings of one progress pass, shared by its steps.
pub(super) struct Pass {
    /// The caller's clock, or the precise one once a step needed it.
    pub(super) now: Option<Time>,
    /// The coarse clock read for the shared-memory records, reused by the quiet check.
    coarse: Option<Time>,
    /// Copies were reaped or shared-memory records taken.
    local_work: bool,
    /// Only shared-memory records were taken (no copy, no backlog).
    records_only: bool,
    /// Local eager receives completed straight from the shared-memory ring.
    filed: bool,
    /// Pull replies were placed straight into their receive buffers.
    pub(super) placed: bool,
}

impl Pass {
    fn new(now: Option<Time>) -> Pass {
        Pass {
            now,
            coarse: None,
            local_work: false,
            records_only: true,
            filed: false,
            placed: false,
        }
    }

    /// The precise clock, read at most once per pass.
    #[inline]
    pub(super) fn precise_now(&mut self, rt: &Runtime) -> Time {
        *self.now.get_or_insert_with(|| rt.now())
    }
}

impl EndpointInner {
    /// One progress pass: frames in, timers, then every output of the engine, flushed.
    pub(super) fn progress(&self, core: &mut Core) {
        self.progress_at(core, None, true)
    }

    /// A progress pass that leaves frames queued (for a later pass) unless `flush`.
    ///
    /// Inputs first (copies, shared memory, the ring, direct receive), so that a pass
    /// that found nothing ends early; then the engine works on them (dispatch, board
    /// service, timers); then its outputs go out (drain) and the once-a-second work runs.
    pub(super) fn progress_at(&self, core: &mut Core, now: Option<Time>, flush: bool) {
        if core.unexpected.running || self.activity.suspended.load(Ordering::Relaxed) {
            return;
        }
        self.sync_peers(core);
        core.inbound.take_looped();
        let mut pass = Pass::new(now);
        self.reap_copies(core, &mut pass);
        self.take_local(core, &mut pass);
        self.take_ring(core, &mut pass);
        self.take_direct_replies(core, &mut pass);
        if self.is_quiet(core, &mut pass) {
            self.finish_quiet(core, &pass, flush);
            return;
        }
        let now = self.pass_clock(core, &pass);
        if core.inbound.has_endpoint_frames() || pass.placed {
            self.wake.last_rx.store(now, Ordering::Relaxed);
        }
        self.dispatch(core, now);
        self.serve_board(core, now);
        Self::fire_timers(core, now);
        let completed = self.drain(core, now, flush) | pass.filed;
        if completed {
            self.wake.signal_sleepers(core.completions.filed());
        }
        if now >= core.upkeep.next_publish {
            self.housekeeping(core, now);
        }
        // Every deadline can only have changed during this pass.
        core.timer_at = core.next_deadline();
    }

    /// First, copies the copy thread finished: the receives they complete are collected
    /// with everything else this pass produces.
    fn reap_copies(&self, core: &mut Core, pass: &mut Pass) {
        let Core { copier, engine, .. } = core;
        if copier.pending() > 0 {
            let t = pass.precise_now(&self.rt);
            copier.reap(|id| engine.copy_done(t, id));
            pass.local_work = true;
            pass.records_only = false;
        }
    }

    /// Then the shared-memory inbox, before the network: local eager receives complete
    /// straight from it, and a pass that took only such records can end early (see
    /// [`EndpointInner::is_quiet`]).
    fn take_local(&self, core: &mut Core, pass: &mut Pass) {
        let Core {
            engine,
            mem,
            local: Some(sh),
            inbound,
            completions,
            ..
        } = core
        else {
            return;
        };
        if sh.has_pending() {
            let t = pass
                .now
                .unwrap_or_else(|| *pass.coarse.insert(self.rt.coarse_now()));
            let filed = &mut pass.filed;
            sh.receive(
                engine,
                mem,
                t,
                &mut |d| inbound.copy(d),
                // Filed as `collect_completions` would, without the engine's queue
                // (which was empty: nothing queued can be overtaken).
                &mut |mem, c| *filed |= completions.file(c, mem),
            );
            pass.local_work = true;
        }
        if sh.has_backlog() {
            pass.local_work = true;
            pass.records_only = false;
        }
    }

    /// Nothing arrived, nothing to send, no timer due: the common case of a polling
    /// loop, kept free of clock reads and deadline scans. Also when shared-memory
    /// records arrived that only completed requests (a local ping-pong): local
    /// messages arm no timer, so the deadlines cannot have moved, and only the
    /// completions need collecting.
    fn is_quiet(&self, core: &Core, pass: &mut Pass) -> bool {
        !core.inbound.has_frames()
            && !pass.placed
            && (!pass.local_work || pass.records_only)
            && !core.engine.has_output_besides_completions()
            && self.before_deadline(core.timer_at, pass)
    }

    /// Whether the pass's time is before `deadline`: the caller's precise clock when it
    /// has one, else the coarse clock while the deadline is more than its lag away, else
    /// the precise clock. The coarse clock lags up to a tick (4 ms at HZ=250): trusting
    /// it near a deadline made every retransmission timeout (250 us floor) up to a tick
    /// late, the tail latency of every lost frame, and a sleeper whose deadline passed
    /// spin until the tick.
    fn before_deadline(&self, deadline: Time, pass: &mut Pass) -> bool {
        if let Some(now) = pass.now {
            return now < deadline;
        }
        let coarse = pass.coarse.unwrap_or_else(|| self.rt.coarse_now());
        if coarse.saturating_add(self.rt.coarse_lag) < deadline {
            pass.now = Some(coarse);
            return true;
        }
        let now = self.rt.now();
        pass.now = Some(now);
        now < deadline
    }

    /// The end of a quiet pass: completions, if any, and the frames earlier streamed
    /// sends left queued.
    fn finish_quiet(&self, core: &mut Core, pass: &Pass, flush: bool) {
        if pass.filed || core.engine.has_output() {
            let completed = core.engine.has_output()
                && core.collect_completions(pass.now.expect("read by is_quiet"));
            if pass.filed || completed {
                self.wake.signal_sleepers(core.completions.filed());
            }
        }
        if flush {
            core.outbound.flush(&mut core.sock, &mut core.stripes);
        }
    }

    /// Frames from the wire start timers that need the precise clock; a pass that
    /// only took shared-memory records or copies does with the coarse one, unless a
    /// deadline is within the coarse clock's lag.
    fn pass_clock(&self, core: &Core, pass: &Pass) -> Time {
        pass.now.unwrap_or_else(|| {
            if core.inbound.has_frames() {
                return self.rt.now();
            }
            let coarse = pass.coarse.unwrap_or_else(|| self.rt.coarse_now());
            if coarse.saturating_add(self.rt.coarse_lag) < core.timer_at {
                coarse
            } else {
                self.rt.now()
            }
        })
    }

    /// After the frames: what they changed may have moved or cancelled the deadlines.
    fn fire_timers(core: &mut Core, now: Time) {
        if core.engine.poll_timeout().is_some_and(|t| t <= now) {
            core.engine.handle_timeout(now);
        }
    }
}

impl EndpointInner {
    /// A progress pass that hands the completion of `req`, if it produces it, straight
    /// to the caller (never seen by other threads: as if taken at once).
    pub(super) fn progress_for(
        &self,
        core: &mut Core,
        now: Option<Time>,
        req: ReqId,
    ) -> Option<Completion> {
        core.completions.watch(req);
        self.progress_at(core, now, true);
        core.completions.unwatch()
    }

    /// A progress pass, then the unexpected handler for whatever it left pending.
    pub(super) fn progress_guard<'a>(&'a self, mut core: CoreGuard<'a>) -> CoreGuard<'a> {
        self.progress(&mut core);
        self.run_handlers(core)
    }

    /// Calls the unexpected handler for each pending message with the endpoint
    /// unlocked (it may post receives), then applies its verdict.
    #[inline]
    pub(super) fn run_handlers<'a>(&'a self, core: CoreGuard<'a>) -> CoreGuard<'a> {
        if core.unexpected.running
            || core.unexpected.handler.is_none()
            || self.activity.suspended.load(Ordering::Relaxed)
        {
            return core;
        }
        self.run_installed_handler(core)
    }

    fn run_installed_handler<'a>(&'a self, mut core: CoreGuard<'a>) -> CoreGuard<'a> {
        while let Some(ev) = core.engine.poll_unexpected() {
            let Some(mut h) = core.unexpected.handler.take() else {
                break;
            };
            core.unexpected.running = true;
            drop(core);
            let discard = h(&ev);
            core = self.lock();
            core.unexpected.running = false;
            if core.unexpected.handler.is_none() && core.engine.unexpected_hook() {
                core.unexpected.handler = Some(h);
            }
            let now = self.rt.now();
            core.engine.resolve_unexpected(now, ev.id, discard);
            self.post_drain(&mut core, now, true);
        }
        core
    }
}

impl EndpointInner {
    /// Background progress while no application thread is driving it: sleeps while an
    /// application thread waits or has called in recently, else sleeps on the socket
    /// and the next timer.
    pub(super) fn progress_loop(self: Arc<Self>) {
        let mut seen = self.activity.app_calls.load(Ordering::Relaxed);
        let mut nap = APP_QUIET;
        while !self.activity.closing.load(Ordering::SeqCst) {
            let calls = self.activity.app_calls.load(Ordering::Relaxed);
            let active = self.activity.app_active.load(Ordering::SeqCst) > 0;
            let suspended = self.activity.suspended.load(Ordering::SeqCst);
            // An application asleep on its notify descriptor needs the progress
            // thread now, however recently it called in.
            let waits_outside = self.wake.notify.is_armed();
            if active || (calls != seen && !waits_outside) || suspended {
                // Not woken when the application leaves (that would cost every wait a
                // futex wake): nap until a whole interval passed without a call, backing
                // off while the application keeps driving (each wake-up steals a CPU
                // from a polling thread).
                seen = calls;
                let g = self
                    .activity
                    .idle
                    .0
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                // An application thread asleep in a wait takes the frames that come
                // itself: nap long (1,000 wake-ups a second of an idle server's
                // process otherwise). Announced before looking (the thread that
                // leaves its wait looks at it after it counted itself out), and the
                // lock held until the wait: the wake-up is not lost.
                self.activity.long_nap.store(true, Ordering::SeqCst);
                let asleep = self.activity.app_active.load(Ordering::SeqCst) > 0
                    && self.wake.sleepers.load(Ordering::SeqCst) > 0
                    && !suspended;
                if asleep {
                    let _ = self.activity.idle.1.wait_timeout(g, APP_ASLEEP_NAP);
                    self.activity.long_nap.store(false, Ordering::SeqCst);
                } else {
                    self.activity.long_nap.store(false, Ordering::SeqCst);
                    let _ = self.activity.idle.1.wait_timeout(g, nap);
                    nap = (nap * 2).min(APP_NAP_MAX);
                }
                continue;
            }
            nap = APP_QUIET;
            let core = self.lock();
            let budget = self.sleep_budget(&core, Duration::from_millis(100));
            let fired = self.sleep_unlocked(core, budget, &[]);
            if self.wake.sleepers.load(Ordering::SeqCst) == 0 && fired.event {
                self.wake.drain_signal();
            }
            if self.activity.closing.load(Ordering::SeqCst) {
                break;
            }
            if self.activity.app_active.load(Ordering::SeqCst) > 0
                || (self.activity.app_calls.load(Ordering::Relaxed) != seen
                    && !self.wake.notify.is_armed())
            {
                continue;
            }
            let core = self.lock();
            let mut core = core;
            let now = self.rt.now();
            self.progress_at(&mut core, Some(now), true);
            drop(self.run_handlers(core));
        }
    }
}
