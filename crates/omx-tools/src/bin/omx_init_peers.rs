//! omx_init_peers: load peers (a peers file, or one `MAC name` pair) into the running
//! host's peer table, as the original's tool of the same name.
//!
//! The host's peer table is each board's shared peer file in the state directory;
//! processes that run merge it into their own tables within a second (housekeeping),
//! and new ones load it when they start.

use clap::Parser;
use omx_proto::NicId;
use omx_runtime::registry::{parse_mac, parse_peers};
use omx_tools::{fmt_mac, runtime_or_exit};

#[derive(Parser)]
#[command(
    name = "omx_init_peers",
    about = "Load peers into the host's omx peer table",
    long_about = "Load peers into the host's omx peer table: every line of FILE \
                  (`MAC name`, `#` comments and blank lines ignored; a name of `-` means \
                  unnamed, to be asked by discovery), or the single peer MAC NAME. An address \
                  already in the table is renamed. The table is each board's shared peer \
                  file: running processes merge it within a second (a cleared entry stays \
                  known to processes that already learned it), new ones load it at start.",
    disable_version_flag = true
)]
struct Args {
    /// Clear the table first (the host's own boards are kept, listed first).
    #[arg(short = 'c')]
    clear: bool,
    /// Append to the table (the default).
    #[arg(short = 'a')]
    append: bool,
    /// Mark the table configured: accepted for the original's scripts; an omx peer
    /// table is always ready (there is no mapper to wait for).
    #[arg(short = 'd')]
    done: bool,
    /// Print the table after the change.
    #[arg(short = 'v')]
    verbose: bool,
    /// A peers file, or a MAC address followed by NAME.
    #[arg(value_name = "FILE | MAC")]
    what: Option<String>,
    /// The peer's name, with a MAC address.
    #[arg(value_name = "NAME")]
    name: Option<String>,
}

fn fail(msg: &str) -> ! {
    eprintln!("omx_init_peers: {msg}");
    std::process::exit(1);
}

/// The peers the command line names.
fn peers_of(a: &Args) -> Vec<(NicId, Option<String>)> {
    match (&a.what, &a.name) {
        (None, _) => Vec::new(),
        (Some(mac), Some(name)) => {
            let nic = parse_mac(mac).unwrap_or_else(|| fail(&format!("bad MAC address {mac}")));
            if name.is_empty() || name.len() >= omx_wire::HOSTNAME_MAX {
                fail(&format!(
                    "a name has 1 to {} bytes",
                    omx_wire::HOSTNAME_MAX - 1
                ));
            }
            vec![(nic, (name != "-").then(|| name.clone()))]
        }
        (Some(file), None) => {
            let text = std::fs::read_to_string(file)
                .unwrap_or_else(|e| fail(&format!("cannot read {file}: {e}")));
            let peers = parse_peers(&text).unwrap_or_else(|e| fail(&format!("{file}: {e}")));
            if let Some((_, Some(n))) = peers.iter().find(|(_, n)| {
                n.as_ref()
                    .is_some_and(|n| n.len() >= omx_wire::HOSTNAME_MAX)
            }) {
                fail(&format!("{file}: name {n} is too long"));
            }
            peers
        }
    }
}

/// `table` with `peers` added (a known address takes the new name, unless the new
/// entry is unnamed).
fn merged(
    mut table: Vec<(NicId, Option<String>)>,
    peers: &[(NicId, Option<String>)],
) -> Vec<(NicId, Option<String>)> {
    for (nic, name) in peers {
        match table.iter_mut().find(|(n, _)| n == nic) {
            Some(e) => {
                if name.is_some() {
                    e.1 = name.clone();
                }
            }
            None => table.push((*nic, name.clone())),
        }
    }
    table
}

fn main() {
    let a: Args = omx_tools::parse_args();
    let peers = peers_of(&a);
    let rt = runtime_or_exit("omx_init_peers");
    let locals: Vec<(NicId, Option<String>)> = rt
        .boards
        .iter()
        .map(|b| (b.nic_id, Some(b.name.clone())))
        .collect();
    for b in &rt.boards {
        let start = if a.clear {
            locals.clone()
        } else {
            merged(b.dir.load_peers(), &locals)
        };
        let table = merged(start, &peers);
        if table.len() > omx_runtime::MAX_PEERS {
            fail(&format!(
                "board #{}: {} peers, the table holds {}",
                b.index,
                table.len(),
                omx_runtime::MAX_PEERS
            ));
        }
        if let Err(e) = b.dir.save_peers(&table) {
            fail(&format!(
                "board #{}: cannot write the peer table: {e}",
                b.index
            ));
        }
        if a.verbose {
            println!("{} (board #{} name {})", b.name, b.index, b.iface.name);
            for (i, (nic, name)) in table.iter().enumerate() {
                println!(
                    "  {i}) {} {}",
                    fmt_mac(*nic),
                    name.as_deref().unwrap_or("<unknown>")
                );
            }
        }
    }
    if a.verbose && a.done {
        println!("(-d: the peer table is always ready, there is no mapper to wait for)");
    }
    let _ = a.append;
}

#[cfg(test)]
mod tests {
    use super::merged;

    #[test]
    fn merge_renames_known_addresses_and_appends_new_ones() {
        let t = vec![(1, Some("a:0".to_string())), (2, None)];
        let m = merged(
            t,
            &[
                (2, Some("b:0".to_string())),
                (1, None),
                (3, Some("c:0".to_string())),
            ],
        );
        assert_eq!(
            m,
            vec![
                (1, Some("a:0".to_string())),
                (2, Some("b:0".to_string())),
                (3, Some("c:0".to_string()))
            ]
        );
    }
}
