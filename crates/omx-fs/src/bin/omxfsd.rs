//! omxfsd: exports directories to omxfs clients (docs/FILES.md).

use omx_fs::export::Export;
use omx_fs::server::{Options, Server};
use std::time::Duration;

const USAGE: &str =
    "usage: omxfsd [--read-only] [--board N] [--endpoint N] [--lease SECS] [--threads N] DIR...\n\
Exports each DIR under its base name; clients mount HOST:NAME with omxfs.\n\
--threads: requests served at once (8 by default).";

fn main() {
    let mut read_only = false;
    let (mut board, mut index, mut lease) = (0u32, omx_fs::proto::SERVER_ENDPOINT, 8u64);
    let mut threads = omx_fs::server::DEFAULT_THREADS;
    let mut dirs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| die(&format!("{what} needs a number\n{USAGE}")))
        };
        match a.as_str() {
            "--read-only" => read_only = true,
            "--board" => board = num("--board") as u32,
            "--endpoint" => index = num("--endpoint") as u8,
            "--lease" => lease = num("--lease").max(1),
            "--threads" => threads = num("--threads").clamp(1, 256) as usize,
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            s if s.starts_with('-') => die(&format!("unknown option {s}\n{USAGE}")),
            _ => dirs.push(a),
        }
    }
    if dirs.is_empty() {
        die(USAGE);
    }
    let exports: Vec<Export> = dirs
        .iter()
        .map(|d| Export::open(d).unwrap_or_else(|e| die(&e)))
        .collect();
    for (i, e) in exports.iter().enumerate() {
        if exports[..i].iter().any(|o| o.name == e.name) {
            die(&format!("two exports named {}", e.name));
        }
    }
    // Modes arrive already masked by the client's umask.
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0) };
    // Blocked in every thread (set before any exists), taken by the one that prints.
    let usr1 = block_sigusr1();
    let ep = omx_fs::open_endpoint(board, Some(index)).unwrap_or_else(|e| die(&e));
    let names: Vec<&str> = exports.iter().map(|e| e.name.as_str()).collect();
    eprintln!(
        "omxfsd: serving {} on {} endpoint {index}{}",
        names.join(", "),
        ep.board().name,
        if read_only { " (read-only)" } else { "" }
    );
    let opts = Options {
        read_only,
        lease: Duration::from_secs(lease),
        threads,
    };
    let server = Server::new(ep, exports, opts);
    let s = server.clone();
    std::thread::spawn(move || loop {
        let mut sig = 0;
        // SAFETY: usr1 is an initialised set; sig receives the signal number.
        if unsafe { libc::sigwait(&usr1, &mut sig) } == 0 {
            eprintln!("omxfsd: counters {}", s.counters);
        }
    });
    server.run()
}

/// Blocks SIGUSR1 in this thread (and so in every thread spawned after), for sigwait.
fn block_sigusr1() -> libc::sigset_t {
    // SAFETY: the set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn die(msg: &str) -> ! {
    eprintln!("omxfsd: {msg}");
    std::process::exit(1)
}
