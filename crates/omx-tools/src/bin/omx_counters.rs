//! omx_counters: the counters of every board (sum of its endpoints, open and closed).

use clap::Parser;
use omx_proto::Counters;
use omx_tools::{fmt_mac, runtime_or_exit};

#[derive(Parser)]
#[command(
    name = "omx_counters",
    about = "Show omx board counters",
    disable_version_flag = true
)]
struct Args {
    /// Only board n.
    #[arg(short = 'b')]
    board: Option<u32>,
    /// All boards (default).
    #[arg(short = 'a')]
    all: bool,
    /// The shared-communication virtual board only (no intra-node path yet: empty).
    #[arg(short = 's')]
    shared: bool,
    /// Clear the counters after reading them.
    #[arg(short = 'c')]
    clear: bool,
    /// Only non-zero counters (default).
    #[arg(short = 'q')]
    quiet: bool,
    /// Also zero counters.
    #[arg(short = 'v')]
    verbose: bool,
}

fn main() {
    let a = Args::parse();
    let rt = runtime_or_exit("omx_counters");
    let names = Counters::NAMES;
    if a.shared {
        println!("Shared Communication (addr 00:00:00:00:00:00)");
        println!("{}", "=".repeat(55));
        println!();
        return;
    }
    let mut found = false;
    for b in rt
        .boards
        .iter()
        .filter(|b| a.board.is_none_or(|i| b.index == i))
    {
        found = true;
        println!(
            "{} (board #{} name {} addr {})",
            b.name,
            b.index,
            b.iface.name,
            fmt_mac(b.nic_id)
        );
        println!("{}", "=".repeat(55));
        for (i, (name, v)) in b.dir.board_counters(names).iter().enumerate() {
            if *v != 0 || a.verbose {
                println!("{i:03} {v:>9} {name}");
            }
        }
        println!();
        if a.clear {
            if let Err(e) = b.dir.clear_counters(names) {
                eprintln!(
                    "omx_counters: cannot clear counters of board #{}: {e}",
                    b.index
                );
                std::process::exit(1);
            }
        }
    }
    if !found {
        eprintln!("omx_counters: no such board");
        std::process::exit(255);
    }
    let _ = a.all || a.quiet;
}
