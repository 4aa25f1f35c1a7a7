//! omx_endpoint_info: the endpoints open on each board, with their owners.

use clap::Parser;
use omx_runtime::MAX_ENDPOINTS;
use omx_tools::{fmt_mac, runtime_or_exit};

#[derive(Parser)]
#[command(
    name = "omx_endpoint_info",
    about = "Show open omx endpoints",
    disable_version_flag = true
)]
struct Args {
    /// Only board n.
    #[arg(short = 'b')]
    board: Option<u32>,
    /// All boards (default).
    #[arg(short = 'a')]
    all: bool,
    /// Also list closed endpoints.
    #[arg(short = 'v')]
    verbose: bool,
}

fn main() {
    let a: Args = omx_tools::parse_args();
    let rt = runtime_or_exit("omx_endpoint_info");
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
        println!("{}", "=".repeat(46));
        let eps = b.dir.endpoints();
        for i in 0..MAX_ENDPOINTS {
            match eps.iter().find(|e| e.index == i) {
                Some(e) => println!("  {:3}   {:>7}  {:.32}", e.index, e.pid, e.command),
                None if a.verbose => println!("  {i:3}   closed"),
                None => {}
            }
        }
        println!(
            "{} regular endpoints open (out of {})",
            eps.len(),
            MAX_ENDPOINTS
        );
    }
    if !found {
        eprintln!("omx_endpoint_info: no such board");
        std::process::exit(255);
    }
    let _ = a.all;
}
