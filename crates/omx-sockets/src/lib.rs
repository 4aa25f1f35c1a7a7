//! `libomx_sockets.so`: preloaded into an unmodified program (`omx_sockets CMD`), it
//! carries the program's TCP connections to peers that run it too on omx, and leaves
//! every other descriptor to the kernel. Design: docs/SOCKETS.md.

mod epoll;
mod fabric;
mod fds;
pub mod handshake;
mod interpose;
mod real;
mod signals;
mod stream;

/// Runs when the library is loaded, before the program's `main`: the program's `OMX_*`
/// variables as it was started are the library's for good, whatever it does to its
/// environment later (`omx_runtime::config::settings::freeze_environment`).
#[used]
#[link_section = ".init_array"]
static FREEZE_ENVIRONMENT: extern "C" fn() = {
    extern "C" fn freeze() {
        omx_runtime::config::settings::freeze_environment();
    }
    freeze
};
