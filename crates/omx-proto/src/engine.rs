//! The engine of one endpoint: its owned parts, public calls, frame admission and
//! dispatch, and timeouts. Message classes live in `send.rs`, `recv.rs`, `pull/`,
//! `connect.rs`, `local.rs` and `onesided.rs`; each part of the state in its own module
//! (`requests`, `partner`, `unexpected`, `regions`, `outputs`, `timer`...).

use crate::config::EngineConfig;
use crate::counters::Counters;
use crate::local::LocalState;
use crate::onesided::OneSided;
use crate::outputs::Outputs;
use crate::partner::{Partner, PartnerTable};
use crate::peers::PeerTable;
use crate::pull::Pulls;
use crate::regions::Regions;
use crate::requests::Request;
use crate::slab::{Key, Slab};
use crate::timer::Timer;
use crate::transmit::{Payload, Transmit, MAX_HEADER_LEN};
use crate::types::*;
use crate::unexpected::UnexpectedQueue;
use crate::{LocalPull, LocalSend};
use bytes::Bytes;
use omx_wire::{DecodeError, DropReason, Extensions, Header, Packet};
use std::collections::VecDeque;

/// Identity of the local endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointParams {
    pub nic_id: NicId,
    pub endpoint: u8,
    /// Random per open, carried by peers in data packets to detect a reopened endpoint.
    pub session: u32,
    /// Application key that connecting peers must present.
    pub key: u32,
}

/// Loss-recovery state of one partner (see [`Engine::path_stats`]); times in ns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathStats {
    pub nic_id: NicId,
    pub endpoint: u8,
    /// Smoothed round trip of sequenced packets to their acks, and its variation.
    pub srtt: Time,
    pub rttvar: Time,
    /// Current retransmission timeout (back-off included).
    pub rto: Time,
    /// Smoothed round trip of pull blocks, and their current re-request timeout.
    pub pull_srtt: Time,
    pub pull_rto: Time,
    /// Pull blocks allowed in flight toward this partner.
    pub pull_blocks: u32,
    /// The wire extensions in use with this partner (both offered them).
    pub extensions: omx_wire::Extensions,
    /// Whether its frames carry checksum trailers.
    pub checksum: bool,
    /// Open links besides the boards' own that large messages are striped over.
    pub stripe_links: u8,
}

/// One output of the engine (see [`Engine::poll`]).
#[derive(Debug)]
pub enum Output {
    /// Read a local partner's memory into ours (the one-copy rendezvous), then report
    /// with `local_pull_done`.
    LocalPull(LocalPull),
    /// A message for a partner reached through shared memory.
    Local(LocalSend),
    /// Copy frame bytes into user memory, then report with `copy_done`.
    Copy(CopyOp),
    /// Apply a remote atomic to exposed memory, then report with `atomic_done`.
    Atomic(crate::atomic::AtomicJob),
    /// A frame to send.
    Transmit(Transmit),
    /// A request completed.
    Completion(Completion),
}

/// Sizes of the engine's internal queues, for memory-bound assertions and tools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub requests: usize,
    pub posted_recvs: usize,
    pub unexpected: usize,
    pub unexpected_bytes: usize,
    pub early_bytes: usize,
    pub unacked: usize,
    pub throttled: usize,
    pub partials: usize,
    pub pulls: usize,
    pub regions: usize,
    pub copies: usize,
    pub zombies: usize,
    pub transmits: usize,
    pub completions: usize,
    pub local_pulls: usize,
    pub local_out: usize,
    pub partners: usize,
}

/// One endpoint. Each part of its state is owned by a type with its own methods; the
/// fields left plain are endpoint-wide values.
pub struct Engine {
    pub(crate) cfg: EngineConfig,
    pub(crate) me: EndpointParams,
    pub(crate) mac: [u8; 6],
    pub(crate) peers: PeerTable,
    pub(crate) partners: PartnerTable,
    pub(crate) timer: Timer,
    pub(crate) requests: Slab<Request>,
    /// Receives not matched yet, in post order (matching order).
    pub(crate) posted: VecDeque<Key>,
    pub(crate) unexp: UnexpectedQueue,
    /// Bytes of early packets held by all partners (bounded by `early_max_bytes`).
    pub(crate) early_bytes: usize,
    pub(crate) regions: Regions,
    pub(crate) pulls: Pulls,
    pub(crate) outputs: Outputs,
    /// Eager sends completed before their ack (bounded by `zombie_max`).
    pub(crate) zombies: usize,
    pub(crate) one_sided: OneSided,
    pub(crate) local: LocalState,
    /// While a bundle is taken apart: partners owed an ack by the count rule, acked
    /// once at its end (each ack covers all before it: one for the bundle, not one
    /// per `not_acked_max` of its messages).
    pub(crate) acks_after_bundle: Option<Vec<PartnerId>>,
    pub counters: Counters,
}

impl Engine {
    pub fn new(mut cfg: EngineConfig, me: EndpointParams, peers: PeerTable) -> Self {
        if !cfg.stripe_boards.is_empty() && !cfg.wire.is_compat() {
            cfg.wire.extensions = cfg.wire.extensions.union(Extensions::STRIPE);
        }
        Engine {
            mac: mac_from_nic_id(me.nic_id),
            cfg,
            me,
            peers,
            partners: PartnerTable::default(),
            timer: Timer::default(),
            requests: Slab::default(),
            posted: VecDeque::new(),
            unexp: UnexpectedQueue::default(),
            early_bytes: 0,
            regions: Regions::default(),
            pulls: Pulls::default(),
            outputs: Outputs::default(),
            zombies: 0,
            one_sided: OneSided::default(),
            local: LocalState::default(),
            acks_after_bundle: None,
            counters: Counters::default(),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Bounds the unexpected queue's payload bytes (MX `MX_PARAM_UNEXP_QUEUE_MAX`):
    /// beyond it new unexpected messages are left unacked, so senders retransmit them
    /// later (slowed, never lost).
    pub fn set_unexpected_max(&mut self, bytes: usize) {
        self.cfg.unexp_max_bytes = bytes;
    }

    /// How many eager sends may complete before their ack (MX's zombie sends,
    /// `OMX_ZOMBIE_SEND`); 0: every send completes once its partner has it.
    pub fn set_zombie_max(&mut self, sends: usize) {
        self.cfg.zombie_max = sends;
    }

    pub fn params(&self) -> &EndpointParams {
        &self.me
    }

    pub fn peers(&self) -> &PeerTable {
        &self.peers
    }

    pub fn peers_mut(&mut self) -> &mut PeerTable {
        &mut self.peers
    }

    /// Adds (or renames) a peer; a full table gives up a peer that never told its name
    /// and that no partner uses (see [`PeerTable::add_or_evict`]).
    pub fn add_peer(&mut self, nic_id: NicId, name: Option<String>) -> Option<u16> {
        if self.peers.index_of(nic_id).is_some() || !self.peers.is_full() {
            return self.peers.add(nic_id, name);
        }
        let used: rustc_hash::FxHashSet<u16> = self.partners.iter().map(|p| p.peer_index).collect();
        self.peers
            .add_or_evict(nic_id, name, |i| used.contains(&i))
            .map(|(i, _)| i)
    }

    /// Remote board, endpoint index and session of a partner.
    pub fn partner_addr(&self, id: PartnerId) -> Option<(NicId, u8, Option<u32>)> {
        self.partners
            .get(id)
            .map(|p| (p.nic_id, p.endpoint, p.session))
    }

    /// The engine's next output for the runtime, one at a time, in the order they
    /// must be acted on: reads of a local partner's memory first (they unblock a
    /// sender that waits), then messages for local partners, payload copies, frames,
    /// and completions last (a request completes after everything it caused is out).
    /// Acting on one may queue more; `None` when nothing is left.
    pub fn poll(&mut self) -> Option<Output> {
        self.poll_with(false)
    }

    /// As [`Engine::poll`], but frames that may share a bundle stay queued, with the
    /// frames behind them (order is kept), so that frames queued later can join their
    /// bundle: for a caller that sends at a later flush (back-to-back sends). The next
    /// [`Engine::poll`] yields them.
    pub fn poll_holding_bundles(&mut self) -> Option<Output> {
        self.poll_with(true)
    }

    /// Whether [`Engine::poll_holding_bundles`] has anything to yield.
    pub fn has_unheld_output(&self) -> bool {
        self.outputs.has_work_besides_bundles() || self.outputs.completions_queued()
    }

    fn poll_with(&mut self, hold_bundles: bool) -> Option<Output> {
        if let Some(p) = self.outputs.pop_local_pull() {
            return Some(Output::LocalPull(p));
        }
        if let Some(m) = self.outputs.pop_local() {
            return Some(Output::Local(m));
        }
        if let Some(c) = self.outputs.pop_copy() {
            return Some(Output::Copy(c));
        }
        if let Some(a) = self.outputs.pop_atomic() {
            return Some(Output::Atomic(a));
        }
        if let Some((t, bundled)) = self.outputs.pop_transmit_bundled(hold_bundles) {
            self.counters.send_bundle += u64::from(bundled);
            return Some(Output::Transmit(t));
        }
        self.outputs.pop_completion().map(Output::Completion)
    }

    /// Completions only, leaving any other output for the next [`Engine::poll`]: for
    /// a caller that must hand over the completions already queued (completion
    /// order) without acting on frames or copies yet.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.outputs.pop_completion()
    }

    /// Whether the engine has output other than completions (frames, copies, local
    /// messages or pulls to execute).
    pub fn has_output_besides_completions(&self) -> bool {
        self.outputs.has_work()
    }

    pub fn has_output(&self) -> bool {
        self.outputs.has_work() || self.outputs.completions_queued()
    }

    pub fn stats(&self) -> QueueStats {
        let (transmits, completions, copies, local_out) = self.outputs.lens();
        QueueStats {
            requests: self.requests.len(),
            posted_recvs: self.posted.len(),
            unexpected: self.unexp.len(),
            unexpected_bytes: self.unexp.bytes(),
            early_bytes: self.early_bytes,
            unacked: self.partners.iter().map(|p| p.unacked.len()).sum(),
            throttled: self.partners.iter().map(|p| p.throttled.len()).sum(),
            partials: self.partners.iter().map(|p| p.partials.len()).sum(),
            pulls: self.pulls.len(),
            regions: self.regions.len(),
            copies,
            zombies: self.zombies,
            transmits,
            completions,
            local_pulls: self.local.pulls_in_progress(),
            local_out,
            partners: self.partners.len(),
        }
    }

    /// Round-trip estimates and pull pipeline of every partner, for the tools.
    pub fn path_stats(&self) -> Vec<PathStats> {
        self.partners
            .iter()
            .map(|p| PathStats {
                nic_id: p.nic_id,
                endpoint: p.endpoint,
                srtt: p.rtt.srtt,
                rttvar: p.rtt.rttvar,
                rto: p.rto(&self.cfg),
                pull_srtt: p.pull.rtt.srtt,
                pull_rto: p.pull.rto(&self.cfg),
                pull_blocks: p.pull.blocks_allowed(self.cfg.pull_blocks_outstanding),
                stripe_links: p.stripes.iter().filter(|s| !s.closed).count() as u8,
                extensions: p.wire.extensions,
                checksum: p.wire.checksum,
            })
            .collect()
    }

    /// Finds or creates the partner for a remote endpoint on a known peer.
    pub(crate) fn partner_for(&mut self, nic_id: NicId, endpoint: u8) -> Option<PartnerId> {
        if let Some(id) = self.partners.lookup(nic_id, endpoint) {
            return Some(id);
        }
        let peer_index = self.peers.index_of(nic_id)?;
        let wire = self.unagreed_wire();
        Some(
            self.partners
                .add(Partner::new(nic_id, endpoint, peer_index, wire)),
        )
    }

    /// The partner for a connect request from a remote endpoint. A new one is created
    /// evictable; when the table holds `partners_max` partners, the oldest one still
    /// evictable (it only ever sent connect requests) gives its slot up
    /// (`partner_evicted`), or the request is dropped (`drop_partner_full`).
    pub(crate) fn partner_for_incoming(
        &mut self,
        now: Time,
        nic_id: NicId,
        endpoint: u8,
    ) -> Option<PartnerId> {
        if let Some(id) = self.partners.lookup(nic_id, endpoint) {
            return Some(id);
        }
        if self.partners.len() < self.cfg.partners_max {
            let id = self.partner_for(nic_id, endpoint)?;
            let p = self.partner(id);
            p.evictable = true;
            p.last_heard = now;
            self.partners.queue_evictable(id);
            return Some(id);
        }
        let peer_index = self.peers.index_of(nic_id)?;
        let mut p = Partner::new(nic_id, endpoint, peer_index, self.unagreed_wire());
        p.evictable = true;
        p.last_heard = now;
        let Some(id) = self.partners.replace_oldest_evictable(p) else {
            self.counters.drop_partner_full += 1;
            return None;
        };
        self.counters.partner_evicted += 1;
        Some(id)
    }

    /// A new partner's frame sizes until a connect tells its own.
    fn unagreed_wire(&self) -> omx_wire::WireConfig {
        self.cfg.wire.unadvertised()
    }

    /// The configuration frames to endpoint `endpoint` of `nic` are sent with: the one
    /// agreed with that partner, or the original's before a CONNECT told us more.
    pub(crate) fn wire_to(&self, nic: NicId, endpoint: u8) -> omx_wire::WireConfig {
        self.partners
            .lookup(nic, endpoint)
            .map_or_else(|| self.unagreed_wire(), |id| self.partners[id].wire)
    }

    /// Largest frame (Ethernet header included) the endpoint `endpoint` of board
    /// `dst_mac` takes from us: the size agreed with it, or the size assumed before a
    /// connect. Bundles to it must not exceed it.
    pub fn frame_limit(&self, dst_mac: [u8; 6], endpoint: u8) -> usize {
        let wire = self.wire_to(nic_id_from_mac(dst_mac), endpoint);
        wire.mtu as usize + omx_wire::ETH_HEADER_LEN
    }

    /// The frame sizes agreed with a partner (see `Partner::wire`).
    pub fn partner_wire(&self, id: PartnerId) -> Option<omx_wire::WireConfig> {
        self.partners.get(id).map(|p| p.wire)
    }

    /// The configuration to decode `frame` with: a medium fragment's offset and a pull
    /// block's bounds depend on the sizes agreed with its sender; other frames decode
    /// within our own (largest) sizes and are checked per partner afterwards. Checksum
    /// trailers are required only from senders whose link uses them (a peer without
    /// the extension sends none); frames that carry one are verified whatever the link.
    fn wire_for_frame(&self, frame: &[u8]) -> omx_wire::WireConfig {
        let t = frame
            .get(omx_wire::COMMON_HEADER_LEN)
            .map(|&t| omx_wire::type_of(t));
        let sized = t.is_some_and(|t| {
            t == omx_wire::PacketType::Medium as u8 || t == omx_wire::PacketType::Pull as u8
        });
        if !sized && !self.cfg.wire.checksum {
            return self.cfg.wire;
        }
        // A connect needs no trailer even from a partner agreed on checksums: the
        // requester may not know yet (our reply was lost). Its seal protects it.
        if t == Some(omx_wire::PacketType::Connect as u8) {
            return self.cfg.wire.with_checksum(false);
        }
        let partner = frame.get(6..12).zip(frame.get(18)).and_then(|(mac, &ep)| {
            let mac: [u8; 6] = mac.try_into().expect("6 bytes");
            self.partners.lookup(nic_id_from_mac(mac), ep)
        });
        // (Pull replies name no sender endpoint: they decode within the larger sizes
        // of a link without trailers, and are verified if they carry one.)
        match partner {
            Some(id) if sized => self.partners[id].wire,
            Some(id) => self.cfg.wire.with_checksum(self.partners[id].wire.checksum),
            None if sized => self.cfg.wire,
            None => self.cfg.wire.with_checksum(false),
        }
    }

    pub(crate) fn partner(&mut self, id: PartnerId) -> &mut Partner {
        &mut self.partners[id]
    }

    pub(crate) fn header_to(&self, id: PartnerId) -> Header {
        let p = &self.partners[id];
        Header {
            dst_mac: mac_from_nic_id(p.nic_id),
            src_mac: self.mac,
            ethertype: self.cfg.wire.ethertype,
            dst_src_peer_index: p.reverse_index,
        }
    }

    /// Encodes and queues one frame under `wire`, the configuration agreed with its
    /// destination: its extensions decide the latency flag and the checksum trailer (a
    /// peer that advertised none gets the original's frame byte for byte).
    pub(crate) fn emit(
        &mut self,
        wire: &omx_wire::WireConfig,
        header: Header,
        packet: Packet,
        payload: Payload,
        urgent: bool,
    ) {
        self.emit_on(0, wire, header, packet, payload, urgent)
    }

    /// As [`Engine::emit`], on link `path` (see `stripe.rs`): a PULL or PULL_REPLY on
    /// a path other than 0 takes its striped type.
    pub(crate) fn emit_on(
        &mut self,
        path: u8,
        wire: &omx_wire::WireConfig,
        header: Header,
        packet: Packet,
        payload: Payload,
        urgent: bool,
    ) {
        let mut buf = [0u8; MAX_HEADER_LEN];
        match omx_wire::encode_header(&header, &packet, wire, &mut buf) {
            Ok(n) => {
                let t = omx_wire::COMMON_HEADER_LEN;
                if urgent && wire.uses(omx_wire::Extensions::LATENCY_FLAG) {
                    buf[t] |= omx_wire::LATENCY_FLAG;
                }
                if path != 0 {
                    let striped = omx_wire::striped_type(omx_wire::type_of(buf[t]));
                    debug_assert!(striped.is_some(), "only pulls are striped: {packet:?}");
                    buf[t] = (buf[t] & !omx_wire::type_of(buf[t])) | striped.unwrap_or(0);
                }
                let mut t = Transmit::new(buf, n, payload, urgent);
                t.path = path;
                let t = if self.cfg.send_bundles {
                    t.bundled_to(wire)
                } else {
                    t
                };
                self.outputs.transmit(t);
            }
            // Only reachable through a field that does not fit the wire mode; the callers
            // validate lengths against the mode, so this is a bug worth surfacing in tests.
            Err(e) => debug_assert!(false, "encode failed: {e:?} for {packet:?}"),
        }
    }

    pub(crate) fn complete(&mut self, req: Key, kind: RequestKind, status: Status) {
        self.complete_with(req, kind, status, None)
    }

    pub(crate) fn complete_with(
        &mut self,
        req: Key,
        kind: RequestKind,
        status: Status,
        mem: Option<MemHandle>,
    ) {
        let source_session = self.source_session(status.source);
        self.outputs.complete(Completion {
            req: ReqId(req.0),
            kind,
            status,
            mem,
            source_session,
        });
    }

    /// The current session of a completion's source partner (0: none or unknown).
    #[inline]
    pub(crate) fn source_session(&self, source: Option<PartnerId>) -> u32 {
        source
            .and_then(|p| self.partners.get(p))
            .and_then(|p| p.session)
            .unwrap_or(0)
    }

    /// Queues a copy for receive `req`, counted among the receive's pending copies
    /// unless the caller makes it as it takes it (a message up to
    /// `inline_copy_msg_max`: not reported).
    pub(crate) fn new_copy(&mut self, req: Key, src: Bytes, dst: MemHandle, dst_offset: u64) {
        let mut msg_length = 0;
        let mut report = true;
        if let Some(Request::Recv(r)) = self.requests.get_mut(req) {
            if let Some(a) = r.active.as_mut() {
                msg_length = a.msg_length;
                report = msg_length > self.cfg.inline_copy_msg_max;
                a.copies_pending += u32::from(report);
            }
        }
        self.outputs
            .copy(req, src, dst, dst_offset, msg_length, report);
    }

    /// A posted request not completed yet: its kind, its context, and for a send
    /// whether its data was captured at post time (so its buffer is free already).
    pub fn request_info(&self, req: ReqId) -> Option<(RequestKind, u64, bool)> {
        Some(match self.requests.get(Key(req.0))? {
            Request::Send(s) => (
                RequestKind::Send,
                s.context,
                matches!(s.data, SendData::Eager(_)),
            ),
            Request::Recv(r) => (RequestKind::Recv, r.context, false),
            Request::Connect(c) => (RequestKind::Connect, c.context, false),
        })
    }

    /// The runtime finished a copy action.
    pub fn copy_done(&mut self, now: Time, id: CopyId) {
        let Some(req) = self.outputs.copy_done(id) else {
            return;
        };
        if let Some(Request::Recv(r)) = self.requests.get_mut(req) {
            if let Some(a) = r.active.as_mut() {
                a.copies_pending -= 1;
            }
        }
        self.try_finish_recv(now, req);
    }

    /// Processes one received frame (a complete Ethernet frame, shared so that copy
    /// actions can reference its payload without copying it).
    pub fn handle_frame(&mut self, now: Time, frame: Bytes) {
        if omx_wire::peek::is_bundle(&frame) && self.cfg.wire.uses(Extensions::BUNDLE) {
            return self.handle_bundle(now, frame);
        }
        let Some((decoded, src, peer_index)) = self.admit_frame(&frame) else {
            return;
        };
        let header = decoded.header;
        let packet = decoded.packet;
        let payload = frame.slice_ref(decoded.payload);
        if decoded.striped {
            return self.on_striped(now, header, packet, payload);
        }
        // Connect and pull replies are resolved by address or handle; everything else
        // must name us by the index we announced.
        let checks_index = !matches!(
            packet,
            Packet::Connect(_) | Packet::PullReply(_) | Packet::NackLib(_) | Packet::NackMcp(_)
        );
        if checks_index && header.dst_src_peer_index != peer_index {
            self.counters.drop_bad_peer_index += 1;
            return;
        }
        match packet {
            Packet::Tiny(_)
            | Packet::Small(_)
            | Packet::Medium(_)
            | Packet::Rndv(_)
            | Packet::Notify(_) => self.on_seq_packet(now, src, packet, frame.len(), payload),
            Packet::Truc(t) => self.on_truc(now, src, t),
            Packet::Connect(c) => self.on_connect(now, src, c, &payload),
            Packet::Pull(p) => self.on_pull(now, src, p),
            Packet::PullReply(r) => self.on_pull_reply(now, r, payload),
            Packet::NackLib(n) => self.on_nack_lib(now, src, n),
            Packet::NackMcp(n) => self.on_nack_mcp(now, n),
            // Discovery frames belong to the board, not to an endpoint.
            Packet::Raw | Packet::HostQuery(_) | Packet::HostReply(_) => {
                self.counters.drop_bad_endpoint += 1
            }
        }
    }

    /// The frames of a bundle, each handled as if it had arrived alone. An item must
    /// come from the bundle's sender and be addressed to us (its own header decides:
    /// the bundle header has no checksum), and bundles do not nest.
    fn handle_bundle(&mut self, now: Time, frame: Bytes) {
        let Ok(items) = omx_wire::bundle_items(&frame) else {
            self.counters.drop_bad_bundle += 1;
            return;
        };
        self.counters.recv_bundle += 1;
        let outer = self.acks_after_bundle.replace(Vec::new());
        for r in items {
            let inner = frame.slice(r);
            let ours = inner.get(6..12) == frame.get(6..12)
                && !omx_wire::peek::is_bundle(&inner)
                && omx_wire::peek::dst_endpoint(&inner) == Some(self.me.endpoint);
            if !ours {
                self.counters.drop_bad_bundle += 1;
                continue;
            }
            self.handle_frame(now, inner);
        }
        let owed = std::mem::replace(&mut self.acks_after_bundle, outer).unwrap_or_default();
        for pid in owed {
            // Unless something sent since (a piggybacked ack) covered it.
            let owes = self
                .partners
                .get(pid)
                .is_some_and(|p| p.next_frag != p.last_acked);
            if owes {
                self.send_ack(pid);
            }
        }
    }

    /// Processes a received frame the caller only lends (a receive-ring slot) when its
    /// payload goes straight to user memory: pull replies. `place(destination, byte
    /// offset, payload)` is called during the call to copy the payload; the engine
    /// keeps no reference to the frame, and the receive needs no copy action. Returns
    /// `false`, having done nothing, for every other frame, which must go through
    /// [`Engine::handle_frame`].
    pub fn handle_frame_in_place(
        &mut self,
        now: Time,
        frame: &[u8],
        place: &mut dyn FnMut(MemHandle, u64, &[u8]),
    ) -> bool {
        // Everything else (bundles included) takes the owned path.
        if !omx_wire::peek::is_pull_reply(frame) {
            return false;
        }
        // Pull replies are resolved by handle, not by peer index: admission is all.
        let Some((decoded, _, _)) = self.admit_frame(frame) else {
            return true;
        };
        let Packet::PullReply(r) = decoded.packet else {
            return false;
        };
        self.on_pull_reply_in_place(now, r, decoded.payload, place);
        true
    }

    /// Whether a pull is under way (pull replies are expected).
    pub fn pulling(&self) -> bool {
        !self.pulls.is_empty()
    }

    /// The pull replies most likely to arrive next, in order: the missing frames of
    /// each pull's blocks in flight, oldest block first (a sender answers each pull
    /// request with its frames in order, and the requests in the order they came).
    /// `f(destination, byte offset, payload length)` returns false to stop. A guess
    /// only: a caller receiving into these places must still check each frame.
    pub fn expected_pull_replies(&self, f: &mut dyn FnMut(MemHandle, u64, usize) -> bool) {
        for pull in self.pulls.iter() {
            if !pull.expected_replies(f) {
                return;
            }
        }
    }

    /// A pull reply the caller receives straight into user memory, from its first
    /// [`omx_wire::PULL_REPLY_HEAD_LEN`] bytes (`head`; the frame is `frame_len` bytes
    /// long and still queued). `place(destination, byte offset, length)` must receive
    /// the frame, its payload going there, during the call, and say whether the whole
    /// frame arrived as peeked. `Some(placed)` when the reply was one to place; `None`,
    /// having changed nothing, when not (bad header, unknown sender or pull,
    /// duplicate...): the caller then takes the frame whole through
    /// [`Engine::handle_frame`], which counts the drop.
    pub fn handle_pull_reply_direct(
        &mut self,
        now: Time,
        head: &[u8],
        frame_len: usize,
        place: &mut dyn FnMut(MemHandle, u64, usize) -> bool,
    ) -> Option<bool> {
        let (header, r) = omx_wire::decode_pull_reply_head(head, frame_len, &self.cfg.wire).ok()?;
        self.peers.index_of(nic_id_from_mac(header.src_mac))?;
        self.on_pull_reply_direct(now, r, place)
    }

    /// Decodes a received frame and checks that it comes from a known peer: the
    /// admission every frame passes, whoever owns its bytes. `None` when it is dropped
    /// (counted); else the frame, its sender and the sender's peer index.
    fn admit_frame<'f>(&mut self, frame: &'f [u8]) -> Option<(omx_wire::Decoded<'f>, NicId, u16)> {
        let decoded = match omx_wire::decode(frame, &self.wire_for_frame(frame)) {
            Ok(d) => d,
            Err(e) => {
                self.count_decode_error(e);
                return None;
            }
        };
        let src = nic_id_from_mac(decoded.header.src_mac);
        if decoded.striped {
            // From one of a partner's other boards: checked by `on_striped`.
            return Some((decoded, src, omx_wire::PEER_INDEX_NONE));
        }
        let known = self.peers.index_of(src).or_else(|| {
            // A connect request from a board we have not discovered yet (it knew us
            // first) adds it while the table has room, instead of the original's drop:
            // first contact then takes one round trip, not a discovery period. Anything
            // else from a stranger, or once the table is full, is dropped.
            let request = matches!(decoded.packet, Packet::Connect(c) if !c.is_reply);
            (request && !self.peers.is_full() && is_unicast_nic(src))
                .then(|| self.peers.add(src, None))
                .flatten()
        });
        let Some(peer_index) = known else {
            self.counters.drop_bad_peer_addr += 1;
            return None;
        };
        Some((decoded, src, peer_index))
    }

    fn count_decode_error(&mut self, e: DecodeError) {
        let c = &mut self.counters;
        match e.drop_reason() {
            DropReason::BadHeaderDataLen => c.drop_bad_header_datalen += 1,
            DropReason::BadDataLen => c.drop_bad_datalen += 1,
            DropReason::BadSkbLen => c.drop_bad_skblen += 1,
            DropReason::UnknownType => c.drop_unknown_type += 1,
            DropReason::InvalidType => c.drop_invalid_type += 1,
            DropReason::BadField | DropReason::WrongEtherType => c.drop_bad_field += 1,
            DropReason::Checksum => c.drop_checksum += 1,
        }
    }

    /// Earliest time at which [`Engine::handle_timeout`] has work to do.
    pub fn poll_timeout(&self) -> Option<Time> {
        // The hint may be early (a deadline since cleared), never late: checked in every
        // debug-built test, the simulator's loss and reordering runs included.
        debug_assert!(self
            .earliest_deadline()
            .is_none_or(|d| self.timer.covers(d)));
        self.timer.next()
    }

    /// Arms the engine's timer for a deadline at `at` (see [`Timer`]).
    pub(crate) fn hint_deadline(&mut self, at: Time) {
        self.timer.arm(at);
    }

    fn earliest_deadline(&self) -> Option<Time> {
        let partners = self
            .partners
            .iter()
            .flat_map(|p| [p.ack_deadline, p.resend_deadline])
            .flatten();
        let pulls = self
            .pulls
            .iter()
            .filter_map(|pull| pull.deadline(&self.partners[pull.partner]));
        partners.chain(pulls).min()
    }

    pub fn handle_timeout(&mut self, now: Time) {
        for i in 0..self.partners.len() {
            let id = PartnerId(i as u32);
            if self.partners[id].ack_deadline.is_some_and(|d| d <= now) {
                self.send_ack(id);
            }
            if self.partners[id].resend_deadline.is_some_and(|d| d <= now) {
                self.resend_overdue(now, id);
            }
        }
        self.pull_timeouts(now);
        self.timer.reset(self.earliest_deadline());
    }

    /// Flushes pending delayed acks (endpoint close).
    pub fn flush_acks(&mut self) {
        for i in 0..self.partners.len() {
            let id = PartnerId(i as u32);
            if self.partners[id].ack_deadline.is_some() {
                self.send_ack(id);
            }
        }
    }

    /// Frames to peers that are addressed to a board but not to this engine's index.
    pub(crate) fn for_me(&mut self, dst_endpoint: u8) -> bool {
        if dst_endpoint != self.me.endpoint {
            self.counters.drop_bad_endpoint += 1;
            return false;
        }
        true
    }

    pub(crate) fn session_ok(&mut self, session: u32) -> bool {
        if session != self.me.session {
            self.counters.drop_bad_session += 1;
            return false;
        }
        true
    }

    /// Nothing is accepted from a partner before a connect succeeded in either direction.
    pub(crate) fn known_partner(
        &mut self,
        now: Time,
        src: NicId,
        endpoint: u8,
    ) -> Option<PartnerId> {
        match self.partners.lookup(src, endpoint) {
            Some(id) if self.partners[id].session.is_some() => {
                let p = &mut self.partners[id];
                p.last_heard = now;
                p.probes = 0;
                p.evictable = false;
                Some(id)
            }
            _ => {
                self.counters.drop_not_connected += 1;
                None
            }
        }
    }
}
