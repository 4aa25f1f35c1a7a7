//! omx_testpeer: a traffic generator and checker for multi-host tests (also handy by hand).
//!
//! Exchange mode (default): every process opens endpoints `0..E-1` on its board; every
//! local endpoint connects to every endpoint of every remote participant, sends it
//! `--count` messages of each `--sizes` length, and receives as many from each of
//! them, checking status, lengths and bytes. Match info encodes who sent what to whom
//! (see [`match_of`]) and the bytes are a pattern derived from the match info, so the
//! receiver knows exactly what to expect. Prints `OK sent=X received=Y` and exits 0, or
//! prints `FAIL: ...` with the first problem and exits 1.
//!
//! `--stream SIZE`: endpoint 0 sends SIZE-byte messages to endpoint 0 of the first
//! remote peer forever, printing every completion. At the first failure it prints
//! `STREAM FAILED ...` and lets the sends in flight complete; then, if more peers were
//! given, it runs the exchange with those (proving the endpoint still works), else it
//! reconnects to the peer (waiting for it to come back) and streams on.
//!
//! `--sink SIZE`: receive any message of up to SIZE bytes forever on every local
//! endpoint, checking each against its match info's pattern, and printing every 10th
//! message of each length (`length=L count=N`); with `--sink-failures-ok` a failed
//! receive (its sender died) prints `RECV FAILED ...` instead of ending the process.

use clap::Parser;
use omx_proto::{EngineError, NicId, PartnerId, ReqId, Status, StatusCode};
use omx_runtime::{Endpoint, Error, Runtime, Segment};
use omx_tools::runtime_or_exit;
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: u32 = 0x7e57_7e57;
/// Size index values with a special meaning.
const DONE_INDEX: u8 = 0xff;
const STREAM_INDEX: u8 = 0xfe;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "omx_testpeer",
    about = "omx multi-host traffic generator and checker",
    disable_version_flag = true
)]
struct Args {
    /// Board names (host:board) of all participants, this one included or not.
    #[arg(long, value_delimiter = ',', required_unless_present = "sink")]
    peers: Vec<String>,
    /// Endpoints per participant (indexes 0..E-1 on the board).
    #[arg(long, default_value_t = 1)]
    endpoints: u8,
    /// Message lengths.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,1,100,5000,40000,300000"
    )]
    sizes: Vec<u32>,
    /// Messages per length and destination endpoint.
    #[arg(long, default_value_t = 3)]
    count: u32,
    /// Seed of the data pattern (all participants must agree).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Outstanding sends per local endpoint.
    #[arg(long, default_value_t = 8)]
    window: usize,
    /// Posted receives per local endpoint and source endpoint.
    #[arg(long, default_value_t = 2)]
    recv_window: usize,
    /// Give up (exit 1) after this many seconds: on the exchange; in stream mode, on the
    /// first connect and, counted from the stream failure, on the exchange after it.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Application key of the endpoints.
    #[arg(long, default_value_t = KEY)]
    key: u32,
    /// Local board index.
    #[arg(long, default_value_t = 0)]
    board: u32,
    /// Give each connect attempt this long before posting a new one (0: one attempt
    /// until the deadline, relying on the library's own connect resends).
    #[arg(long, default_value_t = 2000)]
    connect_attempt_ms: u64,
    /// Wait this long before opening each endpoint after the first (peers then connect
    /// to endpoints that do not exist yet).
    #[arg(long, default_value_t = 0)]
    open_delay_ms: u64,
    /// Stream SIZE-byte messages to the first remote peer (see the module help).
    #[arg(long, conflicts_with = "sink")]
    stream: Option<u32>,
    /// Receive anything up to SIZE bytes forever.
    #[arg(long)]
    sink: Option<u32>,
    /// Sink: a receive that fails (its sender died) is reported (`RECV FAILED`) instead
    /// of ending the process.
    #[arg(long, requires = "sink")]
    sink_failures_ok: bool,
}

/// Match info: sender host (index among the participants' sorted nic ids), sender
/// endpoint, destination endpoint, size index, sequence.
fn match_of(src_host: u8, src_ep: u8, dst_ep: u8, size_index: u8, seq: u32) -> u64 {
    (src_host as u64) << 56
        | (src_ep as u64) << 48
        | (dst_ep as u64) << 40
        | (size_index as u64) << 32
        | seq as u64
}

fn describe(m: u64) -> String {
    format!(
        "{m:#018x} (src host {} ep {}, dst ep {}, size index {}, seq {})",
        m >> 56,
        (m >> 48) & 0xff,
        (m >> 40) & 0xff,
        (m >> 32) & 0xff,
        m & 0xffff_ffff
    )
}

/// Deterministic byte stream of a message, derived from its match info and the seed.
struct PatternGen(u64);

impl PatternGen {
    fn new(match_info: u64, seed: u64) -> Self {
        // splitmix64 of the inputs; never zero (xorshift state).
        let mut z = match_info ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        PatternGen(z | 1)
    }

    fn next8(&mut self) -> [u8; 8] {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes()
    }
}

fn fill(buf: &mut [u8], match_info: u64, seed: u64) {
    let mut g = PatternGen::new(match_info, seed);
    for chunk in buf.chunks_mut(8) {
        let b = g.next8();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// Offset of the first byte that differs from the message's pattern, with the bytes
/// found and expected there.
fn first_mismatch(buf: &[u8], match_info: u64, seed: u64) -> Option<(usize, u8, u8)> {
    let mut g = PatternGen::new(match_info, seed);
    for (i, chunk) in buf.chunks(8).enumerate() {
        let b = g.next8();
        if chunk != &b[..chunk.len()] {
            let k = chunk
                .iter()
                .zip(b.iter())
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            return Some((i * 8 + k, chunk[k], b[k]));
        }
    }
    None
}

/// Prints the first failure of the process and exits 1 (other threads may be mid-way).
fn fail(msg: &str) -> ! {
    static ONCE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = ONCE.lock();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "FAIL: {msg}");
    let _ = out.flush();
    eprintln!("omx_testpeer: {msg}");
    std::process::exit(1);
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A remote endpoint this process talks to.
#[derive(Clone, Debug)]
struct Remote {
    name: String,
    nic: NicId,
    host: u8,
    ep: u8,
}

impl Remote {
    fn label(&self) -> String {
        format!("{} ep {}", self.name, self.ep)
    }
}

/// Participants resolved to nic ids, and this process's host index among them.
struct World {
    me: u8,
    remotes: Vec<Remote>,
}

fn resolve(rt: &Arc<Runtime>, board: u32, names: &[String], eps: u8, deadline: Instant) -> World {
    let (me, hosts) =
        omx_tools::resolve_participants(rt, board, names, deadline).unwrap_or_else(|e| fail(&e));
    let mut remotes = Vec::new();
    for h in &hosts {
        for ep in 0..eps {
            remotes.push(Remote {
                name: h.name.clone(),
                nic: h.nic,
                host: h.id,
                ep,
            });
        }
    }
    World { me, remotes }
}

/// The endpoint's non-zero counters and queue state, for failure messages.
fn diag(ep: &Endpoint) -> String {
    let c: Vec<String> = ep
        .counters()
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    format!(
        "[endpoint {} counters: {}; {:?}]",
        ep.index(),
        c.join(" "),
        ep.stats()
    )
}

/// Connects to `r`, retrying (its process may not be up yet) until `deadline`.
fn connect(ep: &Endpoint, r: &Remote, a: &Args, deadline: Instant) -> PartnerId {
    let mut last = String::from("no attempt");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = match a.connect_attempt_ms {
            0 => left,
            ms => left.min(Duration::from_millis(ms)),
        };
        if left.is_zero() {
            fail(&format!(
                "endpoint {} cannot connect to {}: {last} {}",
                ep.index(),
                r.label(),
                diag(ep)
            ));
        }
        match ep.connect(r.nic, r.ep, a.key, Some(attempt)) {
            Ok(Ok(p)) => return p,
            // Resends exhausted (peer not up yet): try again.
            Ok(Err(s)) => last = format!("status {:?}", s.code),
            Err(Error::Timeout) => last = "timed out".into(),
            // The endpoint's engine may not have picked up a peer that discovery (run
            // by another endpoint) just learned: let it make progress and retry.
            Err(Error::Engine(EngineError::UnknownPeer)) => {
                last = "peer not in the endpoint's table".into();
                ep.progress();
            }
            Err(e) => fail(&format!("connect to {} failed: {e}", r.label())),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

enum Op {
    Send {
        buf: Vec<u8>,
        to: usize,
        match_info: u64,
    },
    Recv {
        buf: Vec<u8>,
        from: usize,
        match_info: u64,
        len: u32,
    },
}

/// Buffers of requests that never completed must outlive the process's use of them.
fn abandon(ops: HashMap<ReqId, Op>) {
    std::mem::forget(ops);
}

fn post_send(ep: &Endpoint, to: PartnerId, mut buf: Vec<u8>, match_info: u64) -> (ReqId, Vec<u8>) {
    let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
    // SAFETY: `buf` is kept (in the op table, or leaked) until the request completes;
    // moving a Vec does not move its heap buffer.
    let r = unsafe { ep.isend(&[seg], to, match_info, 0, false) }
        .unwrap_or_else(|e| fail(&format!("isend {}: {e}", describe(match_info))));
    (r, buf)
}

fn post_recv(ep: &Endpoint, len: u32, match_info: u64) -> (ReqId, Vec<u8>) {
    let mut buf = vec![0u8; len as usize];
    let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
    // SAFETY: as in post_send.
    let r = unsafe { ep.irecv(&[seg], match_info, u64::MAX, 0) }
        .unwrap_or_else(|e| fail(&format!("irecv {}: {e}", describe(match_info))));
    (r, buf)
}

fn check_recv(st: &Status, buf: &[u8], from: &Remote, partner: PartnerId, len: u32, seed: u64) {
    let what = || {
        format!(
            "receive from {} of {}",
            from.label(),
            describe(st.match_info)
        )
    };
    if st.code != StatusCode::Success {
        fail(&format!("{} completed with status {:?}", what(), st.code));
    }
    if st.msg_length != len || st.xfer_length != len {
        fail(&format!(
            "{}: msg_length {} xfer_length {}, expected {len}",
            what(),
            st.msg_length,
            st.xfer_length
        ));
    }
    if st.source != Some(partner) {
        fail(&format!(
            "{}: source {:?}, expected {:?}",
            what(),
            st.source,
            partner
        ));
    }
    if let Some((off, got, want)) = first_mismatch(buf, st.match_info, seed) {
        fail(&format!(
            "{}: data mismatch at offset {off} of {len}: got {got:#04x}, expected {want:#04x}",
            what()
        ));
    }
}

/// Lets acks of our last messages go out before the endpoint closes.
fn linger(ep: &Endpoint) {
    let until = Instant::now() + Duration::from_secs(5);
    while ep.stats().unacked > 0 && Instant::now() < until {
        ep.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The exchange of one local endpoint with every remote endpoint. Returns (sent, received).
fn exchange(ep: &Endpoint, a: &Args, world: &World, deadline: Instant) -> (u64, u64) {
    let me = ep.index();
    let remotes = &world.remotes;
    let partners: Vec<PartnerId> = remotes
        .iter()
        .map(|r| connect(ep, r, a, deadline))
        .collect();
    // Sends: sizes, then sequence, then destinations, so every destination is busy.
    let mut sends = VecDeque::new();
    for (si, _) in a.sizes.iter().enumerate() {
        for seq in 0..a.count {
            for to in 0..remotes.len() {
                sends.push_back((to, si as u8, seq));
            }
        }
    }
    // Receives per source, in the order that source sends them.
    let mut expect: Vec<VecDeque<(u8, u32)>> = remotes
        .iter()
        .map(|_| {
            (0..a.sizes.len())
                .flat_map(|si| (0..a.count).map(move |seq| (si as u8, seq)))
                .collect()
        })
        .collect();
    let mut posted = vec![0usize; remotes.len()];
    let mut ops: HashMap<ReqId, Op> = HashMap::new();
    let mut sends_out = 0usize;
    let (mut sent, mut received) = (0u64, 0u64);
    // The closing barrier: a 0-byte "done" to and from every remote endpoint.
    let mut done_recvs = 0usize;
    for (from, r) in remotes.iter().enumerate() {
        let m = match_of(r.host, r.ep, me, DONE_INDEX, 0);
        let (req, buf) = post_recv(ep, 0, m);
        ops.insert(
            req,
            Op::Recv {
                buf,
                from,
                match_info: m,
                len: 0,
            },
        );
        done_recvs += 1;
    }
    let mut done_sent = false;
    let mut done_sends = 0usize;
    loop {
        while sends_out < a.window {
            let Some((to, si, seq)) = sends.pop_front() else {
                break;
            };
            let r = &remotes[to];
            let m = match_of(world.me, me, r.ep, si, seq);
            let mut buf = vec![0u8; a.sizes[si as usize] as usize];
            fill(&mut buf, m, a.seed);
            let (req, buf) = post_send(ep, partners[to], buf, m);
            ops.insert(
                req,
                Op::Send {
                    buf,
                    to,
                    match_info: m,
                },
            );
            sends_out += 1;
        }
        for (from, r) in remotes.iter().enumerate() {
            while posted[from] < a.recv_window {
                let Some((si, seq)) = expect[from].pop_front() else {
                    break;
                };
                let m = match_of(r.host, r.ep, me, si, seq);
                let len = a.sizes[si as usize];
                let (req, buf) = post_recv(ep, len, m);
                ops.insert(
                    req,
                    Op::Recv {
                        buf,
                        from,
                        match_info: m,
                        len,
                    },
                );
                posted[from] += 1;
            }
        }
        let data_done = sends.is_empty()
            && sends_out == 0
            && expect.iter().all(|e| e.is_empty())
            && posted.iter().all(|&p| p == 0);
        if data_done && !done_sent {
            done_sent = true;
            for (to, r) in remotes.iter().enumerate() {
                let m = match_of(world.me, me, r.ep, DONE_INDEX, 0);
                let (req, buf) = post_send(ep, partners[to], Vec::new(), m);
                ops.insert(
                    req,
                    Op::Send {
                        buf,
                        to,
                        match_info: m,
                    },
                );
                done_sends += 1;
            }
        }
        if done_sent && done_sends == 0 && done_recvs == 0 {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(c) = ep.wait_any(0, 0, Some(left.min(Duration::from_secs(1)))) else {
            if Instant::now() >= deadline {
                let mut pending: Vec<String> = ops
                    .values()
                    .take(8)
                    .map(|o| match o {
                        Op::Send { to, match_info, .. } => {
                            format!("send to {} {}", remotes[*to].label(), describe(*match_info))
                        }
                        Op::Recv {
                            from, match_info, ..
                        } => format!(
                            "receive from {} {}",
                            remotes[*from].label(),
                            describe(*match_info)
                        ),
                    })
                    .collect();
                pending.sort();
                let msg = format!(
                    "endpoint {me}: timed out with {} requests pending (sent {sent}, received \
                     {received}): {} {}",
                    ops.len(),
                    pending.join("; "),
                    diag(ep)
                );
                abandon(ops);
                fail(&msg);
            }
            continue;
        };
        let Some(op) = ops.remove(&c.req) else {
            fail(&format!(
                "endpoint {me}: completion of an unknown request {:?}: {:?}",
                c.req, c.status
            ));
        };
        match op {
            Op::Send {
                buf,
                to,
                match_info,
            } => {
                if c.status.code != StatusCode::Success {
                    fail(&format!(
                        "send to {} of {} completed with status {:?}",
                        remotes[to].label(),
                        describe(match_info),
                        c.status.code
                    ));
                }
                if c.status.match_info != match_info {
                    fail(&format!(
                        "send of {} completed with match info {:#018x}",
                        describe(match_info),
                        c.status.match_info
                    ));
                }
                if (match_info >> 32) & 0xff == DONE_INDEX as u64 {
                    done_sends -= 1;
                } else {
                    sends_out -= 1;
                    sent += 1;
                }
                drop(buf);
            }
            Op::Recv {
                buf,
                from,
                match_info,
                len,
            } => {
                if c.status.match_info != match_info {
                    fail(&format!(
                        "receive posted for {} completed with match info {}",
                        describe(match_info),
                        describe(c.status.match_info)
                    ));
                }
                check_recv(&c.status, &buf, &remotes[from], partners[from], len, a.seed);
                if (match_info >> 32) & 0xff == DONE_INDEX as u64 {
                    done_recvs -= 1;
                } else {
                    posted[from] -= 1;
                    received += 1;
                }
            }
        }
    }
    linger(ep);
    (sent, received)
}

fn open(rt: &Arc<Runtime>, a: &Args, index: u8) -> Endpoint {
    if index > 0 && a.open_delay_ms > 0 {
        std::thread::sleep(Duration::from_millis(a.open_delay_ms));
    }
    Endpoint::open(rt, a.board, Some(index), a.key)
        .unwrap_or_else(|e| fail(&format!("cannot open endpoint {index}: {e}")))
}

/// Runs the exchange on every local endpoint (one thread each) and prints the total.
fn exchange_all(eps: Vec<Endpoint>, a: &Args, world: &World, deadline: Instant) {
    let totals: Vec<(u64, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = eps
            .into_iter()
            .map(|ep| {
                s.spawn(move || {
                    let t = exchange(&ep, a, world, deadline);
                    drop(ep);
                    t
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| fail("a worker panicked")))
            .collect()
    });
    let sent: u64 = totals.iter().map(|t| t.0).sum();
    let received: u64 = totals.iter().map(|t| t.1).sum();
    say(&format!("OK sent={sent} received={received}"));
}

fn stream(rt: &Arc<Runtime>, a: &Args, size: u32) {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(a.timeout);
    // Endpoints first: peer discovery runs in them.
    let mut eps: Vec<Endpoint> = (0..a.endpoints.max(1)).map(|i| open(rt, a, i)).collect();
    let ep = eps.remove(0);
    let world = resolve(rt, a.board, &a.peers, 1, deadline);
    let Some(target) = world.remotes.first().cloned() else {
        fail("--stream needs a remote peer");
    };
    let to = connect(&ep, &target, a, deadline);
    say(&format!(
        "streaming {size}-byte messages to {}",
        target.label()
    ));
    let mut ops: HashMap<ReqId, (u32, Vec<u8>)> = HashMap::new();
    let mut to = to;
    let mut seq = 0u32;
    // After a failure: no new sends until those in flight are done.
    let mut draining = false;
    let others = world.remotes.len() > 1;
    loop {
        while !draining && ops.len() < a.window.max(1) {
            let m = match_of(world.me, ep.index(), target.ep, STREAM_INDEX, seq);
            let mut buf = vec![0u8; size as usize];
            fill(&mut buf, m, a.seed);
            let (req, buf) = post_send(&ep, to, buf, m);
            ops.insert(req, (seq, buf));
            seq = seq.wrapping_add(1);
        }
        if ops.is_empty() {
            if others {
                break;
            }
            // Only this peer: wait for it to come back, then stream on.
            say(&format!("reconnecting to {}", target.label()));
            let far = Instant::now() + Duration::from_secs(86400 * 365);
            to = connect(&ep, &target, a, far);
            say(&format!(
                "STREAM RECONNECTED t_ms={}",
                start.elapsed().as_millis()
            ));
            draining = false;
            continue;
        }
        let Some(c) = ep.wait_any(0, 0, Some(Duration::from_secs(1))) else {
            continue;
        };
        let Some((n, buf)) = ops.remove(&c.req) else {
            continue;
        };
        drop(buf);
        say(&format!(
            "send seq={n} status={:?} t_ms={}",
            c.status.code,
            start.elapsed().as_millis()
        ));
        if c.status.code != StatusCode::Success && !draining {
            say(&format!(
                "STREAM FAILED seq={n} status={:?} t_ms={}",
                c.status.code,
                start.elapsed().as_millis()
            ));
            draining = true;
        }
    }
    // The stream peer failed: the endpoint must still work with everybody else.
    let rest: Vec<String> = a
        .peers
        .iter()
        .filter(|n| **n != target.name)
        .cloned()
        .collect();
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    let world = resolve(rt, a.board, &rest, a.endpoints.max(1), deadline);
    say(&format!(
        "exchanging with {} remote endpoints after the failure",
        world.remotes.len()
    ));
    let mut all = vec![ep];
    all.append(&mut eps);
    exchange_all(all, a, &world, deadline);
}

fn sink(rt: &Arc<Runtime>, a: &Args, size: u32) {
    let eps: Vec<Endpoint> = (0..a.endpoints.max(1)).map(|i| open(rt, a, i)).collect();
    say(&format!("sink ready on {} endpoints", eps.len()));
    std::thread::scope(|s| {
        for ep in &eps {
            s.spawn(move || {
                let mut ops: HashMap<ReqId, Vec<u8>> = HashMap::new();
                let mut n = 0u64;
                let mut by_length: HashMap<u32, u64> = HashMap::new();
                loop {
                    while ops.len() < a.recv_window.max(1) {
                        let mut buf = vec![0u8; size as usize];
                        let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
                        // SAFETY: as in post_send.
                        let r = unsafe { ep.irecv(&[seg], 0, 0, 0) }
                            .unwrap_or_else(|e| fail(&format!("irecv: {e}")));
                        ops.insert(r, buf);
                    }
                    let Some(c) = ep.wait_any(0, 0, Some(Duration::from_secs(1))) else {
                        continue;
                    };
                    let Some(buf) = ops.remove(&c.req) else {
                        continue;
                    };
                    let st = c.status;
                    if a.sink_failures_ok && st.code != StatusCode::Success {
                        say(&format!(
                            "RECV FAILED {} status={:?}",
                            describe(st.match_info),
                            st.code
                        ));
                        continue;
                    }
                    if st.code != StatusCode::Success || st.xfer_length != st.msg_length {
                        fail(&format!(
                            "sink receive of {}: status {:?}, msg_length {} xfer_length {}",
                            describe(st.match_info),
                            st.code,
                            st.msg_length,
                            st.xfer_length
                        ));
                    }
                    let got = &buf[..st.xfer_length as usize];
                    if let Some((off, g, w)) = first_mismatch(got, st.match_info, a.seed) {
                        fail(&format!(
                            "sink receive of {}: data mismatch at offset {off}: got {g:#04x}, \
                             expected {w:#04x}",
                            describe(st.match_info)
                        ));
                    }
                    n += 1;
                    if n % 100 == 1 {
                        say(&format!("endpoint {} received {n}", ep.index()));
                    }
                    let k = by_length.entry(st.msg_length).or_insert(0u64);
                    *k += 1;
                    if *k % 10 == 1 {
                        say(&format!("length={} count={k}", st.msg_length));
                    }
                }
            });
        }
    });
}

fn main() {
    let a: Args = omx_tools::parse_args();
    if a.sizes.len() >= STREAM_INDEX as usize {
        fail("too many sizes");
    }
    if a.endpoints == 0 || a.endpoints > 32 {
        fail("--endpoints must be 1..32");
    }
    let rt = runtime_or_exit("omx_testpeer");
    if let Some(size) = a.sink {
        sink(&rt, &a, size);
        return;
    }
    if let Some(size) = a.stream {
        stream(&rt, &a, size);
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    // Open first, so that peers connecting to us find the endpoints while we resolve.
    let eps: Vec<Endpoint> = (0..a.endpoints).map(|i| open(&rt, &a, i)).collect();
    let world = resolve(&rt, a.board, &a.peers, a.endpoints, deadline);
    if world.remotes.is_empty() {
        fail("no remote peer in --peers");
    }
    exchange_all(eps, &a, &world, deadline);
}
