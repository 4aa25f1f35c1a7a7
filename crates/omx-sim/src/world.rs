//! Hosts running engines over a simulated Ethernet link with a virtual clock and seeded
//! faults. Everything is deterministic for a given seed.

use crate::memory::{Buffer, Memory};
use crate::rng::Rng;
use crate::switch::Switch;
use bytes::Bytes;
use omx_proto::demux::{route, Route};
use omx_proto::*;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

/// Link behaviour. Probabilities apply per frame.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    pub latency: Time,
    /// Bytes per second of each host's transmit side; 0 for unlimited.
    pub bandwidth: u64,
    pub loss: f64,
    pub duplicate: f64,
    /// Probability that a frame is delayed by up to `reorder_delay` (so later frames pass it).
    pub reorder: f64,
    pub reorder_delay: Time,
    /// Probability that 1 to 4 random bytes of a frame are flipped.
    pub corrupt: f64,
    /// Probability that a frame starts a burst of losses (a queue overflowing), in which
    /// it and the next frames, up to a count drawn in `burst_len`, are lost, until the
    /// queue has drained (`burst_time` after the burst began).
    pub burst: f64,
    pub burst_len: (u64, u64),
    pub burst_time: Time,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            latency: 2_000,
            bandwidth: 0,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: 50_000,
            corrupt: 0.0,
            burst: 0.0,
            burst_len: (10, 100),
            burst_time: 200_000,
        }
    }
}

impl LinkConfig {
    /// Loss, duplication and reordering at the given rates.
    pub fn faulty(loss: f64, duplicate: f64, reorder: f64) -> Self {
        LinkConfig {
            loss,
            duplicate,
            reorder,
            ..Default::default()
        }
    }
}

/// How copy actions are executed: at once, or later in random order (exercises the
/// asynchronous copy seam the offload engine plugs into).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyMode {
    Immediate,
    Deferred { max_delay: Time },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub frames: u64,
    pub bytes: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    pub undeliverable: u64,
    /// Frames longer than the sending or the receiving host's MTU, dropped as a real
    /// link drops them.
    pub oversize: u64,
    /// Bursts of losses started (`LinkConfig::burst`).
    pub bursts: u64,
}

pub struct Host {
    pub nic_id: NicId,
    pub engines: Vec<Engine>,
    pub mem: Memory,
    pub completions: Vec<(u8, Completion)>,
    /// The host's interface MTU (see [`World::set_host_mtu`]); `None`: unlimited.
    pub mtu: Option<u32>,
    /// The host's other boards (see [`World::add_links`]): board `i` is on link `i + 1`.
    pub links: Vec<NicId>,
    /// When each of its links (0: its own board) is free to send again.
    tx_busy_until: Vec<Time>,
}

struct InFlight {
    at: Time,
    order: u64,
    host: usize,
    frame: Bytes,
}

struct DeferredCopy {
    at: Time,
    host: usize,
    endpoint: u8,
    op: CopyOp,
}

pub struct World {
    pub now: Time,
    pub hosts: Vec<Host>,
    pub link: LinkConfig,
    pub copy_mode: CopyMode,
    pub stats: LinkStats,
    pub rng: Rng,
    heap: BinaryHeap<Reverse<(Time, u64)>>,
    frames: HashMap<u64, InFlight>,
    copies: Vec<DeferredCopy>,
    order: u64,
    by_mac: HashMap<NicId, usize>,
    scratch: Vec<u8>,
    /// Frames still to lose in the current burst, and when it ends at the latest.
    burst_left: u64,
    burst_end: Time,
    /// Test hook: frames for which this returns false are dropped (counted as lost).
    pub filter: Option<FrameFilter>,
    /// Hosts whose frames (in and out) vanish, as if powered off.
    pub down: Vec<bool>,
    /// Scheduled silences of links (`(link, from, until)` in simulated time): frames
    /// sent on `link` by any host in `[from, until)` are lost.
    pub outages: Vec<(usize, Time, Time)>,
    /// Send buffers lent to engines for rendezvous, released when the send is taken.
    /// Keyed by host, endpoint and request: request ids are only unique per endpoint.
    send_regions: HashMap<(usize, u8, ReqId), MemHandle>,
    /// Shared-memory channels between endpoints of one host: (host, from, to) -> queue,
    /// in order, as the runtime's rings.
    local_q: BTreeMap<(usize, u8, u8), VecDeque<LocalItem>>,
    /// Cross-process copies are refused (as with a strict ptrace scope): local large
    /// messages take the pushed two-copy path.
    pub refuse_local_copy: bool,
    /// Bytes per pushed chunk on the fallback path.
    pub push_chunk: usize,
    /// Deliver pull replies as the runtime does without copy offload: lent, with the
    /// payload placed during the call (`Engine::handle_frame_in_place`).
    pub in_place: bool,
    /// Deliver pull replies as the runtime's direct socket does
    /// (`Engine::handle_pull_reply_direct`), a placement failing (a frame cut short)
    /// with this probability; `None`: off.
    pub direct: Option<f64>,
    /// Hosts joined through this switch (port i = host i) instead of point to point:
    /// a frame crosses `link.latency` to it, then its port's queue and link; frames its
    /// full output queues drop count as lost.
    pub switch: Option<Switch>,
}

/// What travels on a simulated shared-memory channel.
enum LocalItem {
    Msg(LocalIn),
    Chunk {
        cookie: u64,
        offset: u32,
        data: Vec<u8>,
    },
}

pub type FrameFilter = Box<dyn FnMut(&[u8]) -> bool>;

pub const KEY: u32 = 0x1234_5678;

impl World {
    /// `hosts` hosts with `endpoints` endpoints each; every host knows every other.
    pub fn new(
        hosts: usize,
        endpoints: usize,
        cfg: EngineConfig,
        link: LinkConfig,
        seed: u64,
    ) -> Self {
        let mut rng = Rng::new(seed);
        let nic = |i: usize| 0x02_00_00_00_00_00u64 | (i as u64 + 1);
        let mut peers = PeerTable::new(1024);
        for i in 0..hosts {
            peers.add(nic(i), Some(format!("host{i}:0")));
        }
        let hosts: Vec<Host> = (0..hosts)
            .map(|i| Host {
                nic_id: nic(i),
                engines: (0..endpoints)
                    .map(|e| {
                        let params = EndpointParams {
                            nic_id: nic(i),
                            endpoint: e as u8,
                            session: rng.next_u64() as u32,
                            key: KEY,
                        };
                        Engine::new(cfg.clone(), params, peers.clone())
                    })
                    .collect(),
                mem: Memory::default(),
                completions: Vec::new(),
                mtu: None,
                links: Vec::new(),
                tx_busy_until: vec![0],
            })
            .collect();
        let by_mac: HashMap<NicId, usize> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| (h.nic_id, i))
            .collect();
        World {
            now: 0,
            hosts,
            link,
            copy_mode: CopyMode::Immediate,
            stats: LinkStats::default(),
            rng,
            heap: BinaryHeap::new(),
            frames: HashMap::new(),
            copies: Vec::new(),
            order: 0,
            down: vec![false; by_mac.len()],
            outages: Vec::new(),
            by_mac,
            scratch: Vec::new(),
            burst_left: 0,
            burst_end: 0,
            filter: None,
            send_regions: HashMap::new(),
            local_q: BTreeMap::new(),
            refuse_local_copy: false,
            push_chunk: 16 * 1024,
            in_place: false,
            direct: None,
            switch: None,
        }
    }

    pub fn engine(&mut self, host: usize, ep: u8) -> &mut Engine {
        &mut self.hosts[host].engines[ep as usize]
    }

    /// Replaces an endpoint by a freshly opened one with a new session (a restart).
    pub fn reopen(&mut self, host: usize, ep: u8) {
        let old = &self.hosts[host].engines[ep as usize];
        let cfg = old.config().clone();
        let peers = old.peers().clone();
        let params = EndpointParams {
            session: self.rng.next_u64() as u32,
            ..*old.params()
        };
        self.hosts[host].engines[ep as usize] = Engine::new(cfg, params, peers);
        self.hosts[host].completions.retain(|(e, _)| *e != ep);
    }

    /// Gives host `host` an interface of MTU `mtu`: its endpoints are reopened with
    /// native frames of that size (as the runtime sizes them from its board), and frames
    /// longer than it, sent or received, are dropped (`LinkStats::oversize`). Call
    /// before connecting.
    pub fn set_host_mtu(&mut self, host: usize, mtu: u32) {
        self.hosts[host].mtu = Some(mtu);
        self.configure_host(host, |cfg| cfg.wire = cfg.wire.with_mtu(mtu));
    }

    /// Reopens every endpoint of host `host` with its configuration changed by `change`
    /// (hosts that differ: frame sizes, extensions offered). Call before connecting.
    pub fn configure_host(&mut self, host: usize, change: impl Fn(&mut EngineConfig)) {
        for ep in 0..self.hosts[host].engines.len() as u8 {
            let old = &self.hosts[host].engines[ep as usize];
            let mut cfg = old.config().clone();
            change(&mut cfg);
            let (peers, params) = (old.peers().clone(), *old.params());
            self.hosts[host].engines[ep as usize] = Engine::new(cfg, params, peers);
        }
    }

    /// Gives every host `n` more boards, board `i` of every host on one more link
    /// (its own bandwidth and queue; losses and the [`World::filter`] apply to each),
    /// and has its endpoints stripe large messages over them when `stripe` is set
    /// (`OMX_STRIPE`). Call before connecting.
    pub fn add_links(&mut self, n: usize, stripe: bool) {
        for h in 0..self.hosts.len() {
            let boards: Vec<NicId> = (0..n).map(|i| Self::link_nic(h, i + 1)).collect();
            for &b in &boards {
                self.by_mac.insert(b, h);
            }
            self.hosts[h].links = boards.clone();
            self.hosts[h].tx_busy_until = vec![0; n + 1];
            if stripe {
                self.configure_host(h, |cfg| cfg.stripe_boards = boards.clone());
            }
        }
    }

    /// The board of host `host` on link `link` (0: its own board).
    pub fn link_nic(host: usize, link: usize) -> NicId {
        0x02_00_00_00_00_00u64 | ((link as u64) << 16) | (host as u64 + 1)
    }

    fn fits_mtu(&self, host: usize, frame: &[u8]) -> bool {
        self.hosts[host]
            .mtu
            .is_none_or(|m| frame.len() <= m as usize + omx_wire::ETH_HEADER_LEN)
    }

    /// Whether the link drops this frame: independent losses, and bursts.
    fn lose_frame(&mut self) -> bool {
        if self.burst_left > 0 && self.now < self.burst_end {
            self.burst_left -= 1;
            return true;
        }
        self.burst_left = 0;
        if self.link.burst > 0.0 && self.rng.chance(self.link.burst) {
            let (lo, hi) = self.link.burst_len;
            self.burst_left = lo.max(1) - 1 + self.rng.below(hi.saturating_sub(lo) + 1);
            self.burst_end = self.now + self.link.burst_time;
            self.stats.bursts += 1;
            return true;
        }
        self.rng.chance(self.link.loss)
    }

    /// Drains every engine's output: copies, frames, completions.
    pub fn pump(&mut self) {
        loop {
            let mut busy = false;
            for h in 0..self.hosts.len() {
                for e in 0..self.hosts[h].engines.len() {
                    while self.hosts[h].engines[e].has_output() {
                        busy = true;
                        self.drain_engine(h, e);
                    }
                }
            }
            if !self.pump_local() && !busy {
                return;
            }
        }
    }

    /// Delivers queued shared-memory messages; a refused one stays at the head of its
    /// channel. Returns whether anything was taken.
    fn pump_local(&mut self) -> bool {
        let now = self.now;
        let mut took = false;
        let keys: Vec<_> = self.local_q.keys().copied().collect();
        for (h, from, to) in keys {
            let (nic, session) = {
                let e = &self.hosts[h].engines[from as usize];
                (e.params().nic_id, e.params().session)
            };
            loop {
                let Some(item) = self
                    .local_q
                    .get_mut(&(h, from, to))
                    .and_then(|q| q.pop_front())
                else {
                    break;
                };
                let host = &mut self.hosts[h];
                let engine = &mut host.engines[to as usize];
                let pid = engine.local_partner(nic, from, session);
                match item {
                    // The runtime's in-place read: a posted receive takes a plain eager
                    // message straight from the channel.
                    LocalItem::Msg(LocalIn::Eager {
                        match_info,
                        flags: 0,
                        ref data,
                    }) if let Some((dst, at, keep, done)) =
                        engine.local_eager_direct(pid, match_info, data.len() as u32) =>
                    {
                        host.mem
                            .get_mut(dst)
                            .write_at(at as usize, &data[..keep as usize]);
                        if let Some(c) = done {
                            host.completions.push((to, c));
                        }
                    }
                    LocalItem::Msg(m) => {
                        if !engine.handle_local(now, pid, m.clone()) {
                            self.local_q
                                .get_mut(&(h, from, to))
                                .expect("queue")
                                .push_front(LocalItem::Msg(m));
                            break;
                        }
                    }
                    LocalItem::Chunk {
                        cookie,
                        offset,
                        data,
                    } => {
                        let len = data.len() as u32;
                        if let Some((dst, at, keep)) =
                            engine.local_chunk_target(cookie, offset, len)
                        {
                            host.mem
                                .get_mut(dst)
                                .write_at(at as usize, &data[..keep as usize]);
                            host.engines[to as usize].local_chunk_done(now, cookie, len);
                        }
                    }
                }
                took = true;
            }
        }
        self.local_q.retain(|_, q| !q.is_empty());
        took
    }

    /// A shared-memory message from endpoint `e` of host `h`.
    fn send_local(&mut self, h: usize, e: usize, s: LocalSend) {
        let (nic, to, _) = self.hosts[h].engines[e]
            .partner_addr(s.partner)
            .expect("local partner");
        assert_eq!(
            nic, self.hosts[h].nic_id,
            "local partners live on the same host"
        );
        let q = self.local_q.entry((h, e as u8, to)).or_default();
        let mem = &self.hosts[h].mem;
        let item = match s.msg {
            LocalMsg::Push {
                cookie,
                mem: handle,
                offset,
                len,
            } => {
                let mut done = 0usize;
                while done < len as usize {
                    let n = self.push_chunk.min(len as usize - done);
                    let mut data = vec![0u8; n];
                    mem.get(handle).read_at(offset as usize + done, &mut data);
                    q.push_back(LocalItem::Chunk {
                        cookie,
                        offset: done as u32,
                        data,
                    });
                    done += n;
                }
                return;
            }
            // A rendezvous's memory, as the simulator describes it: handle and offset.
            LocalMsg::Rndv {
                mem: handle,
                offset,
                ..
            } => {
                let mut remote = Vec::with_capacity(16);
                remote.extend_from_slice(&handle.0.to_le_bytes());
                remote.extend_from_slice(&offset.to_le_bytes());
                s.msg
                    .into_local_in(Bytes::from(remote))
                    .expect("not a push")
            }
            m => m.into_local_in(Bytes::new()).expect("not a push"),
        };
        q.push_back(LocalItem::Msg(item));
    }

    /// Executes a one-copy local pull within host `h`'s memory.
    fn run_local_pull(&mut self, h: usize, e: usize, p: LocalPull) {
        let now = self.now;
        let (src, src_offset) = match &p.src {
            PullSrc::Own(handle) => (*handle, p.src_offset),
            PullSrc::Peer { remote, .. } => {
                if self.refuse_local_copy {
                    self.hosts[h].engines[e].local_pull_done(now, p.id, PullOutcome::Refused);
                    return;
                }
                let handle = MemHandle(u64::from_le_bytes(remote[..8].try_into().expect("8")));
                let base = u64::from_le_bytes(remote[8..16].try_into().expect("8"));
                (handle, base + p.src_offset)
            }
        };
        let mut data = vec![0u8; p.len as usize];
        self.hosts[h]
            .mem
            .get(src)
            .read_at(src_offset as usize, &mut data);
        self.hosts[h]
            .mem
            .get_mut(p.dst)
            .write_at(p.dst_offset as usize, &data);
        self.hosts[h].engines[e].local_pull_done(now, p.id, PullOutcome::Done);
    }

    fn drain_engine(&mut self, h: usize, e: usize) {
        while let Some(out) = self.hosts[h].engines[e].poll() {
            match out {
                Output::LocalPull(p) => self.run_local_pull(h, e, p),
                Output::Local(s) => self.send_local(h, e, s),
                Output::Copy(op) => match self.copy_mode {
                    _ if !op.report => self.run_copy(h, e as u8, op),
                    CopyMode::Immediate => self.run_copy(h, e as u8, op),
                    CopyMode::Deferred { max_delay } => {
                        let at = self.now + self.rng.below(max_delay + 1);
                        self.copies.push(DeferredCopy {
                            at,
                            host: h,
                            endpoint: e as u8,
                            op,
                        });
                    }
                },
                Output::Atomic(job) => self.run_atomic(h, e, job),
                Output::Transmit(t) => {
                    let mut frame = std::mem::take(&mut self.scratch);
                    frame.clear();
                    let mem = &self.hosts[h].mem;
                    t.assemble(&mut frame, |handle, off, out| {
                        mem.get(handle).read_at(off as usize, out)
                    });
                    self.send_frame(h, t.path as usize, &frame);
                    self.scratch = frame;
                }
                Output::Completion(c) => self.hosts[h].completions.push((e as u8, c)),
            }
        }
    }

    /// Applies a remote atomic at once (the runtime does it in its progress pass).
    fn run_atomic(&mut self, h: usize, e: usize, job: AtomicJob) {
        let mut target = vec![0u8; job.len as usize];
        let mem = &mut self.hosts[h].mem;
        mem.get(job.handle)
            .read_at(job.offset as usize, &mut target);
        let fetched = Bytes::copy_from_slice(&target);
        if job.apply(&mut target) {
            mem.get_mut(job.handle)
                .write_at(job.offset as usize, &target);
        }
        let now = self.now;
        self.hosts[h].engines[e].atomic_done(now, &job, fetched);
    }

    fn run_copy(&mut self, h: usize, ep: u8, op: CopyOp) {
        self.hosts[h]
            .mem
            .get_mut(op.dst)
            .write_at(op.dst_offset as usize, &op.src);
        if op.report {
            let now = self.now;
            self.hosts[h].engines[ep as usize].copy_done(now, op.id);
        }
    }

    fn send_frame(&mut self, from: usize, link: usize, frame: &[u8]) {
        self.stats.frames += 1;
        self.stats.bytes += frame.len() as u64;
        let bw = self.link.bandwidth;
        let host = &mut self.hosts[from];
        let Some(busy) = host.tx_busy_until.get_mut(link) else {
            self.stats.undeliverable += 1;
            return;
        };
        let start = (*busy).max(self.now);
        let wire_time = (frame.len() as u64 * 1_000_000_000)
            .checked_div(bw)
            .unwrap_or(0);
        *busy = start + wire_time;
        let depart = *busy;
        let filtered = self.filter.as_mut().is_some_and(|f| !f(frame));
        let now = self.now;
        let out = self
            .outages
            .iter()
            .any(|&(l, from, until)| l == link && from <= now && now < until);
        if self.lose_frame() || filtered || out || self.down[from] {
            self.stats.lost += 1;
            return;
        }
        let copies = if self.rng.chance(self.link.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        let mut dst = [0u8; 8];
        dst[2..].copy_from_slice(&frame[..6]);
        let Some(&to) = self.by_mac.get(&u64::from_be_bytes(dst)) else {
            self.stats.undeliverable += 1;
            return;
        };
        if self.down[to] {
            self.stats.lost += 1;
            return;
        }
        if !self.fits_mtu(from, frame) || !self.fits_mtu(to, frame) {
            self.stats.oversize += 1;
            return;
        }
        for _ in 0..copies {
            let mut bytes = frame.to_vec();
            if self.rng.chance(self.link.corrupt) {
                self.stats.corrupted += 1;
                for _ in 0..1 + self.rng.below(4) {
                    let i = self.rng.below(bytes.len() as u64) as usize;
                    bytes[i] ^= 1 << self.rng.below(8);
                }
            }
            let mut at = depart + self.link.latency;
            if let Some(switch) = self.switch.as_mut() {
                let Some(arrival) = switch.forward(to, at, bytes.len()) else {
                    self.stats.lost += 1;
                    continue;
                };
                at = arrival;
            }
            if self.rng.chance(self.link.reorder) {
                self.stats.reordered += 1;
                at += 1 + self.rng.below(self.link.reorder_delay);
            }
            self.order += 1;
            self.heap.push(Reverse((at, self.order)));
            self.frames.insert(
                self.order,
                InFlight {
                    at,
                    order: self.order,
                    host: to,
                    frame: bytes.into(),
                },
            );
        }
    }

    /// Earliest pending event: a frame arrival, a deferred copy or an engine timer.
    pub fn next_event(&self) -> Option<Time> {
        let frame = self.heap.peek().map(|Reverse((t, _))| *t);
        let copy = self.copies.iter().map(|c| c.at).min();
        let timers = self
            .hosts
            .iter()
            .flat_map(|h| h.engines.iter())
            .filter_map(|e| e.poll_timeout());
        frame.into_iter().chain(copy).chain(timers).min()
    }

    /// Advances to the next event and processes everything due then. False when idle.
    pub fn step(&mut self) -> bool {
        self.pump();
        let Some(t) = self.next_event() else {
            return false;
        };
        self.now = self.now.max(t);
        let now = self.now;
        while let Some(&Reverse((at, order))) = self.heap.peek() {
            if at > now {
                break;
            }
            self.heap.pop();
            let f = self.frames.remove(&order).expect("frame of heap entry");
            debug_assert_eq!((f.at, f.order), (at, order));
            self.deliver(f.host, f.frame);
        }
        let mut i = 0;
        while i < self.copies.len() {
            if self.copies[i].at <= now {
                let c = self.copies.swap_remove(i);
                self.run_copy(c.host, c.endpoint, c.op);
            } else {
                i += 1;
            }
        }
        for h in &mut self.hosts {
            for e in &mut h.engines {
                if e.poll_timeout().is_some_and(|d| d <= now) {
                    e.handle_timeout(now);
                }
            }
        }
        self.pump();
        true
    }

    fn deliver(&mut self, host: usize, frame: Bytes) {
        let now = self.now;
        let in_place = self.in_place;
        let cut = self.direct.map(|p| self.rng.chance(p));
        let Host { engines, mem, .. } = &mut self.hosts[host];
        match route(&frame) {
            Route::Endpoint(ep) => match engines.get_mut(ep as usize) {
                Some(engine) if cut.is_some() && frame.len() >= omx_wire::PULL_REPLY_HEAD_LEN => {
                    let head = &frame[..omx_wire::PULL_REPLY_HEAD_LEN];
                    // The runtime's batched mode receives payloads where the engine
                    // expects the next replies: every reply it accepts must be one.
                    let mut expected = Vec::new();
                    engine.expected_pull_replies(&mut |h, off, n| {
                        expected.push((h, off, n));
                        true
                    });
                    let mut place = |h, off: u64, n: usize| {
                        assert!(
                            expected.contains(&(h, off, n)),
                            "accepted pull reply ({h:?}, {off}, {n}) was not expected"
                        );
                        let start = omx_wire::PULL_REPLY_HEAD_LEN;
                        let Some(p) = frame.get(start..start + n) else {
                            return false;
                        };
                        if cut == Some(true) {
                            // Part of the payload lands before the frame turns out short.
                            mem.get_mut(h).write_at(off as usize, &p[..n / 2]);
                            return false;
                        }
                        mem.get_mut(h).write_at(off as usize, p);
                        true
                    };
                    if engine
                        .handle_pull_reply_direct(now, head, frame.len(), &mut place)
                        .is_none()
                    {
                        engine.handle_frame(now, frame);
                    }
                }
                Some(engine) if in_place => {
                    let placed = engine.handle_frame_in_place(now, &frame, &mut |h, off, data| {
                        mem.get_mut(h).write_at(off as usize, data)
                    });
                    if !placed {
                        engine.handle_frame(now, frame);
                    }
                }
                Some(engine) => engine.handle_frame(now, frame),
                None => self.stats.undeliverable += 1,
            },
            Route::Board | Route::Drop => self.stats.undeliverable += 1,
        }
    }

    /// Steps until `done` holds or simulated time passes `limit`. Returns whether done.
    pub fn run_until(&mut self, limit: Time, mut done: impl FnMut(&World) -> bool) -> bool {
        loop {
            self.pump();
            if done(self) {
                return true;
            }
            if self.now > limit || !self.step() {
                return done(self);
            }
        }
    }

    /// Processes every event up to `limit`, then sets the clock to `limit`.
    pub fn run_idle(&mut self, limit: Time) {
        loop {
            self.pump();
            match self.next_event() {
                Some(t) if t <= limit => {
                    self.step();
                }
                _ => break,
            }
        }
        self.now = self.now.max(limit);
    }

    // ----- Conveniences for tests and benchmarks -----

    /// Connects endpoint (a, ea) to (b, eb); panics if the handshake fails.
    pub fn connect(&mut self, a: usize, ea: u8, b: usize, eb: u8) -> PartnerId {
        let nic = self.hosts[b].nic_id;
        let now = self.now;
        let req = self
            .engine(a, ea)
            .connect(now, nic, eb, KEY, 0)
            .expect("peer known");
        let limit = self.now + 3_600 * 1_000_000_000;
        let status = self.wait(a, ea, req, limit).expect("connect completes");
        assert_eq!(
            status.code,
            StatusCode::Success,
            "connect failed: {status:?}\nrequester {:?}\ntarget {:?}",
            self.hosts[a].engines[usize::from(ea)].counters,
            self.hosts[b].engines[usize::from(eb)].counters,
        );
        status.source.expect("connect names its partner")
    }

    /// Connects endpoint `ea` to endpoint `eb` of the same host `h` through shared
    /// memory (or to itself when they are equal).
    pub fn connect_local(&mut self, h: usize, ea: u8, eb: u8) -> PartnerId {
        let nic = self.hosts[h].nic_id;
        let now = self.now;
        let req = if ea == eb {
            self.engine(h, ea).connect(now, nic, eb, KEY, 0)
        } else {
            let session = self.engine(h, eb).params().session;
            self.engine(h, ea)
                .connect_local(nic, eb, Ok(session), true, 0)
        }
        .expect("local connect");
        let limit = self.now + 1_000_000_000;
        let status = self.wait(h, ea, req, limit).expect("connect completes");
        assert_eq!(
            status.code,
            StatusCode::Success,
            "connect failed: {status:?}"
        );
        status.source.expect("connect names its partner")
    }

    /// Posts a send of `data` (captured if eager, registered as a region otherwise).
    pub fn send(
        &mut self,
        h: usize,
        ep: u8,
        to: PartnerId,
        match_info: u64,
        data: Vec<u8>,
        sync: bool,
    ) -> ReqId {
        let now = self.now;
        let len = data.len() as u32;
        let plan = self.engine(h, ep).plan_send(to, match_info, len, sync);
        if plan == SendPlan::WriteToInbox {
            if let Some(req) = self.write_to_inbox(h, ep, to, match_info, &data) {
                return req;
            }
            // No room (messages wait on the channel): the queued path, as the runtime.
        }
        let payload = if plan != SendPlan::Lend {
            SendData::Eager(Bytes::from(data))
        } else {
            let handle = self.hosts[h].mem.register(Buffer::contiguous(data));
            SendData::Region { handle, len }
        };
        let region = match payload {
            SendData::Region { handle, .. } => Some(handle),
            SendData::Eager(_) => None,
        };
        let e = self.engine(h, ep);
        let r = if sync {
            e.issend(now, to, match_info, payload, 0)
        } else {
            e.isend(now, to, match_info, payload, 0)
        };
        let req = r.expect("send accepted");
        if let Some(handle) = region {
            self.send_regions.insert((h, ep, req), handle);
        }
        req
    }

    /// The runtime's fast path of a small send to a local partner: the message goes
    /// straight into the partner's channel and the send completes at once
    /// (`Engine::local_direct_sent`). `None` when messages already wait on the channel.
    fn write_to_inbox(
        &mut self,
        h: usize,
        ep: u8,
        to: PartnerId,
        match_info: u64,
        data: &[u8],
    ) -> Option<ReqId> {
        let (_, to_ep, _) = self.engine(h, ep).partner_addr(to)?;
        let key = (h, ep, to_ep);
        if self.local_q.get(&key).is_some_and(|q| !q.is_empty()) {
            return None;
        }
        self.local_q
            .entry(key)
            .or_default()
            .push_back(LocalItem::Msg(LocalIn::Eager {
                match_info,
                flags: 0,
                data: Bytes::copy_from_slice(data),
            }));
        // Completions already queued go first (completion order).
        while let Some(c) = self.engine(h, ep).poll_completion() {
            self.hosts[h].completions.push((ep, c));
        }
        let c = self
            .engine(h, ep)
            .local_direct_sent(to, match_info, data.len() as u32, 0);
        let req = c.req;
        self.hosts[h].completions.push((ep, c));
        Some(req)
    }

    /// Frees the buffer of a completed send (no-op for eager sends).
    pub fn release_send(&mut self, h: usize, ep: u8, req: ReqId) {
        if let Some(handle) = self.send_regions.remove(&(h, ep, req)) {
            self.hosts[h].mem.release(handle);
        }
    }

    /// Posts a receive into a fresh buffer split into the given segment sizes.
    pub fn recv(
        &mut self,
        h: usize,
        ep: u8,
        match_info: u64,
        mask: u64,
        len: usize,
        segments: &[usize],
    ) -> (ReqId, MemHandle) {
        let handle = self.hosts[h].mem.register(Buffer::zeroed(len, segments));
        let now = self.now;
        let req = self
            .engine(h, ep)
            .irecv(now, match_info, mask, handle, len as u32, 0)
            .expect("recv accepted");
        (req, handle)
    }

    /// Removes and returns the completion of `req`, if it happened.
    pub fn take(&mut self, h: usize, ep: u8, req: ReqId) -> Option<Status> {
        let c = &mut self.hosts[h].completions;
        let i = c.iter().position(|(e, c)| *e == ep && c.req == req)?;
        let status = c.remove(i).1.status;
        self.release_send(h, ep, req);
        Some(status)
    }

    /// Runs until `req` completes (or `limit`), returning its status.
    pub fn wait(&mut self, h: usize, ep: u8, req: ReqId, limit: Time) -> Option<Status> {
        let found = self.run_until(limit, |w| {
            w.hosts[h]
                .completions
                .iter()
                .any(|(e, c)| *e == ep && c.req == req)
        });
        if found {
            self.take(h, ep, req)
        } else {
            None
        }
    }
}
