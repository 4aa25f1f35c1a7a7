//! One-direction message rate: the client streams messages of one size with a window
//! of outstanding sends, the server keeps a window of receives posted. Prints
//! messages/s and MB/s. Server: `omx_msgrate`; client: `omx_msgrate -d h0:0`.

use clap::Parser;
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
    /// Messages to send.
    #[arg(short = 'n', default_value_t = 1_000_000)]
    count: u64,
    /// Outstanding sends (client) / posted receives (server).
    #[arg(short = 'w', default_value_t = 64)]
    window: usize,
    /// Local endpoint index.
    #[arg(short = 'e')]
    endpoint: Option<u8>,
}

fn main() {
    let a = Args::parse();
    let rt = Runtime::global().unwrap_or_else(|e| panic!("omx: {e}"));
    let idx = if a.dest.is_some() {
        a.endpoint
    } else {
        Some(a.endpoint.unwrap_or(0))
    };
    let ep = Endpoint::open(&rt, 0, idx, KEY).expect("open endpoint");
    let mut buf = vec![0x5Au8; a.size.max(1)];
    match &a.dest {
        None => {
            let mut bufs: Vec<Vec<u8>> = (0..a.window).map(|_| vec![0u8; a.size.max(1)]).collect();
            let mut posted = VecDeque::new();
            for b in bufs.iter_mut() {
                // SAFETY: each buffer outlives its receive, which completes before reuse.
                posted.push_back(
                    unsafe {
                        ep.irecv(
                            &[Segment {
                                ptr: b.as_mut_ptr(),
                                len: a.size,
                            }],
                            0,
                            0,
                            0,
                        )
                    }
                    .expect("irecv"),
                );
            }
            let mut i = 0usize;
            let mut got = 0u64;
            let t0 = Instant::now();
            loop {
                let r = posted.pop_front().expect("window");
                let c = ep.wait(r, None).expect("wait");
                if c.status.match_info == DONE {
                    break;
                }
                got += 1;
                let b = &mut bufs[i % a.window];
                i += 1;
                // SAFETY: as above.
                posted.push_back(
                    unsafe {
                        ep.irecv(
                            &[Segment {
                                ptr: b.as_mut_ptr(),
                                len: a.size,
                            }],
                            0,
                            0,
                            0,
                        )
                    }
                    .expect("irecv"),
                );
            }
            let dt = t0.elapsed().as_secs_f64();
            println!("received {got} messages of {} B in {dt:.3} s", a.size);
        }
        Some(d) => {
            let nic = rt
                .hostname_to_nic_id(d, Duration::from_secs(10))
                .expect("peer name");
            let to = ep
                .connect(nic, 0, KEY, Some(Duration::from_secs(30)))
                .expect("connect")
                .expect("connect status");
            let seg = Segment {
                ptr: buf.as_mut_ptr(),
                len: a.size,
            };
            let mut inflight = VecDeque::new();
            let t0 = Instant::now();
            for i in 0..a.count {
                if inflight.len() >= a.window {
                    let r = inflight.pop_front().expect("window");
                    ep.wait(r, None).expect("wait");
                }
                // SAFETY: the buffer is only read, and outlives every send.
                inflight.push_back(unsafe { ep.isend(&[seg], to, i, 0, false) }.expect("isend"));
            }
            while let Some(r) = inflight.pop_front() {
                ep.wait(r, None).expect("wait");
            }
            // Synchronous end marker: returns once the server matched everything before it.
            let end = unsafe {
                ep.isend(
                    &[Segment {
                        ptr: buf.as_mut_ptr(),
                        len: 0,
                    }],
                    to,
                    DONE,
                    0,
                    true,
                )
            }
            .expect("isend");
            ep.wait(end, None).expect("wait");
            let dt = t0.elapsed().as_secs_f64();
            let rate = a.count as f64 / dt;
            println!(
                "{:>9} {:>12.0} msg/s {:>10.2} MB/s",
                a.size,
                rate,
                rate * a.size as f64 / 1e6
            );
        }
    }
}
