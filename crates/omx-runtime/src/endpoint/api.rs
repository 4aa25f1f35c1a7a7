//! The application-facing operations: connect, send and receive, one-sided access,
//! test/wait/probe, cancel, and the unexpected-message handler.

use super::completions::RequestInfo;
use super::sleep::Ended;
use super::{Core, Endpoint, Error, Interrupted, Spin, UnexpectedHandler, WatchEnd};
use crate::local::LocalConnect;
use crate::memory::{Access, Segment, MAX_SEGMENTS};
use omx_proto::*;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a connect waits for a nic id not in the peer table to be heard of before
/// NIC_NOT_FOUND: a name lookup's wait (`mx_hostname_to_nic_id`).
pub const UNKNOWN_NIC_WAIT: Duration = Duration::from_secs(2);
/// Discovery is asked to announce again this often while such a connect waits.
const UNKNOWN_NIC_ASK_EVERY: Duration = Duration::from_millis(500);
/// The peer table is looked at this often while such a connect waits.
const UNKNOWN_NIC_LOOK_EVERY: Duration = Duration::from_millis(2);

/// Sends posted closer together than this are treated as a stream.
const STREAM_GAP: Time = 5_000;

/// A finished connect: the partner, or the status it failed with.
fn connect_outcome(c: Completion) -> Result<PartnerId, Status> {
    match c.status.code {
        StatusCode::Success => Ok(c.status.source.expect("partner")),
        _ => Err(c.status),
    }
}

impl Endpoint {
    /// Non-blocking connect. A nic id not in the peer table is given `UNKNOWN_NIC_WAIT`
    /// to be heard of (see [`Endpoint::iconnect_within`]).
    pub fn iconnect(
        &self,
        nic: NicId,
        endpoint: u8,
        key: u32,
        context: u64,
    ) -> Result<ReqId, Error> {
        self.iconnect_within(nic, endpoint, key, context, UNKNOWN_NIC_WAIT)
    }

    /// [`Endpoint::iconnect`], with `learn` the longest wait for a nic id not in the peer
    /// table: MX fails such a connect at once with NIC_NOT_FOUND (its table was filled
    /// before any process ran), where omx learns boards by discovery, so a job started
    /// right after its hosts may name a board whose announcement is still on the way.
    /// Discovery is asked to announce at once (an unknown board answers an announcement
    /// at once), and the connect goes ahead the moment the board is heard of, or fails
    /// with `UnknownPeer` (NIC_NOT_FOUND) when `learn` ran out.
    pub fn iconnect_within(
        &self,
        nic: NicId,
        endpoint: u8,
        key: u32,
        context: u64,
        learn: Duration,
    ) -> Result<ReqId, Error> {
        let deadline = std::time::Instant::now() + learn;
        let mut next_ask = std::time::Instant::now();
        loop {
            match self.try_connect(nic, endpoint, key, context) {
                Err(Error::Engine(EngineError::UnknownPeer))
                    if is_unicast_nic(nic) && std::time::Instant::now() < deadline =>
                {
                    if std::time::Instant::now() >= next_ask {
                        next_ask = std::time::Instant::now() + UNKNOWN_NIC_ASK_EVERY;
                        self.inner.board.solicit.fetch_add(1, Ordering::Relaxed);
                    }
                    // Discovery runs in the progress of the endpoint holding the board
                    // (maybe this one, without a progress thread).
                    self.progress();
                    std::thread::sleep(UNKNOWN_NIC_LOOK_EVERY);
                }
                r => return r,
            }
        }
    }

    /// One connect attempt: the peer table as this host knows it now (another process's
    /// discovery may have written the shared peer file since this one last read it).
    fn try_connect(
        &self,
        nic: NicId,
        endpoint: u8,
        key: u32,
        context: u64,
    ) -> Result<ReqId, Error> {
        let (mut core, now) = self.inner.app_lock_now();
        let me = (self.inner.board.nic_id, self.inner.index);
        let Core { engine, local, .. } = &mut *core;
        if let Some(sh) = local
            .as_mut()
            .filter(|s| s.is_local(nic) && (nic, endpoint) != me)
        {
            if let LocalConnect::Done(r) = sh.connect(engine, nic, endpoint, key, context)? {
                self.inner.post_drain(&mut core, now, true);
                return Ok(r);
            }
        }
        let r = match core.engine.connect(now, nic, endpoint, key, context) {
            Err(EngineError::UnknownPeer) => {
                let board = &self.inner.board;
                board.merge_peers(&board.dir.load_peers());
                self.inner.sync_peers(&mut core);
                core.engine.connect(now, nic, endpoint, key, context)?
            }
            r => r?,
        };
        self.inner.progress_at(&mut core, Some(now), true);
        Ok(r)
    }

    /// Blocking connect; the partner on success, the failure status otherwise.
    pub fn connect(
        &self,
        nic: NicId,
        endpoint: u8,
        key: u32,
        timeout: Option<Duration>,
    ) -> Result<Result<PartnerId, Status>, Error> {
        let learn = timeout.map_or(UNKNOWN_NIC_WAIT, |t| t.min(UNKNOWN_NIC_WAIT));
        let r = self.iconnect_within(nic, endpoint, key, 0, learn)?;
        match self.wait(r, timeout) {
            Some(c) => Ok(connect_outcome(c)),
            None => {
                self.forget(r);
                Err(Error::Timeout)
            }
        }
    }

    /// Blocking connect that busy-polls, calling `others` between its own polls (the
    /// C API makes progress on the process's other endpoints there: `OMX_CONNECT_POLLALL`,
    /// for processes without a progress thread whose endpoints connect to each other).
    pub fn connect_polling(
        &self,
        nic: NicId,
        endpoint: u8,
        key: u32,
        timeout: Option<Duration>,
        mut others: impl FnMut(),
    ) -> Result<Result<PartnerId, Status>, Error> {
        let learn = timeout.map_or(UNKNOWN_NIC_WAIT, |t| t.min(UNKNOWN_NIC_WAIT));
        let r = self.iconnect_within(nic, endpoint, key, 0, learn)?;
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            if let Some(c) = self.test(r) {
                return Ok(connect_outcome(c));
            }
            others();
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                self.forget(r);
                return Err(Error::Timeout);
            }
            std::thread::yield_now();
        }
    }

    /// The total length of `segs`, after checking that they can be used for
    /// `access` (file and process segments: see [`Segment::check`]), so that a bad
    /// segment fails the post with nothing sent.
    pub(super) fn check_segments(segs: &[Segment], access: Access) -> Result<u32, Error> {
        if segs.len() > MAX_SEGMENTS {
            return Err(Error::TooManySegments);
        }
        // One pass over the segments (this runs on every send and receive).
        let mut total: u64 = 0;
        for s in segs {
            match *s {
                Segment::Memory { ptr, len } if len > 0 && ptr.is_null() => {
                    return Err(Error::NullSegment)
                }
                Segment::Memory { .. } => {}
                _ => s.check(access)?,
            }
            total += s.len() as u64;
        }
        if total > u32::MAX as u64 {
            return Err(Error::MessageTooLong);
        }
        Ok(total as u32)
    }

    /// Posts a send of the bytes in `segs` to `dest`.
    ///
    /// # Safety
    /// Every segment must stay valid and unmodified until the request completes (eager
    /// messages are copied at once, but the MX contract covers both).
    pub unsafe fn isend(
        &self,
        segs: &[Segment],
        dest: PartnerId,
        match_info: u64,
        context: u64,
        sync: bool,
    ) -> Result<ReqId, Error> {
        self.isend_then(segs, dest, match_info, context, sync, false)
    }

    /// [`Endpoint::isend`]; with `forget`, a send whose completion nobody will take
    /// (the C API's NULL request): forgotten in the same hold of the endpoint lock as
    /// the post, where an eager send's completion is still the latest (no second lock,
    /// no hash).
    ///
    /// # Safety
    /// As [`Endpoint::isend`].
    pub unsafe fn isend_then(
        &self,
        segs: &[Segment],
        dest: PartnerId,
        match_info: u64,
        context: u64,
        sync: bool,
        forget: bool,
    ) -> Result<ReqId, Error> {
        let len = Self::check_segments(segs, Access::Read)?;
        let mut core = self.inner.app_lock();
        let plan = core.engine.plan_send(dest, match_info, len, sync);
        if plan == SendPlan::WriteToInbox {
            if let Some(r) =
                self.send_to_local_inbox(&mut core, segs, dest, match_info, len, context)
            {
                if forget {
                    core.completions.forget(r);
                }
                return Ok(r);
            }
        }
        let now = self.inner.rt.now();
        let (data, handle) = if plan != SendPlan::Lend {
            (
                SendData::Eager(core.outbound.capture(segs, len as usize)?),
                None,
            )
        } else {
            let h = core.mem.register(segs);
            (SendData::Region { handle: h, len }, Some(h))
        };
        let r = if sync {
            core.engine.issend(now, dest, match_info, data, context)
        } else {
            core.engine.isend(now, dest, match_info, data, context)
        };
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                if let Some(h) = handle {
                    core.mem.release(h);
                }
                return Err(e.into());
            }
        };
        let streaming = now.saturating_sub(core.outbound.last_post) < STREAM_GAP;
        core.outbound.last_post = now;
        self.inner.post_drain(&mut core, now, !streaming);
        if forget {
            core.completions.forget(r);
        }
        Ok(r)
    }

    /// The fast path of a small send to a partner on this host: the message is written
    /// from the application's segments (lent by `isend`) straight into the partner's
    /// shared-memory inbox and completes at once. `None` when it must take the queued
    /// path (no channel or inbox yet, messages waiting, or no room).
    fn send_to_local_inbox(
        &self,
        core: &mut Core,
        segs: &[Segment],
        dest: PartnerId,
        match_info: u64,
        len: u32,
        context: u64,
    ) -> Option<ReqId> {
        let Core { engine, local, .. } = core;
        if !local
            .as_mut()?
            .write_eager_to_inbox(dest, match_info, segs, len as usize)
        {
            return None;
        }
        let c = engine.local_direct_sent(dest, match_info, len, context);
        if core.engine.has_output() {
            // Completions already queued go first (completion order); other output
            // waits for the next pass, as between streamed sends.
            core.collect_completions(self.inner.rt.coarse_now());
        }
        let r = c.req;
        core.completions.insert(c);
        self.inner.wake.signal_sleepers(core.completions.filed());
        Some(r)
    }

    /// Posts a receive into `segs` for messages with `(match & mask) == match_info`.
    ///
    /// # Safety
    /// Every segment must stay valid, and untouched by the application, until the
    /// request completes or is cancelled.
    pub unsafe fn irecv(
        &self,
        segs: &[Segment],
        match_info: u64,
        mask: u64,
        context: u64,
    ) -> Result<ReqId, Error> {
        let len = Self::check_segments(segs, Access::Write)?;
        self.post_lent(segs, |e, now, h| {
            e.irecv(now, match_info, mask, h, len, context)
        })
    }

    /// Posts a request that lends `segs` to the engine: the memory is registered for it
    /// and released again if the engine refuses the request.
    pub(super) fn post_lent(
        &self,
        segs: &[Segment],
        post: impl FnOnce(&mut Engine, Time, MemHandle) -> Result<ReqId, EngineError>,
    ) -> Result<ReqId, Error> {
        // The precise clock: posting may start a pull, whose requests are timed from
        // now against a 1 ms floor; the coarse clock lags up to a tick (4 ms), so blocks
        // looked overdue at once and were re-requested for nothing.
        let mut core = self.inner.app_lock();
        let now = self.inner.rt.now();
        let h = core.mem.register(segs);
        match post(&mut core.engine, now, h) {
            Ok(r) => {
                if core.engine.has_output() {
                    self.inner.post_drain(&mut core, now, true);
                } else {
                    // A receive that matched nothing yet: no output, no timer armed;
                    // only frames earlier streamed sends left queued go out.
                    let Core {
                        outbound,
                        sock,
                        stripes,
                        ..
                    } = &mut *core;
                    outbound.flush(sock, stripes);
                }
                Ok(r)
            }
            Err(e) => {
                core.mem.release(h);
                Err(e.into())
            }
        }
    }

    /// Exposes `seg` to one-sided access by remote endpoints under `id` (flags:
    /// `omx_proto::onesided::EXPOSE_READ | EXPOSE_WRITE`). Remote accesses name its
    /// bytes from `window` on: its own address (MX), or any other base (a window
    /// keyed by a memory-registration key, so a wrong key names nothing).
    ///
    /// # Safety
    /// The segment must stay valid until [`Endpoint::unexpose`] (or the endpoint's
    /// close); remote puts write into it at any time in between.
    pub unsafe fn expose(
        &self,
        seg: Segment,
        window: u64,
        id: u64,
        flags: u32,
    ) -> Result<(), Error> {
        // Remote reads need the bytes there to read, remote writes a place to write.
        use omx_proto::onesided::{EXPOSE_READ, EXPOSE_WRITE};
        let read = flags & EXPOSE_READ != 0;
        let access = if read { Access::Read } else { Access::Write };
        Self::check_segments(&[seg], access)?;
        if read && flags & EXPOSE_WRITE != 0 {
            Self::check_segments(&[seg], Access::Write)?;
        }
        let mut core = self.inner.app_lock();
        let h = core.mem.register(&[seg]);
        match core.engine.expose(id, window, seg.len() as u64, h, flags) {
            Ok(()) => Ok(()),
            Err(e) => {
                core.mem.release(h);
                Err(e.into())
            }
        }
    }

    /// Withdraws an exposed region: no new remote access is accepted.
    pub fn unexpose(&self, id: u64) -> Result<(), Error> {
        let mut core = self.inner.app_lock();
        let h = core.engine.unexpose(id)?;
        // Pulls already granted may still read it: keep the handle until the endpoint
        // closes if any rendezvous region is in use, else release it now.
        if core.engine.stats().regions == 0 && core.engine.stats().pulls == 0 {
            core.mem.release(h);
        }
        Ok(())
    }

    /// One-sided read of `remote_addr` on `dest` into `seg`.
    ///
    /// # Safety
    /// As for [`Endpoint::irecv`].
    pub unsafe fn iget(
        &self,
        seg: Segment,
        dest: PartnerId,
        remote_addr: u64,
        context: u64,
    ) -> Result<ReqId, Error> {
        let len = Self::check_segments(&[seg], Access::Write)?;
        self.post_lent(&[seg], |e, now, h| {
            e.iget(now, dest, remote_addr, h, len, context)
        })
    }

    /// One-sided write of `seg` at `remote_addr` on `dest`.
    ///
    /// # Safety
    /// As for [`Endpoint::isend`] of a large message.
    pub unsafe fn iput(
        &self,
        seg: Segment,
        dest: PartnerId,
        remote_addr: u64,
        context: u64,
    ) -> Result<ReqId, Error> {
        self.iput_notify(seg, dest, remote_addr, context, None)
    }

    /// [`Endpoint::iput`] that sends `dest` the message `notice` once the data is in
    /// place ([`Engine::iput_notify`]): the engine sends it, no later call needed.
    ///
    /// # Safety
    /// As for [`Endpoint::isend`] of a large message.
    pub unsafe fn iput_notify(
        &self,
        seg: Segment,
        dest: PartnerId,
        remote_addr: u64,
        context: u64,
        notice: Option<onesided::PutNotice>,
    ) -> Result<ReqId, Error> {
        let len = Self::check_segments(&[seg], Access::Read)?;
        self.post_lent(&[seg], |e, now, h| {
            e.iput_notify(now, dest, remote_addr, h, len, context, notice)
        })
    }

    /// Remote atomic `what` on `count` elements at `remote_addr` on `dest`
    /// ([`Engine::iatomic`]): `operands` are copied at the call; the old values land
    /// in `result` for fetching kinds (an empty segment otherwise).
    ///
    /// # Safety
    /// As for [`Endpoint::irecv`] (`result` is written until completion).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn iatomic(
        &self,
        result: Segment,
        dest: PartnerId,
        remote_addr: u64,
        what: (AtomicOp, AtomicType, AtomicKind),
        count: u32,
        operands: &[u8],
        context: u64,
    ) -> Result<ReqId, Error> {
        Self::check_segments(&[result], Access::Write)?;
        self.post_lent(&[result], |e, now, h| {
            e.iatomic(now, dest, remote_addr, what, count, operands, h, context)
        })
    }

    /// The completion of `req`, if done (removes it).
    pub fn test(&self, req: ReqId) -> Option<Completion> {
        let mut core = self.inner.app_lock();
        if let Some(c) = core.completions.take(req) {
            return Some(c);
        }
        let got = self.inner.progress_for(&mut core, None, req);
        // The pass hands `req`'s completion to `got`; only the unexpected handler (it
        // runs with the lock released, and what it posts completes into the done
        // table) can have filed it since the first look.
        let handler = !core.unexpected.running && core.unexpected.handler.is_some();
        let mut core = self.inner.run_handlers(core);
        let c = match got {
            None if handler => core.completions.take(req),
            got => got,
        };
        if c.is_none() && (core.copier.pending() > 0 || core.sock.is_relay()) {
            // Let the copy thread, or omxd relaying our frames, run if it shares our CPU.
            drop(core);
            std::thread::yield_now();
        }
        c
    }

    /// Waits for `req` (None = forever). `None` on timeout or `wakeup()`.
    pub fn wait(&self, req: ReqId, timeout: Option<Duration>) -> Option<Completion> {
        self.wait_with(req, timeout, Spin::Adaptive)
    }

    /// [`Endpoint::wait`] with the spin before the sleep chosen per call (see [`Spin`]).
    pub fn wait_with(
        &self,
        req: ReqId,
        timeout: Option<Duration>,
        spin: Spin,
    ) -> Option<Completion> {
        self.inner
            .wait_watching(timeout, Some(req), &[], spin, false, |core, got| {
                got.or_else(|| core.completions.take(req))
            })
            .ok()
    }

    /// [`Endpoint::wait`] that a signal delivered to this thread while it sleeps ends
    /// too (`Err`), whatever `OMX_WAITINTR` says: for a caller that must answer signals
    /// as a system call does (a socket layer's blocked write, `EINTR`).
    pub fn wait_or_signal(
        &self,
        req: ReqId,
        timeout: Option<Duration>,
    ) -> Result<Option<Completion>, Interrupted> {
        match self.inner.wait_watching(
            timeout,
            Some(req),
            &[],
            Spin::Adaptive,
            true,
            |core, got| got.or_else(|| core.completions.take(req)),
        ) {
            Ok(c) => Ok(Some(c)),
            Err(Ended::Interrupted) => Err(Interrupted),
            Err(_) => Ok(None),
        }
    }

    /// Oldest completed request whose match info satisfies the mask (removes it).
    pub fn test_any(&self, match_info: u64, mask: u64) -> Option<Completion> {
        let core = self.inner.app_lock();
        let mut core = self.inner.progress_guard(core);
        core.completions.take_any(match_info, mask)
    }

    /// `test_any` without a progress pass: only requests already completed.
    pub fn take_any_completed(&self, match_info: u64, mask: u64) -> Option<Completion> {
        self.inner.app_lock().completions.take_any(match_info, mask)
    }

    pub fn wait_any(
        &self,
        match_info: u64,
        mask: u64,
        timeout: Option<Duration>,
    ) -> Option<Completion> {
        self.inner.wait_for(timeout, None, |core, _| {
            core.completions.take_any(match_info, mask)
        })
    }

    /// The oldest completed request, left in place.
    pub fn peek(&self) -> Option<ReqId> {
        let core = self.inner.app_lock();
        let mut core = self.inner.progress_guard(core);
        core.completions.oldest()
    }

    pub fn wait_peek(&self, timeout: Option<Duration>) -> Option<ReqId> {
        self.inner
            .wait_for(timeout, None, |core, _| core.completions.oldest())
    }

    pub fn iprobe(&self, match_info: u64, mask: u64) -> Option<Status> {
        let core = self.inner.app_lock();
        let core = self.inner.progress_guard(core);
        core.engine.iprobe(match_info, mask)
    }

    pub fn probe(&self, match_info: u64, mask: u64, timeout: Option<Duration>) -> Option<Status> {
        self.inner.wait_for(timeout, None, |core, _| {
            core.engine.iprobe(match_info, mask)
        })
    }

    /// Waits as [`Endpoint::probe`] does (spin, then sleep on the endpoint's
    /// descriptors with its message-aware wake-ups, this thread making the progress)
    /// until `ready()` says so, one of the caller's descriptors `watch` is ready
    /// (looked at while the spin yields, watched in every sleep), a signal, `timeout`
    /// or [`Endpoint::wakeup`]. `ready` is asked after each progress pass, once the
    /// unexpected handler has run; it runs with the endpoint locked, so it must not
    /// call the endpoint. A thread blocked on something that omx messages and other
    /// descriptors both feed (a socket layer's read, its `poll`) sleeps here, so the
    /// frame that brings the message wakes the thread that takes it.
    pub fn wait_watching(
        &self,
        timeout: Option<Duration>,
        watch: &[libc::pollfd],
        ready: impl FnMut() -> bool,
    ) -> WatchEnd {
        self.wait_watching_with(timeout, watch, Spin::Adaptive, ready)
    }

    /// [`Endpoint::wait_watching`] with the spin before the sleep chosen per call (see
    /// [`Spin`]): a socket layer that knows its reader is streaming bulk data sleeps at
    /// once, the frame that brings the data waking it.
    pub fn wait_watching_with(
        &self,
        timeout: Option<Duration>,
        watch: &[libc::pollfd],
        spin: Spin,
        mut ready: impl FnMut() -> bool,
    ) -> WatchEnd {
        match self
            .inner
            .wait_watching(timeout, None, watch, spin, false, |_, _| {
                ready().then_some(())
            }) {
            Ok(()) => WatchEnd::Ready,
            Err(Ended::Timeout) => WatchEnd::TimedOut,
            Err(Ended::Watched) => WatchEnd::Watched,
            Err(Ended::Interrupted) => WatchEnd::Interrupted,
        }
    }

    /// Cancels an unmatched receive; true if it was cancelled (and freed).
    pub fn cancel(&self, req: ReqId) -> Result<bool, Error> {
        let mut core = self.inner.app_lock();
        let handle = core.engine.recv_handle(req);
        let cancelled = match core.engine.cancel(req) {
            Ok(c) => c,
            // Already completed (its completion waits for test/wait): too late.
            Err(_) if core.completions.contains(req) => false,
            Err(e) => return Err(e.into()),
        };
        if let Some(h) = handle.filter(|_| cancelled) {
            core.mem.release(h);
        }
        Ok(cancelled)
    }

    /// The application no longer wants the completion of `req`.
    pub fn forget(&self, req: ReqId) {
        let mut core = self.inner.app_lock();
        core.completions.forget(req);
    }

    /// What a request is, while it is pending or completed and not yet taken.
    pub fn request_info(&self, req: ReqId) -> Option<RequestInfo> {
        let core = self.inner.app_lock();
        if let Some((kind, context, buffered)) = core.engine.request_info(req) {
            return Some(RequestInfo {
                kind,
                context,
                buffered,
            });
        }
        core.completions.get(req).map(|c| RequestInfo {
            kind: c.kind,
            context: c.status.context,
            buffered: true,
        })
    }

    /// Wakes every thread blocked in a wait on this endpoint (they return `None`).
    /// Sleeps of the threads waiting on this endpoint and how they ended: (sleeps,
    /// woken by a frame or doorbell, woken by the timer).
    pub fn wake_stats(&self) -> (u64, u64, u64) {
        let s = &self.inner.wake.stats;
        (
            s.sleeps.load(Ordering::Relaxed),
            s.woken_by_io.load(Ordering::Relaxed),
            s.woken_by_timer.load(Ordering::Relaxed),
        )
    }

    /// A descriptor for the application's own `poll`/`epoll`: after
    /// [`Endpoint::arm_notify`] it becomes readable at the next completion (made by
    /// any thread, the progress thread included).
    pub fn notify_fd(&self) -> std::io::Result<std::os::fd::RawFd> {
        self.inner.wake.notify.fd()
    }

    /// Arms the notify descriptor (clearing it) before the application sleeps on it.
    /// Completions already queued do not ring it: the caller looks for them after
    /// arming. False when work is under way that finishes without any descriptor
    /// firing (copies, queued local messages): the caller should poll, not sleep.
    pub fn arm_notify(&self) -> bool {
        self.arm_notify_at(self.notify_mark() + 1)
    }

    /// A count of the completions made so far (every request that completed for the
    /// application), for [`Endpoint::arm_notify_at`]. Read it before looking at the
    /// completions the wait is about: the count may lag the completions already made
    /// (it moves at the end of the pass that made them), never lead.
    pub fn notify_mark(&self) -> u64 {
        self.inner.wake.notify.mark()
    }

    /// Arms the notify descriptor (clearing it) to ring once the count of
    /// [`Endpoint::notify_mark`] reaches `target` (at once if it did): a thread that
    /// needs `n` more requests done (room in a send window) reads the mark, looks at
    /// what completed, and arms at `mark + n`, and is woken once instead of at each
    /// completion. The completions counted are any requests', so it may ring early
    /// (the caller looks again and re-arms), never late. Threads arming one descriptor
    /// share it: the latest arming's target holds. False as [`Endpoint::arm_notify`].
    pub fn arm_notify_at(&self, target: u64) -> bool {
        let core = self.inner.lock();
        // Under the lock, as completions count (see `Notify::arm_at`).
        self.inner.wake.notify.arm_at(target);
        let quiet = !core.work_without_wakeup();
        drop(core);
        // The progress thread takes over at once instead of after its nap.
        self.inner.activity.idle.1.notify_all();
        quiet
    }

    pub fn wakeup(&self) {
        self.inner.wake.wakeups.fetch_add(1, Ordering::SeqCst);
        self.inner.wake.signal();
    }

    /// Per-request resend budget. Completed requests and receives (which resend
    /// nothing) accept it and ignore it.
    pub fn set_request_resends(&self, req: ReqId, resends: u32) -> Result<(), Error> {
        let mut core = self.inner.app_lock();
        match core.engine.set_send_resends(req, resends) {
            Ok(()) => Ok(()),
            Err(_) if core.completions.contains(req) || core.engine.recv_handle(req).is_some() => {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// MX's `mx_disable_progression`: from now on no progress pass runs, in library
    /// calls or on the progress thread, and no handler is called, until
    /// [`Endpoint::reenable_progression`]. Waits for a running unexpected handler to
    /// return first, unless `from_handler` (the caller is that handler). Idempotent.
    pub fn disable_progression(&self, from_handler: bool) {
        self.inner.activity.suspended.store(true, Ordering::SeqCst);
        if from_handler {
            return;
        }
        while self.inner.lock().unexpected.running {
            std::thread::yield_now();
        }
    }

    /// Undoes [`Endpoint::disable_progression`] and progresses at once. Idempotent.
    pub fn reenable_progression(&self) {
        self.inner.activity.suspended.store(false, Ordering::SeqCst);
        self.inner.activity.idle.1.notify_all();
        self.progress();
    }

    /// Makes progress once (for callers that poll).
    pub fn progress(&self) {
        let core = self.inner.app_lock();
        drop(self.inner.progress_guard(core));
    }

    /// Installs (or removes) the unexpected-message handler: it sees every message
    /// that matches no posted receive, before it is stored, and may post receives; it
    /// returns true to discard the message. It runs with the endpoint unlocked and
    /// progression paused.
    pub fn set_unexpected_handler(&self, handler: Option<UnexpectedHandler>) {
        let mut core = self.inner.app_lock();
        let now = self.inner.rt.now();
        core.engine.set_unexpected_hook(handler.is_some());
        if handler.is_none() {
            while let Some(ev) = core.engine.poll_unexpected() {
                core.engine.resolve_unexpected(now, ev.id, false);
            }
        }
        core.unexpected.handler = handler;
        self.inner.post_drain(&mut core, now, true);
    }
}
