//! `omx_sockets CMD ARGS...`: runs CMD with libomx_sockets.so preloaded.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{exit, Command};

const USAGE: &str = "usage: omx_sockets CMD [ARGS...]\n\
Runs CMD with libomx_sockets.so preloaded: its TCP connections to peers that run the\n\
library too are carried on omx, everything else stays on the kernel.\n\
OMX_SOCKETS_LIB names the library (default: beside this program, then ../lib).\n\
OMX_SOCKETS_VERBOSE=1 reports each carried connection on stderr.";

fn library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("OMX_SOCKETS_LIB") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("libomx_sockets.so"),
        dir.join("../lib/libomx_sockets.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args[0] == "-h" || args[0] == "--help" {
        eprintln!("{USAGE}");
        exit(if args.is_empty() { 2 } else { 0 });
    }
    let Some(lib) = library() else {
        eprintln!("omx_sockets: libomx_sockets.so not found (set OMX_SOCKETS_LIB)");
        exit(2);
    };
    let lib = lib.canonicalize().unwrap_or(lib);
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(old) if !old.is_empty() => format!("{} {old}", lib.display()),
        _ => lib.display().to_string(),
    };
    let err = Command::new(&args[0])
        .args(&args[1..])
        .env("LD_PRELOAD", preload)
        .exec();
    eprintln!("omx_sockets: {}: {err}", args[0]);
    exit(127);
}
