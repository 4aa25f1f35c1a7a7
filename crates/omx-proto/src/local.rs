//! Partners reached without the network: the endpoint itself ("self") and endpoints of
//! other processes on this host ("shared", through shared-memory rings the runtime owns).
//!
//! The channel is reliable and ordered, so local partners skip sequence numbers, acks,
//! retransmission and pull frames, but keep the same matching, ordering, unexpected queue
//! and one-sided semantics: local messages enter the same `take_*` paths as network ones.
//! Messages up to `shared_rndv_threshold` travel whole (eager); larger ones announce their
//! region and the receiver copies it in one step from the sender's memory (a
//! [`LocalPull`], which the runtime executes with a cross-process copy) and then
//! notifies. When the runtime reports that cross-process copies are refused, the
//! receiver asks the sender to push the data through the ring instead (two copies).

use crate::engine::Engine;
use crate::requests::Request;
use crate::slab::{Key, Slab};
use crate::types::*;
use bytes::Bytes;
use omx_wire::{Msg, Notify, Rndv};

/// Kept importable from here (the type lives with the shared vocabulary).
pub use crate::types::Reach;

/// A message for a local partner, for the runtime to put in the partner's ring (never
/// emitted for the self partner, which the engine serves internally).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalSend {
    pub partner: PartnerId,
    pub msg: LocalMsg,
}

/// Messages of the local channel, outbound side: memory is named by handle; the runtime
/// turns a rendezvous region into addresses the receiver can copy from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalMsg {
    Eager {
        match_info: u64,
        flags: u8,
        data: Bytes,
    },
    Rndv {
        match_info: u64,
        flags: u8,
        len: u32,
        region: u8,
        use_seq: u8,
        mem: MemHandle,
        /// Byte offset of the message in `mem`.
        offset: u64,
    },
    Notify {
        region: u8,
        use_seq: u8,
        xfer: u32,
        flags: u8,
    },
    /// Fallback: asks the sender to push `len` bytes of its region from `offset`.
    PullReq {
        region: u8,
        use_seq: u8,
        offset: u32,
        len: u32,
        cookie: u64,
    },
    /// Fallback, sender side: stream `len` bytes of `mem` from `offset` as chunks tagged
    /// `cookie` (message offsets start at 0).
    Push {
        cookie: u64,
        mem: MemHandle,
        offset: u64,
        len: u32,
    },
}

impl LocalMsg {
    /// The message as its receiver sees it, with `remote` describing a rendezvous's
    /// memory; `None` for a push (streamed as chunks, not one message).
    pub fn into_local_in(self, remote: Bytes) -> Option<LocalIn> {
        Some(match self {
            LocalMsg::Eager {
                match_info,
                flags,
                data,
            } => LocalIn::Eager {
                match_info,
                flags,
                data,
            },
            LocalMsg::Rndv {
                match_info,
                flags,
                len,
                region,
                use_seq,
                ..
            } => LocalIn::Rndv {
                match_info,
                flags,
                len,
                region,
                use_seq,
                remote,
            },
            LocalMsg::Notify {
                region,
                use_seq,
                xfer,
                flags,
            } => LocalIn::Notify {
                region,
                use_seq,
                xfer,
                flags,
            },
            LocalMsg::PullReq {
                region,
                use_seq,
                offset,
                len,
                cookie,
            } => LocalIn::PullReq {
                region,
                use_seq,
                offset,
                len,
                cookie,
            },
            LocalMsg::Push { .. } => return None,
        })
    }
}

/// Messages of the local channel, inbound side (decoded by the runtime from a ring).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalIn {
    Eager {
        match_info: u64,
        flags: u8,
        data: Bytes,
    },
    Rndv {
        match_info: u64,
        flags: u8,
        len: u32,
        region: u8,
        use_seq: u8,
        /// The sender's description of its memory (opaque to the engine).
        remote: Bytes,
    },
    Notify {
        region: u8,
        use_seq: u8,
        xfer: u32,
        flags: u8,
    },
    PullReq {
        region: u8,
        use_seq: u8,
        offset: u32,
        len: u32,
        cookie: u64,
    },
}

/// Where a local pull reads from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PullSrc {
    /// This endpoint's own memory (the self partner).
    Own(MemHandle),
    /// Another process's memory, as its rendezvous described it.
    Peer { partner: PartnerId, remote: Bytes },
}

/// A one-step copy of a local large message into a receive buffer, reported with
/// [`Engine::local_pull_done`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalPull {
    pub id: CopyId,
    pub src: PullSrc,
    pub src_offset: u64,
    pub dst: MemHandle,
    pub dst_offset: u64,
    pub len: u32,
}

/// How a local pull ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullOutcome {
    Done,
    /// The kernel refused the cross-process copy: use the pushed two-copy path.
    Refused,
    /// One side's buffer has parts no cross-process copy reaches (file ranges,
    /// another process's memory): push this message, without giving up on the copy
    /// for the partner's next ones.
    Push,
    /// The sender's process is gone.
    Gone,
    /// The sender's memory could not be read (bad address).
    Fault,
}

/// A matched local large receive in progress.
pub(crate) struct LocalPullState {
    pub req: Key,
    pub partner: PartnerId,
    pub region: u8,
    pub use_seq: u8,
    pub offset: u32,
    pub xfer: u32,
    /// Bytes pushed so far (fallback path).
    pub pushed: u32,
}

/// The endpoint's state for local partners: matched local large receives in progress
/// (their keys are the pulls' copy ids and the push cookies), and whether a message to
/// oneself is being delivered.
#[derive(Default)]
pub(crate) struct LocalState {
    pulls: Slab<LocalPullState>,
    /// During a self delivery the unexpected budget does not apply (there is no
    /// sender to slow down).
    self_delivery: bool,
}

impl LocalState {
    fn start_pull(&mut self, st: LocalPullState) -> Key {
        self.pulls.insert(st)
    }

    fn pull(&self, lk: Key) -> Option<&LocalPullState> {
        self.pulls.get(lk)
    }

    fn pull_mut(&mut self, lk: Key) -> Option<&mut LocalPullState> {
        self.pulls.get_mut(lk)
    }

    fn end_pull(&mut self, lk: Key) -> Option<LocalPullState> {
        self.pulls.remove(lk)
    }

    /// Ends the pulls from `pid`; returns them.
    fn end_pulls_from(&mut self, pid: PartnerId) -> Vec<LocalPullState> {
        let keys: Vec<Key> = self.pulls.keys().collect();
        let mut ended = Vec::new();
        for lk in keys {
            if self.pulls.get(lk).is_some_and(|s| s.partner == pid) {
                ended.extend(self.pulls.remove(lk));
            }
        }
        ended
    }

    pub fn pulls_in_progress(&self) -> usize {
        self.pulls.len()
    }

    pub fn delivering_to_self(&self) -> bool {
        self.self_delivery
    }
}

impl Engine {
    /// The partner for a remote endpoint, if one exists.
    pub fn partner_of(&self, nic_id: NicId, endpoint: u8) -> Option<PartnerId> {
        self.partners.lookup(nic_id, endpoint)
    }

    /// How `partner` is reached.
    pub fn reach(&self, partner: PartnerId) -> Reach {
        self.partners
            .get(partner)
            .map_or(Reach::Network, |p| p.reach)
    }

    /// Connects to an endpoint of this host reached through shared memory. The runtime
    /// opened its ring and read its `session`, or failed to (`Err`: the endpoint is
    /// closed); `key_ok` says whether the key we were given matches the one it
    /// published. Completes at once.
    pub fn connect_local(
        &mut self,
        nic_id: NicId,
        endpoint: u8,
        session: Result<u32, StatusCode>,
        key_ok: bool,
        context: u64,
    ) -> Result<ReqId, EngineError> {
        let (pid, code) = match session {
            Ok(session) => {
                let pid = self.local_partner(nic_id, endpoint, session);
                if key_ok {
                    (pid, StatusCode::Success)
                } else {
                    self.counters.connect_bad_key += 1;
                    (pid, StatusCode::BadKey)
                }
            }
            Err(code) => {
                let pid = self.local_partner(nic_id, endpoint, 0);
                self.reset_partner(0, pid, code);
                (pid, code)
            }
        };
        Ok(self.connect_done_now(pid, code, context))
    }

    /// The partner for a shared-memory sender (or connect target) with `session`; a new
    /// session means the remote endpoint was reopened: what was pending with the old one
    /// fails.
    pub fn local_partner(&mut self, nic_id: NicId, endpoint: u8, session: u32) -> PartnerId {
        let pid = match self.partners.lookup(nic_id, endpoint) {
            Some(id) => id,
            None => {
                let peer_index = self.peers.index_of(nic_id).unwrap_or(0);
                let p = crate::partner::Partner::new(nic_id, endpoint, peer_index, self.cfg.wire);
                self.partners.add(p)
            }
        };
        let p = &self.partners[pid];
        if p.reach == Reach::Shared && p.session.is_some_and(|s| s != session) {
            self.reset_partner(0, pid, StatusCode::EndpointClosed);
        }
        let me = (self.me.nic_id, self.me.endpoint);
        let p = self.partner(pid);
        p.evictable = false;
        p.reach = if (nic_id, endpoint) == me {
            Reach::SelfEndpoint
        } else {
            Reach::Shared
        };
        p.session = Some(session);
        pid
    }

    /// The self partner (loopback inside the engine), for `connect` to oneself.
    pub(crate) fn connect_self(&mut self, pid: PartnerId) {
        let session = self.me.session;
        let p = self.partner(pid);
        p.reach = Reach::SelfEndpoint;
        p.session = Some(session);
    }

    /// A shared-memory partner's process closed its endpoint or died: everything
    /// pending with it fails with `EndpointClosed`; a new connect is needed.
    pub fn local_partner_gone(&mut self, now: Time, partner: PartnerId) {
        if self.reach(partner) != Reach::Shared {
            return;
        }
        self.reset_partner(now, partner, StatusCode::EndpointClosed);
    }

    /// Sends the first (and only) message of a send to a local partner.
    pub(crate) fn start_local_send(&mut self, now: Time, k: Key) {
        let Some(Request::Send(s)) = self.requests.get(k) else {
            return;
        };
        let (pid, match_info, flags, base) = (s.partner, s.match_info, s.flags, s.base);
        match s.data.clone() {
            SendData::Eager(data) => {
                let len = data.len() as u32;
                self.counters.send_local_eager += 1;
                // Complete first: a self message may complete receives at once, and the
                // send was posted before them.
                let status = self.send_status(k, StatusCode::Success, len);
                self.complete_send(k, status);
                self.emit_local(
                    now,
                    pid,
                    LocalMsg::Eager {
                        match_info,
                        flags,
                        data,
                    },
                );
            }
            SendData::Region { handle, len } => {
                let Some((region, use_seq)) = self.claim_region(k, handle, len, base) else {
                    return;
                };
                self.counters.send_local_rndv += 1;
                self.emit_local(
                    now,
                    pid,
                    LocalMsg::Rndv {
                        match_info,
                        flags,
                        len,
                        region,
                        use_seq,
                        mem: handle,
                        offset: base,
                    },
                );
            }
        }
    }

    /// Queues a local message, or serves it at once when it is for this endpoint.
    pub(crate) fn emit_local(&mut self, now: Time, pid: PartnerId, msg: LocalMsg) {
        if self.reach(pid) != Reach::SelfEndpoint {
            self.outputs.local(LocalSend { partner: pid, msg });
            return;
        }
        // The self partner never refuses its own memory: no pushes.
        let Some(m) = msg.into_local_in(Bytes::new()) else {
            return;
        };
        self.local.self_delivery = true;
        let taken = self.handle_local(now, pid, m);
        self.local.self_delivery = false;
        debug_assert!(taken, "self delivery is never refused");
    }

    /// Processes one message from a local partner's ring. Returns false when it cannot
    /// be taken now (the unexpected queue is full): the runtime keeps it in the ring and
    /// offers it again later, so the sender is slowed, never dropped.
    pub fn handle_local(&mut self, now: Time, pid: PartnerId, m: LocalIn) -> bool {
        if self.reach(pid) == Reach::Network {
            self.counters.drop_not_connected += 1;
            return true;
        }
        match m {
            LocalIn::Eager {
                match_info,
                flags,
                data,
            } => {
                self.counters.recv_local_eager += 1;
                if flags != 0 {
                    let msg = Msg {
                        flags,
                        dst_endpoint: self.me.endpoint,
                        src_endpoint: 0,
                        length: data.len().min(u16::MAX as usize) as u16,
                        checksum: 0,
                        lib_seqnum: 0,
                        lib_piggyack: 0,
                        match_info,
                        session: 0,
                    };
                    return self.take_one_sided_eager(now, pid, msg, data);
                }
                self.take_whole_eager(now, pid, match_info, data)
            }
            LocalIn::Rndv {
                match_info,
                flags,
                len,
                region,
                use_seq,
                remote,
            } => {
                self.counters.recv_local_rndv += 1;
                self.partner(pid)
                    .local_regions
                    .insert((region, use_seq), remote);
                let r = Rndv {
                    msg: Msg {
                        flags,
                        dst_endpoint: self.me.endpoint,
                        src_endpoint: 0,
                        length: 8,
                        checksum: 0,
                        lib_seqnum: 0,
                        lib_piggyack: 0,
                        match_info,
                        session: 0,
                    },
                    msg_length: len,
                    pulled_rdma_id: region,
                    pulled_rdma_seqnum: use_seq,
                    pulled_rdma_offset: 0,
                };
                let taken = self.take_rndv(now, pid, r);
                if !taken {
                    self.partner(pid).local_regions.remove(&(region, use_seq));
                }
                taken
            }
            LocalIn::Notify {
                region,
                use_seq,
                xfer,
                flags,
            } => {
                let n = Notify {
                    flags,
                    dst_endpoint: self.me.endpoint,
                    src_endpoint: 0,
                    session: 0,
                    total_length: xfer,
                    pulled_rdma_id: region,
                    pulled_rdma_seqnum: use_seq,
                    lib_seqnum: 0,
                    lib_piggyack: 0,
                };
                self.take_notify(now, pid, n);
                true
            }
            LocalIn::PullReq {
                region,
                use_seq,
                offset,
                len,
                cookie,
            } => {
                self.on_local_pull_req(pid, region, use_seq, offset, len, cookie);
                true
            }
        }
    }

    /// Whether nothing local waits before a new message (queued local messages or
    /// sends waiting for a region): only then may one be written straight into a
    /// partner's inbox without overtaking them.
    pub(crate) fn local_path_clear(&self) -> bool {
        !self.outputs.local_queued() && self.regions.nobody_waits()
    }

    /// A send the runtime wrote straight into a shared-memory ring: complete at once.
    /// Its completion is returned, not queued (the runtime files it itself, after any
    /// completion still queued).
    #[inline]
    pub fn local_direct_sent(
        &mut self,
        partner: PartnerId,
        match_info: u64,
        len: u32,
        context: u64,
    ) -> Completion {
        self.counters.send_local_eager += 1;
        let k = self.requests.retired_key();
        let status = Status {
            code: StatusCode::Success,
            source: Some(partner),
            match_info,
            msg_length: len,
            xfer_length: len,
            context,
        };
        Completion {
            req: ReqId(k.0),
            kind: RequestKind::Send,
            status,
            mem: None,
            source_session: self.source_session(Some(partner)),
        }
    }

    /// Fast path for a whole eager message from a local partner, read in place from
    /// its ring: when a posted receive takes it, the receive completes at once and
    /// this returns where the bytes go (buffer, byte offset, bytes to keep: a short
    /// buffer keeps fewer) and, when no other completion is queued, the receive's
    /// completion itself (the runtime copies the bytes, then files it as if it had
    /// polled it: no trip through the completion queue). With completions queued it
    /// is queued behind them (completion order), and `None` is returned in its
    /// place. `None` overall: offer the message with [`Engine::handle_local`].
    pub fn local_eager_direct(
        &mut self,
        pid: PartnerId,
        match_info: u64,
        len: u32,
    ) -> Option<(MemHandle, u64, u32, Option<Completion>)> {
        if self.reach(pid) == Reach::Network {
            return None;
        }
        let k = self.match_posted(match_info)?;
        let Some(Request::Recv(r)) = self.requests.get(k) else {
            debug_assert!(false, "the posted queue holds receives");
            return None;
        };
        let (handle, base, xfer, context, internal) =
            (r.handle, r.base, r.len.min(len), r.context, r.internal);
        self.requests.discard(k);
        self.counters.recv_local_eager += 1;
        if internal {
            return Some((handle, base, xfer, None));
        }
        let c = Completion {
            req: ReqId(k.0),
            kind: RequestKind::Recv,
            status: Status {
                code: if xfer < len {
                    StatusCode::Truncated
                } else {
                    StatusCode::Success
                },
                source: Some(pid),
                match_info,
                msg_length: len,
                xfer_length: xfer,
                context,
            },
            mem: Some(handle),
            source_session: self.source_session(Some(pid)),
        };
        if self.outputs.completions_queued() {
            self.outputs.complete(c);
            return Some((handle, base, xfer, None));
        }
        Some((handle, base, xfer, Some(c)))
    }

    /// Fallback, sender side: validates the request against the region and streams it.
    fn on_local_pull_req(
        &mut self,
        pid: PartnerId,
        region: u8,
        use_seq: u8,
        offset: u32,
        len: u32,
        cookie: u64,
    ) {
        let ok = self.regions.get(region as usize).and_then(|r| {
            let owner_ok =
                matches!(self.requests.get(r.req), Some(Request::Send(s)) if s.partner == pid);
            let in_range = (offset as u64 + len as u64) <= r.len as u64;
            (r.use_seq == use_seq && owner_ok && in_range).then_some((r.handle, r.base))
        });
        let Some((mem, base)) = ok else {
            self.counters.drop_pull_bad_region += 1;
            return;
        };
        self.counters.send_local_push += 1;
        self.outputs.local(LocalSend {
            partner: pid,
            msg: LocalMsg::Push {
                cookie,
                mem,
                offset: base + offset as u64,
                len,
            },
        });
    }

    /// An eager message that arrived whole (any length up to the local threshold).
    fn take_whole_eager(
        &mut self,
        now: Time,
        pid: PartnerId,
        match_info: u64,
        data: Bytes,
    ) -> bool {
        // The common case, kept free of allocations: a posted receive takes it (it
        // matched none of the older unexpected messages, or it would hold one).
        if let Some(k) = self.match_posted(match_info) {
            self.activate(k, pid, Some(match_info), data.len() as u32);
            self.deliver_chunk(k, 0, data);
            self.try_finish_recv(now, k);
            return true;
        }
        let len = data.len() as u32;
        let mut data = Some(data);
        let body = || crate::unexpected::UnexpBody::Eager {
            chunks: smallvec::smallvec![(0, data.take().expect("taken once"))],
            complete: true,
        };
        match self.place(pid, match_info, len, body) {
            None => false,
            Some(crate::recv::Placed::Unexpected(_)) => true,
            Some(crate::recv::Placed::Recv(k)) => {
                self.deliver_chunk(k, 0, data.take().expect("not stored"));
                self.try_finish_recv(now, k);
                true
            }
        }
    }

    /// A matched large receive from a local partner: one copy from the sender's memory,
    /// or the pushed fallback when copies between processes are refused.
    pub(crate) fn start_local_recv(&mut self, now: Time, k: Key, rdma_id: u8, rdma_seq: u8) {
        let Some(Request::Recv(r)) = self.requests.get(k) else {
            return;
        };
        let (handle, base) = (r.handle, r.base);
        let Some((pid, xfer)) = r.active.as_ref().map(|a| (a.partner, a.xfer)) else {
            return;
        };
        let remote = self.partner(pid).local_regions.remove(&(rdma_id, rdma_seq));
        let src = match self.reach(pid) {
            Reach::SelfEndpoint => {
                let own = self
                    .regions
                    .get(rdma_id as usize)
                    .filter(|r| r.use_seq == rdma_seq)
                    .map(|r| (r.handle, r.base));
                own.map(|(h, b)| (PullSrc::Own(h), b))
            }
            _ => remote.map(|remote| {
                (
                    PullSrc::Peer {
                        partner: pid,
                        remote,
                    },
                    0,
                )
            }),
        };
        let Some((src, src_base)) = src else {
            // The announcement's memory is unknown (a forged or stale rendezvous).
            self.counters.drop_pull_bad_region += 1;
            self.fail_recv(k, StatusCode::Aborted);
            return;
        };
        if let Some(Request::Recv(r)) = self.requests.get_mut(k) {
            if let Some(a) = r.active.as_mut() {
                a.rndv = Some((rdma_id, rdma_seq, 0));
            }
        }
        if xfer == 0 {
            self.finish_local_recv(now, k, pid, rdma_id, rdma_seq, 0);
            return;
        }
        let lk = self.local.start_pull(LocalPullState {
            req: k,
            partner: pid,
            region: rdma_id,
            use_seq: rdma_seq,
            offset: 0,
            xfer,
            pushed: 0,
        });
        if self.partners[pid].no_cma {
            self.request_push(lk);
            return;
        }
        self.outputs.local_pull(LocalPull {
            id: CopyId(lk.0),
            src,
            src_offset: src_base,
            dst: handle,
            dst_offset: base,
            len: xfer,
        });
    }

    fn request_push(&mut self, lk: Key) {
        let Some(st) = self.local.pull(lk) else {
            return;
        };
        let (pid, region, use_seq, offset, len) =
            (st.partner, st.region, st.use_seq, st.offset, st.xfer);
        self.counters.send_local_pull_req += 1;
        self.outputs.local(LocalSend {
            partner: pid,
            msg: LocalMsg::PullReq {
                region,
                use_seq,
                offset,
                len,
                cookie: lk.0,
            },
        });
    }

    /// The runtime finished (or failed) a [`LocalPull`].
    pub fn local_pull_done(&mut self, now: Time, id: CopyId, outcome: PullOutcome) {
        let lk = Key(id.0);
        let Some(st) = self.local.pull(lk) else {
            return;
        };
        let (k, pid, region, use_seq, xfer) = (st.req, st.partner, st.region, st.use_seq, st.xfer);
        match outcome {
            PullOutcome::Done => {
                self.local.end_pull(lk);
                self.finish_local_recv(now, k, pid, region, use_seq, xfer);
            }
            PullOutcome::Refused => {
                self.counters.local_copy_refused += 1;
                self.partner(pid).no_cma = true;
                self.request_push(lk);
            }
            PullOutcome::Push => self.request_push(lk),
            PullOutcome::Gone | PullOutcome::Fault => {
                self.local.end_pull(lk);
                let code = if outcome == PullOutcome::Gone {
                    StatusCode::EndpointClosed
                } else {
                    StatusCode::Aborted
                };
                // Let the sender release its region (it fails its send if it is alive).
                self.notify_local(now, pid, region, use_seq, 0, crate::onesided::DENIED);
                self.fail_recv(k, code);
            }
        }
    }

    /// Fallback, receiver side: where a pushed chunk of `len` bytes at message offset
    /// `offset` goes (buffer, byte offset in it, bytes to keep: the rest is beyond a
    /// short buffer). `None` for an unknown cookie or a chunk outside the message.
    pub fn local_chunk_target(
        &self,
        cookie: u64,
        offset: u32,
        len: u32,
    ) -> Option<(MemHandle, u64, u32)> {
        let st = self.local.pull(Key(cookie))?;
        if offset as u64 + len as u64 > st.xfer as u64 {
            return None;
        }
        match self.requests.get(st.req) {
            Some(Request::Recv(r)) => Some((r.handle, r.base + offset as u64, len)),
            _ => None,
        }
    }

    /// Fallback, receiver side: `len` pushed bytes were copied into the buffer.
    pub fn local_chunk_done(&mut self, now: Time, cookie: u64, len: u32) {
        let lk = Key(cookie);
        let Some(st) = self.local.pull_mut(lk) else {
            return;
        };
        st.pushed = st.pushed.saturating_add(len);
        if st.pushed < st.xfer {
            return;
        }
        let (k, pid, region, use_seq, xfer) = (st.req, st.partner, st.region, st.use_seq, st.xfer);
        self.local.end_pull(lk);
        self.counters.recv_local_pushed += 1;
        self.finish_local_recv(now, k, pid, region, use_seq, xfer);
    }

    fn finish_local_recv(
        &mut self,
        now: Time,
        k: Key,
        pid: PartnerId,
        region: u8,
        use_seq: u8,
        xfer: u32,
    ) {
        if let Some(Request::Recv(r)) = self.requests.get_mut(k) {
            if let Some(a) = r.active.as_mut() {
                a.received = a.msg_length;
                a.data_done = true;
            }
        }
        self.notify_local(now, pid, region, use_seq, xfer, 0);
        self.try_finish_recv(now, k);
    }

    pub(crate) fn notify_local(
        &mut self,
        now: Time,
        pid: PartnerId,
        region: u8,
        use_seq: u8,
        xfer: u32,
        flags: u8,
    ) {
        if self.partners[pid].session.is_none() {
            return;
        }
        self.counters.send_local_notify += 1;
        self.emit_local(
            now,
            pid,
            LocalMsg::Notify {
                region,
                use_seq,
                xfer,
                flags,
            },
        );
    }

    pub(crate) fn abort_local_pulls_from(&mut self, pid: PartnerId, code: StatusCode) {
        for st in self.local.end_pulls_from(pid) {
            self.fail_recv(st.req, code);
        }
    }
}
