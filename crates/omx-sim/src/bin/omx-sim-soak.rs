//! Long simulated soak: many seeds of random traffic over a faulty link, every message
//! verified. `omx-sim-soak --seeds 20 --messages 10000`.

use clap::Parser;
use omx_proto::EngineConfig;
use omx_sim::soak::{run, SoakConfig};
use omx_sim::{CopyMode, LinkConfig};
use omx_wire::WireConfig;
use std::process::ExitCode;

#[derive(Parser)]
#[command(about = "Simulated soak of the omx protocol engine under injected faults")]
struct Args {
    /// Number of seeds (each a full run).
    #[arg(long, default_value_t = 8)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Messages per seed.
    #[arg(long, default_value_t = 10_000)]
    messages: usize,
    /// Hosts in the ring.
    #[arg(long, default_value_t = 2)]
    hosts: usize,
    /// Largest message in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_size: usize,
    #[arg(long, default_value_t = 0.05)]
    loss: f64,
    #[arg(long, default_value_t = 0.02)]
    dup: f64,
    #[arg(long, default_value_t = 0.05)]
    reorder: f64,
    /// Wire mode: native9000, native1500 or mx.
    #[arg(long, default_value = "all")]
    wire: String,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let wires: Vec<(&str, WireConfig)> = [
        ("native9000", WireConfig::native_9000()),
        ("native1500", WireConfig::native_1500()),
        ("mx", WireConfig::mx_compat()),
    ]
    .into_iter()
    .filter(|(n, _)| a.wire == "all" || a.wire == *n)
    .collect();
    let mut failed = false;
    let (mut total_msgs, mut total_dup, mut total_lost, mut total_bad) = (0, 0, 0, 0);
    for seed in a.first_seed..a.first_seed + a.seeds {
        for (name, wire) in &wires {
            let cfg = SoakConfig {
                seed,
                hosts: a.hosts,
                messages: a.messages,
                max_size: a.max_size,
                window: 32,
                link: LinkConfig::faulty(a.loss, a.dup, a.reorder),
                engine: EngineConfig::new(*wire),
                copy_mode: if seed % 2 == 0 {
                    CopyMode::Immediate
                } else {
                    CopyMode::Deferred { max_delay: 100_000 }
                },
                time_limit: 24 * 3_600 * 1_000_000_000,
            };
            let t = std::time::Instant::now();
            let r = run(&cfg);
            println!(
                "seed {seed:3} {name:10} sent {:6} delivered {:6} duplicates {} lost {} corrupted {} wrong-status {} out-of-order {} | {:.1} MB, {} frames, {:.1} s simulated, {:.1} s real",
                r.sent, r.delivered, r.duplicates, r.lost, r.corrupted, r.wrong_status, r.out_of_order,
                r.bytes as f64 / 1e6, r.frames, r.sim_time as f64 / 1e9, t.elapsed().as_secs_f64()
            );
            total_msgs += r.sent;
            total_dup += r.duplicates;
            total_lost += r.lost;
            total_bad += r.corrupted + r.wrong_status + r.out_of_order;
            failed |= !r.clean();
        }
    }
    println!("total: {total_msgs} messages, {total_dup} duplicates, {total_lost} lost, {total_bad} corrupted/misordered/failed");
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
