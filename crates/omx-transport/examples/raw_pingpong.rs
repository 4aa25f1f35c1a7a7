//! Raw-frame ping-pong over the transport: the latency floor the full omx
//! stack is compared with.
//!
//! ```text
//! scripts/hosts.sh up 2 9000
//! cargo build --release -p omx-transport --example raw_pingpong
//! B=target/release/examples/raw_pingpong
//! scripts/hosts.sh exec 1 $B pong omx0 8 100000 spin &
//! scripts/hosts.sh exec 0 $B ping omx0 8 100000 spin
//! ```
//!
//! Arguments: `ROLE IFACE SIZE ITERATIONS WAIT [--mmsg] [--bypass] [--busy-poll US]`
//! * ROLE: `ping` (measures, prints) or `pong` (echoes until ping says stop).
//! * SIZE: payload bytes after a 32-byte header; frames are at least 60 bytes.
//! * WAIT: `spin` (poll the ring / recvmmsg in a loop) or `block` (sleep in poll).
//! * `--mmsg`: no RX ring; `--bypass`: PACKET_QDISC_BYPASS; `--busy-poll`: SO_BUSY_POLL.
//!
//! Ping sends to the broadcast address until the first reply teaches it
//! pong's MAC; pong answers to the sender's MAC. The median round trip / 2 is
//! printed as the one-way latency.

use std::process::exit;
use std::time::{Duration, Instant};

use omx_transport::{interface_by_name, PacketSocket, SocketOptions, OMX_ETHERTYPE};

const HEADER: usize = 32;
const SEQ_AT: usize = 24;
const STOP: u64 = u64::MAX;
const TYPE_RAW: u8 = 1;

struct Args {
    ping: bool,
    iface: String,
    size: usize,
    iters: usize,
    spin: bool,
    opts: SocketOptions,
}

fn usage() -> ! {
    eprintln!("usage: raw_pingpong ping|pong IFACE SIZE ITERATIONS spin|block [--mmsg] [--bypass] [--busy-poll US]");
    exit(2)
}

fn parse() -> Args {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 5 {
        usage();
    }
    let mut opts = SocketOptions::default();
    let mut rest = a[5..].iter();
    while let Some(flag) = rest.next() {
        match flag.as_str() {
            "--mmsg" => opts.rx_ring_bytes = 0,
            "--bypass" => opts.qdisc_bypass = true,
            "--busy-poll" => {
                opts.busy_poll_us = rest
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            _ => usage(),
        }
    }
    Args {
        ping: match a[0].as_str() {
            "ping" => true,
            "pong" => false,
            _ => usage(),
        },
        iface: a[1].clone(),
        size: a[2].parse().unwrap_or_else(|_| usage()),
        iters: a[3].parse().unwrap_or_else(|_| usage()),
        spin: match a[4].as_str() {
            "spin" => true,
            "block" => false,
            _ => usage(),
        },
        opts,
    }
}

/// Waits for one frame and returns (seq, source MAC); `None` on timeout.
fn recv_one(s: &mut PacketSocket, spin: bool, timeout: Duration) -> Option<(u64, [u8; 6])> {
    let start = Instant::now();
    let mut got = None;
    let mut polls = 0u32;
    loop {
        if !spin
            && !s
                .wait_readable(Some(timeout.saturating_sub(start.elapsed())))
                .expect("poll")
        {
            return None;
        }
        s.recv_batch(1, |f| {
            if f.len() >= HEADER && f[16] == TYPE_RAW {
                let seq = u64::from_le_bytes(f[SEQ_AT..SEQ_AT + 8].try_into().unwrap());
                got = Some((seq, f[6..12].try_into().unwrap()));
            }
        })
        .expect("recv");
        if got.is_some() {
            return got;
        }
        polls = polls.wrapping_add(1);
        if (!spin || polls % 4096 == 0) && start.elapsed() >= timeout {
            return None;
        }
    }
}

fn send(s: &mut PacketSocket, len: usize, dst: [u8; 6], seq: u64) {
    let src = s.interface().mac;
    s.queue_send(len, |f| {
        f[0..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f[12..14].copy_from_slice(&OMX_ETHERTYPE.to_be_bytes());
        f[14..SEQ_AT].fill(0);
        f[16] = TYPE_RAW;
        f[SEQ_AT..SEQ_AT + 8].copy_from_slice(&seq.to_le_bytes());
        f[HEADER..].fill(0xA5);
    })
    .expect("queue");
    s.flush().expect("send");
}

fn main() {
    let a = parse();
    let iface = interface_by_name(&a.iface).unwrap_or_else(|e| {
        eprintln!("raw_pingpong: {e}");
        exit(1)
    });
    let len = (HEADER + a.size).max(60);
    if len > iface.max_frame_len() {
        eprintln!(
            "raw_pingpong: {len}-byte frame exceeds MTU {} of {}",
            iface.mtu, iface.name
        );
        exit(1);
    }
    let mut s = PacketSocket::open(&iface, OMX_ETHERTYPE, &a.opts).unwrap_or_else(|e| {
        eprintln!(
            "raw_pingpong: cannot open packet socket on {}: {e}",
            iface.name
        );
        exit(1)
    });
    let path = if s.uses_ring() { "ring" } else { "recvmmsg" };
    if a.ping {
        ping(&mut s, &a, len, path)
    } else {
        pong(&mut s, &a, len)
    }
}

fn pong(s: &mut PacketSocket, a: &Args, len: usize) {
    loop {
        // Give up if ping never shows up or disappears for long.
        let Some((seq, from)) = recv_one(s, a.spin, Duration::from_secs(30)) else {
            eprintln!("pong: no frame for 30 s, exiting");
            exit(1)
        };
        if seq == STOP {
            return;
        }
        send(s, len, from, seq);
    }
}

fn ping(s: &mut PacketSocket, a: &Args, len: usize, path: &str) {
    let warmup = (a.iters / 10).clamp(10, 10_000);
    let mut peer = [0xff; 6];
    let mut rtt = Vec::with_capacity(a.iters);
    for i in 0..warmup + a.iters {
        let seq = i as u64;
        let t0 = Instant::now();
        send(s, len, peer, seq);
        loop {
            match recv_one(s, a.spin, Duration::from_millis(500)) {
                Some((r, from)) if r == seq => {
                    peer = from;
                    break;
                }
                Some(_) => continue, // stale reply of a retransmitted ping
                None => send(s, len, peer, seq),
            }
        }
        if i >= warmup {
            rtt.push(t0.elapsed().as_nanos() as u64);
        }
    }
    for _ in 0..3 {
        send(s, len, peer, STOP);
    }
    rtt.sort_unstable();
    let pct = |p: f64| rtt[((rtt.len() - 1) as f64 * p) as usize] as f64 / 2000.0;
    let st = s.stats().expect("stats");
    println!(
        "raw_pingpong size={} frame={len}B iters={} wait={} rx={path} one-way us: median {:.2} min {:.2} p99 {:.2} (drops {}, send retries {})",
        a.size,
        a.iters,
        if a.spin { "spin" } else { "block" },
        pct(0.5),
        pct(0.0),
        pct(0.99),
        st.drops,
        st.send_retries,
    );
}
