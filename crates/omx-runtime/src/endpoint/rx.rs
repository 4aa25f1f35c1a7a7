//! The receive path: frames taken from the packet ring, either placed in place (pull
//! replies) or copied into pooled chunks, then dispatched to the engine; frames for
//! closed endpoints are nacked by the board-service owner.

use super::progress::Pass;
use super::{Core, EndpointInner, RX_BATCH, RX_POOL_CHUNK};
use crate::runtime::MAX_ENDPOINTS;
use bytes::{Bytes, BytesMut};
use omx_proto::demux::closed_endpoint_nack;
use omx_proto::demux::{route, Route};
use omx_proto::*;
use omx_transport::{PacketSocket, RxFrame};
use omx_wire::NackType;
use std::collections::VecDeque;

/// Retired chunks kept for reuse.
const RX_POOL_KEEP: usize = 16;

/// Frames taken during a progress pass and waiting for dispatch.
pub(super) struct Inbound {
    /// Endpoint frames, carved out of `pool`.
    frames: Vec<Bytes>,
    /// Board frames, for discovery.
    pub(super) board: Vec<Vec<u8>>,
    pool: FramePool,
    /// Frames this endpoint sent to itself, delivered at the next pass.
    pub(super) looped: Vec<Bytes>,
}

impl Inbound {
    pub(super) fn new() -> Inbound {
        Inbound {
            frames: Vec::with_capacity(RX_BATCH),
            board: Vec::new(),
            pool: FramePool::default(),
            looped: Vec::new(),
        }
    }

    /// Frames from the wire (or looped back) are waiting for dispatch.
    pub(super) fn has_frames(&self) -> bool {
        !self.frames.is_empty() || !self.board.is_empty()
    }

    /// Endpoint frames (not board frames) are waiting for dispatch.
    pub(super) fn has_endpoint_frames(&self) -> bool {
        !self.frames.is_empty()
    }

    /// Queues the frames looped back by the last pass for this one's dispatch.
    pub(super) fn take_looped(&mut self) {
        if !self.looped.is_empty() {
            self.frames.append(&mut self.looped);
        }
    }

    /// Queues a copy of `f` for dispatch (frames are carved out of shared chunks: no
    /// allocation per frame).
    #[inline]
    pub(super) fn keep(&mut self, f: &[u8]) {
        let b = self.pool.copy(f);
        self.frames.push(b);
    }

    /// A copy of `f` the engine may keep (shared-memory records), from the same chunks.
    #[inline]
    pub(super) fn copy(&mut self, f: &[u8]) -> Bytes {
        self.pool.copy(f)
    }
}

/// Received frames are copied into a few large chunks used in turn: a chunk is reused
/// in place once every frame carved from it has been dropped, so the data path neither
/// allocates nor touches fresh pages (which cost page faults at every message).
#[derive(Default)]
struct FramePool {
    current: BytesMut,
    retired: VecDeque<BytesMut>,
}

impl FramePool {
    /// `f` copied into the current chunk (a fresh or reclaimed one if it is full).
    #[inline]
    fn copy(&mut self, f: &[u8]) -> Bytes {
        if self.current.capacity() < f.len() {
            self.refill(f.len());
        }
        self.carve(f)
    }

    fn refill(&mut self, need: usize) {
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

    fn carve(&mut self, f: &[u8]) -> Bytes {
        self.current.extend_from_slice(f);
        self.current.split().freeze()
    }
}

impl EndpointInner {
    /// Takes the frames waiting on the packet ring (at most a batch). Pull replies for
    /// this endpoint are copied once, from their ring slot into their receive buffer:
    /// here, or with copy offload on the copy engine, the slot held until its copy is
    /// done (copied here when holding it could stall the ring). Board frames are set
    /// aside for discovery; the rest is copied for dispatch.
    pub(super) fn take_ring(&self, core: &mut Core, pass: &mut Pass) {
        let Core {
            engine,
            sock,
            stripes,
            mem,
            copier,
            faults,
            inbound,
            ..
        } = core;
        // Striped pulls and replies (`OMX_STRIPE`) from the other boards' sockets, which
        // take nothing else: handed to the engine as they are.
        for s in stripes.iter_mut().filter(|s| s.may_have_rx()) {
            let _ = s.recv_frames(RX_BATCH, |fr| inbound.keep(fr.data()));
        }
        let offload = copier.backend().is_some();
        let me = self.index;
        // An empty ring (the common poll) is seen with one load, before the frame
        // handler is even built.
        if faults.is_none() && !sock.may_have_rx() {
            return;
        }
        let mut take = |mut fr: RxFrame<'_>| {
            let f = fr.data();
            // (Pull replies for another endpoint, which only the board-service owner
            // sees, take the owned path to be counted as for a closed endpoint.)
            if omx_wire::peek::is_pull_reply(f) && route(f) == Route::Endpoint(me) {
                let t = pass.precise_now(&self.rt);
                pass.placed = true;
                if offload {
                    if let Some(held) = fr.hold() {
                        // Its payload becomes a copy action for the copy engine.
                        engine.handle_frame(t, held);
                        return;
                    }
                    copier.inline_unheld += 1;
                }
                let m = &*mem;
                if engine
                    .handle_frame_in_place(t, f, &mut |h, off, data| m.write(h, off as usize, data))
                {
                    return;
                }
            }
            if omx_wire::peek::is_board_frame(f) {
                inbound.board.push(f.to_vec());
            } else {
                inbound.keep(f);
            }
        };
        match faults.as_mut() {
            None => {
                let _ = sock.recv_frames(RX_BATCH, take);
            }
            Some(inj) => {
                let _ = sock.recv_frames(RX_BATCH, |f| inj.on_receive(f, &mut take));
                inj.release(&mut take);
            }
        }
    }

    /// Hands the endpoint frames taken in this pass to the engine (which takes bundles
    /// apart); frames for other endpoints (only the board-service owner sees them) are
    /// nacked as the original driver does for endpoints that are not open.
    pub(super) fn dispatch(&self, core: &mut Core, now: Time) {
        let Core {
            engine,
            sock,
            inbound,
            ..
        } = core;
        let me = self.index;
        for f in inbound.frames.drain(..) {
            match route(&f) {
                Route::Endpoint(e) if e != me && omx_wire::peek::is_bundle(&f) => {
                    // The bundle header carries no checksum: each item is routed by its
                    // own, so a flipped endpoint byte there does not nack frames that
                    // are ours.
                    let Ok(items) = omx_wire::bundle_items(&f) else {
                        engine.counters.drop_bad_bundle += 1;
                        continue;
                    };
                    for inner in items.into_iter().map(|r| f.slice(r)) {
                        match route(&inner) {
                            Route::Endpoint(x) if x != me => {
                                self.nack_closed(engine, sock, x, &inner)
                            }
                            _ => engine.handle_frame(now, inner),
                        }
                    }
                }
                Route::Endpoint(e) if e != me => self.nack_closed(engine, sock, e, &f),
                _ => engine.handle_frame(now, f),
            }
        }
    }

    fn nack_closed(&self, engine: &mut Engine, sock: &mut PacketSocket, e: u8, f: &[u8]) {
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
        if let Some(n) = closed_endpoint_nack(f, &self.rt.cfg.wire, self.board.iface.mac, kind) {
            engine.counters.send_nack_lib += 1;
            let _ = sock.queue_send(n.len(), |b| b.copy_from_slice(&n));
        }
    }
}
