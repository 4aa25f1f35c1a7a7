//! omx_prepare_binding: write the CPU binding of each endpoint of each board (the CPUs
//! its receive interrupt is routed to), for `OMX_PROCESS_BINDING=file`.

use clap::Parser;
use omx_tools::binding::{endpoint_irqs, receive_irqs};
use omx_tools::{fmt_mac, runtime_or_exit};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

/// Where `OMX_PROCESS_BINDING=file` looks (the original's default).
const DEFAULT_FILE: &str = "/tmp/open-mx.bindings.dat";

#[derive(Parser)]
#[command(
    name = "omx_prepare_binding",
    about = "Write per-endpoint CPU bindings for OMX_PROCESS_BINDING=file",
    long_about = "For each board, finds its receive interrupts in /proc/interrupts (lines \
                  naming the interface, transmit queues left out) and the CPUs each is routed \
                  to (/proc/irq/N/smp_affinity), and writes one line per endpoint: \
                  `board MAC ep J irq N mask HEX`. Endpoint J takes queue J mod N when the \
                  queues are numbered 0..N-1, else the J-th interrupt. A process run with \
                  OMX_PROCESS_BINDING=file (or file:FILE) binds itself to those CPUs when it \
                  opens endpoint J. Interfaces without interrupts of their own (veth, \
                  virtual functions without named queues) get no lines.",
    disable_version_flag = true
)]
struct Args {
    /// Say what each board got.
    #[arg(short = 'v')]
    verbose: bool,
    /// The bindings file.
    #[arg(default_value = DEFAULT_FILE)]
    file: String,
}

fn main() {
    let a: Args = omx_tools::parse_args();
    let rt = runtime_or_exit("omx_prepare_binding");
    let interrupts = std::fs::read_to_string("/proc/interrupts").unwrap_or_else(|e| {
        eprintln!("omx_prepare_binding: cannot read /proc/interrupts: {e}");
        std::process::exit(1);
    });
    let mut text = String::new();
    for b in &rt.boards {
        let irqs = receive_irqs(&interrupts, &b.iface.name);
        let mut lines = 0;
        for (ep, irq) in endpoint_irqs(&irqs, omx_runtime::MAX_ENDPOINTS as u32) {
            let path = format!("/proc/irq/{irq}/smp_affinity");
            let Ok(mask) = std::fs::read_to_string(&path) else {
                continue;
            };
            text.push_str(&format!(
                "board {} ep {ep} irq {irq} mask {}\n",
                fmt_mac(b.nic_id),
                mask.trim()
            ));
            lines += 1;
        }
        if a.verbose {
            println!(
                "board #{} ({} {}): {} receive interrupts, {lines} endpoint bindings",
                b.index,
                b.iface.name,
                fmt_mac(b.nic_id),
                irqs.len()
            );
        }
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&a.file)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            // Readable by every user's processes, whatever the umask (the original's mode).
            f.set_permissions(std::fs::Permissions::from_mode(0o644))
        });
    if let Err(e) = written {
        eprintln!("omx_prepare_binding: cannot write {}: {e}", a.file);
        std::process::exit(1);
    }
    println!("Generated bindings in {}", a.file);
}
