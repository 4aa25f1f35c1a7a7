//! Which protocol a send takes, decided in one place from one table of thresholds (as
//! UCX picks its protocol from one threshold table): how the partner is reached, the
//! message's size, and whether the send is synchronous. The runtime asks once per send
//! ([`Engine::plan_send`]) and hands the bytes over as the plan says; the engine checks
//! the same table when the send is posted.

use crate::{Engine, EngineConfig, PartnerId, Reach};
use omx_wire::{WireConfig, NATIVE_MTU_MIN};

/// What the runtime does with a send's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendPlan {
    /// Write them now into the partner's shared-memory inbox (a connected local
    /// partner, an eager size, nothing local queued before it), then report the send
    /// with [`Engine::local_direct_sent`]; when the inbox has no room, capture instead.
    WriteToInbox,
    /// Copy them at post time ([`crate::SendData::Eager`]): the send completes early.
    Capture,
    /// Lend them as a registered region ([`crate::SendData::Region`]): rendezvous and
    /// pull (network), one-copy read by the receiver (shared memory), or one copy
    /// straight into a posted receive (self).
    Lend,
}

impl EngineConfig {
    /// Largest eager message to a partner reached this way (over the network, with
    /// the frame sizes `wire` agreed with it): the one threshold table.
    pub fn eager_max(&self, reach: Reach, wire: &WireConfig) -> u32 {
        match reach {
            Reach::Network => self.rndv_threshold_with(wire),
            Reach::Shared | Reach::SelfEndpoint => self.shared_rndv_threshold,
        }
    }

    /// The largest send buffered at post time whatever path it takes (MX's
    /// `MX_COPY_SEND_MAX`): the network's eager limit at the smallest frame size a
    /// partner may agree (`wire` with the native floor), or less when local paths
    /// (self or shared memory) may carry it.
    pub fn copy_send_max(&self, wire: &WireConfig, local_paths: bool) -> u32 {
        let net = self.eager_max(Reach::Network, &wire.with_mtu(NATIVE_MTU_MIN));
        if local_paths {
            net.min(self.eager_max(Reach::Shared, wire))
        } else {
            net
        }
    }
}

impl Engine {
    /// How the runtime hands over a send of `len` bytes with `match_info` to
    /// `partner`. To the self partner, a message that a posted receive matches is
    /// lent (copied once, straight from the send buffer); only one that would wait in
    /// the unexpected queue is captured.
    pub fn plan_send(&self, partner: PartnerId, match_info: u64, len: u32, sync: bool) -> SendPlan {
        let Some(p) = self.partners.get(partner) else {
            // Posting will report the unknown partner.
            return SendPlan::Capture;
        };
        if sync || len > self.cfg.eager_max(p.reach, &p.wire) {
            return SendPlan::Lend;
        }
        match p.reach {
            Reach::Shared if p.session.is_some() && self.local_path_clear() => {
                SendPlan::WriteToInbox
            }
            Reach::SelfEndpoint if self.posted_position(match_info).is_some() => SendPlan::Lend,
            _ => SendPlan::Capture,
        }
    }

    /// Whether a send to `partner` must be captured ([`SendPlan::Capture`] or the
    /// inbox fallback); the engine's own check when a send is posted.
    pub(crate) fn must_capture(
        &self,
        reach: Reach,
        wire: &WireConfig,
        len: u32,
        sync: bool,
    ) -> bool {
        !sync && len <= self.cfg.eager_max(reach, wire)
    }
}
