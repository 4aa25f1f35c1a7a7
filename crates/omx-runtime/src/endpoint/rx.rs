//! The receive path: frames taken from the packet ring, either placed in place (pull
//! replies) or copied into pooled chunks, then dispatched to the engine; frames for
//! closed endpoints are nacked by the board-service owner.

use super::{EndpointInner, RX_POOL_CHUNK};
use crate::runtime::MAX_ENDPOINTS;
use bytes::{Bytes, BytesMut};
use omx_proto::demux::closed_endpoint_nack;
use omx_proto::*;
use omx_transport::PacketSocket;
use omx_wire::NackType;
use std::collections::VecDeque;

/// Packet type byte of pull replies (flags masked), taken in place from the ring.
pub(super) const PULL_REPLY_TYPE: u8 = omx_wire::PacketType::PullReply as u8;

/// Retired chunks kept for reuse.
pub(super) const RX_POOL_KEEP: usize = 16;

/// Received frames are copied into a few large chunks used in turn: a chunk is reused
/// in place once every frame carved from it has been dropped, so the data path neither
/// allocates nor touches fresh pages (which cost page faults at every message).
#[derive(Default)]
pub(super) struct FramePool {
    current: BytesMut,
    retired: VecDeque<BytesMut>,
}

impl FramePool {
    pub(super) fn capacity(&self) -> usize {
        self.current.capacity()
    }

    pub(super) fn refill(&mut self, need: usize) {
        let want = RX_POOL_CHUNK.max(need);
        let old = std::mem::take(&mut self.current);
        if old.capacity() > 0 || !self.retired.is_empty() {
            self.retired.push_back(old);
        }
        // Oldest first: its frames are the most likely to be gone.
        for _ in 0..self.retired.len() {
            let mut c = self.retired.pop_front().expect("non-empty");
            c.clear();
            if c.try_reclaim(want) {
                self.current = c;
                return;
            }
            self.retired.push_back(c);
        }
        // Every chunk still has live frames: a new one (older ones are freed by the
        // allocator when their last frame drops, beyond a few kept for reuse).
        while self.retired.len() > RX_POOL_KEEP {
            self.retired.pop_front();
        }
        self.current = BytesMut::with_capacity(want);
    }

    pub(super) fn carve(&mut self, f: &[u8]) -> Bytes {
        self.current.extend_from_slice(f);
        self.current.split().freeze()
    }
}

/// Feeds the inner frames of a bundle to the engine (zero-copy slices of the bundle).
pub(super) fn is_board_frame(f: &[u8]) -> bool {
    matches!(
        f.get(16).map(|&t| omx_wire::type_of(t)),
        Some(1) | Some(3) | Some(4)
    )
}

impl EndpointInner {
    pub(super) fn nack_closed(
        &self,
        engine: &mut Engine,
        sock: &mut PacketSocket,
        e: u8,
        f: &Bytes,
    ) {
        engine.counters.drop_bad_endpoint += 1;
        // It may have opened since the filter was last refreshed: then it has its own copy.
        if e < MAX_ENDPOINTS && self.board.dir.endpoint_open(e) {
            return;
        }
        let kind = if e < MAX_ENDPOINTS {
            NackType::EndpointClosed
        } else {
            NackType::BadEndpoint
        };
        let frames: Vec<Bytes> =
            if f.get(16).map(|&t| omx_wire::type_of(t)) == Some(omx_wire::BUNDLE_TYPE) {
                omx_wire::bundle_items(f)
                    .map(|items| items.into_iter().map(|r| f.slice(r)).collect())
                    .unwrap_or_default()
            } else {
                vec![f.clone()]
            };
        for inner in frames {
            if let Some(n) =
                closed_endpoint_nack(&inner, &self.rt.cfg.wire, self.board.iface.mac, kind)
            {
                engine.counters.send_nack_lib += 1;
                let _ = sock.queue_send(n.len(), |b| b.copy_from_slice(&n));
            }
        }
    }
}
