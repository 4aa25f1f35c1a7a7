//! omx_copyd: the host-wide copy service (see `omx_runtime::copy_service`).

use std::path::PathBuf;

use clap::Parser;
use omx_runtime::copy_service::{client, Service, ServiceConfig};

#[derive(Parser)]
#[command(name = "omx_copyd", about = "omx host-wide copy service")]
struct Args {
    /// Unix socket path clients connect to (default: $OMX_COPY_SERVICE, or
    /// omx-copyd.sock in the state directory).
    #[arg(short = 's', long)]
    socket: Option<PathBuf>,
    /// Core to copy on (default: $OMX_COPY_CPU, or the least-loaded core at start).
    #[arg(long)]
    cpu: Option<usize>,
    /// MiB one client may have posted and not completed.
    #[arg(long, default_value_t = 256)]
    max_mib: u64,
    /// Log clients and drops on stderr.
    #[arg(short = 'v', long)]
    verbose: bool,
}

fn main() {
    let a: Args = omx_tools::parse_args_in_section("8");
    let Some(socket) = a.socket.or_else(client::socket_path) else {
        eprintln!("omx_copyd: OMX_COPY_SERVICE is off and no --socket given");
        std::process::exit(2);
    };
    let cpu = a.cpu.or_else(|| {
        std::env::var("OMX_COPY_CPU")
            .ok()
            .and_then(|v| v.trim().parse().ok())
    });
    let cfg = ServiceConfig {
        socket,
        cpu,
        max_bytes: a.max_mib.max(1) << 20,
        verbose: a.verbose,
    };
    match Service::bind(cfg) {
        Ok(s) => s.run(),
        Err(e) => {
            eprintln!("omx_copyd: {e}");
            std::process::exit(1);
        }
    }
}
