//! omx_flood: a sender that floods one receiver with messages as fast as its window
//! allows, and a receiver that posts nothing for a while and then takes every message,
//! for the flood and memory-bound tests.
//!
//! Sender: `omx_flood --to HOST:BOARD [--to-endpoint E] --id K --messages N --sizes LIST`
//! sends N messages (match info `K << 40 | seq`, length `sizes[seq % len]`, content
//! derived from the match info) with `--window` sends outstanding, and prints
//! `flood: sent=N failed=F seconds=S`.
//!
//! Receiver: `omx_flood --receive --senders S --messages N --sizes LIST --hold-ms T`
//! opens its endpoint, posts nothing for T ms (sampling its queues), then receives
//! S x N messages with wildcard receives, checks each one's length and content and that
//! none arrives twice, and prints `flood: received=... duplicates=... corrupted=...`
//! with the largest queue sizes seen, its counters of interest and its peak resident
//! memory (VmHWM).

use clap::Parser;
use omx_proto::{EngineError, PartnerId, QueueStats, ReqId, StatusCode};
use omx_runtime::{Endpoint, Error, Segment};
use omx_tools::{resolve_participants, runtime_or_exit};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

const KEY: u32 = 0x0f1d;

#[derive(Parser)]
#[command(
    name = "omx_flood",
    about = "Flood a receiver, or be the flooded receiver"
)]
struct Args {
    /// Receiver mode.
    #[arg(long)]
    receive: bool,
    /// Sender: the receiver's board (host:board).
    #[arg(long)]
    to: Option<String>,
    /// Sender: the receiver's endpoint index.
    #[arg(long, default_value_t = 0)]
    to_endpoint: u8,
    /// Sender: this sender's id (match info bits 40 and up).
    #[arg(long, default_value_t = 0)]
    id: u64,
    /// Local endpoint index (receiver default 0, sender any).
    #[arg(long)]
    endpoint: Option<u8>,
    /// Messages per sender.
    #[arg(long, default_value_t = 1000)]
    messages: u64,
    /// Message lengths, cycled.
    #[arg(long, value_delimiter = ',', default_value = "17,100,5000,100000")]
    sizes: Vec<u32>,
    /// Sender: outstanding sends.
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// Receiver: senders to expect (ids 0..S-1).
    #[arg(long, default_value_t = 1)]
    senders: u64,
    /// Receiver: post nothing for this long after opening.
    #[arg(long, default_value_t = 3000)]
    hold_ms: u64,
    /// Receiver: wildcard receives kept posted.
    #[arg(long, default_value_t = 64)]
    posted: usize,
    /// Give up (exit 1) after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

fn fail(msg: &str) -> ! {
    println!("FAILED: {msg}");
    eprintln!("omx_flood: {msg}");
    std::process::exit(1);
}

fn byte_of(match_info: u64, i: usize) -> u8 {
    ((match_info.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .wrapping_add((i as u8).wrapping_mul(7))
}

fn size_of(sizes: &[u32], seq: u64) -> u32 {
    sizes[(seq % sizes.len() as u64) as usize]
}

fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let a: Args = omx_tools::parse_args();
    if a.sizes.is_empty() {
        fail("--sizes is empty");
    }
    if a.receive {
        receive(&a)
    } else {
        send(&a)
    }
}

fn send(a: &Args) {
    let rt = runtime_or_exit("omx_flood");
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    let to = a.to.clone().unwrap_or_else(|| fail("--to is required"));
    // Discovery runs with an open endpoint: open first, then resolve.
    let ep = Endpoint::open(&rt, 0, a.endpoint, KEY)
        .unwrap_or_else(|e| fail(&format!("open endpoint: {e}")));
    let (_, remotes) = resolve_participants(&rt, 0, &[to], deadline).unwrap_or_else(|e| fail(&e));
    let nic = remotes
        .first()
        .unwrap_or_else(|| fail("the receiver is this board"))
        .nic;
    let partner: PartnerId = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            fail("cannot connect to the receiver");
        }
        match ep.connect(
            nic,
            a.to_endpoint,
            KEY,
            Some(left.min(Duration::from_secs(2))),
        ) {
            Ok(Ok(p)) => break p,
            Ok(Err(_)) | Err(Error::Timeout) => {}
            Err(Error::Engine(EngineError::UnknownPeer)) => ep.progress(),
            Err(e) => fail(&format!("connect: {e}")),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let start = Instant::now();
    let mut bufs: HashMap<ReqId, Vec<u8>> = HashMap::new();
    let (mut next, mut done, mut failed) = (0u64, 0u64, 0u64);
    while done < a.messages {
        while bufs.len() < a.window && next < a.messages {
            let m = a.id << 40 | next;
            let len = size_of(&a.sizes, next) as usize;
            let mut buf: Vec<u8> = (0..len).map(|i| byte_of(m, i)).collect();
            let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
            // SAFETY: the buffer stays in `bufs` (or is leaked) until the send completes.
            let r = unsafe { ep.isend(&[seg], partner, m, 0, false) }
                .unwrap_or_else(|e| fail(&format!("isend: {e}")));
            bufs.insert(r, buf);
            next += 1;
        }
        if Instant::now() > deadline {
            std::mem::forget(bufs);
            fail(&format!("timed out after {done} of {} sends", a.messages));
        }
        if let Some(c) = ep.wait_any(0, 0, Some(Duration::from_millis(100))) {
            if bufs.remove(&c.req).is_some() {
                done += 1;
                if c.status.code != StatusCode::Success {
                    failed += 1;
                }
            }
        }
    }
    let until = Instant::now() + Duration::from_secs(5);
    while ep.stats().unacked > 0 && Instant::now() < until {
        ep.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    let c = ep.counters();
    println!(
        "flood: sent={done} failed={failed} seconds={:.2} resends={} vmhwm_kb={}",
        start.elapsed().as_secs_f64(),
        c.resends,
        vm_hwm_kb()
    );
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

#[derive(Default)]
struct Peaks {
    unexpected: usize,
    unexpected_bytes: usize,
    early_bytes: usize,
    partners: usize,
    pulls: usize,
    requests: usize,
}

impl Peaks {
    fn sample(&mut self, s: QueueStats) {
        self.unexpected = self.unexpected.max(s.unexpected);
        self.unexpected_bytes = self.unexpected_bytes.max(s.unexpected_bytes);
        self.early_bytes = self.early_bytes.max(s.early_bytes);
        self.partners = self.partners.max(s.partners);
        self.pulls = self.pulls.max(s.pulls);
        self.requests = self.requests.max(s.requests);
    }
}

fn receive(a: &Args) {
    let rt = runtime_or_exit("omx_flood");
    let ep = Endpoint::open(&rt, 0, Some(a.endpoint.unwrap_or(0)), KEY)
        .unwrap_or_else(|e| fail(&format!("open endpoint: {e}")));
    println!("flood: receiver open, endpoint {}", ep.index());
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    let mut peaks = Peaks::default();
    let hold_until = Instant::now() + Duration::from_millis(a.hold_ms);
    while Instant::now() < hold_until {
        peaks.sample(ep.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    let held = ep.stats();
    println!(
        "flood: holding done, unexpected={} unexpected_bytes={}",
        held.unexpected, held.unexpected_bytes
    );
    let total = a.senders * a.messages;
    let max = a.sizes.iter().copied().max().unwrap_or(0) as usize;
    let mut bufs: HashMap<ReqId, Vec<u8>> = HashMap::new();
    let mut seen: HashSet<u64> = HashSet::new();
    let (mut received, mut duplicates, mut corrupted, mut failed) = (0u64, 0u64, 0u64, 0u64);
    let mut first_problem: Option<String> = None;
    while received < total {
        while bufs.len() < a.posted {
            let mut buf = vec![0u8; max];
            let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
            // SAFETY: the buffer stays in `bufs` (or is leaked) until the receive completes.
            let r = unsafe { ep.irecv(&[seg], 0, 0, 0) }
                .unwrap_or_else(|e| fail(&format!("irecv: {e}")));
            bufs.insert(r, buf);
        }
        if Instant::now() > deadline {
            std::mem::forget(bufs);
            fail(&format!("timed out after {received} of {total} messages"));
        }
        peaks.sample(ep.stats());
        let Some(c) = ep.wait_any(0, 0, Some(Duration::from_millis(100))) else {
            continue;
        };
        let Some(buf) = bufs.remove(&c.req) else {
            continue;
        };
        received += 1;
        let s = c.status;
        let (id, seq) = (s.match_info >> 40, s.match_info & ((1 << 40) - 1));
        let mut problem = None;
        if s.code != StatusCode::Success {
            failed += 1;
            problem = Some(format!("status {:?}", s.code));
        } else if id >= a.senders || seq >= a.messages {
            corrupted += 1;
            problem = Some(format!("unknown match info {:#x}", s.match_info));
        } else if !seen.insert(s.match_info) {
            duplicates += 1;
            problem = Some(format!("{:#x} received twice", s.match_info));
        } else {
            let len = size_of(&a.sizes, seq);
            let bad = s.msg_length != len
                || s.xfer_length != len
                || (0..len as usize).any(|i| buf[i] != byte_of(s.match_info, i));
            if bad {
                corrupted += 1;
                problem = Some(format!("{:#x}: wrong length or content", s.match_info));
            }
        }
        if first_problem.is_none() {
            first_problem = problem;
        }
    }
    // Receives still posted are cancelled; their buffers must outlive the endpoint.
    for r in bufs.keys() {
        let _ = ep.cancel(*r);
    }
    std::mem::forget(bufs);
    let c = ep.counters();
    println!(
        "flood: received={received} duplicates={duplicates} corrupted={corrupted} \
         failed={failed} missing={} max_unexpected={} max_unexpected_bytes={} \
         max_early_bytes={} max_partners={} max_pulls={} max_requests={} \
         drop_unexp_full={} drop_bad_peer_addr={} partner_evicted={} drop_partner_full={} \
         recv_connect_request={} vmhwm_kb={}",
        total - seen.len() as u64,
        peaks.unexpected,
        peaks.unexpected_bytes,
        peaks.early_bytes,
        peaks.partners,
        peaks.pulls,
        peaks.requests,
        c.drop_unexp_full,
        c.drop_bad_peer_addr,
        c.partner_evicted,
        c.drop_partner_full,
        c.recv_connect_request,
        vm_hwm_kb()
    );
    if let Some(p) = first_problem {
        println!("first problem: {p}");
    }
    let clean = duplicates + corrupted + failed == 0 && seen.len() as u64 == total;
    std::process::exit(if clean { 0 } else { 1 });
}
