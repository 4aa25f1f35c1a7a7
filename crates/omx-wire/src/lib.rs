//! Wire codec for omx, a Rust implementation of Open-MX (message passing
//! over raw Ethernet frames).
//!
//! The crate turns received frames into typed, validated headers plus a
//! borrowed payload ([`decode`]) and builds frames from them
//! ([`encode_header`], [`encode`]). It knows the three reference wire
//! configurations ([`WireConfig`]): native MTU 9000, native MTU 1500 and
//! MX-wire-compatible, which differ in sizes and in the MEDIUM and PULL
//! layouts. All multi-byte fields are big-endian. [`peek`] reads the routing
//! fields of a raw frame (type, endpoints) without a decode and is the one
//! home of their offsets.
//!
//! Decoding is the per-frame hot path: it never allocates, never copies
//! the payload and cannot panic on any input.
#![forbid(unsafe_code)]

mod bundle;
mod bytes;
mod config;
mod decode;
mod encode;
mod error;
mod local;
mod packet;
pub mod peek;

pub use bundle::*;
pub use config::*;
pub use decode::{decode, decode_pull_reply_head, observer_config, Decoded, PULL_REPLY_HEAD_LEN};
pub use encode::{encode, encode_header};
pub use error::{DecodeError, DropReason, EncodeError};
pub use local::*;
pub use packet::{
    Connect, Header, HostQuery, HostReply, Medium, Msg, NackLib, NackMcp, NackType, Notify, Packet,
    PacketType, Pull, PullReply, Rndv, Truc,
};
