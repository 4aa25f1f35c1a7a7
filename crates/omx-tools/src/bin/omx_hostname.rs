//! omx_hostname: show or set a board's peer name, or clear learned peer names.

use clap::Parser;
use omx_tools::{fmt_mac, runtime_or_exit};

#[derive(Parser)]
#[command(
    name = "omx_hostname",
    about = "Show or change an omx board's name",
    disable_version_flag = true
)]
struct Args {
    /// Board index.
    #[arg(short = 'b', default_value_t = 0)]
    board: u32,
    /// Set the board's peer name (applies to processes started afterwards).
    #[arg(short = 'n')]
    name: Option<String>,
    /// Clear every non-local peer name so that they are queried again.
    #[arg(short = 'c')]
    clear: bool,
    #[arg(short = 'v')]
    verbose: bool,
}

fn main() {
    let a: Args = omx_tools::parse_args();
    let rt = runtime_or_exit("omx_hostname");
    let Some(b) = rt.board(a.board) else {
        eprintln!("omx_hostname: no board #{}", a.board);
        std::process::exit(255);
    };
    if (a.name.is_none() && !a.clear) || a.verbose {
        println!(
            "Board #{} ({} {}) hostname was {}",
            b.index,
            b.iface.name,
            fmt_mac(b.nic_id),
            b.name
        );
    }
    if let Some(n) = &a.name {
        if n.is_empty() || n.len() >= omx_wire::HOSTNAME_MAX {
            eprintln!(
                "omx_hostname: a name has 1 to {} bytes",
                omx_wire::HOSTNAME_MAX - 1
            );
            std::process::exit(1);
        }
        if let Err(e) = b.dir.save_name(n) {
            eprintln!("omx_hostname: cannot set the name: {e}");
            std::process::exit(1);
        }
    }
    if a.clear {
        let peers: Vec<_> = b
            .dir
            .load_peers()
            .into_iter()
            .map(|(nic, name)| (nic, if nic == b.nic_id { name } else { None }))
            .collect();
        if let Err(e) = b.dir.save_peers(&peers) {
            eprintln!("omx_hostname: cannot clear peer names: {e}");
            std::process::exit(1);
        }
    }
}
