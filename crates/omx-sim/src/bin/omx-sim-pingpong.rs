//! Ping-pong between two simulated hosts: the protocol's behaviour without a network.
//! Prints, per message length, the simulated one-way latency on a modelled link and the
//! real CPU time the engines and simulator spent per message.

use clap::Parser;
use omx_proto::{EngineConfig, StatusCode};
use omx_sim::{LinkConfig, World};
use omx_wire::WireConfig;
use std::time::Instant;

#[derive(Parser)]
#[command(about = "Simulated omx ping-pong between two hosts")]
struct Args {
    /// Largest length (exclusive), doubling from 0.
    #[arg(short = 'E', long, default_value_t = (4 << 20) + 1)]
    end: usize,
    /// Round trips per length.
    #[arg(short = 'N', long, default_value_t = 100)]
    iterations: usize,
    /// Modelled one-way link latency in ns.
    #[arg(long, default_value_t = 2_000)]
    latency_ns: u64,
    /// Modelled link bandwidth in bytes/s.
    #[arg(long, default_value_t = 2_900_000_000)]
    bandwidth: u64,
}

fn main() {
    let a = Args::parse();
    let link = LinkConfig {
        latency: a.latency_ns,
        bandwidth: a.bandwidth,
        ..Default::default()
    };
    let mut w = World::new(2, 1, EngineConfig::new(WireConfig::native_9000()), link, 1);
    let ab = w.connect(0, 0, 1, 0);
    let ba = w.connect(1, 0, 0, 0);
    println!(
        "Simulated hosts, no network: latencies and MB/s come from a link model ({} us one \
         way, {} MB/s, set by --latency-ns and --bandwidth) plus the protocol's own \
         exchanges; cpu us/msg is the real CPU time of the engines and simulator here. \
         Measured figures: make demo.",
        a.latency_ns as f64 / 1e3,
        a.bandwidth / 1_000_000
    );
    println!(
        "{:>9} {:>14} {:>12} {:>14}",
        "length", "sim lat (us)", "sim MB/s", "cpu us/msg"
    );
    let mut len = 0usize;
    while len < a.end {
        let data = vec![0x5Au8; len];
        let t0 = w.now;
        let wall = Instant::now();
        for _ in 0..a.iterations {
            for (from, to, p) in [(0usize, 1usize, ab), (1, 0, ba)] {
                let (r, h) = w.recv(to, 0, 1, u64::MAX, len, &[]);
                let sreq = w.send(from, 0, p, 1, data.clone(), false);
                let s = w.wait(to, 0, r, u64::MAX).expect("delivered");
                assert_eq!(s.code, StatusCode::Success);
                w.hosts[to].mem.release(h);
                w.wait(from, 0, sreq, u64::MAX).expect("send completes");
            }
        }
        let msgs = 2 * a.iterations;
        let one_way = (w.now - t0) as f64 / msgs as f64 / 1e3;
        let cpu = wall.elapsed().as_secs_f64() * 1e6 / msgs as f64;
        println!(
            "{len:>9} {one_way:>14.3} {:>12.2} {cpu:>14.3}",
            len as f64 / one_way
        );
        len = if len == 0 { 1 } else { len * 2 };
    }
}
