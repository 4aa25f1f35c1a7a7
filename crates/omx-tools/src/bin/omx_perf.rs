//! omx_perf: ping-pong benchmark between two endpoints (server without -d, client
//! with -d host:board), options and output as the original's.

use clap::Parser;
use omx_proto::{PartnerId, ReqId, StatusCode};
use omx_runtime::{Endpoint, Segment};
use omx_tools::runtime_or_exit;
use std::time::{Duration, Instant};

const KEY: u32 = 0x1234_5678;
const PARAM_MATCH: u64 = 0x1234_5678_8765_4321;
const ACK_MATCH: u64 = 0xabcd_dcba_abcd_dcba;
const CONNECT_BACK_CONTEXT: u64 = 0xdead_beef;

#[derive(Parser, Debug)]
#[command(
    name = "omx_perf",
    about = "omx ping-pong benchmark",
    long_about = "omx ping-pong benchmark. Start a server (no -d) on one host, then a \
                  client with -d SERVER_BOARD_NAME (host:board, e.g. h0:0) on another: for \
                  each length (from -S, times -M plus -I, below -E) the client sends, the \
                  server replies with the same length, -W warm-up then -N timed round \
                  trips. The client prints one line per length: length in bytes, one-way \
                  latency in microseconds (the mean of the timed round trips, halved; the \
                  whole round trip with -U), and the bandwidth that gives (length / \
                  latency) in MB/s (10^6 bytes) and MiB/s. With -L it adds the median, \
                  99th percentile and maximum of the timed iterations, in the same unit \
                  as the mean.",
    after_help = "Example: omx_perf &  then  omx_perf -d myhost:0 -S 8 -E 9 -N 10000",
    disable_version_flag = true
)]
struct Args {
    /// Local board index.
    #[arg(short = 'b', default_value_t = 0)]
    board: u32,
    /// Local endpoint index (server default 0, client default any).
    #[arg(short = 'e')]
    endpoint: Option<u8>,
    /// Peer to connect to (client mode), as host:board.
    #[arg(short = 'd')]
    dest: Option<String>,
    /// Remote endpoint index.
    #[arg(short = 'r', default_value_t = 0)]
    remote: u8,
    /// Server: stay alive for further clients.
    #[arg(short = 's')]
    stay: bool,
    /// Sleep in wait instead of busy polling.
    #[arg(short = 'w')]
    wait: bool,
    /// Yield between polls.
    #[arg(short = 'y')]
    yield_: bool,
    /// Verbose: the server says when it starts and when a client is done; the client
    /// adds per-iteration sleeps and wake-ups (by a frame, by the timer) of its own
    /// side; both print their endpoint's non-zero counters at exit.
    #[arg(short = 'v')]
    verbose: bool,
    /// Page-aligned (64 KiB) buffers.
    #[arg(short = 'a')]
    aligned: bool,
    /// First length.
    #[arg(short = 'S', default_value_t = 0)]
    start: u32,
    /// Last length (exclusive).
    #[arg(short = 'E', default_value_t = 4 * 1024 * 1024 + 1)]
    end: u32,
    /// Length multiplier.
    #[arg(short = 'M', default_value_t = 2)]
    mult: u32,
    /// Length increment.
    #[arg(short = 'I', default_value_t = 0)]
    incr: u32,
    /// Iterations per length.
    #[arg(short = 'N', default_value_t = 1000)]
    iter: u32,
    /// Warm-up iterations per length.
    #[arg(short = 'W', default_value_t = 10)]
    warmup: u32,
    /// Pause between lengths, in ms.
    #[arg(short = 'P', default_value_t = 100)]
    pause: u32,
    /// Unidirectional: replies are 0-byte.
    #[arg(short = 'U')]
    unidir: bool,
    /// Synchronous sends (issend).
    #[arg(short = 'Y')]
    sync: bool,
    /// Check received bytes (fails loudly on a mismatch).
    #[arg(short = 'c')]
    check: bool,
    /// Time every iteration and add three columns per length: median, 99th percentile
    /// and maximum latency (us, halved like the mean; whole round trips with -U).
    #[arg(short = 'L', long = "percentiles")]
    percentiles: bool,
}

/// What the client tells the server, 32-bit fields in network order.
#[derive(Clone, Copy, Debug, Default)]
struct Params {
    start: u32,
    end: u32,
    mult: u32,
    incr: u32,
    iter: u32,
    warmup: u32,
    unidir: u32,
    sync: u32,
    check: u32,
    pause: u32,
}

impl Params {
    fn encode(&self) -> [u8; 40] {
        let f = [
            self.start,
            self.end,
            self.mult,
            self.incr,
            self.iter,
            self.warmup,
            self.unidir,
            self.sync,
            self.check,
            self.pause,
        ];
        let mut out = [0u8; 40];
        for (i, v) in f.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
        }
        out
    }

    fn decode(b: &[u8; 40]) -> Params {
        let g = |i: usize| u32::from_be_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        Params {
            start: g(0),
            end: g(1),
            mult: g(2),
            incr: g(3),
            iter: g(4),
            warmup: g(5),
            unidir: g(6),
            sync: g(7),
            check: g(8),
            pause: g(9),
        }
    }

    fn lengths(&self) -> Vec<u32> {
        let mut v = Vec::new();
        let mut len = self.start as u64;
        while len < self.end as u64 {
            v.push(len as u32);
            let next = len * self.mult.max(1) as u64 + self.incr as u64;
            len = if next <= len {
                if len == 0 {
                    1
                } else {
                    len + 1
                }
            } else {
                next
            };
        }
        v
    }
}

struct Buffers {
    send: Vec<u8>,
    recv: Vec<u8>,
    offset: usize,
}

impl Buffers {
    fn new(max: usize, aligned: bool) -> Self {
        // Over-allocate so that an aligned window of `max` bytes exists.
        let pad = if aligned { 65536 } else { 0 };
        let send = vec![0u8; max + pad];
        let offset = if aligned {
            (65536 - send.as_ptr() as usize % 65536) % 65536
        } else {
            0
        };
        let recv = vec![0u8; max + pad];
        Buffers { send, recv, offset }
    }

    fn send_seg(&mut self, len: usize) -> Segment {
        Segment::memory(self.send[self.offset..].as_mut_ptr(), len)
    }

    fn recv_seg(&mut self, len: usize) -> Segment {
        let off = if self.offset > 0 {
            (65536 - self.recv.as_ptr() as usize % 65536) % 65536
        } else {
            0
        };
        Segment::memory(self.recv[off..].as_mut_ptr(), len)
    }

    fn recv_bytes(&self, len: usize) -> &[u8] {
        let off = if self.offset > 0 {
            (65536 - self.recv.as_ptr() as usize % 65536) % 65536
        } else {
            0
        };
        &self.recv[off..off + len]
    }
}

/// Check pattern: a per-length random base (made once) with a per-iteration stamp every
/// 4 KiB, so stale or misplaced data is caught while checking costs only a memcmp.
struct Pattern {
    base: Vec<u8>,
}

impl Pattern {
    fn new(len: u32) -> Self {
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

    fn write(&self, buf: &mut [u8], iter: u32) {
        buf[..self.base.len()].copy_from_slice(&self.base);
        Self::stamp(&mut buf[..self.base.len()], iter);
    }

    fn stamp(buf: &mut [u8], iter: u32) {
        let len = buf.len();
        for k in (0..len).step_by(4096) {
            let v = (iter.wrapping_mul(2_654_435_761) ^ k as u32).to_le_bytes();
            let n = 4.min(len - k);
            buf[k..k + n].copy_from_slice(&v[..n]);
        }
    }

    fn matches(&self, got: &[u8], iter: u32, scratch: &mut Vec<u8>) -> bool {
        scratch.clear();
        scratch.extend_from_slice(&self.base);
        Self::stamp(scratch, iter);
        got == &scratch[..]
    }
}

struct Io<'a> {
    ep: &'a Endpoint,
    sleep: bool,
    yield_: bool,
}

impl Io<'_> {
    fn finish(&self, req: ReqId) -> omx_proto::Status {
        let c = if self.sleep {
            self.ep.wait(req, None).expect("wait")
        } else {
            loop {
                if let Some(c) = self.ep.test(req) {
                    break c;
                }
                if self.yield_ {
                    std::thread::yield_now();
                }
            }
        };
        c.status
    }

    fn send(&self, seg: Segment, to: PartnerId, m: u64, sync: bool) -> ReqId {
        // SAFETY: the buffers outlive every request: each is completed before reuse.
        unsafe { self.ep.isend(&[seg], to, m, 0, sync) }
            .unwrap_or_else(|e| die(&format!("send failed: {e}")))
    }

    fn recv(&self, seg: Segment, m: u64, mask: u64) -> ReqId {
        // SAFETY: as above.
        unsafe { self.ep.irecv(&[seg], m, mask, 0) }
            .unwrap_or_else(|e| die(&format!("receive failed: {e}")))
    }

    fn check_ok(&self, s: omx_proto::Status, what: &str) {
        if s.code != StatusCode::Success {
            die(&format!("{what} completed with status {:?}", s.code));
        }
    }
}

fn die(msg: &str) -> ! {
    eprintln!("omx_perf: {msg}");
    std::process::exit(1);
}

fn main() {
    let a: Args = omx_tools::parse_args();
    let rt = runtime_or_exit("omx_perf");
    let index = if a.dest.is_some() {
        a.endpoint
    } else {
        Some(a.endpoint.unwrap_or(0))
    };
    let ep = Endpoint::open(&rt, a.board, index, KEY)
        .unwrap_or_else(|e| die(&format!("failed to open endpoint: {e}")));
    let board = ep.board().clone();
    println!(
        "Successfully attached endpoint #{} on board #{} ({}, {})",
        ep.index(),
        board.index,
        board.name,
        board.iface.name
    );
    let io = Io {
        ep: &ep,
        sleep: a.wait,
        yield_: a.yield_,
    };
    match &a.dest {
        Some(dest) => client(&a, &io, dest),
        None => server(&a, &io),
    }
    if a.verbose {
        let protocol = ep.counters().iter().map(|(n, v)| (n.to_string(), v));
        for (name, v) in protocol
            .chain(ep.runtime_counters())
            .filter(|(_, v)| *v > 0)
        {
            eprintln!("{name:>32} {v}");
        }
    }
}

fn server(a: &Args, io: &Io) {
    loop {
        if a.verbose {
            println!("Starting server on endpoint {}", io.ep.index());
        }
        let mut pbuf = [0u8; 40];
        let r = io.recv(
            Segment::memory(pbuf.as_mut_ptr(), 40),
            PARAM_MATCH,
            u64::MAX,
        );
        let st = io.ep.wait(r, None).expect("wait").status;
        io.check_ok(st, "parameter receive");
        let p = Params::decode(&pbuf);
        let client = st.source.expect("sender");
        let (nic, rep, _) = io.ep.partner_addr(client).expect("partner");
        // Connect back as the original does, and check the context comes back.
        let c = io
            .ep
            .iconnect(nic, rep, KEY, CONNECT_BACK_CONTEXT)
            .unwrap_or_else(|e| die(&format!("connect back: {e}")));
        let cs = io
            .ep
            .wait(c, Some(Duration::from_secs(30)))
            .unwrap_or_else(|| die("connect back timed out"))
            .status;
        assert_eq!(cs.context, CONNECT_BACK_CONTEXT);
        io.check_ok(cs, "connect back");
        let back = cs.source.expect("partner");
        let ack = io.send(
            Segment::memory(std::ptr::null_mut(), 0),
            back,
            ACK_MATCH,
            false,
        );
        io.check_ok(io.ep.wait(ack, None).expect("wait").status, "ack");
        let lengths = p.lengths();
        let max = lengths.iter().copied().max().unwrap_or(0) as usize;
        let mut bufs = Buffers::new(max, a.aligned);
        let mut scratch = Vec::new();
        for &len in &lengths {
            let reply_len = if p.unidir != 0 { 0 } else { len };
            let (pat, reply_pat) = (Pattern::new(len), Pattern::new(reply_len));
            for i in 0..p.warmup + p.iter {
                let seg = bufs.recv_seg(len as usize);
                let r = io.recv(seg, 0, 0);
                let st = io.finish(r);
                io.check_ok(st, "receive");
                if p.check != 0 {
                    if !pat.matches(bufs.recv_bytes(len as usize), i, &mut scratch) {
                        die(&format!("data mismatch at length {len}, iteration {i}"));
                    }
                    reply_pat.write(&mut bufs.send[bufs.offset..], i + 1);
                }
                let seg = bufs.send_seg(reply_len as usize);
                let s = io.send(seg, back, 0, p.sync != 0);
                io.check_ok(io.finish(s), "send");
            }
        }
        if a.verbose {
            println!("Client done");
        }
        if !a.stay {
            break;
        }
    }
}

fn client(a: &Args, io: &Io, dest: &str) {
    let rt = io.ep.runtime();
    let nic = rt
        .hostname_to_nic_id(dest, Duration::from_secs(10))
        .unwrap_or_else(|| die(&format!("cannot find peer name {dest}")));
    let to = match io
        .ep
        .connect(nic, a.remote, KEY, Some(Duration::from_secs(30)))
    {
        Ok(Ok(p)) => p,
        Ok(Err(s)) => die(&format!("connect to {dest} failed: {:?}", s.code)),
        Err(e) => die(&format!("connect to {dest} failed: {e}")),
    };
    let p = Params {
        start: a.start,
        end: a.end,
        mult: a.mult,
        incr: a.incr,
        iter: a.iter,
        warmup: a.warmup,
        unidir: a.unidir as u32,
        sync: a.sync as u32,
        check: a.check as u32,
        pause: a.pause,
    };
    let mut ackbuf = [0u8; 1];
    let ack = io.recv(Segment::memory(ackbuf.as_mut_ptr(), 0), ACK_MATCH, u64::MAX);
    let mut pbuf = p.encode();
    let s = io.send(
        Segment::memory(pbuf.as_mut_ptr(), 40),
        to,
        PARAM_MATCH,
        true,
    );
    io.check_ok(
        io.ep
            .wait(s, Some(Duration::from_secs(30)))
            .unwrap_or_else(|| die("server did not answer"))
            .status,
        "parameters",
    );
    io.check_ok(
        io.ep
            .wait(ack, Some(Duration::from_secs(30)))
            .unwrap_or_else(|| die("server did not connect back"))
            .status,
        "server ack",
    );
    let lengths = p.lengths();
    let max = lengths.iter().copied().max().unwrap_or(0) as usize;
    let mut bufs = Buffers::new(max, a.aligned);
    let mut scratch = Vec::new();
    // Lines of numbers only below it, so scripts keep reading rows whose first field
    // is a number.
    print!(
        "{:>9} {:>9} {:>9} {:>9}",
        "length", "lat(us)", "MB/s", "MiB/s"
    );
    if a.verbose {
        print!(" {:>7} {:>7} {:>7}", "sleeps", "wk_io", "wk_tmr");
    }
    if a.percentiles {
        print!(" {:>9} {:>9} {:>9}", "p50(us)", "p99(us)", "max(us)");
    }
    println!();
    for &len in &lengths {
        let reply_len_ = if a.unidir { 0 } else { len };
        let (pat, reply_pat) = if a.check {
            (Pattern::new(len), Pattern::new(reply_len_))
        } else {
            (Pattern::new(0), Pattern::new(0))
        };
        if a.pause > 0 {
            std::thread::sleep(Duration::from_millis(a.pause as u64));
        }
        let reply_len = if a.unidir { 0 } else { len };
        let mut t0 = Instant::now();
        let mut w0 = io.ep.wake_stats();
        let mut samples = Vec::with_capacity(if a.percentiles { p.iter as usize } else { 0 });
        for i in 0..p.warmup + p.iter {
            if i == p.warmup {
                t0 = Instant::now();
                w0 = io.ep.wake_stats();
            }
            let ti = Instant::now();
            if a.check {
                pat.write(&mut bufs.send[bufs.offset..], i);
            }
            let r = io.recv(bufs.recv_seg(reply_len as usize), 0, 0);
            let s = io.send(bufs.send_seg(len as usize), to, 0, a.sync);
            io.check_ok(io.finish(s), "send");
            let st = io.finish(r);
            io.check_ok(st, "receive");
            if st.xfer_length != reply_len {
                die(&format!(
                    "reply of {} bytes, expected {reply_len}",
                    st.xfer_length
                ));
            }
            if a.check
                && !reply_pat.matches(bufs.recv_bytes(reply_len as usize), i + 1, &mut scratch)
            {
                die(&format!(
                    "data mismatch in reply at length {len}, iteration {i}"
                ));
            }
            if a.percentiles && i >= p.warmup {
                samples.push(ti.elapsed().as_secs_f64() * 1e6);
            }
        }
        let total = t0.elapsed().as_secs_f64() * 1e6;
        let lat = total / (2 - a.unidir as u32) as f64 / p.iter.max(1) as f64;
        let mbs = if lat > 0.0 { len as f64 / lat } else { 0.0 };
        print!("{len:9} {lat:9.3} {mbs:9.2} {:9.2}", mbs * 1e6 / 1048576.0);
        if a.verbose {
            // This side's sleeps and wake-ups (by a frame, by the timer) per iteration.
            let w = io.ep.wake_stats();
            let per = |x: u64, y: u64| (x - y) as f64 / p.iter.max(1) as f64;
            print!(
                " {:7.2} {:7.2} {:7.2}",
                per(w.0, w0.0),
                per(w.1, w0.1),
                per(w.2, w0.2)
            );
        }
        if a.percentiles {
            let halve = (2 - a.unidir as u32) as f64;
            let [p50, p99, max] = percentiles(&mut samples, [0.5, 0.99, 1.0]).map(|v| v / halve);
            print!(" {p50:9.3} {p99:9.3} {max:9.3}");
        }
        println!();
    }
}

/// Nearest-rank percentiles (fractions in 0..=1) of `samples`, sorted in place; zeros
/// when there are none.
fn percentiles<const N: usize>(samples: &mut [f64], at: [f64; N]) -> [f64; N] {
    samples.sort_by(f64::total_cmp);
    at.map(|q| {
        if samples.is_empty() {
            return 0.0;
        }
        let rank = (q * samples.len() as f64).ceil() as usize;
        samples[rank.clamp(1, samples.len()) - 1]
    })
}
