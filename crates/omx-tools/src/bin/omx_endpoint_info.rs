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
    /// Also show each endpoint's round-trip estimates per partner (smoothed RTT and
    /// its variation, retransmission timeout, the same for pull blocks, and the pull
    /// blocks allowed in flight, and the links large messages are striped over with
    /// `OMX_STRIPE`), as last published (about once a second).
    #[arg(short = 'r')]
    rtt: bool,
}

fn us(ns: u64) -> String {
    if ns == 0 {
        "-".into()
    } else {
        format!("{:.1}", ns as f64 / 1000.0)
    }
}

/// The partners' round-trip table of one endpoint.
fn print_paths(e: &omx_runtime::registry::EndpointInfo, peers: &[(u64, Option<String>)]) {
    if e.paths.is_empty() {
        println!("        no round trip measured yet");
        return;
    }
    println!(
        "        {:<24} {:>3} {:>9} {:>9} {:>9} {:>10} {:>10} {:>6}  wire extensions",
        "partner", "ep", "srtt_us", "rttvar_us", "rto_us", "pull_srtt", "pull_rto", "blocks"
    );
    for p in &e.paths {
        let name = peers
            .iter()
            .find(|(n, _)| *n == p.nic_id)
            .and_then(|(_, name)| name.clone())
            .unwrap_or_else(|| fmt_mac(p.nic_id));
        // Checksums are in use only when the link carries trailers.
        let ext = if p.checksum {
            p.extensions
        } else {
            p.extensions.without(omx_wire::Extensions::CHECKSUM)
        };
        let links = match p.stripe_links {
            0 => String::new(),
            n => format!(" (striped over {} links)", n + 1),
        };
        println!(
            "        {:<24} {:>3} {:>9} {:>9} {:>9} {:>10} {:>10} {:>6}  {}{}",
            name,
            p.endpoint,
            us(p.srtt),
            us(p.rttvar),
            us(p.rto),
            us(p.pull_srtt),
            us(p.pull_rto),
            p.pull_blocks,
            ext,
            links
        );
    }
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
        let peers = b.dir.load_peers();
        for i in 0..MAX_ENDPOINTS {
            match eps.iter().find(|e| e.index == i) {
                Some(e) => {
                    println!("  {:3}   {:>7}  {:.32}", e.index, e.pid, e.command);
                    if a.rtt {
                        print_paths(e, &peers);
                    }
                }
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
