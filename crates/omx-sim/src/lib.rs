//! Deterministic simulation of omx hosts: engines joined by an in-memory Ethernet link
//! with a virtual clock and seeded loss, duplication, reordering, corruption, latency
//! and bandwidth. Used by the protocol tests, the soak command and the engine benchmark.

pub mod hostile;
pub mod memory;
pub mod rng;
pub mod soak;
pub mod world;

pub use memory::{Buffer, Memory, MAX_SEGMENTS};
pub use rng::Rng;
pub use world::{CopyMode, Host, LinkConfig, LinkStats, World, KEY};
