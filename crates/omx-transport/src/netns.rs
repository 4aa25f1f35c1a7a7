//! Running code inside a named network namespace (`ip netns add NAME`).
//!
//! `setns(CLONE_NEWNET)` changes the namespace of the calling *thread* only,
//! and a socket stays in the namespace it was created in. So a short-lived
//! thread can enter a namespace, open sockets there and hand them back to
//! any other thread: no child process, no `ip netns exec`.

use std::fs::File;
use std::io;
use std::path::PathBuf;

use crate::sys;

/// Path of the bind-mounted namespace file `ip netns` creates for `name`.
pub fn path(name: &str) -> PathBuf {
    let run = PathBuf::from("/run/netns").join(name);
    if run.exists() {
        run
    } else {
        PathBuf::from("/var/run/netns").join(name)
    }
}

/// Moves the calling thread into network namespace `name` for the rest of
/// its life. Prefer [`run_in`], which uses a fresh thread.
pub fn enter(name: &str) -> io::Result<()> {
    let f = File::open(path(name))?;
    sys::setns_net(&f)
}

/// Runs `f` on a new thread inside network namespace `name` and returns its
/// result (a panic in `f` propagates). Interfaces listed and sockets opened in `f` belong to that namespace.
pub fn run_in<T, F>(name: &str, f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let name = name.to_owned();
    std::thread::Builder::new()
        .name(format!("netns-{name}"))
        .spawn(move || enter(&name).map(|()| f()))?
        .join()
        // Re-raise a panic of `f` (e.g. a failed assertion) in the caller.
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
}
