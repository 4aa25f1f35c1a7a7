//! Sending: class selection, sequence numbers, retransmission, acks and partner reset.

use crate::engine::Engine;
use crate::partner::{SendRecord, SentPacket};
use crate::requests::{Request, SendReq};
use crate::seqnum::{Seq, MAX_IN_FLIGHT};
use crate::slab::Key;
use crate::transmit::Payload;
use crate::types::*;
use bytes::Bytes;
use omx_wire::{
    Extensions, Medium, Msg, Notify, Packet, Rndv, Truc, SMALL_MAX, TINY_MAX, TRUC_RESENT_GAP,
    TRUC_TYPE_ACK,
};

/// What a send's first frame carries: its eager data, or the region a rendezvous offers.
enum Body {
    Eager(Bytes),
    Region(MemHandle, u32),
}

impl Engine {
    /// Posts a send. Eager data (up to the rendezvous threshold) must be passed as
    /// [`SendData::Eager`]; larger messages as a region the receiver will pull.
    pub fn isend(
        &mut self,
        now: Time,
        partner: PartnerId,
        match_info: u64,
        data: SendData,
        context: u64,
    ) -> Result<ReqId, EngineError> {
        self.post_send(now, partner, match_info, data, context, false)
    }

    /// Synchronous send: completes only once the receiver matched and pulled the data.
    pub fn issend(
        &mut self,
        now: Time,
        partner: PartnerId,
        match_info: u64,
        data: SendData,
        context: u64,
    ) -> Result<ReqId, EngineError> {
        self.post_send(now, partner, match_info, data, context, true)
    }

    fn post_send(
        &mut self,
        now: Time,
        partner: PartnerId,
        match_info: u64,
        data: SendData,
        context: u64,
        sync: bool,
    ) -> Result<ReqId, EngineError> {
        let p = self
            .partners
            .get(partner)
            .ok_or(EngineError::UnknownPartner)?;
        let eager = self.must_capture(p.reach, &p.wire, data.len(), sync);
        // To oneself a small message may also be passed as a region (copied straight
        // into a posted receive).
        let region_ok = p.reach == Reach::SelfEndpoint;
        match (&data, eager) {
            (SendData::Region { .. }, true) if region_ok => {}
            (SendData::Eager(_), false) => return Err(EngineError::WrongSendData),
            (SendData::Region { .. }, true) => return Err(EngineError::WrongSendData),
            _ => {}
        }
        let k = self.post_flagged(now, partner, match_info, data, context, 0, 0, false)?;
        Ok(ReqId(k.0))
    }

    /// Queues a send with one-sided flags (0 for ordinary sends); `internal` sends
    /// complete silently.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_flagged(
        &mut self,
        now: Time,
        partner: PartnerId,
        match_info: u64,
        data: SendData,
        context: u64,
        flags: u8,
        base: u64,
        internal: bool,
    ) -> Result<Key, EngineError> {
        let req = SendReq {
            flags,
            base,
            internal,
            ..SendReq::new(partner, match_info, data, context, self.cfg.resends_max)
        };
        self.post_send_req(now, req)
    }

    /// Posts a send request built by the caller (its partner must exist).
    pub(crate) fn post_send_req(&mut self, now: Time, req: SendReq) -> Result<Key, EngineError> {
        let partner = req.partner;
        let p = self
            .partners
            .get(partner)
            .ok_or(EngineError::UnknownPartner)?;
        let no_session = p.session.is_none();
        let k = self.requests.insert(Request::Send(req));
        if no_session {
            // Reset or never connected: fail like MX does for a dead partner.
            self.fail_send(k, StatusCode::EndpointUnreachable);
            return Ok(k);
        }
        let p = self.partner(partner);
        if !p.throttled.is_empty() || p.unacked_in_flight() >= MAX_IN_FLIGHT {
            p.throttled.push_back(k);
        } else {
            self.start_send(now, k);
        }
        Ok(k)
    }

    /// Sets the resend budget of a pending send (from `mx_set_request_timeout`).
    pub fn set_send_resends(&mut self, req: ReqId, resends_max: u32) -> Result<(), EngineError> {
        match self.requests.get_mut(Key(req.0)) {
            Some(Request::Send(s)) => {
                s.resends_max = resends_max;
                let pid = s.partner;
                for r in self.partner(pid).unacked.iter_mut() {
                    if r.req == Some(Key(req.0)) {
                        r.resends_max = resends_max;
                    }
                }
                Ok(())
            }
            Some(Request::Connect(c)) => {
                c.resends_max = resends_max;
                Ok(())
            }
            _ => Err(EngineError::BadRequest),
        }
    }

    /// Assigns a sequence number and sends the first frames of a request.
    fn start_send(&mut self, now: Time, k: Key) {
        let Some(Request::Send(s)) = self.requests.get(k) else {
            return;
        };
        // Messages to one partner leave in order: behind a large send that waits for a
        // free region, later sends wait too.
        let waiting_before = !self.regions.nobody_waits()
            && self.regions.waiting().any(|w| {
                matches!(self.requests.get(w), Some(Request::Send(x)) if x.partner == s.partner)
            });
        if waiting_before {
            self.regions.wait(k);
            return;
        }
        self.begin_send(now, k);
    }

    /// `start_send` once the send is next in its partner's order.
    fn begin_send(&mut self, now: Time, k: Key) {
        let Some(Request::Send(s)) = self.requests.get(k) else {
            return;
        };
        if self.partners[s.partner].reach != Reach::Network {
            self.start_local_send(now, k);
            return;
        }
        let (pid, match_info, len, resends_max) =
            (s.partner, s.match_info, s.data.len(), s.resends_max);
        // An eager send completes here unless too many already wait for their ack
        // (MX's zombie sends); its data then lives on in the unacked record alone.
        let eager = matches!(s.data, SendData::Eager(_));
        let zombie = eager && self.zombies < self.cfg.zombie_max;
        let done = zombie.then(|| self.send_status(k, StatusCode::Success, len));
        let session = self.partners[pid].session.unwrap_or(0);
        let dst_endpoint = self.partners[pid].endpoint;
        let src_endpoint = self.me.endpoint;
        let Some(Request::Send(s)) = self.requests.get_mut(k) else {
            return;
        };
        let (flags, base) = (s.flags, s.base);
        let msg = Msg {
            flags,
            dst_endpoint,
            src_endpoint,
            length: 0,
            checksum: 0,
            lib_seqnum: 0,
            lib_piggyack: 0,
            match_info,
            session,
        };
        // The record takes one reference to the payload (each count is an atomic
        // operation); a send completing now hands over its own.
        let body = match &mut s.data {
            SendData::Eager(bytes) if zombie => Body::Eager(std::mem::take(bytes)),
            SendData::Eager(bytes) => Body::Eager(bytes.clone()),
            SendData::Region { handle, len } => Body::Region(*handle, *len),
        };
        let packet = match body {
            Body::Eager(bytes) if len as usize <= TINY_MAX => SentPacket::Tiny(
                Msg {
                    length: len as u16,
                    ..msg
                },
                bytes,
            ),
            Body::Eager(bytes) if len as usize <= SMALL_MAX => SentPacket::Small(
                Msg {
                    length: len as u16,
                    ..msg
                },
                bytes,
            ),
            Body::Eager(bytes) => SentPacket::Medium(
                Medium {
                    dst_endpoint,
                    src_endpoint,
                    length: len,
                    lib_seqnum: 0,
                    lib_piggyack: 0,
                    match_info,
                    session,
                    frag_length: 0,
                    frag_seqnum: 0,
                    frag_pipeline: 0,
                    checksum: 0,
                },
                bytes,
            ),
            Body::Region(handle, len) => {
                let Some((id, use_seq)) = self.claim_region(k, handle, len, base) else {
                    return;
                };
                SentPacket::Rndv(Rndv {
                    msg: Msg { length: 8, ..msg },
                    msg_length: len,
                    pulled_rdma_id: id,
                    pulled_rdma_seqnum: use_seq,
                    pulled_rdma_offset: 0,
                })
            }
        };
        if let SentPacket::Rndv(r) = &packet {
            let seq = self.partners[pid].next_send;
            if let Some(Request::Send(s)) = self.requests.get_mut(k) {
                s.rndv = Some((seq, *r));
            }
        }
        let p = &mut self.partners[pid];
        let delay = p.rto(&self.cfg);
        let seq = p.next_send;
        p.next_send = seq.next();
        p.unacked.push_back(SendRecord {
            seq,
            packet,
            req: if zombie { None } else { Some(k) },
            zombie,
            first_send: now,
            last_send: now,
            resends: 0,
            resends_max,
        });
        p.arm_resend(now + delay);
        self.hint_deadline(now + delay);
        let idx = self.partners[pid].unacked.len() - 1;
        self.transmit_record(pid, idx);
        if let Some(status) = done {
            // MX completes eager sends at once; the record keeps the data for resends.
            self.zombies += 1;
            self.complete_send(k, status);
        }
    }

    /// Registers the region of a large send, or queues the send until one frees up.
    pub(crate) fn claim_region(
        &mut self,
        k: Key,
        handle: MemHandle,
        len: u32,
        base: u64,
    ) -> Option<(u8, u8)> {
        let Some((id, use_seq)) = self.regions.alloc(handle, len, base, k) else {
            self.regions.wait(k);
            return None;
        };
        if let Some(Request::Send(s)) = self.requests.get_mut(k) {
            s.large = Some((id, use_seq));
        }
        Some((id, use_seq))
    }

    pub(crate) fn free_region(&mut self, now: Time, id: u8) {
        self.regions.release(id);
        self.start_waiting_sends(now);
    }

    /// Starts the sends that waited for a region, in order, until a large one finds
    /// none free.
    fn start_waiting_sends(&mut self, now: Time) {
        while let Some(k) = self.regions.next_waiting() {
            let large = matches!(
                self.requests.get(k),
                Some(Request::Send(s)) if matches!(s.data, SendData::Region { .. })
            );
            if large && self.regions.is_full() {
                return;
            }
            self.regions.pop_waiting();
            self.begin_send(now, k);
        }
    }

    /// Removes a finished send and reports it (engine-internal sends stay silent).
    pub(crate) fn complete_send(&mut self, k: Key, status: Status) {
        if let Some(r) = self.requests.remove(k) {
            let internal = matches!(&r, Request::Send(s) if s.internal);
            if !internal {
                let mem = r.lent_mem();
                self.complete_with(k, RequestKind::Send, status, mem);
            }
        }
    }

    pub(crate) fn send_status(&self, k: Key, code: StatusCode, xfer: u32) -> Status {
        match self.requests.get(k) {
            Some(Request::Send(s)) => Status {
                code,
                source: Some(s.partner),
                match_info: s.match_info,
                msg_length: s.data.len(),
                xfer_length: xfer,
                context: s.context,
            },
            _ => Status {
                code,
                source: None,
                match_info: 0,
                msg_length: 0,
                xfer_length: 0,
                context: 0,
            },
        }
    }

    pub(crate) fn fail_send(&mut self, k: Key, code: StatusCode) {
        let status = self.send_status(k, code, 0);
        if let Some(Request::Send(s)) = self.requests.remove(k) {
            if let Some((id, _)) = s.large {
                self.regions.release_if_held_by(id, k);
            }
            if !s.internal {
                let mem = Request::Send(s).lent_mem();
                self.complete_with(k, RequestKind::Send, status, mem);
            }
        }
    }

    /// Resends the oldest unacked record of a partner now (fast retransmit, partial ack
    /// in recovery, or timeout): it counts as resent from `now`.
    /// The records that shared its frame (bundled, sent in the same pass) were lost
    /// with it: they are resent too, instead of one recovery round each.
    fn resend_front(&mut self, now: Time, pid: PartnerId) {
        let p = &mut self.partners[pid];
        let bundled = p.wire.uses(omx_wire::Extensions::BUNDLE);
        let Some(front) = p.unacked.front_mut() else {
            return;
        };
        let sent_with = front.last_send;
        let mut n = 1;
        if bundled && front.packet.may_be_bundled() {
            n += p
                .unacked
                .iter()
                .skip(1)
                .take_while(|r| r.last_send == sent_with && r.packet.may_be_bundled())
                .count();
        }
        for r in p.unacked.iter_mut().take(n) {
            r.resends += 1;
            r.last_send = now;
        }
        p.resent_at = now;
        for idx in 0..n {
            self.transmit_record(pid, idx);
        }
    }

    /// (Re)encodes the record at `idx` of the partner's queue with a fresh piggyback.
    pub(crate) fn transmit_record(&mut self, pid: PartnerId, idx: usize) {
        let rec = &self.partners[pid].unacked[idx];
        let (seq, packet) = (rec.seq, rec.packet.clone());
        self.transmit_packet(pid, seq, packet);
    }

    /// Encodes a seq-consuming packet with the current piggybacked ack and queues it.
    pub(crate) fn transmit_packet(&mut self, pid: PartnerId, seq: Seq, packet: SentPacket) {
        let header = self.header_to(pid);
        let p = &mut self.partners[pid];
        let wire = p.wire;
        let piggy = p.next_frag.0;
        p.last_acked = p.next_frag;
        p.ack_deadline = None;
        let seq = seq.0;
        match packet {
            SentPacket::Tiny(m, data) => {
                let m = Msg {
                    lib_seqnum: seq,
                    lib_piggyack: piggy,
                    ..m
                };
                self.counters.send_tiny += 1;
                self.emit(&wire, header, Packet::Tiny(m), Payload::Bytes(data), true);
            }
            SentPacket::Small(m, data) => {
                let m = Msg {
                    lib_seqnum: seq,
                    lib_piggyack: piggy,
                    ..m
                };
                self.counters.send_small += 1;
                self.emit(&wire, header, Packet::Small(m), Payload::Bytes(data), true);
            }
            SentPacket::Medium(m, data) => {
                let frag_max = wire.medium_frag_max as usize;
                let pipeline = match wire.mode {
                    omx_wire::WireMode::MxCompat => frag_max.trailing_zeros() as u8,
                    omx_wire::WireMode::Native => 0,
                };
                let nfrags = data.len().div_ceil(frag_max).max(1);
                for i in 0..nfrags {
                    let start = i * frag_max;
                    let end = (start + frag_max).min(data.len());
                    let frag = Medium {
                        lib_seqnum: seq,
                        lib_piggyack: piggy,
                        frag_length: (end - start) as u16,
                        frag_seqnum: i as u8,
                        frag_pipeline: pipeline,
                        ..m
                    };
                    self.counters.send_medium_frag += 1;
                    let last = i + 1 == nfrags;
                    let payload = Payload::Bytes(data.slice(start..end));
                    self.emit(&wire, header, Packet::Medium(frag), payload, last);
                }
            }
            SentPacket::Rndv(r) => {
                let r = Rndv {
                    msg: Msg {
                        lib_seqnum: seq,
                        lib_piggyack: piggy,
                        ..r.msg
                    },
                    ..r
                };
                self.counters.send_rndv += 1;
                self.emit(&wire, header, Packet::Rndv(r), Payload::None, true);
            }
            SentPacket::Notify(n) => {
                let n = Notify {
                    lib_seqnum: seq,
                    lib_piggyack: piggy,
                    ..n
                };
                self.counters.send_notify += 1;
                self.emit(&wire, header, Packet::Notify(n), Payload::None, true);
            }
        }
    }

    /// Queues a NOTIFY (consumes a sequence number toward the large sender).
    pub(crate) fn send_notify(&mut self, now: Time, pid: PartnerId, mut n: Notify) {
        let p = self.partner(pid);
        n.dst_endpoint = p.endpoint;
        n.session = p.session.unwrap_or(0);
        let seq = p.next_send;
        p.next_send = seq.next();
        let resends_max = self.cfg.resends_max;
        let src_endpoint = self.me.endpoint;
        let p = &mut self.partners[pid];
        let delay = p.rto(&self.cfg);
        p.unacked.push_back(SendRecord {
            seq,
            packet: SentPacket::Notify(Notify { src_endpoint, ..n }),
            req: None,
            zombie: false,
            first_send: now,
            last_send: now,
            resends: 0,
            resends_max,
        });
        p.arm_resend(now + delay);
        let idx = p.unacked.len() - 1;
        self.hint_deadline(now + delay);
        self.transmit_record(pid, idx);
    }

    /// Everything strictly below `upto` is acknowledged by the partner.
    pub(crate) fn apply_ack(&mut self, now: Time, pid: PartnerId, upto: Seq) {
        let p = &mut self.partners[pid];
        if upto.sesnum() != p.next_send.sesnum()
            || !(upto == p.next_send || upto.before(p.next_send))
        {
            self.counters.drop_bad_ack += 1;
            return;
        }
        // The resend deadline stays armed: connects and liveness probes may still need
        // it, and `resend_overdue` recomputes it exactly when it fires.
        if !p.unacked.front().is_some_and(|r| r.seq.before(upto)) {
            return;
        }
        // The newest record acked gives the round-trip sample, unless a record of this
        // ack was resent (Karn's rule: the ack could answer either transmission, and
        // the records held behind a lost one were waiting for its recovery).
        let mut sample = None;
        let mut resent = false;
        let resent_at = self.partners[pid].resent_at;
        // One record at a time (no list of them: this runs for every frame received).
        while let Some(rec) = self.partners[pid].pop_acked(upto) {
            resent |= rec.resends > 0 || rec.last_send <= resent_at;
            sample = (!resent).then(|| now.saturating_sub(rec.last_send));
            if rec.zombie {
                self.zombies -= 1;
            }
            let Some(k) = rec.req else { continue };
            // Eager sends held back by the zombie limit complete on their ack; a
            // rendezvous keeps waiting for its notify.
            if !matches!(rec.packet, SentPacket::Rndv(_)) {
                let len = self.send_status(k, StatusCode::Success, 0).msg_length;
                let status = self.send_status(k, StatusCode::Success, len);
                self.complete_send(k, status);
            }
        }
        let p = &mut self.partners[pid];
        p.dup_acks = 0;
        p.acked_at = now;
        match sample {
            Some(rtt) => p.rtt.sample(rtt),
            None => p.rtt.progress(),
        }
        if let Some((point, started)) = p.recovery {
            if upto == point || point.before(upto) {
                p.recovery = None;
            } else if p.unacked.front().is_some_and(|r| r.last_send <= started) {
                self.counters.fast_retransmits += 1;
                self.resend_front(now, pid);
            }
        }
        self.release_throttled(now, pid);
    }

    /// A loss was detected: recovery runs until what is in flight now is acked.
    fn enter_recovery(&mut self, now: Time, pid: PartnerId) {
        let p = &mut self.partners[pid];
        if p.recovery.is_none() {
            p.recovery = Some((p.next_send, now));
        }
    }

    /// An explicit ack that acknowledged nothing new while packets wait: the receiver
    /// holds later packets and misses the oldest one. Resend that one at once instead
    /// of waiting for the timeout, unless it was already resent within the last round
    /// trip (the ack may predate that retransmission).
    pub(crate) fn on_duplicate_ack(&mut self, now: Time, pid: PartnerId, upto: Seq) {
        let p = &mut self.partners[pid];
        let Some(front) = p.unacked.front() else {
            return;
        };
        if front.seq != upto {
            return;
        }
        p.dup_acks += 1;
        self.counters.recv_dup_ack += 1;
        if p.dup_acks < self.cfg.dup_ack_threshold.max(1) {
            return;
        }
        let recent = p.rtt.srtt.max(self.cfg.rto_min / 4);
        if front.resends > 0 && now < front.last_send.saturating_add(recent) {
            return;
        }
        p.dup_acks = 0;
        self.counters.fast_retransmits += 1;
        self.resend_front(now, pid);
        self.enter_recovery(now, pid);
    }

    pub(crate) fn release_throttled(&mut self, now: Time, pid: PartnerId) {
        loop {
            let p = &mut self.partners[pid];
            if p.session.is_none() || p.unacked_in_flight() >= MAX_IN_FLIGHT {
                return;
            }
            let Some(k) = p.throttled.pop_front() else {
                return;
            };
            self.start_send(now, k);
        }
    }

    /// Sends an explicit ack (TRUC) covering everything completely received.
    pub(crate) fn send_ack(&mut self, pid: PartnerId) {
        self.send_ack_reporting(pid, false);
    }

    /// An explicit ack that reports a gap in the stream: the one ack that may start a
    /// fast retransmit (flagged toward a partner with `GAP_ACKS`).
    pub(crate) fn send_gap_ack(&mut self, pid: PartnerId) {
        self.counters.send_dup_ack += 1;
        self.send_ack_reporting(pid, true);
    }

    fn send_ack_reporting(&mut self, pid: PartnerId, gap: bool) {
        let header = self.header_to(pid);
        let me = self.me.endpoint;
        let p = self.partner(pid);
        p.ack_deadline = None;
        let Some(session) = p.session else { return };
        p.acknum_sent += 1;
        p.last_acked = p.next_frag;
        let truc = Truc {
            dst_endpoint: p.endpoint,
            src_endpoint: me,
            length: 16,
            session,
            truc_type: TRUC_TYPE_ACK,
            lib_seqnum: p.next_frag.0,
            session_id: session,
            acknum: p.acknum_sent,
            send_seq: p.next_frag.0,
            resent: if gap && p.wire.uses(Extensions::GAP_ACKS) {
                TRUC_RESENT_GAP
            } else {
                0
            },
        };
        let wire = p.wire;
        self.counters.send_liback += 1;
        self.emit(&wire, header, Packet::Truc(truc), Payload::None, false);
    }

    /// After new data was completely received: ack now or arm the delayed ack.
    pub(crate) fn schedule_ack(&mut self, now: Time, pid: PartnerId) {
        let (max, delay) = (self.cfg.not_acked_max, self.cfg.ack_delay);
        let p = self.partner(pid);
        if p.next_frag.since(p.last_acked) >= max {
            match self.acks_after_bundle.as_mut() {
                Some(owed) if !owed.contains(&pid) => owed.push(pid),
                Some(_) => {}
                None => self.send_ack(pid),
            }
        } else if p.next_frag != p.last_acked && p.ack_deadline.is_none() {
            p.ack_deadline = Some(now + delay);
            self.hint_deadline(now + delay);
        }
    }

    pub(crate) fn resend_overdue(&mut self, now: Time, pid: PartnerId) {
        let delay = self.cfg.resend_delay;
        let mut next: Option<Time> = None;
        let mut exhausted = false;
        // One timer for the stream, on its oldest packet, restarted by every ack that
        // advances (as TCP's): the packets behind it are resent when their turn comes,
        // so one loss costs one timeout, not one per packet in flight.
        let p = &mut self.partners[pid];
        if let Some(front) = p.unacked.front() {
            let rto = p.rto(&self.cfg);
            let since = front.last_send.max(p.acked_at);
            // Each packet's budget (mx_set_request_timeout may shorten it) runs from its
            // first send; checked whenever the timer fires, at least every resend delay.
            let spent = |r: &SendRecord| {
                now.saturating_sub(r.first_send) >= delay.saturating_mul(r.resends_max as u64)
            };
            if p.unacked.iter().any(spent) {
                exhausted = true;
            } else if since + rto > now {
                next = Some(since + rto);
            } else {
                p.rtt.back_off();
                let rearm = p.rto(&self.cfg);
                self.counters.resends += 1;
                self.counters.rto_timeouts += 1;
                self.resend_front(now, pid);
                self.enter_recovery(now, pid);
                next = Some(now + rearm);
            }
        }
        let connects: Vec<Key> = self.partners[pid].connects.iter().copied().collect();
        let mut timed_out = Vec::new();
        for k in connects {
            let Some(Request::Connect(c)) = self.requests.get_mut(k) else {
                continue;
            };
            let wait = self.cfg.connect_resend_delay(c.resends);
            if c.last_send + wait <= now {
                if c.resends >= c.resends_max {
                    timed_out.push(k);
                    continue;
                }
                c.resends += 1;
                self.counters.resends += 1;
                self.send_connect_request(now, k);
            }
            if let Some(Request::Connect(c)) = self.requests.get(k) {
                let due = c.last_send + self.cfg.connect_resend_delay(c.resends);
                next = Some(next.map_or(due, |n: Time| n.min(due)));
            }
        }
        for k in timed_out {
            self.finish_connect(k, StatusCode::EndpointUnreachable);
        }
        if let Some(due) = self.probe_liveness(now, pid, &mut exhausted) {
            next = Some(next.map_or(due, |n: Time| n.min(due)));
        }
        self.partners[pid].resend_deadline = next;
        if let Some(n) = next {
            self.hint_deadline(n);
        }
        if exhausted {
            self.reset_partner(now, pid, StatusCode::EndpointUnreachable);
        }
    }

    /// Rendezvous sends whose announcement was acked wait for a notify that never comes
    /// if the receiver died: when the partner has been silent for a resend period,
    /// re-send one announcement (the receiver answers a duplicate with an ack) and count
    /// the unanswered probes against the resend budget. Returns the next probe time.
    fn probe_liveness(&mut self, now: Time, pid: PartnerId, exhausted: &mut bool) -> Option<Time> {
        // No rendezvous send at all (every small-message timer): the region slots are
        // not scanned.
        if self.regions.len() == 0 {
            return None;
        }
        let delay = self.cfg.resend_delay;
        let waiting: Vec<(Seq, Rndv, u32)> = self
            .regions
            .iter()
            .filter_map(|r| match self.requests.get(r.req) {
                Some(Request::Send(s)) if s.partner == pid => {
                    s.rndv.map(|(q, p)| (q, p, s.resends_max))
                }
                _ => None,
            })
            .filter(|(q, _, _)| !self.partners[pid].unacked.iter().any(|r| r.seq == *q))
            .collect();
        let (seq, rndv, budget) = *waiting.first()?;
        let p = &mut self.partners[pid];
        let due = p.last_heard.max(p.probe_sent) + delay;
        if now < due {
            return Some(due);
        }
        if p.probes >= budget {
            *exhausted = true;
            return None;
        }
        p.probes += 1;
        p.probe_sent = now;
        self.counters.resends += 1;
        self.transmit_packet(pid, seq, SentPacket::Rndv(rndv));
        Some(now + delay)
    }

    /// Declares the partner's stream dead: every pending operation with it fails with
    /// `code`, its queued data is dropped, and a new connect is needed to talk again.
    pub(crate) fn reset_partner(&mut self, now: Time, pid: PartnerId, code: StatusCode) {
        self.counters.partner_resets += 1;
        let p = self.partner(pid);
        let records: Vec<_> = p.unacked.drain(..).collect();
        let throttled: Vec<_> = p.throttled.drain(..).collect();
        let connects: Vec<_> = p.connects.drain(..).collect();
        let partials: Vec<_> = p.partials.drain(..).collect();
        p.early.clear();
        let early = std::mem::take(&mut p.early_bytes);
        p.resend_deadline = None;
        p.ack_deadline = None;
        p.dup_acks = 0;
        p.recovery = None;
        p.session = None;
        p.next_send = p.next_send.bump_sesnum();
        p.next_match = p.next_match.bump_sesnum();
        p.next_frag = p.next_match;
        p.last_acked = p.next_match;
        self.early_bytes -= early;
        for rec in records {
            if rec.zombie {
                self.zombies -= 1;
            }
            if let Some(k) = rec.req {
                self.fail_send(k, code);
            }
        }
        for k in throttled {
            self.fail_send(k, code);
        }
        for k in connects {
            self.finish_connect(k, code);
        }
        // Rendezvous sends waiting for a notify from this partner.
        let large: Vec<Key> = self
            .regions
            .iter()
            .map(|r| r.req)
            .filter(|&k| matches!(self.requests.get(k), Some(Request::Send(s)) if s.partner == pid))
            .collect();
        for k in large {
            self.fail_send(k, code);
        }
        for part in partials {
            self.abort_partial(now, part, code);
        }
        self.abort_pulls_from(now, pid, code);
        self.abort_local_pulls_from(pid, code);
        self.partner(pid).local_regions.clear();
        self.unexp.drop_from(pid);
        let waiting: Vec<Key> = self.regions.waiting().collect();
        for k in waiting {
            if matches!(self.requests.get(k), Some(Request::Send(s)) if s.partner == pid) {
                self.regions.stop_waiting(k);
                self.fail_send(k, code);
            }
        }
        let _ = now;
    }
}
