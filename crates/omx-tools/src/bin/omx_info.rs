//! omx_info: version, attached boards and the peer table.

use clap::Parser;
use omx_proto::NicId;
use omx_runtime::registry::STALE_PEERS_AFTER;
use omx_runtime::{Board, Runtime, MAX_ENDPOINTS, MAX_PEERS};
use omx_tools::{fmt_mac, runtime_or_exit};
use omx_wire::Extensions;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "omx_info",
    about = "Show omx boards and peers",
    disable_version_flag = true
)]
struct Args {
    /// Only board n.
    #[arg(short = 'b')]
    board: Option<u32>,
    /// Quiet: boards only.
    #[arg(short = 'q')]
    quiet: bool,
    /// More detail on the peer tables: which peers are this host's own boards or
    /// still unnamed, the table's file and age, and whether a process uses the board.
    #[arg(short = 'v')]
    verbose: bool,
    /// Print every setting (OMX_* environment variable) with its value, where the
    /// value came from and what it means, then exit.
    #[arg(short = 'c')]
    config: bool,
}

/// `omx_info -c`: one `NAME=value  # source; meaning` line per setting (the part
/// before `#` can be pasted into a shell).
fn print_settings() {
    use omx_runtime::config::settings::{describe_all, Source};
    let rows = describe_all();
    let width = rows
        .iter()
        .map(|(s, v, _)| s.name.len() + 1 + v.as_deref().map_or(0, str::len))
        .max()
        .unwrap_or(0);
    for (s, value, source) in rows {
        let assign = format!("{}={}", s.name, value.as_deref().unwrap_or(""));
        let from = match (source, &value) {
            (Source::Default, None) => "not set".to_string(),
            _ => source.describe(s),
        };
        println!("{assign:<width$}  # {from}; {}", s.meaning);
    }
}

fn driver_of(iface: &str) -> Option<String> {
    let link = std::fs::read_link(format!("/sys/class/net/{iface}/device/driver")).ok();
    link.and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| {
            // Virtual interfaces have no device: report their link kind.
            std::fs::read_to_string(format!("/sys/class/net/{iface}/uevent"))
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("DEVTYPE=").map(str::to_string))
        })
}

/// Every interface of this namespace, and why it is or is not a board.
fn print_interfaces(rt: &omx_runtime::runtime::Runtime) {
    let Ok(all) = omx_transport::list_interfaces() else {
        return;
    };
    let rule = match &rt.cfg.ifaces {
        Some(l) => format!("those in OMX_IFACES={}", l.join(",")),
        None => format!(
            "up, Ethernet, not loopback, MTU at least {}",
            rt.cfg.min_board_mtu()
        ),
    };
    println!("Interfaces (used: {rule}):");
    for s in omx_transport::survey(&all, rt.cfg.min_board_mtu(), rt.cfg.ifaces.as_deref()) {
        let i = &s.iface;
        let verdict = match (
            &s.skipped,
            rt.boards.iter().find(|b| b.iface.name == i.name),
        ) {
            (None, Some(b)) => format!(
                "used as board #{}, frames up to MTU {} (medium fragments {} B, pull replies {} B)",
                b.index, b.wire.mtu, b.wire.medium_frag_max, b.wire.pull_reply_max
            ),
            (None, None) => "used (not attached by this process)".to_string(),
            (Some(why), _) => format!("skipped: {why}"),
        };
        println!("  {:<12} MTU {:<6} {verdict}", i.name, i.mtu);
    }
}

fn main() {
    let a: Args = omx_tools::parse_args();
    if a.config {
        print_settings();
        return;
    }
    let verbose = !a.quiet;
    let rt = runtime_or_exit("omx_info");
    for w in &rt.warnings {
        eprintln!("omx_info: warning: {w}");
    }
    if verbose {
        println!(
            "omx {} (Open-MX 1.5 protocol, MX 1.2 API)",
            env!("CARGO_PKG_VERSION")
        );
        let w = &rt.cfg.wire;
        let mode = match w.mode {
            omx_wire::WireMode::Native => format!(
                "native, frames follow each board's MTU ({} to {}, the OMX_MTU cap){}",
                rt.cfg.min_board_mtu(),
                w.mtu,
                if w.checksum {
                    ", CRC32C frame checksums"
                } else {
                    ""
                }
            ),
            omx_wire::WireMode::MxCompat => format!(
                "MX-wire-compatible, fixed 4 KiB fragments: interfaces need MTU {}",
                w.mtu
            ),
        };
        println!(" wire: {mode}, EtherType 0x{:04x}", w.ethertype);
        if a.verbose {
            for line in omx_runtime::copy::describe(&rt.cfg.copy) {
                println!(" {line}");
            }
        }
    }
    if verbose || rt.boards.is_empty() {
        print_interfaces(&rt);
    }
    let boards: Vec<_> = rt
        .boards
        .iter()
        .filter(|b| a.board.is_none_or(|i| b.index == i))
        .collect();
    if a.board.is_some() && boards.is_empty() {
        eprintln!("omx_info: no board #{}", a.board.unwrap_or(0));
        std::process::exit(255);
    }
    println!(
        "Found {} boards ({} max) supporting {} endpoints each:",
        rt.boards.len(),
        32,
        MAX_ENDPOINTS
    );
    for b in &boards {
        println!(
            " {} (board #{} name {} addr {})",
            b.name,
            b.index,
            b.iface.name,
            fmt_mac(b.nic_id)
        );
        if verbose {
            if let Some(d) = driver_of(&b.iface.name) {
                println!("   managed by driver '{d}'");
            }
            if let Ok(n) =
                std::fs::read_to_string(format!("/sys/class/net/{}/device/numa_node", b.iface.name))
            {
                if n.trim() != "-1" {
                    println!("   attached to numa node {}", n.trim());
                }
            }
            match omx_transport::rx_coalescing(&b.iface.name) {
                Ok(c) => {
                    println!(
                        "   interrupt coalescing: rx-usecs {} rx-frames {} adaptive-rx {}{}",
                        c.rx_usecs,
                        c.rx_frames,
                        if c.adaptive_rx { "on" } else { "off" },
                        if c.adaptive_rx {
                            format!(
                                " (rx-usecs-low {} below {} pkt/s)",
                                c.rx_usecs_low, c.pkt_rate_low
                            )
                        } else {
                            String::new()
                        }
                    );
                    if c.hurts_latency() {
                        eprintln!(
                            "omx_info: warning: interface {} delays received frames by {} us \
                             (interrupt coalescing); for latency: ethtool -C {} rx-usecs 0, or \
                             adaptive-rx on with rx-usecs-low 0",
                            b.iface.name,
                            c.effective_usecs(),
                            b.iface.name
                        );
                    }
                }
                Err(_) => println!("   interrupt coalescing: not reported by the interface"),
            }
            println!(
                "   omx wake-up policy: {} ({} us)",
                rt.cfg.coalescing.name(),
                rt.cfg.coalescing_delay.as_micros()
            );
        }
        if !b.iface.up {
            eprintln!("omx_info: warning: interface {} is down", b.iface.name);
        }
        if b.iface.mtu < b.wire.mtu {
            eprintln!(
                "omx_info: warning: interface {} MTU {} is below the required {}",
                b.iface.name, b.iface.mtu, b.wire.mtu
            );
        }
    }
    if !verbose {
        return;
    }
    for b in &boards {
        b.merge_peers(&b.dir.load_peers());
        let peers = b.peer_snapshot();
        let offers = b.dir.load_peer_offers();
        if peers.len() > 1 {
            println!("Peer table is ready, mapper is 00:00:00:00:00:00");
        } else {
            println!("Peer table is not configured yet");
        }
        println!("{}", "=".repeat(48));
        for (i, (nic, name)) in peers.iter().enumerate() {
            let detail = if a.verbose {
                peer_detail(&rt, b, *nic, name.is_some(), offers.get(nic))
            } else {
                String::new()
            };
            println!(
                "  {i}) {} {}{detail}",
                fmt_mac(*nic),
                name.as_deref().unwrap_or("<unknown>")
            );
        }
        if peers.len() >= MAX_PEERS {
            eprintln!("omx_info: warning: the peer table is full");
        }
        if a.verbose {
            println!("{}", table_provenance(b));
        }
    }
}

/// `-v`: what a peer-table entry is, and the wire extensions its announcements offer
/// (what a connection to it may use; `omx_endpoint_info -r` shows what each one uses).
fn peer_detail(
    rt: &Runtime,
    b: &Board,
    nic: NicId,
    named: bool,
    offers: Option<&Option<Extensions>>,
) -> String {
    if nic == b.nic_id {
        return "  (this board)".into();
    }
    if let Some(own) = rt.boards.iter().find(|o| o.nic_id == nic) {
        return format!("  (board #{} of this host)", own.index);
    }
    let offers = match offers {
        Some(Some(e)) => format!("  (offers wire extensions: {e})"),
        Some(None) => "  (offers no wire extensions: the original's frames)".into(),
        None => String::new(),
    };
    if !named {
        return format!("  (heard, name not learned yet){offers}");
    }
    offers
}

/// `-v`: where the board's peer table lives and whether it is current: peers stay
/// listed after the processes that learned them exit, until the table has been
/// unused for `STALE_PEERS_AFTER`.
fn table_provenance(b: &Board) -> String {
    let file = b.dir.path().join("peers");
    let age = match b.dir.peers_age() {
        Some(age) => format!("{}, changed {} ago", file.display(), fmt_age(age)),
        None => format!("{} (none yet)", file.display()),
    };
    let users = if b.dir.in_use() {
        "in use by an omx process of this host".to_string()
    } else {
        format!(
            "no omx process of this host uses the board: peers listed were learned by \
             processes that have exited; dropped after {} unused",
            fmt_age(STALE_PEERS_AFTER)
        )
    };
    format!("  peer table: {age}; {users}")
}

fn fmt_age(d: Duration) -> String {
    match d.as_secs() {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s => format!("{} h", s / 3600),
    }
}
