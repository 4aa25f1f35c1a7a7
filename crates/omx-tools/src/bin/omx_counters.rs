//! omx_counters: the counters of every board (sum of its endpoints, open and closed),
//! and of the "Shared Communication" virtual board: the intra-node traffic (self and
//! shared-memory rings) of every endpoint of this host.

use clap::Parser;
use omx_proto::Counters;
use omx_tools::{fmt_mac, runtime_or_exit};

#[derive(Parser)]
#[command(
    name = "omx_counters",
    about = "Show omx board counters",
    long_about = "Show omx counters: first the \"Shared Communication\" virtual board \
                  (intra-node messages: to oneself and through shared-memory rings \
                  between processes of this host), then every board (frames on the wire, \
                  drops by reason). Counts include endpoints already closed.",
    disable_version_flag = true
)]
struct Args {
    /// Only board n.
    #[arg(short = 'b')]
    board: Option<u32>,
    /// The shared virtual board, then all boards (default).
    #[arg(short = 'a')]
    all: bool,
    /// The shared virtual board only (intra-node counters).
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

/// Counters of intra-node traffic, shown on the shared virtual board instead of the
/// boards' (the engine counts them as `*_local_*`, see omx-proto's local path).
fn is_intra_node(name: &str) -> bool {
    name.contains("_local_") || name.starts_with("local_")
}

/// The counters that `keep` selects, numbered by their place in the full list.
fn print_counters(counters: &[(String, u64)], keep: fn(&str) -> bool, verbose: bool) {
    println!("{}", "=".repeat(55));
    for (i, (name, v)) in counters.iter().enumerate() {
        if keep(name) && (*v != 0 || verbose) {
            println!("{i:03} {v:>9} {name}");
        }
    }
    println!();
}

fn main() {
    let a: Args = omx_tools::parse_args();
    let rt = runtime_or_exit("omx_counters");
    let names = Counters::NAMES;
    let boards: Vec<_> = rt
        .boards
        .iter()
        .filter(|b| a.board.is_none_or(|i| b.index == i))
        .collect();
    if a.board.is_some() && boards.is_empty() {
        eprintln!("omx_counters: no such board");
        std::process::exit(255);
    }
    let per_board: Vec<Vec<(String, u64)>> =
        boards.iter().map(|b| b.dir.board_counters(names)).collect();
    if a.board.is_none() {
        // Intra-node messages go through every board's directory: sum them all.
        let mut shared: Vec<(String, u64)> = names.iter().map(|n| (n.to_string(), 0)).collect();
        for counters in &per_board {
            for (n, v) in counters {
                if let Some((_, s)) = shared.iter_mut().find(|(s, _)| s == n) {
                    *s += v;
                }
            }
        }
        println!("Shared Communication (addr 00:00:00:00:00:00)");
        print_counters(&shared, is_intra_node, a.verbose);
    }
    if !a.shared {
        for (b, counters) in boards.iter().zip(&per_board) {
            println!(
                "{} (board #{} name {} addr {})",
                b.name,
                b.index,
                b.iface.name,
                fmt_mac(b.nic_id)
            );
            print_counters(counters, |n| !is_intra_node(n), a.verbose);
        }
    }
    if a.clear {
        // Clearing zeroes every counter of the boards shown (the shared board's are
        // kept in the boards' directories).
        for b in &boards {
            if let Err(e) = b.dir.clear_counters(names) {
                eprintln!(
                    "omx_counters: cannot clear counters of board #{}: {e}",
                    b.index
                );
                std::process::exit(1);
            }
        }
    }
    let _ = a.all || a.quiet;
}
