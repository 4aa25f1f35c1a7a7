//! Per-remote-endpoint state: sessions, the two sequence streams, retransmission queue,
//! out-of-order ("early") packets and partially received medium messages.

use crate::rtt::RttEstimator;
use crate::seqnum::Seq;
use crate::slab::Key;
use crate::types::{NicId, PartnerId, Reach, Time};
use bytes::Bytes;
use omx_wire::{Medium, Msg, Notify, Packet, Rndv};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;

/// A seq-consuming packet kept until acked, re-encoded on each (re)send so that its
/// piggybacked ack is current.
#[derive(Clone, Debug)]
pub(crate) enum SentPacket {
    Tiny(Msg, Bytes),
    Small(Msg, Bytes),
    Medium(Medium, Bytes),
    Rndv(Rndv),
    Notify(Notify),
}

impl SentPacket {
    /// Whether the frame may have shared a bundle (one frame, no fragments).
    pub(crate) fn may_be_bundled(&self) -> bool {
        !matches!(self, SentPacket::Medium(..))
    }
}

#[derive(Debug)]
pub(crate) struct SendRecord {
    pub seq: Seq,
    pub packet: SentPacket,
    /// The send request still waiting for this ack, if any (early-completed sends and
    /// notifies have none).
    pub req: Option<Key>,
    /// Counted in the endpoint's zombie total until acked.
    pub zombie: bool,
    /// First transmission: the resend budget runs from here.
    pub first_send: Time,
    pub last_send: Time,
    pub resends: u32,
    pub resends_max: u32,
}

/// A packet received ahead of its turn, decoded once on arrival. `len`, its frame's
/// size, is what it costs against the early-packet budget.
#[derive(Debug)]
pub(crate) struct EarlyPacket {
    pub packet: Packet,
    pub payload: Bytes,
    pub len: usize,
}

/// Where the fragments of a partially received medium message go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PartialTarget {
    Recv(Key),
    Unexpected(Key),
}

#[derive(Debug)]
pub(crate) struct PartialMedium {
    pub seq: Seq,
    pub target: PartialTarget,
    pub msg_length: u32,
    pub match_info: u64,
    pub frags_seen: [u64; 4],
    pub received: u32,
}

impl PartialMedium {
    /// Whether a fragment before `i` is still missing (fragments are sent in order, so
    /// it was lost).
    pub fn hole_before(&self, i: u8) -> bool {
        let (w, b) = ((i / 64) as usize, i % 64);
        let full_words = self.frags_seen[..w].iter().any(|&x| x != u64::MAX);
        let below = (1u64 << b) - 1;
        full_words || self.frags_seen[w] & below != below
    }

    /// Marks fragment `i` seen; false if it was already.
    pub fn mark(&mut self, i: u8) -> bool {
        let (w, b) = ((i / 64) as usize, i % 64);
        let fresh = self.frags_seen[w] & (1 << b) == 0;
        self.frags_seen[w] |= 1 << b;
        fresh
    }
}

/// Fixed-point unit of [`PullPath::window`].
const WINDOW_UNIT: u32 = 256;

/// The pull exchanges on one path (link) to a partner: the requests awaited, their
/// round trip and the blocks allowed in flight.
pub(crate) struct PullPath {
    /// Round trips of pull requests (to their first reply): the re-request timeout.
    pub rtt: RttEstimator,
    /// Last pull reply accepted on this path: its block timeouts run from here.
    pub heard: Time,
    /// Blocks timing out before this instant belong to the last timeout round (one
    /// silence): they are asked again but the round is not counted twice.
    pub round_ends: Time,
    /// Pull requests sent on this path not yet answered, in request order.
    pub awaited: VecDeque<crate::pull::Run>,
    /// Pull blocks in flight allowed on this path, in 1/256 blocks: halved on burst
    /// losses, grown by one block per window of completed blocks.
    pub window: u32,
    /// Last time the window was cut (at most one cut per round trip).
    pub window_cut: Time,
}

impl Default for PullPath {
    fn default() -> Self {
        PullPath {
            rtt: RttEstimator::default(),
            heard: 0,
            round_ends: 0,
            awaited: VecDeque::new(),
            window: u32::MAX,
            window_cut: 0,
        }
    }
}

impl PullPath {
    /// The re-request timeout of pull blocks now.
    pub fn rto(&self, cfg: &crate::EngineConfig) -> Time {
        self.rtt
            .rto(cfg.pull_rto_min, cfg.rto_initial, cfg.pull_resend_delay)
    }

    /// Pull blocks allowed in flight on this path (at least one).
    pub fn blocks_allowed(&self, configured: u32) -> u32 {
        let configured = configured.max(1);
        if self.window == u32::MAX {
            return configured;
        }
        (self.window / WINDOW_UNIT).clamp(1, configured)
    }

    /// A burst of lost pull replies: halve the blocks in flight (once per round trip).
    pub fn cut_window(&mut self, now: Time, configured: u32, rtt: Time) -> bool {
        if now < self.window_cut.saturating_add(rtt) && self.window_cut != 0 {
            return false;
        }
        let current = self.blocks_allowed(configured) * WINDOW_UNIT;
        self.window = (current / 2).max(WINDOW_UNIT);
        self.window_cut = now.max(1);
        true
    }

    /// A pull block completed: grow the window by about one block per window of blocks.
    pub fn grow_window(&mut self, configured: u32) {
        if self.window == u32::MAX {
            return;
        }
        let blocks = self.window / WINDOW_UNIT;
        self.window += WINDOW_UNIT / blocks.max(1);
        if self.window >= configured.max(1) * WINDOW_UNIT {
            self.window = u32::MAX;
        }
    }
}

pub(crate) struct Partner {
    pub nic_id: NicId,
    pub endpoint: u8,
    /// Our peer-table index of the remote board.
    pub peer_index: u16,
    /// The remote's index of us (goes in the common header); learned from CONNECT.
    pub reverse_index: u16,
    /// The remote endpoint's session, once a connect succeeded in either direction.
    pub session: Option<u32>,

    // Send direction.
    pub next_send: Seq,
    pub unacked: VecDeque<SendRecord>,
    /// Sends waiting for a sequence number (too many unacked).
    pub throttled: VecDeque<Key>,
    pub resend_deadline: Option<Time>,
    /// Round trips of sequenced packets to their acks: the retransmission timeout.
    pub rtt: RttEstimator,
    /// Last ack that acknowledged something: the stream's timer restarts there.
    pub acked_at: Time,
    /// When a packet of the stream was last resent: records sent before it give no
    /// round-trip sample, even acked without a resend of their own (they may have
    /// waited at the receiver behind the resent one, and an ack can cover them apart).
    pub resent_at: Time,
    /// Loss recovery in progress: until everything sent before it began (below the
    /// sequence number) is acked, each ack that advances resends the next packet at
    /// once if it was sent before the recovery began (NewReno's partial acks), so
    /// several losses in one window cost a round trip each, not a timeout each.
    pub recovery: Option<(Seq, Time)>,
    /// Explicit acks that did not advance while packets were unacked (the receiver saw
    /// a gap): they trigger a fast retransmit of the oldest packet.
    pub dup_acks: u32,
    /// Pull requests, replies and window on the link between our boards (path 0).
    pub pull: PullPath,
    /// The other links to this partner (`OMX_STRIPE`), path 1 onward: empty unless
    /// both sides offered striping and have several boards. Replaced only through
    /// [`PartnerTable::set_stripes`] (which indexes them).
    pub stripes: Vec<crate::stripe::StripePath>,
    /// Connect requests in flight, oldest first.
    pub connects: VecDeque<Key>,
    pub connect_seqnum: u8,

    // Receive direction.
    pub next_match: Seq,
    /// All sequence numbers below this were completely received (the ack value).
    pub next_frag: Seq,
    pub last_acked: Seq,
    pub ack_deadline: Option<Time>,
    pub acknum_sent: u32,
    pub acknum_seen: u32,
    pub partials: Vec<PartialMedium>,
    /// Out-of-order packets by sequence number, kept decoded until their turn.
    pub early: HashMap<u16, Vec<EarlyPacket>>,
    pub early_bytes: usize,

    // Liveness while rendezvous sends wait for notifies.
    pub last_heard: Time,
    pub probes: u32,
    pub probe_sent: Time,
    /// Network, self, or shared memory.
    pub reach: Reach,
    /// Cross-process copies to this partner were refused: large messages are pushed.
    pub no_cma: bool,
    /// Memory descriptions of its local rendezvous announcements, by (region, use).
    pub local_regions: HashMap<(u8, u8), Bytes>,
    /// Created by a connect request and nothing else since: the application cannot
    /// know this partner, and it holds no state, so it may be evicted when the table is
    /// full (a flood of connect requests from many sources).
    pub evictable: bool,
    /// Frame sizes used with this partner: the smaller of both boards' sizes, agreed in
    /// the connect handshake (until then, the size assumed for a peer that does not
    /// advertise one). Fragments, pull replies and eager limits follow it.
    pub wire: omx_wire::WireConfig,
}

impl Partner {
    pub fn new(nic_id: NicId, endpoint: u8, peer_index: u16, wire: omx_wire::WireConfig) -> Self {
        Partner {
            nic_id,
            endpoint,
            peer_index,
            reverse_index: omx_wire::PEER_INDEX_NONE,
            session: None,
            next_send: Seq::first(0),
            unacked: VecDeque::new(),
            throttled: VecDeque::new(),
            resend_deadline: None,
            rtt: RttEstimator::default(),
            acked_at: 0,
            resent_at: 0,
            recovery: None,
            dup_acks: 0,
            pull: PullPath::default(),
            stripes: Vec::new(),
            connects: VecDeque::new(),
            connect_seqnum: 0,
            next_match: Seq::first(0),
            next_frag: Seq::first(0),
            last_acked: Seq::first(0),
            ack_deadline: None,
            acknum_sent: 0,
            acknum_seen: 0,
            partials: Vec::new(),
            early: HashMap::default(),
            early_bytes: 0,
            last_heard: 0,
            probes: 0,
            probe_sent: 0,
            reach: Reach::Network,
            no_cma: false,
            local_regions: HashMap::default(),
            evictable: false,
            wire,
        }
    }

    /// Recomputes the ack value: everything below the oldest partial medium (or below the
    /// next message to match) is complete.
    pub fn refresh_next_frag(&mut self) {
        let base = self.next_match;
        self.next_frag = self
            .partials
            .iter()
            .map(|p| p.seq)
            .max_by_key(|s| base.since(*s))
            .unwrap_or(base);
    }

    pub fn unacked_in_flight(&self) -> u16 {
        self.next_send.since(
            self.unacked
                .front()
                .map(|r| r.seq)
                .unwrap_or(self.next_send),
        )
    }

    /// Holds nothing in flight in either direction.
    pub fn is_idle(&self) -> bool {
        self.unacked.is_empty()
            && self.throttled.is_empty()
            && self.connects.is_empty()
            && self.partials.is_empty()
            && self.early.is_empty()
            && self.local_regions.is_empty()
            && self.reach == Reach::Network
    }

    /// The oldest unacked record if `upto` acks it.
    pub fn pop_acked(&mut self, upto: Seq) -> Option<SendRecord> {
        if self.unacked.front()?.seq.before(upto) {
            self.unacked.pop_front()
        } else {
            None
        }
    }

    /// The retransmission timeout of sequenced packets now.
    pub fn rto(&self, cfg: &crate::EngineConfig) -> Time {
        self.rtt.rto(cfg.rto_min, cfg.rto_initial, cfg.resend_delay)
    }

    /// The pull state of path `path` (0: the endpoint's own board; a path the partner
    /// does not have falls back to 0).
    pub fn path(&self, path: u8) -> &PullPath {
        match path {
            0 => &self.pull,
            i => self
                .stripes
                .get(i as usize - 1)
                .map_or(&self.pull, |s| &s.pull),
        }
    }

    pub fn path_mut(&mut self, path: u8) -> &mut PullPath {
        match path {
            0 => &mut self.pull,
            i => match self.stripes.get_mut(i as usize - 1) {
                Some(s) => &mut s.pull,
                None => &mut self.pull,
            },
        }
    }

    pub fn arm_resend(&mut self, at: Time) {
        self.resend_deadline = Some(self.resend_deadline.map_or(at, |d| d.min(at)));
    }
}

/// The partners of an endpoint by id and by address, and the order in which the ones
/// created by connect requests alone may be evicted.
#[derive(Default)]
pub(crate) struct PartnerTable {
    list: Vec<Partner>,
    by_addr: HashMap<(NicId, u8), PartnerId>,
    /// The partners by one of their other boards and their endpoint (striped frames
    /// come from those boards).
    by_stripe: HashMap<(NicId, u8), PartnerId>,
    /// Evictable partners, oldest first (entries that stopped being evictable are
    /// skipped when met): eviction costs O(1) amortized under a connect flood.
    evict_queue: VecDeque<u32>,
}

impl PartnerTable {
    /// The partner for endpoint `endpoint` of board `nic_id`, if one exists.
    pub fn lookup(&self, nic_id: NicId, endpoint: u8) -> Option<PartnerId> {
        self.by_addr.get(&(nic_id, endpoint)).copied()
    }

    pub fn get(&self, id: PartnerId) -> Option<&Partner> {
        self.list.get(id.0 as usize)
    }

    /// The partner endpoint `endpoint` whose other boards include `nic_id` (striped
    /// frames come from those): once per striped pull block.
    pub fn lookup_stripe(&self, nic_id: NicId, endpoint: u8) -> Option<PartnerId> {
        self.by_stripe.get(&(nic_id, endpoint)).copied()
    }

    /// Sets the partner's striping paths (the only way they change, so that
    /// [`PartnerTable::lookup_stripe`] finds it by them).
    pub fn set_stripes(&mut self, id: PartnerId, paths: Vec<crate::stripe::StripePath>) {
        self.forget_stripes(id.0 as usize);
        let p = &mut self.list[id.0 as usize];
        for s in &paths {
            self.by_stripe.insert((s.remote, p.endpoint), id);
        }
        p.stripes = paths;
    }

    fn forget_stripes(&mut self, i: usize) {
        let p = &self.list[i];
        for s in &p.stripes {
            let key = (s.remote, p.endpoint);
            if self.by_stripe.get(&key) == Some(&PartnerId(i as u32)) {
                self.by_stripe.remove(&key);
            }
        }
    }

    /// Adds a partner (for an address not in the table).
    pub fn add(&mut self, p: Partner) -> PartnerId {
        let id = PartnerId(self.list.len() as u32);
        self.by_addr.insert((p.nic_id, p.endpoint), id);
        self.list.push(p);
        id
    }

    /// Queues a partner for eviction (it was just created by a connect request).
    pub fn queue_evictable(&mut self, id: PartnerId) {
        self.evict_queue.push_back(id.0);
    }

    /// Gives the slot of the oldest evictable idle partner to `p` (evictable too);
    /// `None` when there is none.
    pub fn replace_oldest_evictable(&mut self, p: Partner) -> Option<PartnerId> {
        // The oldest partner that is still evictable; the others leave the queue.
        let mut victim = None;
        for _ in 0..self.evict_queue.len() {
            let Some(i) = self.evict_queue.pop_front() else {
                break;
            };
            let old = &self.list[i as usize];
            if !old.evictable {
                continue;
            }
            if old.is_idle() {
                victim = Some(i as usize);
                break;
            }
            self.evict_queue.push_back(i);
        }
        let i = victim?;
        self.forget_stripes(i);
        let old = &self.list[i];
        self.by_addr.remove(&(old.nic_id, old.endpoint));
        let id = PartnerId(i as u32);
        self.by_addr.insert((p.nic_id, p.endpoint), id);
        self.list[i] = p;
        self.evict_queue.push_back(id.0);
        Some(id)
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Partner> {
        self.list.iter()
    }
}

impl std::ops::Index<PartnerId> for PartnerTable {
    type Output = Partner;
    fn index(&self, id: PartnerId) -> &Partner {
        &self.list[id.0 as usize]
    }
}

impl std::ops::IndexMut<PartnerId> for PartnerTable {
    fn index_mut(&mut self, id: PartnerId) -> &mut Partner {
        &mut self.list[id.0 as usize]
    }
}
