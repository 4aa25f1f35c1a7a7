//! The intra-node channel of one endpoint: its shared-memory inbox (one ring per
//! sending endpoint of this host), its outboxes into other endpoints' inboxes, and the
//! execution of the engine's local pulls (one copy between address spaces with
//! `process_vm_readv`, or a plain copy within this process).
//!
//! Inboxes live in `<board dir>/shm-<uid>/ep<N>`, created owner-only: endpoints of
//! other users are reached through the network path instead.

use crate::memory::{all_memory, read_segments, MemRegistry, Segment};
use crate::registry::LocalReach;
use crate::runtime::Board;
use bytes::Bytes;
use omx_proto::{
    Completion, Engine, LocalIn, LocalMsg, LocalPull, LocalSend, NicId, PartnerId, PullOutcome,
    PullSrc, StatusCode, Time,
};
use omx_transport::cma::{self, CmaError, RemoteIov};
use omx_transport::shm::{Inbox, InboxParams, Outbox, OutboxError, SenderId};
use omx_wire::{
    decode_local, encode_local_chunk, encode_local_eager, encode_local_notify,
    encode_local_pull_req, encode_local_rndv, LocalRecord, RemoteMem, LOCAL_CHUNK_HEADER,
    LOCAL_EAGER_HEADER, LOCAL_NOTIFY_LEN, LOCAL_PULL_REQ_LEN, LOCAL_RNDV_HEADER,
};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Records taken from the inbox per progress pass.
const RX_BUDGET: usize = 256;
/// Largest chunk of a pushed (two-copy) transfer.
const PUSH_CHUNK: usize = 64 * 1024;

/// Where the inboxes of a board live for the current user.
pub fn inbox_dir(board: &Board) -> PathBuf {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    board.dir.path().join(format!("shm-{uid}"))
}

fn inbox_name(endpoint: u8) -> String {
    format!("ep{endpoint}")
}

/// How long a local connect waits for an endpoint that is still opening (sockets,
/// rings and inbox take milliseconds; an endpoint opened through `omxd` cannot say
/// when it is done and costs this wait once per connect).
const OPENING_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A message that did not fit in its ring yet (kept in order per partner).
enum Pending {
    Msg(LocalMsg),
    /// A pushed transfer, `done` bytes already written.
    Push {
        cookie: u64,
        mem: omx_proto::MemHandle,
        offset: u64,
        len: u32,
        done: u32,
    },
}

pub(crate) struct LocalChannel {
    inbox: Inbox,
    me: SenderId,
    pid: u32,
    cma: bool,
    verbose: bool,
    warned: bool,
    boards: Vec<Arc<Board>>,
    outboxes: PartnerMap<Outbox>,
    backlog: HashMap<PartnerId, VecDeque<Pending>>,
    /// Inbox slot -> its sender and our partner for it.
    slots: Vec<Option<(SenderId, PartnerId)>>,
    /// The partner whose doorbell the messages written so far still owe a ring (rung
    /// once per run of messages to one partner, not per message).
    unrung: Option<PartnerId>,
}

/// What connecting through shared memory found.
pub(crate) enum LocalConnect {
    Done(omx_proto::ReqId),
    /// Not reachable this way (no inbox although the endpoint is open, or no free
    /// slot): use the network path.
    UseNetwork,
}

impl LocalChannel {
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        board: &Board,
        boards: Vec<Arc<Board>>,
        endpoint: u8,
        session: u32,
        key: u32,
        ring_bytes: usize,
        cma: bool,
        verbose: bool,
    ) -> io::Result<LocalChannel> {
        let dir = inbox_dir(board);
        let _ = Inbox::reclaim_stale(&dir);
        let params = InboxParams {
            ring_bytes,
            session,
            key,
            nic_id: board.nic_id,
            endpoint,
            ..InboxParams::default()
        };
        let inbox = Inbox::create(&dir, &inbox_name(endpoint), &params)?;
        let slots = vec![None; params.slots];
        Ok(LocalChannel {
            inbox,
            me: SenderId {
                nic_id: board.nic_id,
                endpoint,
                session,
                pid: std::process::id(),
            },
            pid: std::process::id(),
            cma,
            verbose,
            warned: false,
            boards,
            outboxes: PartnerMap::default(),
            backlog: HashMap::default(),
            slots,
            unrung: None,
        })
    }

    fn board_of(&self, nic: NicId) -> Option<&Arc<Board>> {
        self.boards.iter().find(|b| b.nic_id == nic)
    }

    /// Whether `nic` is a board of this host (its endpoints are reached through
    /// shared memory).
    pub fn is_local(&self, nic: NicId) -> bool {
        self.board_of(nic).is_some()
    }

    fn open_outbox(&self, nic: NicId, endpoint: u8) -> Result<Outbox, OutboxError> {
        let Some(b) = self.board_of(nic) else {
            return Err(OutboxError::NotFound);
        };
        Outbox::open(&inbox_dir(b), &inbox_name(endpoint), self.me)
    }

    /// The outbox to `endpoint`, waiting (boundedly) for an endpoint that holds its
    /// index but is still opening: its inbox appears at the end of the open, and a
    /// connect that took the network meanwhile would go nowhere (frames to our own
    /// board do not come back from the interface).
    fn open_outbox_when_ready(&self, nic: NicId, endpoint: u8) -> Result<Outbox, OutboxError> {
        let Some(b) = self.board_of(nic) else {
            return Err(OutboxError::NotFound);
        };
        let deadline = std::time::Instant::now() + OPENING_WAIT;
        loop {
            let r = self.open_outbox(nic, endpoint);
            let absent = matches!(r, Err(OutboxError::NotFound) | Err(OutboxError::Closed));
            if !absent
                || std::time::Instant::now() >= deadline
                || b.dir.reach(endpoint) != LocalReach::Opening
                || !b.dir.endpoint_open(endpoint)
            {
                return r;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Connects to endpoint `endpoint` of local board `nic` through its inbox.
    pub fn connect(
        &mut self,
        engine: &mut Engine,
        nic: NicId,
        endpoint: u8,
        key: u32,
        context: u64,
    ) -> Result<LocalConnect, omx_proto::EngineError> {
        // Keep a live ring: messages already in it must not be overtaken by a new one.
        if let Some(pid) = engine.partner_of(nic, endpoint) {
            if let Some(o) = self.outboxes.get(&pid) {
                if o.receiver_alive() {
                    let r = o.receiver();
                    let req = engine.connect_local(
                        nic,
                        endpoint,
                        Ok(r.session),
                        r.key == key,
                        context,
                    )?;
                    return Ok(LocalConnect::Done(req));
                }
                self.outboxes.remove(&pid);
                self.backlog.remove(&pid);
            }
        }
        match self.open_outbox_when_ready(nic, endpoint) {
            Ok(o) => {
                let r = o.receiver();
                let req =
                    engine.connect_local(nic, endpoint, Ok(r.session), r.key == key, context)?;
                if let Some(pid) = engine.partner_of(nic, endpoint) {
                    self.outboxes.insert(pid, o);
                }
                Ok(LocalConnect::Done(req))
            }
            Err(OutboxError::NotFound) | Err(OutboxError::Closed) => {
                let open = self
                    .board_of(nic)
                    .is_some_and(|b| b.dir.endpoint_open(endpoint));
                if open {
                    // Open but without an inbox (shared memory disabled there).
                    return Ok(LocalConnect::UseNetwork);
                }
                // As the board would nack it: beyond the endpoint range, or not open.
                let code = if endpoint >= crate::runtime::MAX_ENDPOINTS {
                    StatusCode::BadEndpoint
                } else {
                    StatusCode::EndpointClosed
                };
                let req = engine.connect_local(nic, endpoint, Err(code), false, context)?;
                Ok(LocalConnect::Done(req))
            }
            Err(_) => Ok(LocalConnect::UseNetwork),
        }
    }

    /// Whether records wait in the inbox (one load per active ring).
    pub fn has_pending(&self) -> bool {
        self.inbox.has_pending()
    }

    pub fn has_backlog(&self) -> bool {
        !self.backlog.is_empty()
    }

    pub fn wake_fd(&self) -> std::os::fd::RawFd {
        self.inbox.wake_fd()
    }

    /// Before a thread (application or progress) sleeps: arm the doorbell, then
    /// look again (a record published before it was armed rang nothing). False:
    /// do not sleep.
    pub fn prepare_sleep(&mut self) -> bool {
        self.inbox.begin_sleep()
    }

    /// After a sleep; `rang`: the doorbell fired (its FIFO needs draining).
    pub fn after_sleep(&mut self, rang: bool) {
        self.inbox.end_sleep(rang);
    }

    /// Feeds the inbox's records to the engine. `copy_in` turns borrowed ring bytes
    /// into shared bytes the engine may keep.
    pub fn receive(
        &mut self,
        engine: &mut Engine,
        mem: &mut MemRegistry,
        now: Time,
        copy_in: &mut dyn FnMut(&[u8]) -> Bytes,
        complete: &mut dyn FnMut(&mut MemRegistry, Completion),
    ) -> usize {
        let slots = &mut self.slots;
        let outboxes = &mut self.outboxes;
        let backlog = &mut self.backlog;
        self.inbox.poll(RX_BUDGET, |slot, sender, rec| {
            let pid = match slots.get(slot).copied().flatten() {
                Some((s, p)) if s == *sender => p,
                _ => {
                    let p = engine.local_partner(sender.nic_id, sender.endpoint, sender.session);
                    if let Some(x) = slots.get_mut(slot) {
                        *x = Some((*sender, p));
                    }
                    // A reopened endpoint: our ring into its previous incarnation's
                    // inbox is read by nobody any more.
                    if outboxes
                        .get(&p)
                        .is_some_and(|o| o.receiver().session != sender.session)
                    {
                        outboxes.remove(&p);
                        backlog.remove(&p);
                    }
                    p
                }
            };
            let m = match decode_local(rec) {
                Ok(LocalRecord::Eager {
                    flags: 0,
                    match_info,
                    data,
                }) if let Some((h, at, keep, done)) =
                    engine.local_eager_direct(pid, match_info, data.len() as u32) =>
                {
                    // Straight from the ring into the posted receive, which is complete:
                    // its completion is filed now (it releases the buffer), or was
                    // queued behind earlier ones.
                    mem.write(h, at as usize, &data[..keep as usize]);
                    if let Some(c) = done {
                        complete(mem, c);
                    }
                    return true;
                }
                Ok(LocalRecord::Eager {
                    flags,
                    match_info,
                    data,
                }) => LocalIn::Eager {
                    match_info,
                    flags,
                    data: copy_in(data),
                },
                Ok(LocalRecord::Rndv {
                    flags,
                    region,
                    use_seq,
                    len,
                    match_info,
                    memory,
                }) => LocalIn::Rndv {
                    match_info,
                    flags,
                    len,
                    region,
                    use_seq,
                    remote: Bytes::copy_from_slice(memory),
                },
                Ok(LocalRecord::Notify {
                    flags,
                    region,
                    use_seq,
                    xfer,
                }) => LocalIn::Notify {
                    region,
                    use_seq,
                    xfer,
                    flags,
                },
                Ok(LocalRecord::PullReq {
                    region,
                    use_seq,
                    offset,
                    len,
                    cookie,
                }) => LocalIn::PullReq {
                    region,
                    use_seq,
                    offset,
                    len,
                    cookie,
                },
                Ok(LocalRecord::Chunk {
                    cookie,
                    offset,
                    data,
                }) => {
                    let len = data.len() as u32;
                    match engine.local_chunk_target(cookie, offset, len) {
                        Some((h, at, keep)) => {
                            mem.write(h, at as usize, &data[..keep as usize]);
                            engine.local_chunk_done(now, cookie, len);
                        }
                        None => engine.counters.drop_pull_bad_region += 1,
                    }
                    return true;
                }
                Err(_) => {
                    engine.counters.drop_bad_field += 1;
                    return true;
                }
            };
            engine.handle_local(now, pid, m)
        })
    }

    /// Writes one of the engine's local messages into its partner's ring, or queues it
    /// (in order) behind what is waiting for room; the doorbell is rung when the run
    /// of messages to that partner ends ([`LocalChannel::flush`]).
    pub fn send_one(&mut self, s: LocalSend, mem: &MemRegistry) {
        let LocalSend { partner, msg } = s;
        // Fast path: nothing waits for this partner and its ring is open.
        if !matches!(msg, LocalMsg::Push { .. }) && !self.backlog.contains_key(&partner) {
            if let Some(o) = self.outboxes.get_mut(&partner) {
                if write_msg(o, &msg, mem, self.pid) {
                    if let Some(r) = self.unrung.filter(|&r| r != partner) {
                        self.ring(r);
                    }
                    self.unrung = Some(partner);
                    return;
                }
            }
        }
        let p = match msg {
            LocalMsg::Push {
                cookie,
                mem: h,
                offset,
                len,
            } => Pending::Push {
                cookie,
                mem: h,
                offset,
                len,
                done: 0,
            },
            m => Pending::Msg(m),
        };
        self.backlog.entry(partner).or_default().push_back(p);
    }

    /// Rings the doorbell the last messages owe, then writes what waits for room.
    pub fn flush(&mut self, engine: &mut Engine, mem: &MemRegistry, now: Time) {
        if let Some(r) = self.unrung.take() {
            self.ring(r);
        }
        if self.backlog.is_empty() {
            return;
        }
        let partners: Vec<PartnerId> = self.backlog.keys().copied().collect();
        for pid in partners {
            self.flush_partner(engine, mem, now, pid);
        }
    }

    /// Writes an eager message straight from the user's segments into the partner's
    /// ring (no capture); false when it must take the queued path (no ring yet,
    /// messages waiting, no room, or file or process segments, whose reads may fail:
    /// the queued path captures them first and fails the post if they do).
    pub fn write_eager_to_inbox(
        &mut self,
        pid: PartnerId,
        match_info: u64,
        segs: &[Segment],
        len: usize,
    ) -> bool {
        if !self.backlog.is_empty() && self.backlog.contains_key(&pid) || !all_memory(segs) {
            return false;
        }
        let Some(o) = self.outboxes.get_mut(&pid) else {
            return false;
        };
        let ok = o.try_push(LOCAL_EAGER_HEADER + len, |b| {
            encode_local_eager(b, 0, match_info, len as u32);
            // Memory segments only (checked above): the copy cannot fail.
            let _ = read_segments(segs, &mut b[LOCAL_EAGER_HEADER..LOCAL_EAGER_HEADER + len]);
        });
        if ok {
            o.doorbell();
        }
        ok
    }

    fn ring(&mut self, pid: PartnerId) {
        if let Some(o) = self.outboxes.get_mut(&pid) {
            o.doorbell();
        }
    }

    fn flush_partner(&mut self, engine: &mut Engine, mem: &MemRegistry, now: Time, pid: PartnerId) {
        if !self.outboxes.contains_key(&pid) {
            let opened = engine
                .partner_addr(pid)
                .ok_or(OutboxError::NotFound)
                .and_then(|(nic, ep, _)| self.open_outbox(nic, ep));
            match opened {
                Ok(o) => {
                    self.outboxes.insert(pid, o);
                }
                Err(_) => {
                    self.backlog.remove(&pid);
                    engine.local_partner_gone(now, pid);
                    return;
                }
            }
        }
        let o = self.outboxes.get_mut(&pid).expect("opened above");
        let q = self.backlog.get_mut(&pid).expect("caller checked");
        let mut wrote = false;
        while let Some(p) = q.front_mut() {
            let done = write(o, p, mem, self.pid);
            wrote |= done.wrote;
            if !done.finished {
                break;
            }
            q.pop_front();
        }
        if q.is_empty() {
            self.backlog.remove(&pid);
        }
        if wrote {
            o.doorbell();
        }
    }

    /// Partners whose endpoint closed or whose process died: their pending requests
    /// fail. Also frees the inbox slots of senders that went away.
    pub fn check_liveness(&mut self, engine: &mut Engine, now: Time) {
        let dead: Vec<PartnerId> = self
            .outboxes
            .iter()
            .filter(|(_, o)| !o.receiver_alive())
            .map(|(p, _)| p)
            .collect();
        for pid in dead {
            let o = self.outboxes.remove(&pid).expect("listed above");
            self.backlog.remove(&pid);
            // Only if the partner is still that incarnation (it may have reopened and
            // talked to us already: then only the old ring goes).
            let current = engine.partner_addr(pid).and_then(|(_, _, s)| s);
            if current == Some(o.receiver().session) {
                engine.local_partner_gone(now, pid);
            }
        }
        for (slot, _) in self.inbox.reap() {
            if let Some(x) = self.slots.get_mut(slot) {
                *x = None;
            }
        }
    }

    /// Executes a local pull (see [`run_local_pull`]), saying once in verbose mode
    /// when the two-copy fallback takes over.
    pub fn pull(
        &mut self,
        engine: &mut Engine,
        mem: &MemRegistry,
        now: Time,
        p: LocalPull,
        copier: &crate::copy::Copier,
    ) {
        let split = copier
            .backend()
            .filter(|_| p.len as usize >= copier.limits.sync_min);
        let outcome = run_local_pull(mem, &p, self.pid, self.cma, split);
        if outcome == PullOutcome::Refused && !self.warned {
            self.warned = true;
            if self.verbose {
                crate::say!(
                    "cross-process copies refused (ptrace scope or OMX_SHARED_CMA=0): \
                     large intra-node messages use the two-copy path through shared memory"
                );
            }
        }
        engine.local_pull_done(now, p.id, outcome);
    }
}

struct WriteResult {
    wrote: bool,
    finished: bool,
}

/// Writes one pending message (or as much of a pushed transfer as fits).
fn write(o: &mut Outbox, p: &mut Pending, mem: &MemRegistry, pid: u32) -> WriteResult {
    match p {
        Pending::Msg(m) => {
            let ok = write_msg(o, m, mem, pid);
            WriteResult {
                wrote: ok,
                finished: ok,
            }
        }
        Pending::Push {
            cookie,
            mem: h,
            offset,
            len,
            done,
        } => {
            let mut wrote = false;
            let max = PUSH_CHUNK.min(o.max_record() - LOCAL_CHUNK_HEADER);
            while *done < *len {
                let n = max.min((*len - *done) as usize);
                let at = *offset as usize + *done as usize;
                let off = *done;
                let ok = o.try_push(LOCAL_CHUNK_HEADER + n, |b| {
                    encode_local_chunk(b, *cookie, off, n as u32);
                    mem.read(*h, at, &mut b[LOCAL_CHUNK_HEADER..LOCAL_CHUNK_HEADER + n]);
                });
                if !ok {
                    break;
                }
                wrote = true;
                *done += n as u32;
            }
            WriteResult {
                wrote,
                finished: *done >= *len,
            }
        }
    }
}

fn write_msg(o: &mut Outbox, m: &LocalMsg, mem: &MemRegistry, pid: u32) -> bool {
    match m {
        LocalMsg::Eager {
            match_info,
            flags,
            data,
        } => o.try_push(LOCAL_EAGER_HEADER + data.len(), |b| {
            encode_local_eager(b, *flags, *match_info, data.len() as u32);
            b[LOCAL_EAGER_HEADER..LOCAL_EAGER_HEADER + data.len()].copy_from_slice(data);
        }),
        LocalMsg::Rndv {
            match_info,
            flags,
            len,
            region,
            use_seq,
            mem: h,
            offset,
        } => {
            // File and process segments have no address the receiver could read
            // from: it is told so and asks for the message to be pushed.
            let (pid, ranges) = match mem.ranges(*h, *offset as usize, *len as usize) {
                Some(r) => (pid, r),
                None => (RemoteMem::UNREACHABLE, Vec::new()),
            };
            let n = LOCAL_RNDV_HEADER + RemoteMem::encoded_len(ranges.len());
            o.try_push(n, |b| {
                encode_local_rndv(b, *flags, *region, *use_seq, *len, *match_info);
                RemoteMem::encode(
                    &mut b[LOCAL_RNDV_HEADER..],
                    pid,
                    ranges.iter().map(|&(p, l)| (p as u64, l as u64)),
                );
            })
        }
        LocalMsg::Notify {
            region,
            use_seq,
            xfer,
            flags,
        } => o.try_push(LOCAL_NOTIFY_LEN, |b| {
            encode_local_notify(b, *flags, *region, *use_seq, *xfer)
        }),
        LocalMsg::PullReq {
            region,
            use_seq,
            offset,
            len,
            cookie,
        } => o.try_push(LOCAL_PULL_REQ_LEN, |b| {
            encode_local_pull_req(b, *region, *use_seq, *offset, *len, *cookie)
        }),
        // Pushes are queued as `Pending::Push`.
        LocalMsg::Push { .. } => true,
    }
}

/// One copy of a local large message: within this process a plain copy, from another
/// process `process_vm_readv` (refused when `cma` is off or by the kernel).
pub(crate) fn run_local_pull(
    mem: &MemRegistry,
    p: &LocalPull,
    own_pid: u32,
    cma: bool,
    split: Option<&Arc<dyn crate::copy::CopyBackend>>,
) -> PullOutcome {
    let len = p.len as usize;
    match &p.src {
        PullSrc::Own(src) => {
            mem.copy(
                *src,
                p.src_offset as usize,
                p.dst,
                p.dst_offset as usize,
                len,
            );
            PullOutcome::Done
        }
        PullSrc::Peer { remote, .. } => {
            let Some(rm) = RemoteMem::parse(remote) else {
                return PullOutcome::Fault;
            };
            // Typed segments on either side: no addresses for a cross-process copy.
            let local = mem.ranges(p.dst, p.dst_offset as usize, len);
            let Some(local) = local.filter(|_| rm.pid != RemoteMem::UNREACHABLE) else {
                return PullOutcome::Push;
            };
            if rm.total_len() < p.src_offset + len as u64 {
                return PullOutcome::Fault;
            }
            let iovs: Vec<RemoteIov> = rm
                .ranges()
                .map(|(addr, len)| RemoteIov { addr, len })
                .collect();
            if rm.pid != own_pid && !cma {
                return PullOutcome::Refused;
            }
            // SAFETY: the local ranges are the posted receive's lent segments, which
            // nothing else touches until it completes. When the record names this very
            // process, its ranges are a send region of another endpoint of ours, lent
            // until its notify; only a process of the same user (which could ptrace us
            // anyway) could forge such a record.
            // Synchronous offload: the copy engine (the copy thread, or `omx_copyd`
            // reading the peer on our behalf) takes the second half while this
            // thread copies the first (two cores on one transfer).
            let mut helper = None;
            let mut mine = len;
            if let Some(b) = split.filter(|_| rm.pid != own_pid) {
                let half = (len / 2) & !4095;
                let outcome = Arc::new(std::sync::atomic::AtomicU8::new(0));
                let job = crate::copy::CopyJob::Cma {
                    pid: rm.pid,
                    remote: iovs.clone(),
                    offset: p.src_offset + half as u64,
                    local: mem
                        .ranges(p.dst, p.dst_offset as usize + half, len - half)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(q, n)| (q as usize, n))
                        .collect(),
                    len: len - half,
                    outcome: outcome.clone(),
                };
                let done = Arc::new(crate::copy::Completions::default());
                if half > 0 && b.submit(&done, job).is_ok() {
                    helper = Some(outcome);
                    mine = half;
                }
            }
            // SAFETY: see above; the halves do not overlap.
            let r = unsafe { cma::read_from(rm.pid, &iovs, p.src_offset, &local, 0, mine) };
            let mut code = match r {
                Ok(()) => PullOutcome::Done,
                Err(CmaError::PermissionDenied) => PullOutcome::Refused,
                Err(CmaError::ProcessGone) => PullOutcome::Gone,
                Err(_) => PullOutcome::Fault,
            };
            if let (Some(o), Some(b)) = (helper, split) {
                use crate::copy::cma_outcome as c;
                let theirs = loop {
                    let v = o.load(std::sync::atomic::Ordering::Acquire);
                    if v != c::PENDING {
                        break v;
                    }
                    // The copy service reports through its ring: look.
                    b.progress();
                    std::hint::spin_loop();
                };
                if code == PullOutcome::Done {
                    code = match theirs {
                        c::DONE => PullOutcome::Done,
                        c::REFUSED => PullOutcome::Refused,
                        c::GONE => PullOutcome::Gone,
                        _ => PullOutcome::Fault,
                    };
                }
            }
            code
        }
    }
}

/// Per-partner values indexed by partner id (ids are small and dense: the engine
/// numbers its partners from 0), so the per-message lookup is an index, not a hash.
struct PartnerMap<T> {
    slots: Vec<Option<T>>,
}

impl<T> Default for PartnerMap<T> {
    fn default() -> Self {
        PartnerMap { slots: Vec::new() }
    }
}

impl<T> PartnerMap<T> {
    #[inline]
    fn get(&self, p: &PartnerId) -> Option<&T> {
        self.slots.get(p.0 as usize)?.as_ref()
    }

    #[inline]
    fn get_mut(&mut self, p: &PartnerId) -> Option<&mut T> {
        self.slots.get_mut(p.0 as usize)?.as_mut()
    }

    fn contains_key(&self, p: &PartnerId) -> bool {
        self.get(p).is_some()
    }

    fn insert(&mut self, p: PartnerId, v: T) -> Option<T> {
        let i = p.0 as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i].replace(v)
    }

    fn remove(&mut self, p: &PartnerId) -> Option<T> {
        self.slots.get_mut(p.0 as usize)?.take()
    }

    fn iter(&self) -> impl Iterator<Item = (PartnerId, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some((PartnerId(i as u32), v.as_ref()?)))
    }
}
