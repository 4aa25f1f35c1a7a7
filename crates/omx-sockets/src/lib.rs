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
