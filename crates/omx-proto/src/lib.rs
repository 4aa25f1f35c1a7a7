//! Sans-IO Open-MX protocol engine.
//!
//! One [`Engine`] is one endpoint. It takes received frames and the current time, and
//! produces frames to transmit ([`Transmit`]), payload copies for the runtime to perform
//! ([`CopyOp`]), request completions ([`Completion`]) and its next timer deadline. It
//! owns no socket, clock or thread, so every loss, reordering or duplication can be
//! replayed exactly in tests.

pub mod atomic;
mod bundle;
mod config;
mod connect;
mod counters;
pub mod demux;
mod engine;
pub mod local;
pub mod onesided;
mod outputs;
mod partner;
mod peers;
mod protocol;
mod pull;
mod recv;
mod regions;
mod requests;
pub mod rtt;
mod send;
pub mod seqnum;
pub mod slab;
mod stripe;
mod timer;
mod transmit;
mod types;
mod unexpected;

pub use atomic::{AtomicJob, AtomicKind, AtomicOp, AtomicType};
pub use config::EngineConfig;
pub use counters::Counters;
pub use engine::{EndpointParams, Engine, Output, PathStats, QueueStats};
pub use local::{LocalIn, LocalMsg, LocalPull, LocalSend, PullOutcome, PullSrc};
pub use peers::{Peer, PeerTable};
pub use protocol::SendPlan;
pub use stripe::stripe_magic;
pub use transmit::{Payload, Transmit, MAX_HEADER_LEN};
pub use types::*;
pub use unexpected::UnexpectedInfo;
