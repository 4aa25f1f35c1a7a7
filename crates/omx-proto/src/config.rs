//! Engine tunables. Defaults follow the original's documented values (behavior.md §1, §4).

use crate::types::{Time, NS_PER_MS, NS_PER_US};
use omx_wire::WireConfig;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub wire: WireConfig,
    /// Messages longer than this use rendezvous + pull. Clamped to [128, wire.medium_max()].
    pub rndv_threshold: u32,
    /// Period after which a connect request is sent again, and the cap of the
    /// retransmission timeout of sequenced packets (which follows the measured round trip).
    pub resend_delay: Time,
    /// Resend budget: a packet unacknowledged for `resends_max` resend delays makes the
    /// partner unreachable (the original counted resends 0.5 s apart; omx resends as
    /// fast as the round trip allows, so the budget is kept as that time).
    pub resends_max: u32,
    /// Floor of the retransmission timeout of sequenced packets (`OMX_RTO_MIN_US`).
    pub rto_min: Time,
    /// Floor of the re-request timeout of pull blocks (`OMX_PULL_RTO_MIN_US`).
    pub pull_rto_min: Time,
    /// Timeouts used before a partner's first round-trip sample.
    pub rto_initial: Time,
    /// Consecutive pull-reply frames lost in one gap that count as a burst (a full ring
    /// or switch queue): the pull pipeline to that partner then shrinks.
    pub pull_burst_frames: u32,
    /// Duplicate acks that trigger a fast retransmit (Ethernet keeps a link's frames in
    /// order, so one proves a gap).
    pub dup_ack_threshold: u32,
    /// Delay before an explicit ack when no reply carried a piggybacked one. Kept below
    /// the retransmission timeout's floor, so an isolated message is acked before its
    /// sender would resend it (the original waited 16 ms, with 500 ms resends).
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
    /// Bundle small frames to partners that take bundles (a relayed endpoint does not:
    /// its daemon checks every frame on its own).
    pub send_bundles: bool,
    /// This endpoint's host's other boards, in link order, over which large messages
    /// are striped to partners that list theirs (`OMX_STRIPE`); empty: no striping.
    /// [`crate::Engine::new`] offers [`omx_wire::Extensions::STRIPE`] when set.
    pub stripe_boards: Vec<crate::types::NicId>,
    /// Copies into receives of messages up to this length are made by the caller as it
    /// takes them, before it acts on any later output, and are not reported
    /// ([`crate::CopyOp::report`] false): a small receive then completes in the pass
    /// that delivered it, without a `copy_done` round. 0: every copy is reported (a
    /// caller that may hand copies to a copy engine sets the largest message it never
    /// hands over).
    pub inline_copy_msg_max: u32,
}

impl EngineConfig {
    pub fn new(wire: WireConfig) -> Self {
        EngineConfig {
            wire,
            rndv_threshold: 32768.min(wire.medium_max()),
            resend_delay: 500 * NS_PER_MS,
            resends_max: 1000,
            rto_min: 250 * NS_PER_US,
            pull_rto_min: NS_PER_MS,
            rto_initial: 20 * NS_PER_MS,
            pull_burst_frames: 4,
            dup_ack_threshold: 1,
            ack_delay: 100 * NS_PER_US,
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
            send_bundles: true,
            stripe_boards: Vec::new(),
            inline_copy_msg_max: 0,
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

    /// When a connect request is sent again after its `resends`-th resend: soon at
    /// first (a peer that has not discovered us yet drops it, and our solicited
    /// announcement reaches it within milliseconds), then backing off to the resend
    /// delay: first contact costs tens of milliseconds, not the original's half second.
    pub fn connect_resend_delay(&self, resends: u32) -> Time {
        let first = self.rto_initial.min(self.resend_delay);
        first
            .saturating_mul(1u64 << resends.min(20))
            .min(self.resend_delay)
    }
}
