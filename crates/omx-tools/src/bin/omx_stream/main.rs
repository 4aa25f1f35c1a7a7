//! omx_stream: receive-copy offload benchmark. A receiver (default, like omx_perf's
//! server) takes a one-way stream of large messages from a sender (`-d host:board`) and
//! reports throughput and where the receiving process spent CPU, by thread role: the
//! shape of the Open-MX I/OAT paper's CPU-usage breakdown ("Figure 11"). With
//! `--overlap MS` it measures instead how much of a transfer hides behind computation.
//!
//! Protocol: the sender connects and says hello; the receiver connects back and sends
//! the parameters (size, passes, messages per pass, check); before each pass the
//! receiver posts its receives and sends a 0-byte GO; after the last pass a 0-byte ACK.
//! Every run starts with an untimed warm-up pass (`--warmup` messages).
//!
//! Stream pass: `-W` receives are posted (one buffer each) and each is re-posted as soon
//! as it completed, until `-N` messages of `-s` bytes arrived.
//!
//! Overlap (`--overlap MS`): two timed passes of `-N` messages, one receive at a time.
//! Pass `base`: post the receive, wait for it: `transfer_alone` = mean time per message.
//! Pass `overlap`: post the receive, compute, wait. The computation is a fixed amount of
//! work (sweeps over a private 1 MiB array, no library call) calibrated at start-up to
//! take MS ms on an idle machine (`auto`: as long as the measured `transfer_alone`), so
//! a computation slowed down by library threads competing for the CPU shows up as a
//! longer total instead of as less work. `compute` = the same work timed alone, with
//! the endpoint open and idle, just before the overlap pass. Then
//!   overlap_ratio = (compute + transfer_alone - total) / min(compute, transfer_alone)
//! with `total` the mean time per message from posting the receive to its completion:
//! 1 = the shorter of the two was hidden entirely, 0 = no overlap, < 0 = slower than
//! doing the two one after the other.
//!
//! CPU accounting (receiver, and sender for its own process), over a timed pass of
//! `elapsed` seconds (from the GO to the last completion):
//! - the CPU time of every thread of the process, from its thread CPU clock
//!   (`clock_gettime` on the thread's clock id, what `pthread_getcpuclockid` returns; the
//!   kernel's `sum_exec_runtime`, ns), with the user/system split of
//!   `/proc/self/task/<tid>/stat` (utime, stime), grouped by role: `app` = the main
//!   thread, `progress` = `omx-progress-*`, `copy` = `omx-copy`, `other` = the rest;
//! - `app_lib` = the part of the main thread's CPU time spent inside library calls
//!   (irecv, isend, wait/test loops): the main thread's CPU clock is read around each;
//! - `X%` = CPU seconds of X / elapsed * 100: 100% is one CPU busy for the whole pass
//!   (the machine has `ncpus` * 100%);
//! - **free% = 100 - (progress% + copy% + app_lib%)**: the share of one CPU that the
//!   library (its own threads and the time inside its calls) leaves to the application;
//!   negative when the library takes more than one CPU's worth;
//! - `machine_busy%` / `machine_softirq%`: all CPUs of the machine, from `/proc/stat`
//!   (busy = everything but idle and iowait), in the same unit (100% = one CPU): they
//!   include the peer process on a one-machine setup and the kernel's packet
//!   processing, which is charged to whatever thread was interrupted or to ksoftirqd.
//!
//! `pull_rerequests` / `resends` (engine counters over the pass): loss recovery. A pull
//! frame lost (for instance to a full receive ring) is re-requested only after the
//! pull resend delay, so a run with any of them measured a stall, not a stream.
//!
//! `--csv`: a header and one line per timed pass (a stream run has one, an overlap run
//! two: `base` and `overlap`); human-readable output then goes to stderr.

use clap::Parser;
use omx_proto::{PartnerId, ReqId, Status, StatusCode};
use omx_runtime::{Endpoint, Segment};
use omx_tools::runtime_or_exit;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

const KEY: u32 = 0x5713_ea11;
const HELLO_MATCH: u64 = 0x4845_4c4c_4f00_0000;
const PARAM_MATCH: u64 = 0x5041_5241_4d00_0000;
const ACK_MATCH: u64 = 0x4143_4b00_0000_0000;
const GO_BASE: u64 = 0x474f_0000_0000_0000;
const DATA_BASE: u64 = 0xda7a_0000_0000_0000;
const MAX_PASSES: usize = 4;

#[derive(Parser, Debug)]
#[command(
    name = "omx_stream",
    about = "omx one-way stream benchmark: throughput, CPU per thread role, overlap",
    disable_version_flag = true
)]
struct Args {
    /// Local board index.
    #[arg(short = 'b', default_value_t = 0)]
    board: u32,
    /// Local endpoint index (receiver default 0, sender default any).
    #[arg(short = 'e')]
    endpoint: Option<u8>,
    /// Receiver to send to (sender mode), as host:board.
    #[arg(short = 'd')]
    dest: Option<String>,
    /// Remote endpoint index (sender mode).
    #[arg(short = 'r', default_value_t = 0)]
    remote: u8,
    /// Message size in bytes (K, M suffixes: KiB, MiB). Receiver only: it tells the sender.
    #[arg(short = 's', default_value = "1M", value_parser = parse_size)]
    size: u32,
    /// Messages per timed pass (receiver only).
    #[arg(short = 'N', default_value_t = 200)]
    count: u32,
    /// Receives (receiver) or sends (sender) outstanding.
    #[arg(short = 'W', default_value_t = 8)]
    window: u32,
    /// Untimed warm-up messages before the timed passes (receiver only).
    #[arg(long, default_value_t = 4)]
    warmup: u32,
    /// Check every received byte against the message's pattern (receiver decides).
    #[arg(short = 'c')]
    check: bool,
    /// Overlap benchmark: compute MS milliseconds (or `auto`: as long as one transfer)
    /// between posting each receive and waiting for it (receiver only).
    #[arg(long, value_name = "MS")]
    overlap: Option<String>,
    /// Busy-poll with test instead of blocking waits.
    #[arg(long)]
    poll: bool,
    /// Machine-readable output: a CSV header and one line per timed pass on stdout.
    #[arg(long)]
    csv: bool,
    /// Give up when a peer is silent this long (seconds).
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Print the endpoint's non-zero counters (protocol and runtime) at the end.
    #[arg(short = 'v')]
    verbose: bool,
}

fn parse_size(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1024u64),
        Some((i, 'm' | 'M')) => (&s[..i], 1024 * 1024),
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|e| format!("bad size {s}: {e}"))?;
    u32::try_from(n * mult).map_err(|_| format!("size {s} over 4 GiB"))
}

fn die(msg: &str) -> ! {
    eprintln!("omx_stream: {msg}");
    std::process::exit(1);
}

mod cpu;

use cpu::Role;

/// Library calls of the main thread, with the CPU time spent inside them.
struct Io<'a> {
    ep: &'a Endpoint,
    poll: bool,
    timeout: Duration,
    lib_ns: u64,
}

impl Io<'_> {
    fn timed<T>(&mut self, f: impl FnOnce(&Endpoint) -> T) -> T {
        let t = cpu::self_ns();
        let r = f(self.ep);
        self.lib_ns += cpu::self_ns().saturating_sub(t);
        r
    }

    fn finish(&mut self, req: ReqId, what: &str) -> Status {
        let (poll, timeout) = (self.poll, self.timeout);
        let c = self.timed(|ep| {
            if poll {
                let until = Instant::now() + timeout;
                loop {
                    if let Some(c) = ep.test(req) {
                        break Some(c);
                    }
                    if Instant::now() > until {
                        break None;
                    }
                }
            } else {
                ep.wait(req, Some(timeout))
            }
        });
        let st = c
            .unwrap_or_else(|| die(&format!("{what}: no completion within {timeout:?}")))
            .status;
        if st.code != StatusCode::Success {
            die(&format!("{what} completed with status {:?}", st.code));
        }
        st
    }

    fn send(&mut self, ptr: *mut u8, len: usize, to: PartnerId, m: u64) -> ReqId {
        let seg = Segment::memory(ptr, len);
        // SAFETY: every buffer outlives its request: each is completed before reuse.
        self.timed(|ep| unsafe { ep.isend(&[seg], to, m, 0, false) })
            .unwrap_or_else(|e| die(&format!("send failed: {e}")))
    }

    fn recv(&mut self, ptr: *mut u8, len: usize, m: u64) -> ReqId {
        let seg = Segment::memory(ptr, len);
        // SAFETY: as above.
        self.timed(|ep| unsafe { ep.irecv(&[seg], m, u64::MAX, 0) })
            .unwrap_or_else(|e| die(&format!("receive failed: {e}")))
    }

    fn send0(&mut self, to: PartnerId, m: u64, what: &str) {
        let r = self.send(std::ptr::null_mut(), 0, to, m);
        self.finish(r, what);
    }
}

/// Check pattern: a per-size random base with a per-message stamp every 4 KiB.
struct Pattern {
    base: Vec<u8>,
}

impl Pattern {
    fn new(len: usize) -> Self {
        let mut x = (len as u64) << 32 | 0x9E37_79B9;
        let base = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Pattern { base }
    }

    fn stamp_of(tag: u64, k: usize) -> [u8; 8] {
        (tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ k as u64).to_le_bytes()
    }

    fn write(&self, buf: &mut [u8], tag: u64) {
        let len = self.base.len();
        buf[..len].copy_from_slice(&self.base);
        for k in (0..len).step_by(4096) {
            let n = 8.min(len - k);
            buf[k..k + n].copy_from_slice(&Self::stamp_of(tag, k)[..n]);
        }
    }

    /// First mismatching offset, if any.
    fn check(&self, got: &[u8], tag: u64) -> Option<usize> {
        let len = self.base.len();
        for k in (0..len).step_by(4096) {
            let end = (k + 4096).min(len);
            let n = 8.min(len - k);
            if got[k..k + n] != Self::stamp_of(tag, k)[..n] {
                return Some(k);
            }
            if got[k + n..end] != self.base[k + n..end] {
                return Some(k + n);
            }
        }
        None
    }
}

/// What the receiver tells the sender, 32-bit big-endian fields.
#[derive(Clone, Copy, Debug, Default)]
struct Params {
    size: u32,
    check: u32,
    passes: u32,
    counts: [u32; MAX_PASSES],
}

impl Params {
    const LEN: usize = 12 + 4 * MAX_PASSES;

    fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        let f = [self.size, self.check, self.passes]
            .into_iter()
            .chain(self.counts);
        for (i, v) in f.enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
        }
        out
    }

    fn decode(b: &[u8; Self::LEN]) -> Params {
        let g = |i: usize| u32::from_be_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        let mut counts = [0; MAX_PASSES];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = g(3 + i);
        }
        Params {
            size: g(0),
            check: g(1),
            passes: g(2).min(MAX_PASSES as u32),
            counts,
        }
    }
}

/// Engine counters of loss recovery: (pull frames re-requested, resends).
fn losses(ep: &Endpoint) -> (u64, u64) {
    let c = ep.counters();
    let get = |name: &str| c.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| v);
    (get("pull_rerequests"), get("resends"))
}

fn data_match(pass: usize, i: u32) -> u64 {
    DATA_BASE | (pass as u64) << 32 | i as u64
}

/// Page-touched buffer of `n` slots of `size` bytes.
struct Slots {
    buf: Vec<u8>,
    size: usize,
}

impl Slots {
    fn new(n: usize, size: usize) -> Slots {
        // Written once so that no page fault lands in a timed pass.
        Slots {
            buf: vec![0x5a; n.max(1) * size.max(1)],
            size,
        }
    }
    fn ptr(&mut self, slot: usize) -> *mut u8 {
        self.buf[slot * self.size..].as_mut_ptr()
    }
    fn get(&self, slot: usize) -> &[u8] {
        &self.buf[slot * self.size..(slot + 1) * self.size]
    }
    fn get_mut(&mut self, slot: usize) -> &mut [u8] {
        &mut self.buf[slot * self.size..(slot + 1) * self.size]
    }
}

/// One timed pass's results.
#[derive(Default)]
struct PassResult {
    side: &'static str,
    pass: &'static str,
    size: u32,
    count: u32,
    window: u32,
    usage: cpu::Usage,
    app_lib_s: f64,
    /// Engine counters over the pass: pull frames re-requested, messages resent.
    rerequests: u64,
    resends: u64,
    /// Overlap figures, ms per message.
    compute_ms: Option<f64>,
    transfer_alone_ms: Option<f64>,
    total_ms: Option<f64>,
    compute_wall_ms: Option<f64>,
    overlap_ratio: Option<f64>,
}

impl PassResult {
    fn mbps(&self) -> f64 {
        if self.usage.elapsed > 0.0 {
            self.size as f64 * self.count as f64 / self.usage.elapsed / 1e6
        } else {
            0.0
        }
    }

    fn app_lib_pct(&self) -> f64 {
        if self.usage.elapsed > 0.0 {
            self.app_lib_s / self.usage.elapsed * 100.0
        } else {
            0.0
        }
    }

    fn free_pct(&self) -> f64 {
        100.0 - (self.usage.pct(Role::Progress) + self.usage.pct(Role::Copy) + self.app_lib_pct())
    }

    const HEADER: &'static str = "side,pass,size,count,window,offload,copy_thread,ncpus,\
elapsed_s,MBps,app_pct,app_lib_pct,progress_pct,copy_pct,other_pct,free_pct,\
app_sys_pct,progress_sys_pct,copy_sys_pct,machine_busy_pct,machine_softirq_pct,\
app_csw,progress_csw,copy_csw,pull_rerequests,resends,\
compute_ms,compute_wall_ms,transfer_alone_ms,total_ms,overlap_ratio";

    fn csv(&self) -> String {
        let u = &self.usage;
        let opt = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.3}"));
        format!(
            "{},{},{},{},{},{},{},{},{:.4},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},\
             {:.1},{:.1},{:.1},{:.1},{:.1},{},{},{},{},{},{},{},{},{},{}",
            self.side,
            self.pass,
            self.size,
            self.count,
            self.window,
            omx_runtime::config::settings::text("OMX_COPY_OFFLOAD").unwrap_or_default(),
            u.copy_thread as u8,
            cpu::ncpus(),
            u.elapsed,
            self.mbps(),
            u.pct(Role::App),
            self.app_lib_pct(),
            u.pct(Role::Progress),
            u.pct(Role::Copy),
            u.pct(Role::Other),
            self.free_pct(),
            u.sys_pct(Role::App),
            u.sys_pct(Role::Progress),
            u.sys_pct(Role::Copy),
            u.machine_busy * 100.0,
            u.machine_softirq * 100.0,
            u.csw(Role::App),
            u.csw(Role::Progress),
            u.csw(Role::Copy),
            self.rerequests,
            self.resends,
            opt(self.compute_ms),
            opt(self.compute_wall_ms),
            opt(self.transfer_alone_ms),
            opt(self.total_ms),
            self.overlap_ratio
                .map_or(String::new(), |v| format!("{v:.3}")),
        )
    }

    fn human(&self) -> String {
        let u = &self.usage;
        let mut s = format!(
            "{} {:>8}: {} x {} B (window {}) in {:.3} s = {:.1} MB/s\n  \
             CPU % of one CPU: app {:.1} (in library {:.1}), progress {:.1}, copy {:.1}{}, \
             other {:.1}; free for the application {:.1}\n  \
             system share: app {:.1}, progress {:.1}, copy {:.1}; machine ({} CPUs): busy {:.1}, softirq {:.1}\n  \
             context switches: app {}, progress {}, copy {}",
            self.side,
            self.pass,
            self.count,
            self.size,
            self.window,
            u.elapsed,
            self.mbps(),
            u.pct(Role::App),
            self.app_lib_pct(),
            u.pct(Role::Progress),
            u.pct(Role::Copy),
            if u.copy_thread { "" } else { " (no copy thread)" },
            u.pct(Role::Other),
            self.free_pct(),
            u.sys_pct(Role::App),
            u.sys_pct(Role::Progress),
            u.sys_pct(Role::Copy),
            cpu::ncpus(),
            u.machine_busy * 100.0,
            u.machine_softirq * 100.0,
            u.csw(Role::App),
            u.csw(Role::Progress),
            u.csw(Role::Copy),
        );
        if self.rerequests + self.resends > 0 {
            s += &format!(
                "\n  loss recovery: {} pull re-requests, {} resends (stalls: not a clean stream)",
                self.rerequests, self.resends
            );
        }
        if let Some(t) = self.total_ms {
            s += &format!("\n  per message: total {t:.3} ms");
        }
        if let (Some(c), Some(w)) = (self.compute_ms, self.compute_wall_ms) {
            s += &format!(", compute {c:.3} ms alone ({w:.3} ms during the pass)");
        }
        if let Some(a) = self.transfer_alone_ms {
            s += &format!(", transfer alone {a:.3} ms");
        }
        if let Some(r) = self.overlap_ratio {
            s += &format!(", overlap ratio {r:.3}");
        }
        s
    }
}

// ---------------------------------------------------------------------------------
// Computation for the overlap benchmark

/// Private 1 MiB working set; work is counted in element updates.
struct Compute {
    data: Vec<u64>,
    at: usize,
    /// Element updates per millisecond, measured alone.
    per_ms: f64,
}

impl Compute {
    const ELEMS: usize = (1 << 20) / 8;

    fn new() -> Compute {
        let mut c = Compute {
            data: (0..Self::ELEMS as u64).collect(),
            at: 0,
            per_ms: 0.0,
        };
        // Best of a few 20 ms rounds (noise only slows it down).
        c.run(Self::ELEMS * 4);
        let mut best = 0.0f64;
        for _ in 0..5 {
            let n = Self::ELEMS * 16;
            let t = Instant::now();
            c.run(n);
            best = best.max(n as f64 / (t.elapsed().as_secs_f64() * 1e3));
        }
        c.per_ms = best;
        c
    }

    fn run(&mut self, mut n: usize) {
        let d = &mut self.data;
        while n > 0 {
            let end = (self.at + n).min(Self::ELEMS);
            let mut x = d[(self.at + Self::ELEMS - 1) % Self::ELEMS];
            for v in &mut d[self.at..end] {
                x = (*v ^ x.rotate_left(7)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                *v = x;
            }
            n -= end - self.at;
            self.at = end % Self::ELEMS;
        }
        std::hint::black_box(&self.data);
    }

    fn work_for_ms(&self, ms: f64) -> usize {
        (ms * self.per_ms).round() as usize
    }
}

// ---------------------------------------------------------------------------------

fn main() {
    let a: Args = omx_tools::parse_args();
    if a.window == 0 || a.count == 0 {
        die("-W and -N must be at least 1");
    }
    // Calibrate the computation before any library thread exists.
    let compute = a
        .overlap
        .as_ref()
        .filter(|_| a.dest.is_none())
        .map(|_| Compute::new());
    let rt = runtime_or_exit("omx_stream");
    let index = if a.dest.is_some() {
        a.endpoint
    } else {
        Some(a.endpoint.unwrap_or(0))
    };
    let ep = Endpoint::open(&rt, a.board, index, KEY)
        .unwrap_or_else(|e| die(&format!("failed to open endpoint: {e}")));
    let board = ep.board().clone();
    let hello = format!(
        "Successfully attached endpoint #{} on board #{} ({}, {})",
        ep.index(),
        board.index,
        board.name,
        board.iface.name
    );
    if a.csv {
        eprintln!("{hello}");
    } else {
        println!("{hello}");
    }
    let mut io = Io {
        ep: &ep,
        poll: a.poll,
        timeout: Duration::from_secs(a.timeout.max(1)),
        lib_ns: 0,
    };
    let results = match &a.dest {
        Some(dest) => sender(&a, &mut io, dest),
        None => receiver(&a, &mut io, compute),
    };
    if a.csv {
        println!("{}", PassResult::HEADER);
        for r in &results {
            println!("{}", r.csv());
        }
        for r in &results {
            eprintln!("{}", r.human());
        }
    } else {
        for r in &results {
            println!("{}", r.human());
        }
    }
    if a.verbose {
        // Protocol and runtime counters (copy offload among them), as omx_perf -v.
        let protocol = ep.counters().iter().map(|(n, v)| (n.to_string(), v));
        for (name, v) in protocol
            .chain(ep.runtime_counters())
            .filter(|(_, v)| *v > 0)
        {
            eprintln!("{name:>32} {v}");
        }
    }
}

fn receiver(a: &Args, io: &mut Io, mut compute: Option<Compute>) -> Vec<PassResult> {
    let size = a.size as usize;
    let overlap_ms: Option<Option<f64>> = a.overlap.as_ref().map(|v| {
        if v.trim() == "auto" {
            None
        } else {
            Some(
                v.trim()
                    .parse::<f64>()
                    .unwrap_or_else(|_| die(&format!("--overlap takes MS or auto, not {v}"))),
            )
        }
    });
    // Passes: warm-up, then stream, or base + overlap.
    let mut p = Params {
        size: a.size,
        check: a.check as u32,
        passes: 2,
        counts: [a.warmup, a.count, 0, 0],
    };
    if overlap_ms.is_some() {
        p.passes = 3;
        p.counts[2] = a.count;
    }
    let mut hbuf = [0u8; 8];
    let r = io.recv(hbuf.as_mut_ptr(), 8, HELLO_MATCH);
    // Waiting for a sender: no deadline.
    let st = io
        .ep
        .wait(r, None)
        .unwrap_or_else(|| die("woken up while waiting for a sender"))
        .status;
    if st.code != StatusCode::Success {
        die(&format!("hello completed with status {:?}", st.code));
    }
    let (nic, rep, _) = io
        .ep
        .partner_addr(st.source.expect("sender"))
        .expect("partner");
    let back = match io.ep.connect(nic, rep, KEY, Some(io.timeout)) {
        Ok(Ok(p)) => p,
        Ok(Err(s)) => die(&format!("connect back failed: {:?}", s.code)),
        Err(e) => die(&format!("connect back failed: {e}")),
    };
    let mut pbuf = p.encode();
    let r = io.send(pbuf.as_mut_ptr(), Params::LEN, back, PARAM_MATCH);
    io.finish(r, "parameters");

    let window = if overlap_ms.is_some() { 1 } else { a.window };
    let mut slots = Slots::new(window as usize, size);
    let pattern = a.check.then(|| Pattern::new(size));
    let mut results = Vec::new();
    // Warm-up (untimed), in the timed passes' shape.
    recv_stream(
        io,
        back,
        0,
        p.counts[0],
        window,
        &mut slots,
        &pattern,
        a.size,
    );
    match overlap_ms {
        None => {
            let mut r = recv_stream(io, back, 1, a.count, window, &mut slots, &pattern, a.size);
            r.pass = "stream";
            results.push(r);
        }
        Some(ms) => {
            let mut base = recv_overlap(io, back, 1, a.count, &mut slots, &pattern, a.size, None);
            let alone = base.total_ms.expect("measured");
            base.pass = "base";
            base.transfer_alone_ms = Some(alone);
            let c = compute.as_mut().expect("calibrated");
            let work = c.work_for_ms(ms.unwrap_or(alone));
            let mut o = recv_overlap(
                io,
                back,
                2,
                a.count,
                &mut slots,
                &pattern,
                a.size,
                Some((c, work)),
            );
            o.pass = "overlap";
            o.transfer_alone_ms = Some(alone);
            let (cm, total) = (o.compute_ms.expect("set"), o.total_ms.expect("set"));
            let shorter = cm.min(alone);
            o.overlap_ratio = (shorter > 0.0).then(|| (cm + alone - total) / shorter);
            results.push(base);
            results.push(o);
        }
    }
    io.send0(back, ACK_MATCH, "final ack");
    results
}

/// Windowed stream of `count` messages of pass `pass`; `count == 0` is a no-op.
#[allow(clippy::too_many_arguments)]
fn recv_stream(
    io: &mut Io,
    back: PartnerId,
    pass: usize,
    count: u32,
    window: u32,
    slots: &mut Slots,
    pattern: &Option<Pattern>,
    size: u32,
) -> PassResult {
    let len = size as usize;
    let mut reqs = VecDeque::new();
    for i in 0..window.min(count) {
        let slot = (i % window) as usize;
        reqs.push_back((i, io.recv(slots.ptr(slot), len, data_match(pass, i))));
    }
    let loss0 = losses(io.ep);
    let lib0 = io.lib_ns;
    let s0 = cpu::snapshot();
    if count > 0 {
        io.send0(back, GO_BASE | pass as u64, "go");
    }
    while let Some((i, r)) = reqs.pop_front() {
        let st = io.finish(r, "receive");
        if st.xfer_length != size {
            die(&format!(
                "message {i}: {} bytes, expected {size}",
                st.xfer_length
            ));
        }
        let slot = (i % window) as usize;
        if let Some(p) = pattern {
            if let Some(off) = p.check(slots.get(slot), data_match(pass, i)) {
                die(&format!(
                    "data mismatch in message {i} of pass {pass} at offset {off}"
                ));
            }
        }
        let next = i + window;
        if next < count {
            reqs.push_back((next, io.recv(slots.ptr(slot), len, data_match(pass, next))));
        }
    }
    let s1 = cpu::snapshot();
    let loss1 = losses(io.ep);
    PassResult {
        side: "recv",
        pass: "warmup",
        rerequests: loss1.0 - loss0.0,
        resends: loss1.1 - loss0.1,
        size,
        count,
        window,
        usage: cpu::usage(&s0, &s1),
        app_lib_s: (io.lib_ns - lib0) as f64 / 1e9,
        ..Default::default()
    }
}

/// One receive at a time: post, compute `work` (if any), wait.
#[allow(clippy::too_many_arguments)]
fn recv_overlap(
    io: &mut Io,
    back: PartnerId,
    pass: usize,
    count: u32,
    slots: &mut Slots,
    pattern: &Option<Pattern>,
    size: u32,
    mut work: Option<(&mut Compute, usize)>,
) -> PassResult {
    let len = size as usize;
    // The computation alone, with the endpoint open and idle.
    let compute_ms = work.as_mut().map(|(c, n)| {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            c.run(*n);
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
        best
    });
    let loss0 = losses(io.ep);
    let lib0 = io.lib_ns;
    let s0 = cpu::snapshot();
    io.send0(back, GO_BASE | pass as u64, "go");
    let (mut total, mut comp) = (0.0f64, 0.0f64);
    for i in 0..count {
        let t0 = Instant::now();
        let r = io.recv(slots.ptr(0), len, data_match(pass, i));
        if let Some((c, n)) = work.as_mut() {
            c.run(*n);
        }
        let t1 = Instant::now();
        let st = io.finish(r, "receive");
        let t2 = Instant::now();
        total += (t2 - t0).as_secs_f64();
        comp += (t1 - t0).as_secs_f64();
        if st.xfer_length != size {
            die(&format!(
                "message {i}: {} bytes, expected {size}",
                st.xfer_length
            ));
        }
        if let Some(p) = pattern {
            if let Some(off) = p.check(slots.get(0), data_match(pass, i)) {
                die(&format!(
                    "data mismatch in message {i} of pass {pass} at offset {off}"
                ));
            }
        }
    }
    let s1 = cpu::snapshot();
    let loss1 = losses(io.ep);
    let n = count.max(1) as f64;
    PassResult {
        side: "recv",
        pass: "overlap",
        rerequests: loss1.0 - loss0.0,
        resends: loss1.1 - loss0.1,
        size,
        count,
        window: 1,
        usage: cpu::usage(&s0, &s1),
        app_lib_s: (io.lib_ns - lib0) as f64 / 1e9,
        total_ms: Some(total / n * 1e3),
        compute_ms,
        compute_wall_ms: work.as_ref().map(|_| comp / n * 1e3),
        ..Default::default()
    }
}

fn sender(a: &Args, io: &mut Io, dest: &str) -> Vec<PassResult> {
    let rt = io.ep.runtime();
    let nic = rt
        .hostname_to_nic_id(dest, Duration::from_secs(10))
        .unwrap_or_else(|| die(&format!("cannot find peer name {dest}")));
    let to = match io.ep.connect(nic, a.remote, KEY, Some(io.timeout)) {
        Ok(Ok(p)) => p,
        Ok(Err(s)) => die(&format!("connect to {dest} failed: {:?}", s.code)),
        Err(e) => die(&format!("connect to {dest} failed: {e}")),
    };
    let mut pbuf = [0u8; Params::LEN];
    let pr = io.recv(pbuf.as_mut_ptr(), Params::LEN, PARAM_MATCH);
    let mut hbuf = [0u8; 8];
    let h = io.send(hbuf.as_mut_ptr(), 8, to, HELLO_MATCH);
    io.finish(h, "hello");
    io.finish(pr, "parameters");
    let p = Params::decode(&pbuf);
    let size = p.size as usize;
    let window = a.window.max(1);
    let mut slots = Slots::new(window as usize, size);
    let pattern = (p.check != 0).then(|| Pattern::new(size));
    let mut ack = [0u8; 1];
    let ackr = io.recv(ack.as_mut_ptr(), 0, ACK_MATCH);
    let mut gos: HashMap<usize, ReqId> = HashMap::new();
    for pass in 0..p.passes as usize {
        gos.insert(pass, io.recv(ack.as_mut_ptr(), 0, GO_BASE | pass as u64));
    }
    let mut results = Vec::new();
    for pass in 0..p.passes as usize {
        let count = p.counts[pass];
        if count == 0 {
            continue;
        }
        io.finish(gos.remove(&pass).expect("posted"), "go");
        let loss0 = losses(io.ep);
        let lib0 = io.lib_ns;
        let s0 = cpu::snapshot();
        let mut inflight: VecDeque<ReqId> = VecDeque::new();
        for i in 0..count {
            if inflight.len() as u32 >= window {
                let r = inflight.pop_front().expect("non-empty");
                io.finish(r, "send");
            }
            let slot = (i % window) as usize;
            if let Some(pt) = &pattern {
                pt.write(slots.get_mut(slot), data_match(pass, i));
            }
            let r = io.send(slots.ptr(slot), size, to, data_match(pass, i));
            inflight.push_back(r);
        }
        while let Some(r) = inflight.pop_front() {
            io.finish(r, "send");
        }
        let s1 = cpu::snapshot();
        let loss1 = losses(io.ep);
        if pass > 0 {
            results.push(PassResult {
                side: "send",
                pass: match (p.passes, pass) {
                    (2, _) => "stream",
                    (_, 1) => "base",
                    _ => "overlap",
                },
                size: p.size,
                count,
                window,
                usage: cpu::usage(&s0, &s1),
                app_lib_s: (io.lib_ns - lib0) as f64 / 1e9,
                rerequests: loss1.0 - loss0.0,
                resends: loss1.1 - loss0.1,
                ..Default::default()
            });
        }
    }
    io.finish(ackr, "final ack");
    results
}
