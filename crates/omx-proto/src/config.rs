//! Engine tunables. Defaults follow the original's documented values (behavior.md §1, §4).

use crate::types::{Time, NS_PER_MS};
use omx_wire::WireConfig;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub wire: WireConfig,
    /// Messages longer than this use rendezvous + pull. Clamped to [128, wire.medium_max()].
    pub rndv_threshold: u32,
    /// Period after which an unacknowledged packet (or connect request) is sent again.
    pub resend_delay: Time,
    /// Resends before the partner is declared unreachable.
    pub resends_max: u32,
    /// Delay before an explicit ack when no reply carried a piggybacked one.
    pub ack_delay: Time,
    /// Received-but-unacked messages that trigger an immediate explicit ack.
    pub not_acked_max: u16,
    /// Sends completed early (before their ack) kept per endpoint before completion waits.
    pub zombie_max: usize,
    /// Pull blocks requested ahead of the data (the original used 4).
    pub pull_blocks_outstanding: u32,
    /// Time without pull progress before missing pull-reply frames are requested again.
    pub pull_resend_delay: Time,
    /// Bytes of unexpected eager payload kept before new unexpected messages are refused
    /// (refused messages are not acked, so the sender retransmits them later).
    pub unexp_max_bytes: usize,
    /// Bytes of out-of-order ("early") packets kept per endpoint.
    pub early_max_bytes: usize,
    /// How far ahead of the next expected sequence number a packet is kept.
    pub early_window: u16,
    /// Local (self and shared-memory) messages longer than this use a one-copy
    /// rendezvous (`OMX_SHARED_RNDV_THRESHOLD`).
    pub shared_rndv_threshold: u32,
    /// Pull blocks requested at once across all pulls: the runtime sizes it to its
    /// receive ring, so replies to every outstanding request fit in it (more would be
    /// dropped by the kernel and re-requested a resend delay later).
    pub pull_blocks_max: u32,
    /// Serve messages to oneself inside the engine (`OMX_DISABLE_SELF=1` turns it off:
    /// they then loop through the network path).
    pub self_enabled: bool,
    /// Partners (remote endpoints) beyond which a connect request from a new one evicts
    /// the oldest partner that only ever sent connect requests, or is refused
    /// when there is none. The application's own connects are never refused.
    pub partners_max: usize,
}

impl EngineConfig {
    pub fn new(wire: WireConfig) -> Self {
        EngineConfig {
            wire,
            rndv_threshold: 32768.min(wire.medium_max()),
            resend_delay: 500 * NS_PER_MS,
            resends_max: 1000,
            ack_delay: 16 * NS_PER_MS,
            not_acked_max: 4,
            zombie_max: 512,
            pull_blocks_outstanding: wire.pull_blocks_outstanding,
            pull_resend_delay: 1000 * NS_PER_MS,
            unexp_max_bytes: 256 << 20,
            early_max_bytes: 64 << 20,
            early_window: 255,
            shared_rndv_threshold: 4096,
            pull_blocks_max: u32::MAX,
            self_enabled: true,
            partners_max: 4096,
        }
    }

    /// The threshold actually used, clamped as the original does.
    pub fn effective_rndv_threshold(&self) -> u32 {
        self.rndv_threshold_with(&self.wire)
    }

    /// The threshold with a partner whose agreed frame sizes are `wire`: no medium
    /// message may need more fragments than the format allows.
    pub fn rndv_threshold_with(&self, wire: &WireConfig) -> u32 {
        self.rndv_threshold.clamp(128, wire.medium_max())
    }

    pub fn pull_timeout_total(&self) -> Time {
        self.resend_delay.saturating_mul(self.resends_max as u64)
    }
}
