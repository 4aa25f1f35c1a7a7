//! The omx runtime: opens endpoints on the boards (packet-socket interfaces) of this
//! host, runs their protocol engines with a background progress thread, performs the
//! engines' copies, and discovers peers.

pub mod clock;
pub mod config;
pub mod copy;
pub mod copy_service;
pub mod daemon;
pub mod debug_signal;
pub mod discovery;
pub mod endpoint;
pub mod ipmap;
mod local;
pub mod memcpy;
pub mod memory;
pub mod preload;
pub mod raw;
pub mod registry;
pub mod runtime;

pub use config::{DaemonUse, RuntimeConfig};
pub use endpoint::{Endpoint, Error, Interrupted, RequestInfo, Spin, UnexpectedHandler, WatchEnd};
pub use memory::{Access, Segment, SegmentError, MAX_SEGMENTS};
pub use raw::{RawEndpoint, RawEvent};
pub use runtime::{Board, Runtime, MAX_ENDPOINTS, MAX_PEERS};
