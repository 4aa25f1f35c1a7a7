//! omx_soak: a long-running traffic soak on real frames, with end-to-end checking.
//!
//! Every process opens one endpoint, connects to every peer given (`-p host:board`,
//! repeated or comma separated; its own name may be listed too), then sends
//! `--messages N` messages (or sends for `--seconds S`) of seeded random sizes to random
//! peers, keeping `--window` sends in flight and `--recv-window` receives posted with a
//! mask that accepts any soak message.
//!
//! Match info: `0xA5` tag (bits 63..56), done flag (bit 55), 7 bits derived from the
//! message (54..48), sender id (47..40: index of the sender among the participants'
//! sorted nic ids), 8 more derived bits (39..32), per-destination sequence number
//! (31..0). A message's length, derived bits and bytes are functions of (seed, sender,
//! destination, sequence), so the receiver knows what to expect. The payload starts
//! with a 32-byte header (magic, sender, sequence, length, and a 64-bit FNV-1a-style
//! checksum of the bytes after the header); a message shorter than the header carries
//! the header's first bytes.
//!
//! The receiver counts: `corrupted` (checksum, header or pattern mismatch, wrong length
//! or match info), `duplicated` (a sequence number seen twice), `misordered` (a message
//! matched after a later one of the same sender: MX keeps per-pair matching order, and
//! since every receive accepts any message, the order of matching is the order in which
//! the receives were posted). At the end every process sends each peer a `done` message
//! whose sequence field is how many messages it sent that peer, waits (`--timeout`) for
//! every peer's `done`, and counts as `lost` what was sent and never delivered. It then
//! prints one line
//!
//! `soak: sent=.. delivered=.. lost=.. duplicated=.. corrupted=.. misordered=.. bytes=..
//! seconds=.. truncated=.. errors=.. stalled=..`
//!
//! (`errors`: requests that completed with a failure status; `stalled`: peers whose
//! `done` never came) and exits 0 only if every count after `bytes`/`seconds` is zero.

use clap::Parser;
use omx_proto::{EngineError, PartnerId, ReqId, StatusCode};
use omx_runtime::{Endpoint, Error, Runtime, Segment};
use omx_tools::runtime_or_exit;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: u32 = 0x50a4_50a4;
const TAG: u64 = 0xa5;
const TAG_MASK: u64 = 0xff << 56;
const DONE_BIT: u64 = 1 << 55;
const HDR: usize = 32;
const MAGIC: u32 = 0x4b41_4f53; // "SOAK"

#[derive(Parser, Debug, Clone)]
#[command(
    name = "omx_soak",
    about = "omx soak on real frames: random traffic between peers, every message checked",
    disable_version_flag = true
)]
struct Args {
    /// Board names (host:board) of all participants, this one included or not.
    #[arg(short = 'p', long = "peers", value_delimiter = ',', required = true)]
    peers: Vec<String>,
    /// Messages this process sends (in total, over all peers).
    #[arg(short = 'n', long, default_value_t = 10_000)]
    messages: u64,
    /// Send for this many seconds instead of a number of messages.
    #[arg(long)]
    seconds: Option<f64>,
    /// Largest message (bytes). The distribution: 94% up to 4 KiB, 5.9% up to 256 KiB,
    /// 0.1% up to this.
    #[arg(long, default_value_t = 16 << 20)]
    max_size: u32,
    /// Seed of sizes, destinations and bytes (all participants must agree).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Sends in flight.
    #[arg(long, default_value_t = 16)]
    window: usize,
    /// Receives posted (each with a --max-size buffer).
    #[arg(long, default_value_t = 16)]
    recv_window: usize,
    /// Seconds to resolve and connect, to wait for the peers' done messages after the
    /// last send, and without any completion while sending, before giving up.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Application key of the endpoints.
    #[arg(long, default_value_t = KEY)]
    key: u32,
    /// Local board index.
    #[arg(long, default_value_t = 0)]
    board: u32,
    /// Endpoint index (the same on every participant).
    #[arg(long, default_value_t = 0)]
    endpoint: u8,
    /// Print progress every this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    progress: u64,
}

fn die(msg: &str) -> ! {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "FAIL: {msg}");
    let _ = out.flush();
    eprintln!("omx_soak: {msg}");
    std::process::exit(2);
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A hash of one message's identity: sizes, derived match bits and bytes come from it.
fn msg_hash(seed: u64, sender: u8, dest: u8, seq: u32) -> u64 {
    splitmix(splitmix(seed) ^ ((sender as u64) << 48 | (dest as u64) << 40 | seq as u64))
}

/// xorshift64* generator (process RNG and byte patterns).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(splitmix(seed) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        ((self.next() >> 32) * n) >> 32
    }
}

/// Length of a message: 94% 0..=4 KiB, 5.9% up to 256 KiB, 0.1% up to `max`.
fn msg_len(h: u64, max: u32) -> u32 {
    let mut r = Rng::new(h ^ 0x5153);
    let class = r.below(1000);
    let top = if class < 940 {
        4096
    } else if class < 999 {
        256 << 10
    } else {
        max
    };
    r.below(top.min(max) as u64 + 1) as u32
}

fn match_of(h: u64, sender: u8, seq: u32, done: bool) -> u64 {
    let bits = splitmix(h ^ 0xb175);
    TAG << 56
        | if done { DONE_BIT } else { 0 }
        | (bits & 0x7f) << 48
        | (sender as u64) << 40
        | ((bits >> 8) & 0xff) << 32
        | seq as u64
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over 8-byte little-endian words (then the remaining bytes one by one): every
/// step is a bijection of the state, so a change confined to one word always shows.
fn checksum(b: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        h ^= u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = h.wrapping_mul(FNV_PRIME);
    }
    for &x in words.remainder() {
        h ^= x as u64;
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

fn header(sender: u8, seq: u32, len: u32, sum: u64) -> [u8; HDR] {
    let mut h = [0u8; HDR];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&(sender as u32).to_le_bytes());
    h[8..16].copy_from_slice(&(seq as u64).to_le_bytes());
    h[16..24].copy_from_slice(&(len as u64).to_le_bytes());
    h[24..32].copy_from_slice(&sum.to_le_bytes());
    h
}

fn fill_pattern(body: &mut [u8], h: u64) {
    let mut g = Rng::new(h ^ 0xda7a);
    for c in body.chunks_mut(8) {
        let b = g.next().to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}

/// The payload of message (sender -> dest, seq).
fn build(seed: u64, max: u32, sender: u8, dest: u8, seq: u32) -> (u64, Vec<u8>) {
    let h = msg_hash(seed, sender, dest, seq);
    let len = msg_len(h, max) as usize;
    let mut buf = vec![0u8; len.max(HDR)];
    fill_pattern(&mut buf[HDR..], h);
    let sum = checksum(&buf[HDR..]);
    buf[..HDR].copy_from_slice(&header(sender, seq, len as u32, sum));
    buf.truncate(len);
    (match_of(h, sender, seq, false), buf)
}

/// Why a received data message is wrong, if it is.
fn check(seed: u64, max: u32, me: u8, sender: u8, seq: u32, m: u64, data: &[u8]) -> Option<String> {
    let h = msg_hash(seed, sender, me, seq);
    let want_len = msg_len(h, max) as usize;
    if m != match_of(h, sender, seq, false) {
        return Some(format!(
            "match info {m:#018x}, expected {:#018x}",
            match_of(h, sender, seq, false)
        ));
    }
    if data.len() != want_len {
        return Some(format!("length {}, expected {want_len}", data.len()));
    }
    if data.len() < HDR {
        let want = header(sender, seq, want_len as u32, FNV_OFFSET);
        if data != &want[..data.len()] {
            return Some(format!(
                "short message bytes {data:02x?}, expected {:02x?}",
                &want[..data.len()]
            ));
        }
        return None;
    }
    let sum = checksum(&data[HDR..]);
    let want = header(
        sender,
        seq,
        want_len as u32,
        u64::from_le_bytes(data[24..32].try_into().expect("8 bytes")),
    );
    if data[..HDR] != want {
        return Some(format!(
            "header {:02x?}, expected {want:02x?} (checksum aside)",
            &data[..HDR]
        ));
    }
    if want[24..32] != sum.to_le_bytes() {
        return Some(format!(
            "checksum {sum:#018x} of the payload, header says {:#018x}",
            u64::from_le_bytes(want[24..32].try_into().expect("8 bytes"))
        ));
    }
    None
}

/// Records the first problem (and prints it at once on stderr).
fn note(what: &str, first: &mut Option<String>) {
    if first.is_none() {
        eprintln!("omx_soak: {what}");
        *first = Some(what.to_string());
    }
}

/// A remote participant.
type Peer = omx_tools::Participant;

/// Resolves the peers' names (waiting for discovery) and returns this process's id and
/// the remote participants.
fn resolve(rt: &Arc<Runtime>, a: &Args, deadline: Instant) -> (u8, Vec<Peer>) {
    omx_tools::resolve_participants(rt, a.board, &a.peers, deadline).unwrap_or_else(|e| die(&e))
}

/// Connects to `p`, retrying (its process may not be up yet) until `deadline`.
fn connect(ep: &Endpoint, p: &Peer, a: &Args, deadline: Instant) -> PartnerId {
    let mut last = String::from("no attempt");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            die(&format!("cannot connect to {}: {last}", p.name));
        }
        match ep.connect(
            p.nic,
            a.endpoint,
            a.key,
            Some(left.min(Duration::from_secs(2))),
        ) {
            Ok(Ok(x)) => return x,
            Ok(Err(s)) => last = format!("status {:?}", s.code),
            Err(Error::Timeout) => last = "timed out".into(),
            Err(Error::Engine(EngineError::UnknownPeer)) => {
                last = "peer not in the endpoint's table".into();
                ep.progress();
            }
            Err(e) => die(&format!("connect to {} failed: {e}", p.name)),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What each posted receive is, in posting order, once it completed.
enum Matched {
    Data { sender: u8, seq: u32 },
    Done { sender: u8, count: u32 },
    Nothing,
}

enum Op {
    Send { buf: Vec<u8>, done: bool },
    Recv { buf: Vec<u8>, index: u64 },
}

#[derive(Default)]
struct Totals {
    sent: u64,
    delivered: u64,
    lost: u64,
    duplicated: u64,
    corrupted: u64,
    misordered: u64,
    truncated: u64,
    errors: u64,
    stalled: u64,
    bytes: u64,
}

/// Per-sender receive state.
#[derive(Default)]
struct FromPeer {
    seen: Vec<u64>,
    distinct: u64,
    highest: Option<u32>,
    done: Option<u32>,
    /// Messages of this sender that arrived corrupted (not lost, not delivered).
    corrupted: u64,
}

impl FromPeer {
    /// Marks `seq` seen; false if it already was.
    fn mark(&mut self, seq: u32) -> bool {
        let (w, b) = (seq as usize / 64, seq % 64);
        if self.seen.len() <= w {
            self.seen.resize(w + 1, 0);
        }
        let fresh = self.seen[w] & (1 << b) == 0;
        self.seen[w] |= 1 << b;
        fresh
    }
}

fn main() {
    let a: Args = omx_tools::parse_args();
    let max = a.max_size;
    let rt = runtime_or_exit("omx_soak");
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    let ep = Endpoint::open(&rt, a.board, Some(a.endpoint), a.key)
        .unwrap_or_else(|e| die(&format!("cannot open endpoint {}: {e}", a.endpoint)));
    let (me, peers) = resolve(&rt, &a, deadline);
    if peers.is_empty() {
        die("no remote peer in --peers");
    }
    let partners: Vec<PartnerId> = peers
        .iter()
        .map(|p| connect(&ep, p, &a, deadline))
        .collect();
    let by_id: HashMap<u8, usize> = peers.iter().enumerate().map(|(i, p)| (p.id, i)).collect();
    say(&format!(
        "omx_soak: id {me}, {} peers, {}, max size {max}",
        peers.len(),
        match a.seconds {
            Some(s) => format!("{s} s"),
            None => format!("{} messages", a.messages),
        }
    ));

    let start = Instant::now();
    let send_until = a.seconds.map(|s| start + Duration::from_secs_f64(s));
    let mut rng = Rng::new(a.seed ^ (me as u64) << 32 ^ 0x50a4);
    let mut t = Totals::default();
    let mut next_seq = vec![0u32; peers.len()];
    let mut from: Vec<FromPeer> = peers.iter().map(|_| FromPeer::default()).collect();
    let mut ops: HashMap<ReqId, Op> = HashMap::new();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let (mut sends_out, mut recvs_out, mut done_out) = (0usize, 0usize, 0usize);
    let (mut posted, mut retired) = (0u64, 0u64);
    let mut matched: BTreeMap<u64, Matched> = BTreeMap::new();
    let mut sending = true;
    let mut done_sent = false;
    let mut final_deadline: Option<Instant> = None;
    let mut last_progress = Instant::now();
    let mut last_completion = Instant::now();
    let stall_limit = Duration::from_secs(a.timeout);
    let mut first_problem: Option<String> = None;

    loop {
        // Receives: keep the window posted.
        while recvs_out < a.recv_window.max(1) {
            let mut buf = pool.pop().unwrap_or_else(|| vec![0u8; max as usize]);
            let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
            // SAFETY: the buffer is kept in `ops` (or leaked at exit) until the request
            // completes; moving a Vec does not move its heap buffer.
            let r = unsafe { ep.irecv(&[seg], TAG << 56, TAG_MASK, 0) }
                .unwrap_or_else(|e| die(&format!("irecv: {e}")));
            ops.insert(r, Op::Recv { buf, index: posted });
            posted += 1;
            recvs_out += 1;
        }
        // Sends.
        if sending {
            let more = match send_until {
                Some(u) => Instant::now() < u,
                None => t.sent < a.messages,
            };
            if !more {
                sending = false;
            }
        }
        while sending && sends_out < a.window.max(1) {
            if send_until.is_none() && t.sent >= a.messages {
                break;
            }
            let to = rng.below(peers.len() as u64) as usize;
            let seq = next_seq[to];
            next_seq[to] += 1;
            let (m, mut buf) = build(a.seed, max, me, peers[to].id, seq);
            let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
            // SAFETY: as for receives.
            let r = unsafe { ep.isend(&[seg], partners[to], m, 0, false) }
                .unwrap_or_else(|e| die(&format!("isend: {e}")));
            ops.insert(r, Op::Send { buf, done: false });
            sends_out += 1;
            t.sent += 1;
        }
        if !sending && sends_out == 0 && !done_sent {
            done_sent = true;
            for (i, p) in peers.iter().enumerate() {
                let h = msg_hash(a.seed, me, p.id, u32::MAX);
                let m = match_of(h, me, next_seq[i], true);
                // SAFETY: a zero-length send reads no memory.
                let r = unsafe {
                    ep.isend(
                        &[Segment::memory(
                            std::ptr::NonNull::<u8>::dangling().as_ptr(),
                            0,
                        )],
                        partners[i],
                        m,
                        0,
                        false,
                    )
                }
                .unwrap_or_else(|e| die(&format!("isend done: {e}")));
                ops.insert(
                    r,
                    Op::Send {
                        buf: Vec::new(),
                        done: true,
                    },
                );
                done_out += 1;
            }
            final_deadline = Some(Instant::now() + Duration::from_secs(a.timeout));
        }
        if done_sent && done_out == 0 && from.iter().all(|f| f.done.is_some()) {
            break;
        }
        if let Some(d) = final_deadline {
            if Instant::now() >= d {
                let missing: Vec<&str> = peers
                    .iter()
                    .zip(&from)
                    .filter(|(_, f)| f.done.is_none())
                    .map(|(p, _)| p.name.as_str())
                    .collect();
                note(
                    &format!(
                        "timed out: {done_out} done sends pending, no done from [{}]; {:?}",
                        missing.join(" "),
                        ep.stats()
                    ),
                    &mut first_problem,
                );
                t.stalled += missing.len() as u64;
                t.errors += done_out as u64;
                break;
            }
        }
        if a.progress > 0 && last_progress.elapsed() >= Duration::from_secs(a.progress) {
            last_progress = Instant::now();
            say(&format!(
                "progress: t={:.0}s sent={} delivered={} posted={posted} retired={retired}",
                start.elapsed().as_secs_f64(),
                t.sent,
                t.delivered
            ));
        }

        let Some(c) = ep.wait_any(0, 0, Some(Duration::from_millis(200))) else {
            if final_deadline.is_none() && last_completion.elapsed() >= stall_limit {
                note(
                    &format!(
                        "no completion for {} s while sending ({} sends in flight); {:?}",
                        a.timeout,
                        sends_out,
                        ep.stats()
                    ),
                    &mut first_problem,
                );
                t.stalled += 1;
                break;
            }
            continue;
        };
        last_completion = Instant::now();
        let Some(op) = ops.remove(&c.req) else {
            die(&format!("completion of an unknown request {:?}", c.req));
        };
        let st = c.status;
        match op {
            Op::Send { buf, done } => {
                drop(buf);
                if done {
                    done_out -= 1;
                } else {
                    sends_out -= 1;
                }
                if st.code != StatusCode::Success {
                    t.errors += 1;
                    note(
                        &format!("send {:#018x} completed with {:?}", st.match_info, st.code),
                        &mut first_problem,
                    );
                }
            }
            Op::Recv { buf, index } => {
                recvs_out -= 1;
                let m = st.match_info;
                let sender = ((m >> 40) & 0xff) as u8;
                let seq = m as u32;
                let what = if st.code != StatusCode::Success {
                    t.errors += 1;
                    note(
                        &format!("receive {m:#018x} completed with {:?}", st.code),
                        &mut first_problem,
                    );
                    Matched::Nothing
                } else if !by_id.contains_key(&sender)
                    || st.source != Some(partners[by_id[&sender]])
                {
                    t.corrupted += 1;
                    note(
                        &format!(
                            "receive {m:#018x}: sender {sender} from source {:?}",
                            st.source
                        ),
                        &mut first_problem,
                    );
                    Matched::Nothing
                } else if st.xfer_length != st.msg_length {
                    t.truncated += 1;
                    note(
                        &format!(
                            "receive {m:#018x}: {} of {} bytes",
                            st.xfer_length, st.msg_length
                        ),
                        &mut first_problem,
                    );
                    Matched::Nothing
                } else if m & DONE_BIT != 0 {
                    let h = msg_hash(a.seed, sender, me, u32::MAX);
                    if m != match_of(h, sender, seq, true) || st.msg_length != 0 {
                        t.corrupted += 1;
                        note(
                            &format!("bad done message {m:#018x}, {} bytes", st.msg_length),
                            &mut first_problem,
                        );
                        Matched::Nothing
                    } else {
                        Matched::Done { sender, count: seq }
                    }
                } else {
                    let data = &buf[..st.xfer_length as usize];
                    match check(a.seed, max, me, sender, seq, m, data) {
                        Some(why) => {
                            t.corrupted += 1;
                            from[by_id[&sender]].corrupted += 1;
                            note(
                                &format!(
                                    "message {seq} from {}: {why}",
                                    peers[by_id[&sender]].name
                                ),
                                &mut first_problem,
                            );
                            Matched::Nothing
                        }
                        None => Matched::Data { sender, seq },
                    }
                };
                pool.push(buf);
                matched.insert(index, what);
                // Sequence checks in matching (= posting) order.
                while let Some(w) = matched.remove(&retired) {
                    retired += 1;
                    match w {
                        Matched::Nothing => {}
                        Matched::Data { sender, seq } => {
                            let i = by_id[&sender];
                            let f = &mut from[i];
                            if f.done.is_some() {
                                t.misordered += 1;
                                note(
                                    &format!("message {seq} from {} after its done", peers[i].name),
                                    &mut first_problem,
                                );
                            }
                            if !f.mark(seq) {
                                t.duplicated += 1;
                                note(
                                    &format!(
                                        "message {seq} from {} delivered twice",
                                        peers[i].name
                                    ),
                                    &mut first_problem,
                                );
                                continue;
                            }
                            if f.highest.is_some_and(|h| seq < h) {
                                t.misordered += 1;
                                note(
                                    &format!(
                                        "message {seq} from {} matched after {}",
                                        peers[i].name,
                                        f.highest.unwrap_or(0)
                                    ),
                                    &mut first_problem,
                                );
                            }
                            f.highest = Some(f.highest.map_or(seq, |h| h.max(seq)));
                            f.distinct += 1;
                            t.delivered += 1;
                            t.bytes += msg_len(msg_hash(a.seed, sender, me, seq), max) as u64;
                        }
                        Matched::Done { sender, count } => {
                            let i = by_id[&sender];
                            if from[i].done.is_some() {
                                t.duplicated += 1;
                                note(
                                    &format!("second done from {}", peers[i].name),
                                    &mut first_problem,
                                );
                            } else {
                                from[i].done = Some(count);
                            }
                        }
                    }
                }
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    for (i, f) in from.iter().enumerate() {
        if let Some(n) = f.done {
            let lost = (n as u64).saturating_sub(f.distinct + f.corrupted);
            if lost > 0 {
                note(
                    &format!(
                        "{lost} of {n} messages from {} never arrived",
                        peers[i].name
                    ),
                    &mut first_problem,
                );
            }
            t.lost += lost;
            // Sequence numbers at or beyond the count the sender reported.
            let beyond = f
                .highest
                .map_or(0, |h| (h as u64 + 1).saturating_sub(n as u64));
            t.corrupted += beyond;
        }
    }
    // Let the acks of our last messages go out before the endpoint closes.
    let until = Instant::now() + Duration::from_secs(3);
    while ep.stats().unacked > 0 && Instant::now() < until {
        ep.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    let counters = ep.counters();
    let injected = ep.fault_stats().map_or(0, |f| f.corrupted);
    say(&format!(
        "soak: sent={} delivered={} lost={} duplicated={} corrupted={} misordered={} bytes={} \
         seconds={seconds:.2} truncated={} errors={} stalled={} frames_corrupted={injected} \
         drop_checksum={}",
        t.sent,
        t.delivered,
        t.lost,
        t.duplicated,
        t.corrupted,
        t.misordered,
        t.bytes,
        t.truncated,
        t.errors,
        t.stalled,
        counters.drop_checksum
    ));
    let clean =
        t.lost + t.duplicated + t.corrupted + t.misordered + t.truncated + t.errors + t.stalled
            == 0;
    if !clean {
        if let Some(p) = &first_problem {
            say(&format!("first problem: {p}"));
        }
    }
    // Requests may still be pending (on failure): their buffers must outlive them.
    std::mem::forget(ops);
    std::process::exit(if clean { 0 } else { 1 });
}
