//! Deterministic simulation of omx hosts: engines joined by an in-memory Ethernet link
//! with a virtual clock and seeded loss, duplication, reordering, corruption, latency
//! and bandwidth, optionally through a switch model with finite output queues. Used by
//! the protocol tests, the soak command, the scale scenarios and the engine benchmark.

pub mod heap;
pub mod hostile;
pub mod memory;
pub mod rng;
pub mod scale;
pub mod soak;
pub mod switch;
pub mod world;

pub use memory::{Buffer, Memory, MAX_SEGMENTS};
pub use rng::Rng;
pub use switch::{PortConfig, Switch};
pub use world::{CopyMode, Host, LinkConfig, LinkStats, World, KEY};
