//! The unexpected queue: in-order messages that no posted receive matched yet, in
//! arrival order, under a byte budget, optionally held for the application's
//! unexpected handler first.

use crate::slab::{Key, Slab};
use crate::types::*;
use bytes::Bytes;
use std::collections::VecDeque;

/// Bytes charged to the unexpected budget for a rendezvous announcement.
const RNDV_CHARGE: usize = 64;

/// Payload pieces of an eager message by byte offset; a single-frame message keeps its
/// one piece inline (no allocation per unexpected message).
pub(crate) type Chunks = smallvec::SmallVec<[(u32, Bytes); 1]>;

pub(crate) enum UnexpBody {
    Eager {
        chunks: Chunks,
        complete: bool,
    },
    Rndv {
        rdma_id: u8,
        rdma_seq: u8,
        rdma_offset: u16,
    },
}

pub(crate) struct Unexpected {
    pub partner: PartnerId,
    pub match_info: u64,
    pub msg_length: u32,
    pub body: UnexpBody,
    /// Bytes charged against the unexpected-queue budget.
    pub charged: usize,
    /// Waiting for the application's unexpected handler: invisible to matching.
    pub pending: bool,
}

/// An unmatched message offered to the application's unexpected handler before it is
/// stored (MX `mx_register_unexp_handler`).
#[derive(Clone, Debug)]
pub struct UnexpectedInfo {
    pub id: u64,
    pub source: PartnerId,
    pub match_info: u64,
    pub msg_length: u32,
    /// The whole payload, when it is already at hand (one-frame messages).
    pub data: Option<Bytes>,
}

#[derive(Default)]
pub(crate) struct UnexpectedQueue {
    entries: Slab<Unexpected>,
    /// Matching order (arrival order) of the stored messages.
    order: VecDeque<Key>,
    /// Bytes charged by the stored messages.
    bytes: usize,
    /// An unexpected handler is registered: new messages wait for its verdict.
    hook: bool,
    /// Messages the handler has yet to see.
    events: VecDeque<Key>,
}

impl UnexpectedQueue {
    /// Stores a message unless it exceeds the budget of `max` bytes (`unbounded`: a
    /// message to oneself, which has no sender to slow down).
    pub fn push(
        &mut self,
        partner: PartnerId,
        match_info: u64,
        msg_length: u32,
        body: UnexpBody,
        max: usize,
        unbounded: bool,
    ) -> Option<Key> {
        let charged = match body {
            UnexpBody::Eager { .. } => msg_length as usize,
            UnexpBody::Rndv { .. } => RNDV_CHARGE,
        };
        if self.bytes + charged > max && !unbounded {
            return None;
        }
        self.bytes += charged;
        let pending = self.hook;
        let u = self.entries.insert(Unexpected {
            partner,
            match_info,
            msg_length,
            body,
            charged,
            pending,
        });
        self.order.push_back(u);
        if pending {
            self.events.push_back(u);
        }
        Some(u)
    }

    /// The oldest message visible to matching that `(m & mask) == match_info` takes,
    /// taken out of the matching order (it stays stored until [`Self::remove`]).
    pub fn take_match(&mut self, match_info: u64, mask: u64) -> Option<Key> {
        let pos = self.order.iter().position(|&u| {
            self.entries
                .get(u)
                .is_some_and(|u| !u.pending && u.match_info & mask == match_info)
        })?;
        self.order.remove(pos)
    }

    /// The oldest visible message matching, left in place.
    pub fn probe(&self, match_info: u64, mask: u64) -> Option<&Unexpected> {
        self.order
            .iter()
            .filter_map(|&u| self.entries.get(u))
            .find(|u| !u.pending && u.match_info & mask == match_info)
    }

    /// Removes a message already out of the matching order.
    pub fn remove(&mut self, u: Key) -> Option<Unexpected> {
        let x = self.entries.remove(u)?;
        self.bytes -= x.charged;
        Some(x)
    }

    /// Removes a message wherever it is.
    pub fn discard(&mut self, u: Key) -> Option<Unexpected> {
        let x = self.remove(u)?;
        self.unlink(u);
        Some(x)
    }

    /// Takes a message out of the matching order.
    pub fn unlink(&mut self, u: Key) {
        self.order.retain(|&y| y != u);
    }

    pub fn get_mut(&mut self, u: Key) -> Option<&mut Unexpected> {
        self.entries.get_mut(u)
    }

    /// Drops every message from `pid` (its stream was reset).
    pub fn drop_from(&mut self, pid: PartnerId) {
        let keys: Vec<Key> = self.order.iter().copied().collect();
        for u in keys {
            if self.entries.get(u).is_some_and(|x| x.partner == pid) {
                self.discard(u);
            }
        }
    }

    /// The handler's verdict on `u` is in: it becomes visible to matching. Its
    /// sender and match info.
    pub fn resolve(&mut self, u: Key) -> Option<(PartnerId, u64)> {
        let x = self.entries.get_mut(u)?;
        x.pending = false;
        Some((x.partner, x.match_info))
    }

    /// The next message the unexpected handler must see.
    pub fn poll_event(&mut self) -> Option<UnexpectedInfo> {
        while let Some(u) = self.events.pop_front() {
            let Some(x) = self.entries.get(u) else {
                continue;
            };
            let data = match &x.body {
                UnexpBody::Eager {
                    chunks,
                    complete: true,
                } if chunks.len() == 1 && chunks[0].0 == 0 => Some(chunks[0].1.clone()),
                UnexpBody::Eager { .. } if x.msg_length == 0 => Some(Bytes::new()),
                _ => None,
            };
            return Some(UnexpectedInfo {
                id: u.0,
                source: x.partner,
                match_info: x.match_info,
                msg_length: x.msg_length,
                data,
            });
        }
        None
    }

    pub fn set_hook(&mut self, on: bool) {
        self.hook = on;
    }

    pub fn hook(&self) -> bool {
        self.hook
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}
