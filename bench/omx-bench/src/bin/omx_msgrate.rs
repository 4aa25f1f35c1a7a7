//! One-direction message rate: the client streams messages of one size with a window
//! of outstanding sends, the server keeps a window of receives posted. Prints
//! messages/s and MB/s. Server: `omx_msgrate`; client: `omx_msgrate -d h0:0`.
//!
//! Waiting: by default both sides use the runtime's adaptive blocking wait (`ep.wait`:
//! spin `OMX_WAITSPIN_US`, then sleep). `--sleep` uses the same blocking wait but makes it
//! sleep at once (spin budget 0 unless `OMX_WAITSPIN_US`/`OMX_WAITSPIN` is set), so every
//! wait that is not already satisfied costs a sleep and a wake-up, as under the
//! interrupt-driven receive path of the original; `--poll` busy-polls with `test`.
//!
//! At the end the server prints its wake-up counters over the measured interval (from
//! its first message to the end marker), one parseable line:
//! `wakeups sleeps=S io=I timer=T msgs=N per_msg=W io_per_msg=.. timer_per_msg=..`
//! where W = (I + T) / N (the client prints the same about itself with `-v`).
//! `--csv` prints, instead of the human-readable lines, a header and one row:
//! `role,size,msgs,seconds,msgs_per_s,MBps,sleeps,wakeups_io,wakeups_timer,wakeups_per_msg`.

use clap::Parser;
use omx_proto::ReqId;
use omx_runtime::{Endpoint, Runtime, Segment};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

const KEY: u32 = 0x1234_5678;
const DONE: u64 = 0xFFFF_FFFF_FFFF_FFFF;

#[derive(Parser)]
#[command(about = "omx one-direction message rate")]
struct Args {
    /// Peer (client mode), as host:board.
    #[arg(short = 'd')]
    dest: Option<String>,
    /// Message size in bytes.
    #[arg(short = 's', default_value_t = 8)]
    size: usize,
    /// Messages to send (at most, with -t).
    #[arg(short = 'n', default_value_t = 1_000_000)]
    count: u64,
    /// Client: stop after this many seconds even if fewer than -n messages were sent.
    #[arg(short = 't')]
    seconds: Option<f64>,
    /// Outstanding sends (client) / posted receives (server).
    #[arg(short = 'w', default_value_t = 64)]
    window: usize,
    /// Local endpoint index.
    #[arg(short = 'e')]
    endpoint: Option<u8>,
    /// Blocking waits that sleep at once (spin budget 0 unless OMX_WAITSPIN_US is set).
    #[arg(long, conflicts_with = "poll")]
    sleep: bool,
    /// Busy-poll with test() instead of blocking waits.
    #[arg(long)]
    poll: bool,
    /// Machine-readable output: a CSV header and one row.
    #[arg(long)]
    csv: bool,
    /// Client: also print its own wake-up line.
    #[arg(short = 'v')]
    verbose: bool,
}

struct Io<'a> {
    ep: &'a Endpoint,
    poll: bool,
}

impl Io<'_> {
    fn finish(&self, req: ReqId) -> omx_proto::Status {
        if self.poll {
            loop {
                if let Some(c) = self.ep.test(req) {
                    return c.status;
                }
            }
        }
        self.ep.wait(req, None).expect("wait").status
    }
}

/// What one side measured.
struct Report {
    role: &'static str,
    size: usize,
    msgs: u64,
    seconds: f64,
    wake: (u64, u64, u64),
}

impl Report {
    fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.msgs as f64 / self.seconds
        } else {
            0.0
        }
    }

    fn per_msg(&self, x: u64) -> f64 {
        x as f64 / self.msgs.max(1) as f64
    }

    fn wake_line(&self) -> String {
        let (s, i, t) = self.wake;
        format!(
            "wakeups sleeps={s} io={i} timer={t} msgs={} per_msg={:.4} io_per_msg={:.4} timer_per_msg={:.4}",
            self.msgs,
            self.per_msg(i + t),
            self.per_msg(i),
            self.per_msg(t)
        )
    }

    fn csv(&self) {
        let (s, i, t) = self.wake;
        println!("role,size,msgs,seconds,msgs_per_s,MBps,sleeps,wakeups_io,wakeups_timer,wakeups_per_msg");
        println!(
            "{},{},{},{:.6},{:.1},{:.3},{s},{i},{t},{:.4}",
            self.role,
            self.size,
            self.msgs,
            self.seconds,
            self.rate(),
            self.rate() * self.size as f64 / 1e6,
            self.per_msg(i + t)
        );
    }
}

fn delta(a: (u64, u64, u64), b: (u64, u64, u64)) -> (u64, u64, u64) {
    (a.0 - b.0, a.1 - b.1, a.2 - b.2)
}

fn main() {
    let a = Args::parse();
    if a.sleep && std::env::var_os("OMX_WAITSPIN_US").is_none() {
        // Read once when the runtime starts (below), before any thread exists.
        std::env::set_var("OMX_WAITSPIN_US", "0");
    }
    let rt = Runtime::global().unwrap_or_else(|e| panic!("omx: {e}"));
    let idx = if a.dest.is_some() {
        a.endpoint
    } else {
        Some(a.endpoint.unwrap_or(0))
    };
    let ep = Endpoint::open(&rt, 0, idx, KEY).expect("open endpoint");
    let io = Io {
        ep: &ep,
        poll: a.poll,
    };
    let mut buf = vec![0x5Au8; a.size.max(1)];
    match &a.dest {
        None => {
            let mut bufs: Vec<Vec<u8>> = (0..a.window).map(|_| vec![0u8; a.size.max(1)]).collect();
            let mut posted = VecDeque::new();
            for b in bufs.iter_mut() {
                // SAFETY: each buffer outlives its receive, which completes before reuse.
                posted.push_back(
                    unsafe { ep.irecv(&[Segment::memory(b.as_mut_ptr(), a.size)], 0, 0, 0) }
                        .expect("irecv"),
                );
            }
            let mut i = 0usize;
            let mut got = 0u64;
            // The measured interval starts at the first message (not while waiting for
            // the client to come up).
            let mut t0 = Instant::now();
            let mut w0 = ep.wake_stats();
            loop {
                let r = posted.pop_front().expect("window");
                let st = io.finish(r);
                if st.match_info == DONE {
                    break;
                }
                got += 1;
                if got == 1 {
                    t0 = Instant::now();
                    w0 = ep.wake_stats();
                }
                let b = &mut bufs[i % a.window];
                i += 1;
                // SAFETY: as above.
                posted.push_back(
                    unsafe { ep.irecv(&[Segment::memory(b.as_mut_ptr(), a.size)], 0, 0, 0) }
                        .expect("irecv"),
                );
            }
            // Counted: the messages after the first, up to and including the end marker.
            let rep = Report {
                role: "server",
                size: a.size,
                msgs: got.saturating_sub(1).max(1),
                seconds: t0.elapsed().as_secs_f64(),
                wake: delta(ep.wake_stats(), w0),
            };
            if a.csv {
                rep.csv();
            } else {
                println!(
                    "received {got} messages of {} B in {:.3} s",
                    a.size, rep.seconds
                );
                println!("{}", rep.wake_line());
            }
        }
        Some(d) => {
            let nic = rt
                .hostname_to_nic_id(d, Duration::from_secs(10))
                .expect("peer name");
            let to = ep
                .connect(nic, 0, KEY, Some(Duration::from_secs(30)))
                .expect("connect")
                .expect("connect status");
            let seg = Segment::memory(buf.as_mut_ptr(), a.size);
            let limit = a.seconds.map(Duration::from_secs_f64);
            let mut inflight = VecDeque::new();
            let t0 = Instant::now();
            let w0 = ep.wake_stats();
            let mut sent = 0u64;
            while sent < a.count {
                if inflight.len() >= a.window {
                    let r = inflight.pop_front().expect("window");
                    io.finish(r);
                }
                if limit.is_some_and(|l| sent & 63 == 0 && t0.elapsed() >= l) {
                    break;
                }
                // SAFETY: the buffer is only read, and outlives every send.
                inflight.push_back(unsafe { ep.isend(&[seg], to, sent, 0, false) }.expect("isend"));
                sent += 1;
            }
            while let Some(r) = inflight.pop_front() {
                io.finish(r);
            }
            // Synchronous end marker: returns once the server matched everything before it.
            let end =
                unsafe { ep.isend(&[Segment::memory(buf.as_mut_ptr(), 0)], to, DONE, 0, true) }
                    .expect("isend");
            io.finish(end);
            let rep = Report {
                role: "client",
                size: a.size,
                msgs: sent,
                seconds: t0.elapsed().as_secs_f64(),
                wake: delta(ep.wake_stats(), w0),
            };
            if a.csv {
                rep.csv();
            } else {
                let rate = rep.rate();
                println!(
                    "{:>9} {:>12.0} msg/s {:>10.2} MB/s",
                    a.size,
                    rate,
                    rate * a.size as f64 / 1e6
                );
                if a.verbose {
                    println!("{}", rep.wake_line());
                }
            }
        }
    }
}
