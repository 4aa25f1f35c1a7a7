//! Receiving: in-order delivery per partner, matching, unexpected messages, acks, nacks.

use crate::engine::Engine;
use crate::partner::{EarlyPacket, PartialMedium, PartialTarget};
use crate::requests::{ActiveRecv, RecvReq, Request};
use crate::seqnum::Seq;
use crate::slab::Key;
use crate::transmit::Payload;
use crate::types::*;
use crate::unexpected::{Chunks, UnexpBody, Unexpected, UnexpectedInfo};
use bytes::Bytes;
use omx_wire::{
    Header, Medium, Msg, NackLib, NackType, Notify, Packet, Rndv, Truc, WireMode, PEER_INDEX_NONE,
};

/// Where an in-order message went.
pub(crate) enum Placed {
    Recv(Key),
    Unexpected(Key),
}

impl Engine {
    /// Posts a receive for messages whose match info satisfies `(m & mask) == match_info`.
    pub fn irecv(
        &mut self,
        now: Time,
        match_info: u64,
        mask: u64,
        handle: MemHandle,
        len: u32,
        context: u64,
    ) -> Result<ReqId, EngineError> {
        if match_info & !mask != 0 {
            return Err(EngineError::MatchOutsideMask);
        }
        let k = self.requests.insert(Request::Recv(RecvReq::new(
            match_info, mask, handle, len, context,
        )));
        match self.unexp.take_match(match_info, mask) {
            Some(u) => self.bind_unexpected(now, k, u),
            None => self.posted.push_back(k),
        }
        Ok(ReqId(k.0))
    }

    /// The buffer a pending receive names (so a caller can release it on cancel).
    pub fn recv_handle(&self, req: ReqId) -> Option<MemHandle> {
        match self.requests.get(Key(req.0)) {
            Some(Request::Recv(r)) => Some(r.handle),
            _ => None,
        }
    }

    /// Offers unmatched messages to an unexpected handler: while on, each new
    /// unexpected message waits in [`Engine::poll_unexpected`] for
    /// [`Engine::resolve_unexpected`] before it can be matched.
    pub fn set_unexpected_hook(&mut self, on: bool) {
        self.unexp.set_hook(on);
    }

    pub fn unexpected_hook(&self) -> bool {
        self.unexp.hook()
    }

    /// The next message the unexpected handler must see.
    pub fn poll_unexpected(&mut self) -> Option<UnexpectedInfo> {
        self.unexp.poll_event()
    }

    /// The handler's verdict: `discard` drops the message (a rendezvous sender is told
    /// that nothing was pulled); otherwise it matches a receive posted meanwhile (by the
    /// handler) or stays unexpected.
    pub fn resolve_unexpected(&mut self, now: Time, id: u64, discard: bool) {
        let u = Key(id);
        let Some((pid, match_info)) = self.unexp.resolve(u) else {
            return;
        };
        if discard {
            let x = self.unexp.discard(u).expect("present");
            if let UnexpBody::Rndv {
                rdma_id, rdma_seq, ..
            } = x.body
            {
                self.notify_discarded(now, pid, rdma_id, rdma_seq);
            }
            return;
        }
        if let Some(k) = self.match_posted(match_info) {
            self.unexp.unlink(u);
            self.bind_unexpected(now, k, u);
        }
    }

    /// Cancels a receive that has not been matched yet, or a connect not yet answered.
    /// Returns whether it was cancelled (MX then frees the request without a
    /// completion). Sends cannot be cancelled once posted.
    pub fn cancel(&mut self, req: ReqId) -> Result<bool, EngineError> {
        let k = Key(req.0);
        match self.requests.get(k) {
            Some(Request::Recv(r)) if r.active.is_none() => {
                self.posted.retain(|&x| x != k);
                self.requests.remove(k);
                Ok(true)
            }
            Some(Request::Connect(c)) => {
                // An unanswered connect (MX allows cancelling mx_iconnect).
                let pid = c.partner;
                self.partner(pid).connects.retain(|&x| x != k);
                self.requests.remove(k);
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Err(EngineError::BadRequest),
        }
    }

    /// Looks for an unexpected message matching `(m & mask) == match_info` without
    /// consuming it.
    pub fn iprobe(&self, match_info: u64, mask: u64) -> Option<Status> {
        self.unexp.probe(match_info, mask).map(|u| Status {
            code: StatusCode::Success,
            source: Some(u.partner),
            match_info: u.match_info,
            msg_length: u.msg_length,
            xfer_length: u.msg_length,
            context: 0,
        })
    }

    fn bind_unexpected(&mut self, now: Time, k: Key, u: Key) {
        let Some(un) = self.unexp.remove(u) else {
            return;
        };
        self.activate(k, un.partner, Some(un.match_info), un.msg_length);
        match un.body {
            UnexpBody::Eager { chunks, complete } => {
                for (off, data) in chunks {
                    self.deliver_chunk(k, off, data);
                }
                if !complete {
                    let p = self.partner(un.partner);
                    if let Some(part) = p
                        .partials
                        .iter_mut()
                        .find(|x| x.target == PartialTarget::Unexpected(u))
                    {
                        part.target = PartialTarget::Recv(k);
                    }
                }
                self.try_finish_recv(now, k);
            }
            UnexpBody::Rndv {
                rdma_id,
                rdma_seq,
                rdma_offset,
            } => self.start_large_recv(now, k, rdma_id, rdma_seq, rdma_offset),
        }
    }

    /// Matches receive `k` to a message of `msg_length` bytes from `partner`; `None`
    /// for `match_info` when the message carries the receive's own (one-sided replies
    /// and puts).
    pub(crate) fn activate(
        &mut self,
        k: Key,
        partner: PartnerId,
        match_info: Option<u64>,
        msg_length: u32,
    ) {
        if let Some(Request::Recv(r)) = self.requests.get_mut(k) {
            let match_info = match_info.unwrap_or(r.match_info);
            r.active = Some(ActiveRecv::new(partner, match_info, msg_length, r.len));
        }
    }

    /// Emits the copy of `data` (message bytes at `offset`) into the receive buffer,
    /// clipped to the buffer's length.
    pub(crate) fn deliver_chunk(&mut self, k: Key, offset: u32, data: Bytes) {
        let Some(Request::Recv(r)) = self.requests.get_mut(k) else {
            return;
        };
        let (handle, base) = (r.handle, r.base);
        let Some(a) = r.active.as_mut() else { return };
        a.received = a.received.saturating_add(data.len() as u32);
        if a.received >= a.msg_length {
            a.data_done = true;
        }
        let keep = a.xfer.saturating_sub(offset).min(data.len() as u32) as usize;
        if keep > 0 {
            self.new_copy(k, data.slice(..keep), handle, base + offset as u64);
        }
    }

    /// Completes a receive once all its data arrived and all its copies are done.
    pub(crate) fn try_finish_recv(&mut self, _now: Time, k: Key) {
        let Some(Request::Recv(r)) = self.requests.get(k) else {
            return;
        };
        let Some(a) = r.active.as_ref() else { return };
        if !a.data_done || a.copies_pending > 0 {
            return;
        }
        let status = Status {
            code: a.code,
            source: Some(a.partner),
            match_info: a.match_info,
            msg_length: a.msg_length,
            xfer_length: if a.code == StatusCode::Truncated || a.code == StatusCode::Success {
                a.xfer
            } else {
                0
            },
            context: r.context,
        };
        let (handle, internal) = (r.handle, r.internal);
        self.requests.remove(k);
        if internal {
            return;
        }
        self.complete_with(k, RequestKind::Recv, status, Some(handle));
    }

    /// Fails a matched receive (partner reset, pull failure). Copies still in flight
    /// are forgotten: their completion reports are ignored.
    pub(crate) fn fail_recv(&mut self, k: Key, code: StatusCode) {
        let Some(Request::Recv(r)) = self.requests.get_mut(k) else {
            return;
        };
        let Some(a) = r.active.as_mut() else { return };
        a.code = code;
        a.data_done = true;
        a.copies_pending = 0;
        self.outputs.forget_copies_of(k);
        self.try_finish_recv(0, k);
    }

    /// Finds the first posted receive matching `match_info` and removes it from the queue.
    pub(crate) fn match_posted(&mut self, match_info: u64) -> Option<Key> {
        // The usual case, the oldest posted receive matches, tested before any scan.
        if self.posted_matches(*self.posted.front()?, match_info) {
            return self.posted.pop_front();
        }
        let pos = self.posted_position(match_info)?;
        self.posted.remove(pos)
    }

    #[inline]
    fn posted_matches(&self, k: Key, match_info: u64) -> bool {
        matches!(self.requests.get(k), Some(Request::Recv(r)) if match_info & r.mask == r.match_info)
    }

    /// Where the first posted receive matching `match_info` is in the queue.
    pub(crate) fn posted_position(&self, match_info: u64) -> Option<usize> {
        self.posted
            .iter()
            .position(|&k| self.posted_matches(k, match_info))
    }

    /// Matches a new in-order message or stores it as unexpected; `None` when the
    /// unexpected budget refuses it (it stays unacked and will be resent).
    pub(crate) fn place(
        &mut self,
        pid: PartnerId,
        match_info: u64,
        msg_length: u32,
        body: impl FnOnce() -> UnexpBody,
    ) -> Option<Placed> {
        if let Some(k) = self.match_posted(match_info) {
            self.activate(k, pid, Some(match_info), msg_length);
            return Some(Placed::Recv(k));
        }
        // Built only for an unexpected message: a posted receive takes the data as is.
        let (max, unbounded) = (self.cfg.unexp_max_bytes, self.local.delivering_to_self());
        let Some(u) = self
            .unexp
            .push(pid, match_info, msg_length, body(), max, unbounded)
        else {
            self.counters.drop_unexp_full += 1;
            return None;
        };
        Some(Placed::Unexpected(u))
    }

    pub(crate) fn abort_partial(&mut self, _now: Time, part: PartialMedium, code: StatusCode) {
        match part.target {
            PartialTarget::Recv(k) => self.fail_recv(k, code),
            PartialTarget::Unexpected(u) => {
                self.unexp.discard(u);
            }
        }
    }

    /// Rejects a packet from `src`'s endpoint `dst_endpoint` (the original sender).
    fn nack_lib(&mut self, src: NicId, dst_endpoint: u8, seq: u16, kind: NackType) {
        let nack = NackLib {
            src_endpoint: self.me.endpoint,
            nack_type: kind as u8,
            dst_endpoint,
            dst_src_peer_index: self.peers.index_of(src).unwrap_or(PEER_INDEX_NONE),
            lib_seqnum: seq,
        };
        let reply = Header {
            dst_mac: mac_from_nic_id(src),
            src_mac: self.mac,
            ethertype: self.cfg.wire.ethertype,
            dst_src_peer_index: PEER_INDEX_NONE,
        };
        let wire = self.wire_to(src, dst_endpoint);
        self.counters.send_nack_lib += 1;
        self.emit(&wire, reply, Packet::NackLib(nack), Payload::None, true);
    }

    /// Common checks of seq-consuming packets; returns the partner when the packet
    /// should be classified further.
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &mut self,
        now: Time,
        src: NicId,
        dst_endpoint: u8,
        src_endpoint: u8,
        session: u32,
        seq: u16,
        piggyack: u16,
    ) -> Option<PartnerId> {
        if !self.for_me(dst_endpoint) {
            return None;
        }
        if session != self.me.session {
            self.counters.drop_bad_session += 1;
            self.nack_lib(src, src_endpoint, seq, NackType::BadSession);
            return None;
        }
        let pid = self.known_partner(now, src, src_endpoint)?;
        let p = &self.partners[pid];
        if Seq(seq).sesnum() != p.next_match.sesnum()
            || Seq(piggyack).sesnum() != p.next_send.sesnum()
        {
            self.counters.drop_bad_sesnum += 1;
            return None;
        }
        self.apply_ack(now, pid, Seq(piggyack));
        Some(pid)
    }

    /// Routes a seq-consuming packet by its position in the partner's stream.
    #[allow(clippy::too_many_arguments)]
    fn sequence(
        &mut self,
        now: Time,
        pid: PartnerId,
        seq: Seq,
        frag: Option<u8>,
        frame_len: usize,
        packet: &Packet,
        payload: Bytes,
    ) {
        let p = &self.partners[pid];
        let ahead = seq.since(p.next_match);
        if ahead == 0 {
            if self.process_packet(now, pid, packet, payload) {
                self.after_in_order(now, pid);
            }
            return;
        }
        if frag.is_some() && p.partials.iter().any(|x| x.seq == seq) {
            self.process_packet(now, pid, packet, payload);
            return;
        }
        if ahead <= self.cfg.early_window {
            let early = EarlyPacket {
                packet: *packet,
                payload,
                len: frame_len,
            };
            self.store_early(pid, seq, frag, early);
            // A gap in the stream (every packet past it, resent ones included, shows
            // it): tell the sender at once with a duplicate ack, so it resends the
            // missing packet now rather than at its timeout.
            self.send_gap_ack(pid);
            return;
        }
        self.counters.drop_obsolete += 1;
        if seq.before(p.next_frag) {
            // The sender evidently missed our ack.
            self.send_ack(pid);
        }
    }

    /// Keeps an out-of-order packet for later (not a duplicate, and within the bound).
    fn store_early(&mut self, pid: PartnerId, seq: Seq, frag: Option<u8>, early: EarlyPacket) {
        if self.early_bytes + early.len > self.cfg.early_max_bytes {
            self.counters.drop_early_full += 1;
            return;
        }
        let p = &mut self.partners[pid];
        let slot = p.early.entry(seq.0).or_default();
        // Fragments of one medium share a sequence number; anything else is a duplicate.
        let dup = slot.iter().any(|e| match (frag, &e.packet) {
            (Some(i), Packet::Medium(m)) => m.frag_seqnum == i,
            (Some(_), _) => false,
            (None, _) => true,
        });
        if dup {
            self.counters.drop_obsolete += 1;
            return;
        }
        p.early_bytes += early.len;
        self.early_bytes += early.len;
        slot.push(early);
    }

    /// After the message at `next_match` was taken: advance, ack, replay early packets.
    fn after_in_order(&mut self, now: Time, pid: PartnerId) {
        let mut replayed = false;
        loop {
            let p = self.partner(pid);
            p.next_match = p.next_match.next();
            p.refresh_next_frag();
            self.schedule_ack(now, pid);
            let p = self.partner(pid);
            let Some(packets) = p.early.remove(&p.next_match.0) else {
                if replayed && p.next_frag != p.last_acked {
                    // A gap just filled: the sender is recovering, ack at once.
                    self.send_ack(pid);
                }
                return;
            };
            replayed = true;
            let bytes: usize = packets.iter().map(|e| e.len).sum();
            p.early_bytes -= bytes;
            self.early_bytes -= bytes;
            let mut taken = false;
            for e in packets {
                if taken {
                    // Remaining fragments of a medium whose first replayed one matched.
                    self.process_packet(now, pid, &e.packet, e.payload);
                } else {
                    taken = self.process_packet(now, pid, &e.packet, e.payload);
                }
            }
            if !taken {
                return;
            }
        }
    }

    /// Takes an in-order packet (or a fragment of a partial medium). Returns whether a
    /// new message was taken at `next_match`.
    fn process_packet(
        &mut self,
        now: Time,
        pid: PartnerId,
        packet: &Packet,
        payload: Bytes,
    ) -> bool {
        match *packet {
            Packet::Tiny(m) | Packet::Small(m) => self.take_eager(now, pid, m, payload),
            Packet::Medium(m) => self.take_medium(now, pid, m, payload),
            Packet::Rndv(r) => self.take_rndv(now, pid, r),
            Packet::Notify(n) => {
                self.take_notify(now, pid, n);
                true
            }
            _ => false,
        }
    }

    fn take_eager(&mut self, now: Time, pid: PartnerId, m: Msg, payload: Bytes) -> bool {
        if m.flags != 0 && self.cfg.wire.mode == WireMode::Native {
            return self.take_one_sided_eager(now, pid, m, payload);
        }
        // Moved into whichever takes it: a posted receive or the unexpected queue.
        let mut payload = Some(payload);
        let body = || UnexpBody::Eager {
            chunks: smallvec::smallvec![(0, payload.take().expect("taken once"))],
            complete: true,
        };
        match self.place(pid, m.match_info, m.length as u32, body) {
            None => false,
            Some(Placed::Unexpected(_)) => true,
            Some(Placed::Recv(k)) => {
                self.deliver_chunk(k, 0, payload.take().expect("not stored"));
                self.try_finish_recv(now, k);
                true
            }
        }
    }

    fn take_medium(&mut self, now: Time, pid: PartnerId, m: Medium, payload: Bytes) -> bool {
        let seq = Seq(m.lib_seqnum);
        let offset = self.partners[pid]
            .wire
            .medium_frag_offset(m.frag_seqnum, m.frag_pipeline);
        let existing = self.partners[pid]
            .partials
            .iter()
            .position(|x| x.seq == seq);
        let idx = match existing {
            Some(i) => {
                let part = &mut self.partners[pid].partials[i];
                if part.msg_length != m.length || part.match_info != m.match_info {
                    self.counters.drop_medium_inconsistent += 1;
                    return false;
                }
                if !part.mark(m.frag_seqnum) {
                    self.counters.drop_obsolete += 1;
                    return false;
                }
                i
            }
            None => {
                if m.length as usize <= omx_wire::SMALL_MAX && m.frag_seqnum != 0 {
                    self.counters.drop_medium_inconsistent += 1;
                    return false;
                }
                let body = || UnexpBody::Eager {
                    chunks: Chunks::new(),
                    complete: false,
                };
                let target = match self.place(pid, m.match_info, m.length, body) {
                    None => return false,
                    Some(Placed::Recv(k)) => PartialTarget::Recv(k),
                    Some(Placed::Unexpected(u)) => PartialTarget::Unexpected(u),
                };
                let mut part = PartialMedium {
                    seq,
                    target,
                    msg_length: m.length,
                    match_info: m.match_info,
                    frags_seen: [0; 4],
                    received: 0,
                };
                part.mark(m.frag_seqnum);
                let p = self.partner(pid);
                p.partials.push(part);
                p.partials.len() - 1
            }
        };
        let p = &mut self.partners[pid];
        let next_frag = p.next_frag;
        let part = &mut p.partials[idx];
        part.received += payload.len() as u32;
        let done = part.received >= part.msg_length;
        let target = part.target;
        let last_frag = offset as usize + payload.len() >= part.msg_length as usize;
        if !done && last_frag && part.seq == next_frag && part.hole_before(m.frag_seqnum) {
            // The last fragment came and an earlier one did not (they are sent in
            // order): one duplicate ack per transmission gets the message resent now.
            self.send_gap_ack(pid);
        }
        match target {
            PartialTarget::Recv(k) => self.deliver_chunk(k, offset, payload),
            PartialTarget::Unexpected(u) => {
                if let Some(Unexpected {
                    body: UnexpBody::Eager { chunks, complete },
                    ..
                }) = self.unexp.get_mut(u)
                {
                    chunks.push((offset, payload));
                    *complete = done;
                }
            }
        }
        if done {
            self.partner(pid).partials.remove(idx);
            if existing.is_some() {
                // A late fragment completed an older message: the ack value may move.
                self.partner(pid).refresh_next_frag();
                self.schedule_ack(now, pid);
            }
            if let PartialTarget::Recv(k) = target {
                self.try_finish_recv(now, k);
            }
        }
        existing.is_none()
    }

    pub(crate) fn take_rndv(&mut self, now: Time, pid: PartnerId, r: Rndv) -> bool {
        if r.msg.flags != 0 && self.cfg.wire.mode == WireMode::Native {
            return self.take_one_sided_rndv(now, pid, r);
        }
        let body = || UnexpBody::Rndv {
            rdma_id: r.pulled_rdma_id,
            rdma_seq: r.pulled_rdma_seqnum,
            rdma_offset: r.pulled_rdma_offset,
        };
        match self.place(pid, r.msg.match_info, r.msg_length, body) {
            None => false,
            Some(Placed::Unexpected(_)) => true,
            Some(Placed::Recv(k)) => {
                self.start_large_recv(
                    now,
                    k,
                    r.pulled_rdma_id,
                    r.pulled_rdma_seqnum,
                    r.pulled_rdma_offset,
                );
                true
            }
        }
    }

    pub(crate) fn take_notify(&mut self, now: Time, pid: PartnerId, n: Notify) {
        let id = n.pulled_rdma_id;
        let owner = match self.regions.get(id as usize) {
            Some(r) if r.use_seq == n.pulled_rdma_seqnum => Some(r.req),
            _ => None,
        };
        let k = owner.filter(
            |&k| matches!(self.requests.get(k), Some(Request::Send(s)) if s.partner == pid),
        );
        let Some(k) = k else {
            self.counters.drop_stale_notify += 1;
            return;
        };
        let len = self.send_status(k, StatusCode::Success, 0).msg_length;
        let xfer = n.total_length.min(len);
        let code =
            if self.cfg.wire.mode == WireMode::Native && n.flags & crate::onesided::DENIED != 0 {
                StatusCode::BadRdmaWin
            } else if xfer < len {
                StatusCode::Truncated
            } else {
                StatusCode::Success
            };
        let status = self.send_status(k, code, xfer);
        // The notify's piggyback normally acked the rendezvous already; if not, the
        // record no longer names the request.
        for rec in self.partner(pid).unacked.iter_mut() {
            if rec.req == Some(k) {
                rec.req = None;
            }
        }
        let notice = self.take_put_notice(k, code);
        self.complete_send(k, status);
        self.free_region(now, id);
        if let Some(notice) = notice {
            self.send_put_notice(now, pid, notice);
        }
        if self.cfg.wire.mode == WireMode::MxCompat
            && self.partners[pid].reach == Reach::Network
            && self.partners[pid].partials.is_empty()
        {
            // MX before 1.2.5 needs this ack at once to finish its large receive; a
            // deadline of "now" sends it right after the stream advanced.
            self.partner(pid).ack_deadline = Some(now);
            self.hint_deadline(now);
        }
    }

    /// Every seq-consuming packet (TINY, SMALL, MEDIUM, RNDV, NOTIFY): count it, check
    /// its envelope, then place it in the partner's stream.
    pub(crate) fn on_seq_packet(
        &mut self,
        now: Time,
        src: NicId,
        packet: Packet,
        frame_len: usize,
        payload: Bytes,
    ) {
        let c = &mut self.counters;
        let (dst, src_ep, session, seq, piggy, frag) = match packet {
            Packet::Tiny(m) | Packet::Small(m) => {
                if matches!(packet, Packet::Tiny(_)) {
                    c.recv_tiny += 1;
                } else {
                    c.recv_small += 1;
                }
                (
                    m.dst_endpoint,
                    m.src_endpoint,
                    m.session,
                    m.lib_seqnum,
                    m.lib_piggyack,
                    None,
                )
            }
            Packet::Medium(m) => {
                c.recv_medium_frag += 1;
                if m.length > self.cfg.wire.medium_max() {
                    c.drop_bad_datalen += 1;
                    return;
                }
                let f = Some(m.frag_seqnum);
                (
                    m.dst_endpoint,
                    m.src_endpoint,
                    m.session,
                    m.lib_seqnum,
                    m.lib_piggyack,
                    f,
                )
            }
            Packet::Rndv(r) => {
                c.recv_rndv += 1;
                let m = r.msg;
                (
                    m.dst_endpoint,
                    m.src_endpoint,
                    m.session,
                    m.lib_seqnum,
                    m.lib_piggyack,
                    None,
                )
            }
            Packet::Notify(n) => {
                c.recv_notify += 1;
                (
                    n.dst_endpoint,
                    n.src_endpoint,
                    n.session,
                    n.lib_seqnum,
                    n.lib_piggyack,
                    None,
                )
            }
            _ => return,
        };
        let Some(pid) = self.admit(now, src, dst, src_ep, session, seq, piggy) else {
            return;
        };
        self.sequence(now, pid, Seq(seq), frag, frame_len, &packet, payload);
    }

    pub(crate) fn on_truc(&mut self, now: Time, src: NicId, t: Truc) {
        self.counters.recv_liback += 1;
        if !self.for_me(t.dst_endpoint) || !self.session_ok(t.session) {
            return;
        }
        let Some(pid) = self.known_partner(now, src, t.src_endpoint) else {
            return;
        };
        let p = self.partner(pid);
        if t.acknum <= p.acknum_seen {
            self.counters.drop_bad_ack += 1;
            return;
        }
        p.acknum_seen = t.acknum;
        let upto = Seq(t.lib_seqnum);
        let advances = p.unacked.front().is_some_and(|r| r.seq.before(upto));
        // A repeated ack is a loss signal only if it reports a gap: a partner that
        // flags those also repeats its ack for a packet it got twice (ours was late),
        // which taken as a loss would resend the next packet, get that one twice, and
        // so on for as long as the stream lasts.
        let reports_gap =
            !p.wire.uses(omx_wire::Extensions::GAP_ACKS) || t.resent == omx_wire::TRUC_RESENT_GAP;
        if advances {
            self.apply_ack(now, pid, upto);
        } else if reports_gap {
            self.on_duplicate_ack(now, pid, upto);
        }
    }

    pub(crate) fn on_nack_lib(&mut self, now: Time, src: NicId, n: NackLib) {
        self.counters.recv_nack_lib += 1;
        if !self.for_me(n.dst_endpoint) {
            return;
        }
        let Some(pid) = self.partners.lookup(src, n.src_endpoint) else {
            self.counters.drop_bad_peer_addr += 1;
            return;
        };
        let code = nack_status(n.nack_type);
        if n.lib_seqnum == 0 {
            if let Some(&k) = self.partners[pid].connects.front() {
                self.finish_connect(k, code);
            }
            return;
        }
        let p = &self.partners[pid];
        // An unacked packet, or the announcement of a rendezvous that waits for its
        // notify (re-sent as a liveness probe after its ack): the endpoint is gone.
        let probed = || {
            self.regions.iter().any(|r| {
                matches!(self.requests.get(r.req), Some(Request::Send(s))
                    if s.partner == pid && s.rndv.is_some_and(|(q, _)| q.0 == n.lib_seqnum))
            })
        };
        if p.unacked.iter().any(|r| r.seq.0 == n.lib_seqnum) || probed() {
            self.reset_partner(now, pid, code);
        } else {
            self.counters.drop_bad_ack += 1;
        }
    }
}

pub(crate) fn nack_status(nack_type: u8) -> StatusCode {
    match nack_type {
        t if t == NackType::BadEndpoint as u8 => StatusCode::BadEndpoint,
        t if t == NackType::EndpointClosed as u8 => StatusCode::EndpointClosed,
        t if t == NackType::BadSession as u8 => StatusCode::BadSession,
        t if t == NackType::BadRdmaWin as u8 => StatusCode::BadRdmaWin,
        _ => StatusCode::Aborted,
    }
}
