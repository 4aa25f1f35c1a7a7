//! What the preloaded libraries (`libomx_sockets.so`, `libomx_memcpy.so`) share: the C
//! library's own functions found with `dlsym(RTLD_NEXT)`, so that a library's calls
//! for itself never reach its own interposed symbols, and the launchers (`omx_sockets
//! CMD`, `omx_memcpy CMD`) that run a program with a library preloaded.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{exit, Command};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Looks up `name` (NUL-terminated) once and caches the address in `slot`.
pub fn resolve_next(slot: &AtomicUsize, name: &'static [u8]) -> usize {
    let cached = slot.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: name is a NUL-terminated symbol name.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const libc::c_char) };
    if f.is_null() {
        // Without the real function nothing can work: say which and stop (no
        // allocation, no formatting: this may run inside an interposed call).
        let msg = b"omx: a C library symbol is missing: ";
        // SAFETY: plain writes of valid buffers to stderr, then abort.
        unsafe {
            libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
            libc::syscall(libc::SYS_write, 2, name.as_ptr(), name.len() - 1);
            libc::syscall(libc::SYS_write, 2, b"\n".as_ptr(), 1);
            libc::abort()
        };
    }
    slot.store(f as usize, Ordering::Relaxed);
    f as usize
}

/// Declares `pub unsafe fn NAME(args) -> ret` calling the next definition of `NAME`
/// (the C library's, behind the preloaded library's own).
#[macro_export]
macro_rules! real_fns {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(
            #[allow(clippy::missing_safety_doc)]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                static SLOT: ::std::sync::atomic::AtomicUsize =
                    ::std::sync::atomic::AtomicUsize::new(0);
                let f = $crate::preload::resolve_next(
                    &SLOT,
                    concat!(stringify!($name), "\0").as_bytes(),
                );
                let f: unsafe extern "C" fn($($ty),*) -> $ret = std::mem::transmute(f);
                f($($arg),*)
            }
        )*
    };
}

/// A launcher's whole job: `tool CMD ARGS...` runs CMD with `lib_file` preloaded
/// (found through the `lib_env` variable, else beside the launcher, else in `../lib`),
/// ahead of any `LD_PRELOAD` already set. Never returns.
pub fn launch(tool: &str, lib_file: &str, lib_env: &str, usage: &str) -> ! {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args[0] == "-h" || args[0] == "--help" {
        eprintln!("{usage}");
        exit(if args.is_empty() { 2 } else { 0 });
    }
    let Some(lib) = library(lib_file, lib_env) else {
        eprintln!("{tool}: {lib_file} not found (set {lib_env})");
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
    eprintln!("{tool}: {}: {err}", args[0]);
    exit(127);
}

fn library(lib_file: &str, lib_env: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(lib_env) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(lib_file), dir.join("../lib").join(lib_file)]
        .into_iter()
        .find(|p| p.exists())
}
