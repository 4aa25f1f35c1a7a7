//! Raw Ethernet transport of omx: Open-MX frames (EtherType 0x86DF, no IP)
//! over Linux `AF_PACKET` sockets.
//!
//! * [`list_interfaces`] / [`select_boards`]: which interfaces become boards.
//! * [`PacketSocket`]: one socket per board and process, bound to the
//!   EtherType, with an [`EndpointFilter`] compiled to classic BPF (offsets and
//!   type numbers from `omx_wire::peek`) so the kernel only copies frames for
//!   this process's endpoints, an mmap RX ring handing out frames in place,
//!   and batched `sendmmsg` transmission.
//! * [`netns`]: run code inside a named network namespace (tests, tools).
//! * [`shm`]: intra-node transport: per-endpoint [`Inbox`] of single-producer
//!   / single-consumer rings in a shared file, one [`Outbox`] slot per sender.
//! * [`relay`]: frames relayed through the privileged `omxd` for processes
//!   without CAP_NET_RAW.
//! * [`cma`]: one-copy transfers between processes (`process_vm_readv`).
//! * [`DirectRx`]: an endpoint's pull replies received straight into the receive
//!   buffer (one copy instead of two through the ring).
//! * [`xdp`]: the AF_XDP data path (an XDP program steering frames into an
//!   AF_XDP socket per endpoint), behind the same [`PacketSocket`] interface.
//! * [`CaptureSocket`]: every frame of the EtherType, both directions (`omx_dump`).
//!
//! The `unsafe` code is in the private `sys` module and in `shm` / `cma` /
//! `direct` / `capture` (mappings and syscalls), plus the contract of
//! [`PacketSocket::queue_send_gathered`] (frames whose payload the kernel reads from
//! memory the caller lent); everything else is `deny(unsafe_code)`.

#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod capture;
#[allow(unsafe_code)]
pub mod cma;
#[allow(unsafe_code)]
pub mod copyring;
#[allow(unsafe_code)]
mod direct;
pub mod faults;
mod filter;
mod iface;
pub mod netns;
pub mod relay;
mod ring;
#[allow(unsafe_code)]
pub mod shm;
mod socket;
#[allow(unsafe_code)]
mod sys;
#[allow(unsafe_code)]
pub mod xdp;

pub use relay::{OpenReply, OpenRequest, Refusal, RelayError};

pub use capture::{CaptureSocket, Direction};
pub use cma::{CmaError, RemoteIov};
pub use direct::{DirectRx, ReplyPlace, DIRECT_MAX_PIECES};
pub use faults::{FaultConfig, FaultInjector, FaultStats};
pub use filter::{EndpointFilter, StripeFilter};
pub use iface::{
    interface_by_name, list_interfaces, parse_iface_list, rx_coalescing, select_boards,
    select_from, survey, Interface, RxCoalescing, Surveyed,
};
pub use ring::{RingLayout, RxFrame};
pub use shm::{Inbox, InboxParams, Outbox, OutboxError, ReceiverInfo, SenderId};
pub use socket::{PacketSocket, SocketOptions, SocketStats};
pub use sys::{take_socket_error, MAX_GATHER};

/// EtherType of Open-MX frames.
pub const OMX_ETHERTYPE: u16 = omx_wire::DEFAULT_ETHERTYPE;
/// Destination MAC + source MAC + EtherType.
pub const ETH_HEADER_LEN: usize = omx_wire::ETH_HEADER_LEN;

/// Whether the process runs with effective uid 0 (packet sockets and
/// namespace setup need CAP_NET_RAW / CAP_NET_ADMIN; tests skip otherwise).
pub fn is_root() -> bool {
    sys::geteuid() == 0
}
