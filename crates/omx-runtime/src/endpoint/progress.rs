//! The progress pass, run by whichever thread needs progress, the unexpected handler
//! around it, and the background progress thread.

use super::completions::file_completion;
use super::direct_rx::drain_direct;
use super::rx::{is_board_frame, PULL_REPLY_TYPE};
use super::{Core, CoreGuard, EndpointInner, RX_BATCH};
use omx_proto::demux::{route, Route};
use omx_proto::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Longest nap of the progress thread while the application drives progress itself.
pub(super) const APP_NAP_MAX: Duration = Duration::from_millis(1);

/// How long after the application's last call the progress thread takes over.
pub(super) const APP_QUIET: Duration = Duration::from_micros(500);

impl EndpointInner {
    /// One progress pass: frames in, timers, then every output of the engine, flushed.
    pub(super) fn progress(&self, core: &mut Core) {
        self.progress_at(core, None, true)
    }

    /// A progress pass that leaves frames queued (for a later pass) unless `flush`.
    pub(super) fn progress_at(&self, core: &mut Core, now: Option<Time>, flush: bool) {
        if core.in_handler {
            return;
        }
        self.sync_peers(core);
        let Core {
            engine,
            sock,
            direct_rx,
            rx,
            board_rx,
            bundler,
            timer_at,
            rx_pool,
            self_rx,
            local,
            mem,
            copier,
            faults,
            done,
            forgotten,
            want,
            wanted,
            ..
        } = core;
        if !self_rx.is_empty() {
            rx.append(self_rx);
        }
        let mut local_work = false;
        // Local eager receives completed straight from the ring (see below).
        let mut filed = false;
        // Only shared-memory records were taken (no copy, no backlog): see below.
        let mut records_only = true;
        let mut now = now;
        // The coarse clock read for the ring records, reused by the quiet check below.
        let mut coarse = None;
        if copier.pending() > 0 {
            let t = *now.get_or_insert_with(|| self.rt.now());
            copier.reap(|id| engine.copy_done(t, id));
            local_work = true;
            records_only = false;
        }
        if let Some(sh) = local.as_mut() {
            if sh.has_pending() {
                let t = now.unwrap_or_else(|| *coarse.insert(self.rt.coarse_now()));
                let want = *want;
                sh.receive(
                    engine,
                    mem,
                    t,
                    &mut |d| {
                        if rx_pool.capacity() < d.len() {
                            rx_pool.refill(d.len());
                        }
                        rx_pool.carve(d)
                    },
                    // Filed as `collect_completions` would, without the engine's queue
                    // (which was empty: nothing queued can be overtaken).
                    &mut |mem, c| filed |= file_completion(c, mem, done, forgotten, want, wanted),
                );
                local_work = true;
            }
            if sh.has_backlog() {
                local_work = true;
                records_only = false;
            }
        }
        // Pull replies go from the ring slot straight into the receive buffer (one copy
        // fewer); with copy offload they take the owned path, as the copy thread needs
        // a frame that outlives the slot.
        let in_place = copier.backend().is_none();
        let me = self.index;
        let mut placed = false;
        // An empty ring (the common poll) is seen with one load, before the frame
        // handler is even built.
        if faults.is_some() || sock.may_have_rx() {
            let mut take = |f: &[u8]| {
                // (Pull replies for another endpoint, which only the board-service owner
                // sees, take the owned path to be counted as for a closed endpoint.)
                if in_place
                    && f.get(16).map(|&t| omx_wire::type_of(t)) == Some(PULL_REPLY_TYPE)
                    && route(f) == Route::Endpoint(me)
                {
                    let t = *now.get_or_insert_with(|| self.rt.now());
                    let m = &*mem;
                    if engine.handle_frame_in_place(t, f, &mut |h, off, data| {
                        m.write(h, off as usize, data)
                    }) {
                        placed = true;
                        return;
                    }
                }
                if is_board_frame(f) {
                    board_rx.push(f.to_vec());
                } else {
                    // Frames are carved out of shared chunks: no allocation per frame.
                    if rx_pool.capacity() < f.len() {
                        rx_pool.refill(f.len());
                    }
                    rx.push(rx_pool.carve(f));
                }
            };
            match faults.as_mut() {
                None => {
                    let _ = sock.recv_batch(RX_BATCH, take);
                }
                Some(inj) => {
                    let _ = sock.recv_batch(RX_BATCH, |f| inj.on_receive(f, &mut take));
                    inj.release(&mut take);
                }
            }
        }
        // (Only while pulling: an idle poll stays free of system calls. Replies that
        // come late are taken, and dropped, during the next pull.)
        if let Some(d) = direct_rx.as_mut().filter(|_| engine.pulling()) {
            let t = *now.get_or_insert_with(|| self.rt.now());
            placed |= drain_direct(d, engine, mem, t, |f| {
                if rx_pool.capacity() < f.len() {
                    rx_pool.refill(f.len());
                }
                rx.push(rx_pool.carve(f));
            });
        }
        // Nothing arrived, nothing to send, no timer due: the common case of a polling
        // loop, kept free of clock reads and deadline scans. Also when shared-memory
        // records arrived that only completed requests (a local ping-pong): local
        // messages arm no timer, so the deadlines cannot have moved, and only the
        // completions need collecting.
        if rx.is_empty()
            && !placed
            && board_rx.is_empty()
            && (!local_work || records_only)
            && !engine.has_output_besides_completions()
            // The caller's precise clock when it has one: the coarse clock lags up to a
            // tick, and a sleeper whose deadline passed would otherwise spin until then.
            && *now.get_or_insert_with(|| coarse.unwrap_or_else(|| self.rt.coarse_now())) < *timer_at
        {
            if filed || engine.has_output() {
                let completed =
                    core.engine.has_output() && core.collect_completions(now.expect("read above"));
                if (filed || completed) && self.sleepers.load(Ordering::SeqCst) > 0 {
                    self.signal();
                }
                if !flush {
                    return;
                }
                let Core { bundler, sock, .. } = core;
                bundler.emit(sock);
                let _ = sock.flush();
                return;
            }
            if flush {
                bundler.emit(sock);
                let _ = sock.flush();
            }
            return;
        }
        // Frames from the wire start timers that need the precise clock; a pass that
        // only took shared-memory records or copies does with the coarse one.
        let now = now.unwrap_or_else(|| {
            if rx.is_empty() && board_rx.is_empty() {
                self.rt.coarse_now()
            } else {
                self.rt.now()
            }
        });
        if !rx.is_empty() || placed {
            self.last_rx.store(now, Ordering::Relaxed);
        }
        for f in rx.drain(..) {
            if f.get(16).map(|&t| omx_wire::type_of(t)) == Some(omx_wire::BUNDLE_TYPE)
                && self.rt.cfg.bundle
            {
                // Each inner frame is routed by its own (checksummed) header: the
                // bundle's header has no checksum, and a corrupted endpoint byte there
                // must not make us nack frames that are ours.
                let Ok(items) = omx_wire::bundle_items(&f) else {
                    engine.counters.drop_bad_bundle += 1;
                    continue;
                };
                engine.counters.recv_bundle += 1;
                for r in items {
                    let inner = f.slice(r);
                    // The inner frame must come from the bundle's sender.
                    if inner.get(6..12) != f.get(6..12) {
                        engine.counters.drop_bad_bundle += 1;
                        continue;
                    }
                    match route(&inner) {
                        Route::Endpoint(e) if e != me => self.nack_closed(engine, sock, e, &inner),
                        _ => engine.handle_frame(now, inner),
                    }
                }
                continue;
            }
            if let Route::Endpoint(e) = route(&f) {
                if e != me {
                    // Only the board-service owner sees these: frames for endpoints
                    // that are not open, answered with a nack as the original driver.
                    self.nack_closed(engine, sock, e, &f);
                    continue;
                }
            }
            engine.handle_frame(now, f);
        }
        let solicit = self.board.solicit.load(Ordering::Relaxed);
        if !core.board_rx.is_empty()
            || core
                .discovery
                .as_ref()
                .is_some_and(|d| d.deadline() <= now || d.solicited != solicit)
        {
            self.run_discovery(core, now);
        }
        if core.engine.poll_timeout().is_some_and(|t| t <= now) {
            core.engine.handle_timeout(now);
        }
        let completed = self.drain(core, now, flush) | filed;
        if completed && self.sleepers.load(Ordering::SeqCst) > 0 {
            self.signal();
        }
        if now >= core.next_publish {
            self.housekeeping(core, now);
        }
        // Every deadline can only have changed during this pass.
        let mut next = core
            .engine
            .poll_timeout()
            .unwrap_or(u64::MAX)
            .min(core.next_publish);
        if let Some(d) = &core.discovery {
            next = next.min(d.deadline());
        }
        core.timer_at = next;
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
        core.want = Some(req);
        self.progress_at(core, now, true);
        core.want = None;
        core.wanted.take()
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
        if core.in_handler || core.unexp_handler.is_none() {
            return core;
        }
        self.run_installed_handler(core)
    }

    pub(super) fn run_installed_handler<'a>(&'a self, mut core: CoreGuard<'a>) -> CoreGuard<'a> {
        while let Some(ev) = core.engine.poll_unexpected() {
            let Some(mut h) = core.unexp_handler.take() else {
                break;
            };
            core.in_handler = true;
            drop(core);
            let discard = h(&ev);
            core = self.lock();
            core.in_handler = false;
            if core.unexp_handler.is_none() && core.engine.unexpected_hook() {
                core.unexp_handler = Some(h);
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
        let mut seen = self.app_calls.load(Ordering::Relaxed);
        let mut nap = APP_QUIET;
        while !self.closing.load(Ordering::SeqCst) {
            let calls = self.app_calls.load(Ordering::Relaxed);
            let active = self.app_active.load(Ordering::SeqCst) > 0;
            if active || calls != seen {
                // Not woken when the application leaves (that would cost every wait a
                // futex wake): nap until a whole interval passed without a call, backing
                // off while the application keeps driving (each wake-up steals a CPU
                // from a polling thread).
                seen = calls;
                let g = self.idle.0.lock().unwrap_or_else(|p| p.into_inner());
                let _ = self.idle.1.wait_timeout(g, nap);
                nap = (nap * 2).min(APP_NAP_MAX);
                continue;
            }
            nap = APP_QUIET;
            let core = self.lock();
            let budget = self.sleep_budget(&core, Duration::from_millis(100));
            let fired = self.sleep_unlocked(core, budget);
            if self.sleepers.load(Ordering::SeqCst) == 0 && fired.event {
                self.drain_signal();
            }
            if self.closing.load(Ordering::SeqCst) {
                break;
            }
            if self.app_active.load(Ordering::SeqCst) > 0
                || self.app_calls.load(Ordering::Relaxed) != seen
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
