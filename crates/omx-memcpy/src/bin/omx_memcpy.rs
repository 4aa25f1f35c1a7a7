//! `omx_memcpy CMD ARGS...`: runs CMD with libomx_memcpy.so preloaded.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{exit, Command};

const USAGE: &str = "usage: omx_memcpy CMD [ARGS...]\n\
Runs CMD with libomx_memcpy.so preloaded: its memcpy/memmove calls of at least\n\
OMX_MEMCPY_MIN bytes (default 4 MiB) return once posted to the copy service\n\
(omx_copyd, else a copy thread); the destination is protected until the copy is done.\n\
OMX_MEMCPY_LIB names the library (default: beside this program, then ../lib).\n\
OMX_MEMCPY_STATS=1 prints what was copied asynchronously on exit.";

fn library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("OMX_MEMCPY_LIB") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("libomx_memcpy.so"),
        dir.join("../lib/libomx_memcpy.so"),
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
        eprintln!("omx_memcpy: libomx_memcpy.so not found (set OMX_MEMCPY_LIB)");
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
    eprintln!("omx_memcpy: {}: {err}", args[0]);
    exit(127);
}
