//! Cluster-scale scenarios on the real engine, 16 to 1,024 simulated hosts behind one
//! switch; every message verified. `omx-sim-scale` runs the table of
//! docs/PERFORMANCE.md; `--scenario incast --hosts 1024` one line of it.

use clap::Parser;
use omx_sim::heap::{self, Counting};
use omx_sim::scale::{run, Pattern, ScaleConfig, ScaleReport};
use std::io::Write;
use std::process::ExitCode;

#[global_allocator]
static ALLOC: Counting = Counting;

#[derive(Parser)]
#[command(about = "Simulated clusters of up to 1,024 hosts on the omx protocol engine")]
struct Args {
    /// Scenarios: a2a-small, a2a-large, ring, incast, shifts (comma-separated).
    #[arg(long, default_value = "a2a-small,a2a-large,ring,incast,shifts")]
    scenario: String,
    /// Host counts (comma-separated); without it 16 to 1,024, each scenario up to its
    /// own largest size.
    #[arg(long)]
    hosts: Option<String>,
    /// Endpoints per host (parallel planes of the pattern).
    #[arg(long, default_value_t = 1)]
    endpoints: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the rows as CSV here (for bench/plot_scale.py).
    #[arg(long)]
    csv: Option<String>,
}

/// A scenario: its pattern, message size, and the most hosts it runs at by default
/// (all-to-all is n² messages: 65,280 of 64 KiB at 256 hosts; at 1,024 hosts small
/// ones take minutes, as every ack timer scans all 1,023 partners of its endpoint).
fn scenario(name: &str) -> Option<(Pattern, usize, usize)> {
    Some(match name {
        "a2a-small" => (Pattern::AllToAll, 64, 512),
        "a2a-large" => (Pattern::AllToAll, 64 << 10, 256),
        "ring" => (Pattern::Ring { messages: 64 }, 64 << 10, 1024),
        "incast" => (Pattern::Incast { messages: 4 }, 16 << 10, 1024),
        "shifts" => (Pattern::Shifts, 64 << 10, 1024),
        _ => return None,
    })
}

const HEADER: &str = "scenario,hosts,endpoints,messages,size,sim_ms,frames,retransmits,duplicates_dropped,switch_drops,drop_bursts,partners,endpoint_kib,peer_table_kib,partner_bytes,traffic_peak_kib_per_endpoint,peak_unacked,wall_s,sim_heap_mib,clean";

fn csv_row(name: &str, size: usize, r: &ScaleReport) -> String {
    format!(
        "{name},{},{},{},{size},{:.3},{},{},{},{},{},{},{:.1},{:.1},{},{:.1},{},{:.2},{:.1},{}",
        r.hosts,
        r.endpoints,
        r.messages,
        r.sim_time as f64 / 1e6,
        r.frames,
        r.retransmits,
        r.duplicates_dropped,
        r.switch.dropped,
        r.switch.drop_bursts,
        r.partners_max,
        r.endpoint_bytes as f64 / 1024.0,
        r.peer_table_bytes as f64 / 1024.0,
        r.partner_bytes,
        r.traffic_peak_per_endpoint as f64 / 1024.0,
        r.peak_unacked,
        r.wall.as_secs_f64(),
        r.sim_peak_heap as f64 / (1 << 20) as f64,
        r.clean(),
    )
}

fn main() -> ExitCode {
    let a = Args::parse();
    let explicit_hosts = a.hosts.is_some();
    let list = a.hosts.as_deref().unwrap_or("16,32,64,128,256,512,1024");
    let hosts: Vec<usize> = match list.split(',').map(str::parse).collect() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("--hosts: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut csv = match a.csv.as_deref().map(std::fs::File::create).transpose() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("--csv: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(f) = csv.as_mut() {
        writeln!(f, "{HEADER}").expect("write csv");
    }
    println!("| scenario | hosts | messages | size | simulated | frames | retransmits (spurious) | switch drops (bursts) | partners/endpoint | KiB/endpoint (peer table) | B/partner | peak KiB/endpoint in traffic | wall | sim heap |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut failed = false;
    for name in a.scenario.split(',') {
        let Some((pattern, size, max_hosts)) = scenario(name) else {
            eprintln!("unknown scenario {name}");
            return ExitCode::FAILURE;
        };
        for &n in hosts.iter().filter(|&&n| explicit_hosts || n <= max_hosts) {
            let mut cfg = ScaleConfig::new(n, pattern, size);
            cfg.endpoints = a.endpoints;
            cfg.seed = a.seed;
            let r = run(&cfg);
            println!(
                "| {name} | {n} | {} | {size} B | {:.2} ms | {} | {} ({}) | {} ({}) | {} | {:.0} ({:.0}) | {} | {:.0} | {:.1} s | {:.0} MiB |",
                r.messages,
                r.sim_time as f64 / 1e6,
                r.frames,
                r.retransmits,
                r.duplicates_dropped,
                r.switch.dropped,
                r.switch.drop_bursts,
                r.partners_max,
                r.endpoint_bytes as f64 / 1024.0,
                r.peer_table_bytes as f64 / 1024.0,
                r.partner_bytes,
                r.traffic_peak_per_endpoint as f64 / 1024.0,
                r.wall.as_secs_f64(),
                r.sim_peak_heap as f64 / (1 << 20) as f64,
            );
            if std::env::var_os("OMX_SCALE_COUNTERS").is_some() {
                let c: Vec<String> = r
                    .counters
                    .iter()
                    .filter(|c| c.1 > 0)
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                eprintln!(
                    "{name} {n}: connects {:.1} s wall, {:.3} ms simulated; {}",
                    r.connect_wall.as_secs_f64(),
                    r.connect_time as f64 / 1e6,
                    c.join(" ")
                );
            }
            if !r.clean() {
                failed = true;
                eprintln!(
                    "{name} at {n} hosts: delivered {} of {}, {} duplicates, {} corrupted, {} failed, {} left unexpected",
                    r.delivered, r.messages, r.duplicates, r.corrupted, r.failed, r.leftover_unexpected
                );
            }
            if let Some(f) = csv.as_mut() {
                writeln!(f, "{}", csv_row(name, size, &r)).expect("write csv");
            }
        }
    }
    println!(
        "simulation heap now {:.0} MiB, peak resident {}",
        heap::live() as f64 / (1 << 20) as f64,
        peak_rss().unwrap_or_else(|| "unknown".into())
    );
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The process's peak resident set (VmHWM), as the kernel reports it.
fn peak_rss() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line["VmHWM:".len()..].trim().to_string())
}
