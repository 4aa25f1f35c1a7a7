//! Connection handshake: exchanges sessions, keys and initial sequence numbers.

use crate::engine::Engine;
use crate::requests::{ConnectReq, Request};
use crate::seqnum::Seq;
use crate::slab::Key;
use crate::types::*;
use omx_wire::{Connect, Packet, CONNECT_STATUS_BAD_KEY, CONNECT_STATUS_SUCCESS};

impl Engine {
    /// Starts a connect to endpoint `endpoint` of board `nic_id` with the remote's key.
    /// Completes with the partner as `status.source` (or a failure status).
    pub fn connect(
        &mut self,
        now: Time,
        nic_id: NicId,
        endpoint: u8,
        key: u32,
        context: u64,
    ) -> Result<ReqId, EngineError> {
        let pid = self
            .partner_for(nic_id, endpoint)
            .ok_or(EngineError::UnknownPeer)?;
        // The application knows this partner from now on.
        self.partner(pid).evictable = false;
        if nic_id == self.me.nic_id && endpoint == self.me.endpoint {
            // Connecting to oneself needs no packets, only the key check.
            let code = if key == self.me.key {
                StatusCode::Success
            } else {
                StatusCode::BadKey
            };
            if code == StatusCode::Success {
                let (me, wire) = (self.me.session, self.cfg.wire);
                let p = self.partner(pid);
                p.session = Some(me);
                // We understand all we offer: even through the network path.
                p.wire = wire;
                p.reverse_index = p.peer_index;
                if self.cfg.self_enabled {
                    self.connect_self(pid);
                }
            }
            return Ok(self.connect_done_now(pid, code, context));
        }
        let resends_max = self.cfg.resends_max;
        let p = self.partner(pid);
        p.connect_seqnum = p.connect_seqnum.wrapping_add(1);
        let connect_seqnum = p.connect_seqnum;
        let k = self.requests.insert(Request::Connect(ConnectReq::new(
            pid,
            key,
            context,
            connect_seqnum,
            now,
            resends_max,
        )));
        self.partner(pid).connects.push_back(k);
        self.send_connect_request(now, k);
        Ok(ReqId(k.0))
    }

    pub(crate) fn send_connect_request(&mut self, now: Time, k: Key) {
        let Some(Request::Connect(c)) = self.requests.get_mut(k) else {
            return;
        };
        c.last_send = now;
        let (pid, key, seqnum) = (c.partner, c.key, c.connect_seqnum);
        let delay = self.cfg.connect_resend_delay(c.resends);
        let (me, session) = (self.me.endpoint, self.me.session);
        self.hint_deadline(now + delay);
        self.partner(pid).arm_resend(now + delay);
        let (stripe_boards, boards) = self.stripe_advert();
        let p = &self.partners[pid];
        let packet = Packet::Connect(Connect {
            dst_endpoint: p.endpoint,
            src_endpoint: me,
            length: 16,
            lib_seqnum: 0,
            src_dst_peer_index: p.peer_index,
            src_session_id: session,
            app_key_or_target_session: key,
            target_recv_seqnum_start: p.next_match.0,
            is_reply: false,
            connect_seqnum: seqnum,
            status_code: 0,
            link_mtu: self.cfg.wire.advertised_mtu(),
            extensions: self.cfg.wire.advertised_extensions(),
            stripe_boards,
        });
        let header = self.header_to(pid);
        let wire = self.partners[pid].wire;
        self.counters.send_connect_request += 1;
        self.emit(&wire, header, packet, boards, true);
    }

    /// A CONNECT request or reply; `boards`, its payload, lists the sender's other
    /// boards when it offers striping.
    pub(crate) fn on_connect(&mut self, now: Time, src: NicId, c: Connect, boards: &[u8]) {
        if !self.for_me(c.dst_endpoint) {
            return;
        }
        if c.is_reply {
            self.counters.recv_connect_reply += 1;
            self.on_connect_reply(now, src, c, boards);
        } else {
            self.counters.recv_connect_request += 1;
            self.on_connect_request(now, src, c, boards);
        }
    }

    fn on_connect_request(&mut self, now: Time, src: NicId, c: Connect, boards: &[u8]) {
        let Some(pid) = self.partner_for_incoming(now, src, c.src_endpoint) else {
            return;
        };
        let good_key = c.app_key_or_target_session == self.me.key;
        let wire = self.cfg.wire.for_partner(c.link_mtu, c.extensions);
        let p = &mut self.partners[pid];
        p.reverse_index = c.src_dst_peer_index;
        p.wire = wire;
        let status_code = if good_key {
            self.learn_stripes(pid, boards);
            let p = &mut self.partners[pid];
            let previous = p.session;
            if previous.is_some_and(|s| s != c.src_session_id) {
                // The remote endpoint was closed and reopened: its old stream is gone.
                self.reset_partner(now, pid, StatusCode::EndpointClosed);
                let p = self.partner(pid);
                p.next_match = Seq::first(p.next_match.sesnum());
                p.next_frag = p.next_match;
                p.last_acked = p.next_match;
            }
            let p = self.partner(pid);
            // Adopt the requester's expectation of our stream when it is a new
            // incarnation to us, or when nothing of ours is in flight to it, unless the
            // request is older than acks we had since: with nothing in flight, all we
            // sent was received, so an expectation behind `next_send` in the same
            // stream (a resent, duplicated or late request) would make our next
            // messages look like duplicates and be dropped. A partner that reset its
            // side of our stream bumped its session number.
            let start = Seq(c.target_recv_seqnum_start);
            let reset = start.sesnum() != p.next_send.sesnum();
            let stale = !reset && start.before(p.next_send);
            if previous != Some(c.src_session_id) || (p.unacked.is_empty() && !stale) {
                p.next_send = start;
            }
            if previous != Some(c.src_session_id) {
                // A new incarnation numbers its acks from the start again.
                p.acknum_seen = 0;
            }
            p.session = Some(c.src_session_id);
            CONNECT_STATUS_SUCCESS
        } else {
            self.counters.connect_bad_key += 1;
            CONNECT_STATUS_BAD_KEY
        };
        let (stripe_boards, boards) = self.stripe_advert();
        let p = &self.partners[pid];
        let reply = Packet::Connect(Connect {
            dst_endpoint: c.src_endpoint,
            src_endpoint: self.me.endpoint,
            length: 16,
            lib_seqnum: 0,
            src_dst_peer_index: p.peer_index,
            src_session_id: c.src_session_id,
            app_key_or_target_session: if good_key { self.me.session } else { 0 },
            target_recv_seqnum_start: p.next_match.0,
            is_reply: true,
            connect_seqnum: c.connect_seqnum,
            status_code,
            link_mtu: self.cfg.wire.advertised_mtu(),
            extensions: self.cfg.wire.advertised_extensions(),
            stripe_boards,
        });
        let header = self.header_to(pid);
        let wire = p.wire;
        self.counters.send_connect_reply += 1;
        self.emit(&wire, header, reply, boards, true);
    }

    fn on_connect_reply(&mut self, now: Time, src: NicId, c: Connect, boards: &[u8]) {
        let Some(pid) = self.partners.lookup(src, c.src_endpoint) else {
            self.counters.drop_connect_reply_stale += 1;
            return;
        };
        if c.src_session_id != self.me.session {
            self.counters.drop_connect_reply_stale += 1;
            return;
        }
        let pending = self.partners[pid].connects.iter().copied().find(|&k| {
            matches!(self.requests.get(k), Some(Request::Connect(r)) if r.connect_seqnum == c.connect_seqnum)
        });
        let Some(k) = pending else {
            self.counters.drop_connect_reply_stale += 1;
            return;
        };
        // The handshake is the first round trip measured (a request sent once only).
        if let Some(Request::Connect(r)) = self.requests.get(k) {
            if r.resends == 0 {
                let rtt = now.saturating_sub(r.last_send);
                self.partner(pid).rtt.sample(rtt);
            }
        }
        let code = if c.status_code == CONNECT_STATUS_SUCCESS {
            let new_session = c.app_key_or_target_session;
            let p = &self.partners[pid];
            if p.session.is_some_and(|s| s != new_session) {
                // The old incarnation's state fails, but not the connect answered now;
                // the new one sends from the sequence number our request announced.
                let announced = self.partners[pid].next_match;
                self.partner(pid).connects.retain(|&x| x != k);
                self.reset_partner(now, pid, StatusCode::EndpointClosed);
                let p = self.partner(pid);
                p.next_match = announced;
                p.next_frag = announced;
                p.last_acked = announced;
            }
            let wire = self.cfg.wire.for_partner(c.link_mtu, c.extensions);
            let p = self.partner(pid);
            p.reverse_index = c.src_dst_peer_index;
            p.wire = wire;
            if p.session != Some(new_session) || p.unacked.is_empty() {
                p.next_send = Seq(c.target_recv_seqnum_start);
            }
            if p.session != Some(new_session) {
                // A new incarnation numbers its acks from the start again.
                p.acknum_seen = 0;
            }
            p.session = Some(new_session);
            self.learn_stripes(pid, boards);
            StatusCode::Success
        } else {
            StatusCode::BadKey
        };
        self.finish_connect(k, code);
        // Sends queued behind a reset can go now.
        self.release_throttled(now, pid);
    }

    /// Drops all state for a partner without telling it (MX `mx_disconnect`): pending
    /// sends and connects fail with `EndpointUnreachable`, its partial and unexpected
    /// messages are dropped, and a new connect is needed to talk again.
    pub fn disconnect(&mut self, now: Time, pid: PartnerId) {
        if self.partners.get(pid).is_some() {
            self.reset_partner(now, pid, StatusCode::EndpointUnreachable);
        }
    }

    /// A connect that needs no packets (oneself, shared memory): completes at once.
    pub(crate) fn connect_done_now(
        &mut self,
        pid: PartnerId,
        code: StatusCode,
        context: u64,
    ) -> ReqId {
        let k = self
            .requests
            .insert(Request::Connect(ConnectReq::new(pid, 0, context, 0, 0, 0)));
        self.requests.remove(k);
        self.complete(k, RequestKind::Connect, connect_status(code, pid, context));
        ReqId(k.0)
    }

    pub(crate) fn finish_connect(&mut self, k: Key, code: StatusCode) {
        let Some(Request::Connect(c)) = self.requests.remove(k) else {
            return;
        };
        self.partner(c.partner).connects.retain(|&x| x != k);
        self.complete(
            k,
            RequestKind::Connect,
            connect_status(code, c.partner, c.context),
        );
    }
}

/// A connect reports its context value as its match info too (MX's `mx_iconnect`
/// completes with the match info it was given, for `mx_test_any`).
fn connect_status(code: StatusCode, pid: PartnerId, context: u64) -> Status {
    Status {
        code,
        source: Some(pid),
        match_info: context,
        msg_length: 0,
        xfer_length: 0,
        context,
    }
}
