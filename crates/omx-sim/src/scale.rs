//! Cluster-scale scenarios on the real engine: up to 1,024 hosts (the original's default
//! peer table) with one or more endpoints each, joined by a [`Switch`], running
//! all-to-all, ring, incast or shifted (sparse) traffic. Every message is checked
//! exactly once, byte for byte; the report carries the simulated times, frames,
//! retransmissions and switch drops, and the engines' memory as measured by the
//! counting allocator of [`crate::heap`] (zero when it is not installed).
//!
//! Endpoint `e` of a host talks to endpoint `e` of the others: several endpoints per
//! host are parallel planes of the same pattern sharing the hosts' links.

use crate::heap;
use crate::soak::message_bytes;
use crate::switch::{PortConfig, PortStats, Switch};
use crate::world::{LinkConfig, World, KEY};
use omx_proto::{Counters, Engine, EngineConfig, PartnerId, RequestKind, StatusCode, Time};
use omx_wire::WireConfig;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Who sends to whom; `n` is the number of hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Every host sends one message to every other host (n(n-1) messages), host `s`
    /// to `s+1`, `s+2`... in turn, so the receivers are spread at every moment.
    AllToAll,
    /// Host `s` sends `messages` messages to host `s+1`.
    Ring { messages: u32 },
    /// Every host but host 0 sends `messages` messages to host 0 at once, all of them
    /// through host 0's switch port; its receives are all posted up front.
    Incast { messages: u32 },
    /// Host `s` sends one message to each of `s+1`, `s+2`, `s+4`... `s+2^k < s+n`:
    /// n log2(n) messages, every host talking to log2(n) peers each way (a sparse
    /// stand-in for all-to-all where that is too many messages to simulate quickly).
    Shifts,
}

impl Pattern {
    pub fn name(&self) -> &'static str {
        match self {
            Pattern::AllToAll => "all-to-all",
            Pattern::Ring { .. } => "ring",
            Pattern::Incast { .. } => "incast",
            Pattern::Shifts => "shifts",
        }
    }

    /// (destination host, sequence) of each message host `s` sends, in send order, and
    /// (source host, sequence) of each it receives, in post order.
    fn plan(&self, n: usize, s: usize) -> (Vec<Message>, Vec<Message>) {
        let shifts = || (0..).map(|j| 1usize << j).take_while(move |&d| d < n);
        match *self {
            Pattern::AllToAll => (
                (1..n).map(|k| ((s + k) % n, 0)).collect(),
                (1..n).map(|k| ((s + n - k) % n, 0)).collect(),
            ),
            Pattern::Ring { messages } => (
                (0..messages).map(|i| ((s + 1) % n, i)).collect(),
                (0..messages).map(|i| ((s + n - 1) % n, i)).collect(),
            ),
            Pattern::Incast { messages } if s == 0 => (
                Vec::new(),
                (0..messages)
                    .flat_map(|i| (1..n).map(move |from| (from, i)))
                    .collect(),
            ),
            Pattern::Incast { messages } => ((0..messages).map(|i| (0, i)).collect(), Vec::new()),
            Pattern::Shifts => (
                shifts().map(|d| ((s + d) % n, 0)).collect(),
                shifts().map(|d| ((s + n - d) % n, 0)).collect(),
            ),
        }
    }
}

/// A message of a plan: the other host, and the sequence number on that pair.
type Message = (usize, u32);

#[derive(Clone, Debug)]
pub struct ScaleConfig {
    pub hosts: usize,
    pub endpoints: usize,
    pub pattern: Pattern,
    /// Bytes per message.
    pub size: usize,
    /// Sends, and receives, in flight per endpoint (incast receivers post all theirs).
    pub window: usize,
    /// Connects in flight per endpoint while the partners are set up.
    pub connect_window: usize,
    /// The hosts' side: transmit bandwidth and latency to the switch.
    pub link: LinkConfig,
    /// Every switch port and its link to the host.
    pub port: PortConfig,
    pub wire: WireConfig,
    pub seed: u64,
    /// Simulated time allowed for the traffic.
    pub time_limit: Time,
}

impl ScaleConfig {
    /// 10 Gb/s hosts 1 µs from a 10 Gb/s switch with 512 KiB per output port, MTU 9000.
    pub fn new(hosts: usize, pattern: Pattern, size: usize) -> Self {
        let port = PortConfig::default();
        ScaleConfig {
            hosts,
            endpoints: 1,
            pattern,
            size,
            window: 8,
            connect_window: 32,
            link: LinkConfig {
                latency: port.latency,
                bandwidth: port.bandwidth,
                ..LinkConfig::default()
            },
            port,
            wire: WireConfig::native_9000(),
            seed: 1,
            time_limit: 600 * 1_000_000_000,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct ScaleReport {
    pub hosts: usize,
    pub endpoints: usize,
    pub messages: usize,
    pub delivered: usize,
    pub bytes: u64,
    /// Receives completed twice for one message, with wrong bytes or length, or a
    /// status other than success (sends included).
    pub duplicates: usize,
    pub corrupted: usize,
    pub failed: usize,
    /// Messages left in unexpected queues at the end (none may arrive unasked).
    pub leftover_unexpected: usize,
    /// Send or receive buffers still lent to the engines at the end.
    pub leftover_buffers: usize,
    /// Simulated time of the connects, and of the traffic from the first send to the
    /// last completion.
    pub connect_time: Time,
    pub sim_time: Time,
    /// Frames put on the wire (connects excluded), and the engines' retransmissions:
    /// resent sequenced frames plus pull-reply frames asked again.
    pub frames: u64,
    pub retransmits: u64,
    /// Frames the receivers discarded as already received: the spurious part of the
    /// retransmissions (a resend whose original was only late, not lost).
    pub duplicates_dropped: u64,
    pub switch: PortStats,
    /// Every endpoint's counters summed (connects included).
    pub counters: Counters,
    /// Largest partner count of one endpoint.
    pub partners_max: usize,
    /// Heap of one endpoint at the end (after the traffic drained), measured by
    /// dropping it: mean and largest; of which the peer table it was opened with.
    pub endpoint_bytes: usize,
    pub endpoint_bytes_max: usize,
    pub peer_table_bytes: usize,
    /// Heap an endpoint holds per partner: (endpoint - a freshly opened one) / partners.
    pub partner_bytes: usize,
    /// Growth of the whole heap during the traffic, per endpoint: the engine's queues
    /// plus its posted buffers and the frames in flight on the simulated wire.
    pub traffic_peak_per_endpoint: usize,
    /// Largest queues of one endpoint, sampled during the traffic: requests, unacked
    /// frames, unexpected bytes.
    pub peak_requests: usize,
    pub peak_unacked: usize,
    pub peak_unexpected_bytes: usize,
    /// The simulation itself: its peak heap and the wall time it took.
    pub sim_peak_heap: usize,
    pub wall: Duration,
    /// Of which the connects.
    pub connect_wall: Duration,
}

impl ScaleReport {
    /// Every message delivered exactly once, intact, and nothing left behind.
    pub fn clean(&self) -> bool {
        self.delivered == self.messages
            && self.duplicates == 0
            && self.corrupted == 0
            && self.failed == 0
            && self.leftover_unexpected == 0
            && self.leftover_buffers == 0
    }
}

/// One endpoint's progress through its plan.
#[derive(Default)]
struct Rank {
    out: Vec<Message>,
    inc: Vec<Message>,
    /// Partner of each destination host, once connected.
    partners: HashMap<usize, PartnerId>,
    to_connect: Vec<usize>,
    connects: usize,
    next_send: usize,
    next_recv: usize,
    sends: usize,
    recvs: usize,
}

/// Match information naming a message: source and destination endpoints (host and
/// plane), and the sequence number on that pair.
fn message_id(from: usize, to: usize, plane: usize, seq: u32) -> u64 {
    ((from as u64) << 44) | ((to as u64) << 24) | ((plane as u64) << 16) | seq as u64
}

fn ranks_messages_fit(p: Pattern) -> bool {
    match p {
        Pattern::Ring { messages } | Pattern::Incast { messages } => messages <= 1 << 16,
        _ => true,
    }
}

pub fn run(cfg: &ScaleConfig) -> ScaleReport {
    let started = Instant::now();
    heap::reset_peak();
    let (n, planes) = (cfg.hosts, cfg.endpoints);
    assert!(
        (2..=1 << 20).contains(&n) && (1..=256).contains(&planes),
        "hosts or endpoints out of range"
    );
    assert!(
        ranks_messages_fit(cfg.pattern),
        "at most 65,536 messages per pair"
    );
    let engine_cfg = EngineConfig::new(cfg.wire);
    let mut w = World::new(n, planes, engine_cfg.clone(), cfg.link.clone(), cfg.seed);
    w.switch = Some(Switch::new(n, cfg.port));
    let mut ranks: Vec<Rank> = (0..n * planes)
        .map(|r| {
            let (out, inc) = cfg.pattern.plan(n, r / planes);
            let mut to_connect: Vec<usize> = out.iter().map(|&(d, _)| d).collect();
            to_connect.sort_unstable();
            to_connect.dedup();
            Rank {
                out,
                inc,
                to_connect,
                ..Rank::default()
            }
        })
        .collect();
    let mut report = ScaleReport {
        hosts: n,
        endpoints: n * planes,
        messages: ranks.iter().map(|r| r.out.len()).sum(),
        ..ScaleReport::default()
    };

    connect_all(&mut w, &mut ranks, cfg);
    report.connect_time = w.now;
    report.connect_wall = started.elapsed();
    let frames_before = w.stats.frames;

    let connect_peak = heap::peak();
    heap::reset_peak();
    let heap_before = heap::live();
    let start = w.now;
    let limit = w.now + cfg.time_limit;
    let mut seen: HashSet<u64> = HashSet::new();
    for (r, rank) in ranks.iter_mut().enumerate() {
        post(&mut w, rank, r, cfg);
    }
    let mut steps = 0u64;
    let mut last_completion = w.now;
    loop {
        for h in 0..n {
            if w.hosts[h].completions.is_empty() {
                continue;
            }
            last_completion = w.now;
            for (ep, c) in std::mem::take(&mut w.hosts[h].completions) {
                let r = h * planes + ep as usize;
                match c.kind {
                    RequestKind::Send => {
                        ranks[r].sends -= 1;
                        w.release_send(h, ep, c.req);
                        report.failed += (c.status.code != StatusCode::Success) as usize;
                    }
                    RequestKind::Recv => {
                        ranks[r].recvs -= 1;
                        let buf = c.mem.and_then(|m| w.hosts[h].mem.release(m));
                        let id = c.status.match_info;
                        if c.status.code != StatusCode::Success {
                            report.failed += 1;
                        } else if !seen.insert(id) {
                            report.duplicates += 1;
                        } else if c.status.msg_length as usize != cfg.size
                            || buf.is_none_or(|b| b.to_vec() != message_bytes(id, cfg.size))
                        {
                            report.corrupted += 1;
                        } else {
                            report.delivered += 1;
                            report.bytes += cfg.size as u64;
                        }
                    }
                    _ => report.failed += 1,
                }
                post(&mut w, &mut ranks[r], r, cfg);
            }
        }
        let busy = ranks.iter().any(|r| r.sends + r.recvs > 0);
        if !busy || w.now > limit || !w.step() {
            break;
        }
        steps += 1;
        if steps.is_multiple_of(4096) {
            sample_queues(&w, &mut report);
        }
    }
    sample_queues(&w, &mut report);
    report.sim_time = last_completion - start;
    report.traffic_peak_per_endpoint = heap::peak().saturating_sub(heap_before) / report.endpoints;
    // Let the last acks go out, so what is left is the endpoints' resting state.
    let settle = w.now + 1_000_000_000;
    w.run_idle(settle);
    report.frames = w.stats.frames - frames_before;
    report.switch = w.switch.as_ref().map(Switch::total).unwrap_or_default();
    for h in &w.hosts {
        for e in &h.engines {
            report.counters.add(&e.counters);
            report.leftover_unexpected += e.stats().unexpected;
        }
    }
    let c = &report.counters;
    report.retransmits = c.resends + c.pull_frames_rerequested;
    report.duplicates_dropped = c.drop_obsolete + c.drop_pull_reply_duplicate;
    report.leftover_buffers = w.hosts.iter().map(|h| h.mem.len()).sum();
    report.sim_peak_heap = heap::peak().max(connect_peak);
    measure_endpoints(&mut w, &engine_cfg, &mut report);
    report.wall = started.elapsed();
    report
}

/// Connects every endpoint to the destinations of its plan, `connect_window` at a time.
fn connect_all(w: &mut World, ranks: &mut [Rank], cfg: &ScaleConfig) {
    let planes = cfg.endpoints;
    let limit = w.now + cfg.time_limit;
    loop {
        let mut pending = false;
        for (r, rank) in ranks.iter_mut().enumerate() {
            let (h, ep) = (r / planes, (r % planes) as u8);
            while rank.connects < cfg.connect_window && !rank.to_connect.is_empty() {
                let to = rank.to_connect.pop().expect("destination");
                let nic = w.hosts[to].nic_id;
                let now = w.now;
                w.engine(h, ep)
                    .connect(now, nic, ep, KEY, to as u64)
                    .expect("every host is a known peer");
                rank.connects += 1;
            }
            pending |= rank.connects > 0;
        }
        for h in 0..cfg.hosts {
            for (ep, c) in std::mem::take(&mut w.hosts[h].completions) {
                let rank = &mut ranks[h * planes + ep as usize];
                assert_eq!(c.status.code, StatusCode::Success, "connect failed");
                let partner = c.status.source.expect("connect names its partner");
                rank.partners.insert(c.status.context as usize, partner);
                rank.connects -= 1;
            }
        }
        if !pending
            || ranks
                .iter()
                .all(|r| r.connects == 0 && r.to_connect.is_empty())
        {
            return;
        }
        assert!(w.now <= limit && w.step(), "connects did not complete");
    }
}

/// Posts rank `r`'s next sends and receives, up to its window.
fn post(w: &mut World, rank: &mut Rank, r: usize, cfg: &ScaleConfig) {
    let planes = cfg.endpoints;
    let (h, plane) = (r / planes, r % planes);
    let ep = plane as u8;
    let recv_window = match cfg.pattern {
        Pattern::Incast { .. } => usize::MAX,
        _ => cfg.window,
    };
    while rank.recvs < recv_window && rank.next_recv < rank.inc.len() {
        let (from, seq) = rank.inc[rank.next_recv];
        rank.next_recv += 1;
        rank.recvs += 1;
        let id = message_id(from, h, plane, seq);
        w.recv(h, ep, id, u64::MAX, cfg.size, &[]);
    }
    while rank.sends < cfg.window && rank.next_send < rank.out.len() {
        let (to, seq) = rank.out[rank.next_send];
        rank.next_send += 1;
        rank.sends += 1;
        let id = message_id(h, to, plane, seq);
        let partner = rank.partners[&to];
        w.send(h, ep, partner, id, message_bytes(id, cfg.size), false);
    }
}

fn sample_queues(w: &World, report: &mut ScaleReport) {
    for e in w.hosts.iter().flat_map(|h| &h.engines) {
        let s = e.stats();
        report.peak_requests = report.peak_requests.max(s.requests);
        report.peak_unacked = report.peak_unacked.max(s.unacked);
        report.peak_unexpected_bytes = report.peak_unexpected_bytes.max(s.unexpected_bytes);
        report.partners_max = report.partners_max.max(s.partners);
    }
}

/// Drops every endpoint and measures the heap each one gave back, against a freshly
/// opened endpoint and the peer table it starts with.
fn measure_endpoints(w: &mut World, cfg: &EngineConfig, report: &mut ScaleReport) {
    if !heap::installed() {
        return;
    }
    let first = &w.hosts[0].engines[0];
    let (params, peers) = (*first.params(), first.peers().clone());
    report.peer_table_bytes = heap::owned_bytes(peers.clone());
    let fresh = heap::owned_bytes(Engine::new(cfg.clone(), params, peers));
    let (mut total, mut per_partner, mut count) = (0usize, 0usize, 0usize);
    for h in &mut w.hosts {
        for e in std::mem::take(&mut h.engines) {
            let partners = e.stats().partners;
            let bytes = heap::owned_bytes(e);
            total += bytes;
            report.endpoint_bytes_max = report.endpoint_bytes_max.max(bytes);
            per_partner += bytes.saturating_sub(fresh) / partners.max(1);
            count += 1;
        }
    }
    report.endpoint_bytes = total / count.max(1);
    report.partner_bytes = per_partner / count.max(1);
}
