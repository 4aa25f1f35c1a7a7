//! Randomised traffic with verification: random sizes, match patterns and interleavings
//! of sends and receives between hosts over a (faulty) link. Every delivered message is
//! checked byte for byte against the pattern its match info names.

use crate::memory::Buffer;
use crate::rng::Rng;
use crate::world::{CopyMode, LinkConfig, World};
use omx_proto::{EngineConfig, MemHandle, PartnerId, QueueStats, ReqId, StatusCode, Time};
use std::collections::{HashMap, HashSet};

#[derive(Clone, Debug)]
pub struct SoakConfig {
    pub seed: u64,
    pub hosts: usize,
    pub messages: usize,
    /// Largest message; sizes are skewed toward small ones.
    pub max_size: usize,
    /// Sends in flight per host.
    pub window: usize,
    pub link: LinkConfig,
    pub engine: EngineConfig,
    pub copy_mode: CopyMode,
    /// Simulated time budget.
    pub time_limit: Time,
}

#[derive(Clone, Debug, Default)]
pub struct SoakReport {
    pub sent: usize,
    pub delivered: usize,
    pub duplicates: usize,
    pub lost: usize,
    pub corrupted: usize,
    pub wrong_status: usize,
    pub out_of_order: usize,
    pub bytes: u64,
    pub sim_time: Time,
    pub frames: u64,
    /// Frames the link corrupted.
    pub frames_corrupted: u64,
    /// Frames the engines dropped on a checksum mismatch (`drop_checksum`).
    pub drop_checksum: u64,
    pub final_stats: Vec<QueueStats>,
}

impl SoakReport {
    pub fn clean(&self) -> bool {
        self.duplicates == 0
            && self.lost == 0
            && self.corrupted == 0
            && self.wrong_status == 0
            && self.out_of_order == 0
            && self.delivered == self.sent
    }
}

/// Payload of message `id`: a deterministic pattern, so the receiver can verify it.
pub fn message_bytes(id: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(id.wrapping_mul(0x2545_F491_4F6C_DD1D)).fill(&mut v);
    v
}

fn pick_size(rng: &mut Rng, max: usize) -> usize {
    let r = rng.below(100);
    let cap = |n: usize| n.min(max) as u64 + 1;
    (match r {
        0..=39 => rng.below(cap(33)),
        40..=59 => rng.below(cap(129)),
        60..=84 => rng.below(cap(40_000)),
        85..=97 => rng.below(cap(400_000)),
        _ => rng.below(cap(max)),
    }) as usize
}

/// Marks messages received with exact match info; the others go to wildcard receives.
const EXACT_BIT: u64 = 1 << 39;

fn exact_bit(seed: u64, i: usize) -> u64 {
    if Rng::new(seed ^ i as u64).below(2) == 0 {
        EXACT_BIT
    } else {
        0
    }
}

struct PendingRecv {
    req: ReqId,
    handle: MemHandle,
    len: usize,
    host: usize,
    /// The message this receive must get (wildcard receives get the next message of
    /// their class from the sender, in send order).
    expect: u64,
    exact: bool,
}

/// Runs the soak and returns what it saw. Host i sends to host (i+1) % n and receives
/// from host (i-1) % n; match info = sender << 40 | sequence, so ordering per sender can
/// be checked on wildcard receives.
#[allow(clippy::needless_range_loop)] // hosts are indexed in several parallel tables
pub fn run(cfg: &SoakConfig) -> SoakReport {
    let mut w = World::new(cfg.hosts, 1, cfg.engine.clone(), cfg.link.clone(), cfg.seed);
    w.copy_mode = cfg.copy_mode;
    // Half the seeds with immediate copies place pull replies in place, as the runtime
    // does without copy offload, and one in four receives them directly (as its direct
    // socket does), with one placement in 200 cut short.
    w.in_place = matches!(cfg.copy_mode, CopyMode::Immediate) && cfg.seed % 2 == 1;
    w.direct = (matches!(cfg.copy_mode, CopyMode::Immediate) && cfg.seed % 4 == 2).then_some(0.005);
    let mut rng = Rng::new(cfg.seed ^ 0xABCD);
    let n = cfg.hosts;
    let to: Vec<PartnerId> = (0..n).map(|i| w.connect(i, 0, (i + 1) % n, 0)).collect();
    let per_host = cfg.messages / n;
    let sizes: Vec<Vec<usize>> = (0..n)
        .map(|_| {
            (0..per_host)
                .map(|_| pick_size(&mut rng, cfg.max_size))
                .collect()
        })
        .collect();
    let mut next_send = vec![0usize; n];
    let mut next_recv = vec![0usize; n];
    let mut sends: HashMap<(usize, ReqId), ()> = HashMap::new();
    let mut in_flight = vec![0usize; n];
    let mut recvs: Vec<PendingRecv> = Vec::new();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut report = SoakReport {
        sent: per_host * n,
        ..Default::default()
    };
    let limit = w.now + cfg.time_limit;
    let wildcard_mask = !((1u64 << 40) - 1) | EXACT_BIT;

    loop {
        for h in 0..n {
            // Post sends within the window.
            while in_flight[h] < cfg.window && next_send[h] < per_host {
                let i = next_send[h];
                next_send[h] += 1;
                let id = ((h as u64) << 40) | exact_bit(cfg.seed, i) | i as u64;
                let data = message_bytes(id, sizes[h][i]);
                let sync = rng.below(50) == 0;
                let req = w.send(h, 0, to[h], id, data, sync);
                sends.insert((h, req), ());
                in_flight[h] += 1;
            }
            // Receives for messages from the previous host: some exact, some wildcard
            // (those must match in send order), posted ahead of or behind the data.
            let from = (h + n - 1) % n;
            let ahead = rng.below(8) as usize;
            while next_recv[h] < per_host && next_recv[h] < next_send[from] + ahead {
                let i = next_recv[h];
                next_recv[h] += 1;
                let class = exact_bit(cfg.seed, i);
                let id = ((from as u64) << 40) | class | i as u64;
                let len = sizes[from][i];
                let exact = class != 0;
                // Sometimes a buffer larger than the message.
                let buf_len = len + rng.below(3) as usize * 100;
                let segs: Vec<usize> = if rng.below(4) == 0 {
                    (0..1 + rng.below(255))
                        .map(|_| rng.below(buf_len as u64 / 8 + 2) as usize)
                        .collect()
                } else {
                    Vec::new()
                };
                let handle = w.hosts[h].mem.register(Buffer::zeroed(buf_len, &segs));
                let (m, mask) = if exact {
                    (id, u64::MAX)
                } else {
                    ((from as u64) << 40, wildcard_mask)
                };
                let expect = id;
                let now = w.now;
                let req = w
                    .engine(h, 0)
                    .irecv(now, m, mask, handle, buf_len as u32, 0)
                    .expect("irecv");
                recvs.push(PendingRecv {
                    req,
                    handle,
                    len: buf_len,
                    host: h,
                    expect,
                    exact,
                });
            }
        }
        // Collect completions.
        for h in 0..n {
            for (_, c) in std::mem::take(&mut w.hosts[h].completions) {
                if sends.remove(&(h, c.req)).is_some() {
                    in_flight[h] -= 1;
                    w.release_send(h, 0, c.req);
                    if c.status.code != StatusCode::Success {
                        report.wrong_status += 1;
                    }
                    continue;
                }
                let Some(pos) = recvs.iter().position(|r| r.host == h && r.req == c.req) else {
                    continue;
                };
                let r = recvs.swap_remove(pos);
                let id = c.status.match_info;
                let buf = w.hosts[h].mem.release(r.handle).expect("buffer");
                if c.status.code != StatusCode::Success {
                    report.wrong_status += 1;
                    continue;
                }
                if !seen.insert(id) {
                    report.duplicates += 1;
                    continue;
                }
                if r.expect != id {
                    if r.exact {
                        report.wrong_status += 1;
                    } else {
                        report.out_of_order += 1;
                    }
                }
                let sender = (id >> 40) as usize;
                let idx = (id & EXACT_BIT.wrapping_sub(1)) as usize;
                let Some(len) = sizes.get(sender).and_then(|s| s.get(idx)).copied() else {
                    // Match info that names no message: corrupted on the way.
                    report.corrupted += 1;
                    continue;
                };
                let expect = message_bytes(id, len.min(r.len));
                let got = buf.to_vec();
                if c.status.msg_length as usize != len
                    || got.get(..expect.len()) != Some(&expect[..])
                    || got[expect.len()..].iter().any(|&b| b != 0)
                {
                    report.corrupted += 1;
                }
                report.delivered += 1;
                report.bytes += len as u64;
            }
        }
        let all_posted = (0..n).all(|h| next_send[h] == per_host && next_recv[h] == per_host);
        if all_posted && recvs.is_empty() && sends.is_empty() {
            break;
        }
        if w.now > limit || !w.step() {
            break;
        }
    }
    // Let acks and notifies settle so queue sizes can be checked.
    let settle = w.now + 30_000_000_000;
    w.run_idle(settle);
    report.lost = report.sent.saturating_sub(seen.len());
    report.sim_time = w.now;
    report.frames = w.stats.frames;
    report.frames_corrupted = w.stats.corrupted;
    report.drop_checksum = w
        .hosts
        .iter()
        .map(|h| h.engines[0].counters.drop_checksum)
        .sum();
    report.final_stats = w.hosts.iter().map(|h| h.engines[0].stats()).collect();
    report
}
