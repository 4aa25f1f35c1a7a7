//! omxd: the privileged per-host service that lets processes without
//! CAP_NET_RAW use omx (see `omx_runtime::daemon` for what it guarantees).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use omx_runtime::daemon::{self, DaemonConfig};
use omx_tools::runtime_or_exit;

#[derive(Parser)]
#[command(name = "omxd", about = "omx host service for unprivileged processes")]
struct Args {
    /// Unix socket clients connect to: a path, or `@name` for an abstract socket
    /// (default: $OMX_DAEMON_SOCKET or `@omxd`, one per network namespace).
    #[arg(short = 's', long)]
    socket: Option<PathBuf>,
    /// Keep polling a busy relay this many microseconds before sleeping
    /// (lower latency at the cost of CPU).
    #[arg(long, default_value_t = 0)]
    spin_us: u64,
    /// Most endpoints one user may hold at once (0: no limit).
    #[arg(long, default_value_t = 0)]
    max_per_user: usize,
    /// Stay in the foreground (omxd never forks; accepted for systemd and scripts).
    #[arg(short = 'f', long)]
    foreground: bool,
    /// Log boards, opens and closes on stderr.
    #[arg(short = 'v', long)]
    verbose: bool,
}

fn main() {
    // Before any thread starts, so that SIGTERM reaches the cleanup and no other thread.
    daemon::block_stop_signals();
    let a: Args = omx_tools::parse_args_in_section("8");
    let _ = a.foreground;
    let rt = runtime_or_exit("omxd");
    let cfg = DaemonConfig {
        socket: a.socket.unwrap_or_else(daemon::socket_path),
        spin: Duration::from_micros(a.spin_us),
        verbose: a.verbose,
        max_per_user: a.max_per_user,
    };
    if let Err(e) = daemon::run(rt, cfg) {
        eprintln!("omxd: {e}");
        std::process::exit(1);
    }
}
