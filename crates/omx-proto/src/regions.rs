//! Registered send regions: the memory of rendezvous sends that remote (or local)
//! receivers pull from, by 8-bit region id and use counter, and the sends waiting for
//! a free id.

use crate::slab::Key;
use crate::types::MemHandle;
use std::collections::VecDeque;

/// Concurrent rendezvous sends per endpoint (half the 8-bit region id space, as MX).
pub(crate) const MAX_LARGE_SENDS: usize = 128;
/// The original starts every region's use counter here.
const REGION_USE_INIT: u8 = 23;

/// A registered send buffer that remote pullers may read.
pub(crate) struct Region {
    pub handle: MemHandle,
    pub len: u32,
    /// Offset of the region's data in `handle` (one-sided replies read from the middle
    /// of an exposed buffer).
    pub base: u64,
    pub req: Key,
    pub use_seq: u8,
}

pub(crate) struct Regions {
    slots: Vec<Option<Region>>,
    /// Next use counter of each id: a stale announcement names an old use.
    use_counter: [u8; 256],
    used: usize,
    /// Sends waiting for a free region, and sends queued behind them in their
    /// partner's order.
    waitq: VecDeque<Key>,
}

impl Default for Regions {
    fn default() -> Self {
        Regions {
            slots: (0..256).map(|_| None).collect(),
            use_counter: [REGION_USE_INIT; 256],
            used: 0,
            waitq: VecDeque::new(),
        }
    }
}

impl Regions {
    /// Registers a region for send `req`: its id and use counter, or `None` when all
    /// are taken.
    pub fn alloc(&mut self, handle: MemHandle, len: u32, base: u64, req: Key) -> Option<(u8, u8)> {
        if self.is_full() {
            return None;
        }
        let id = self.slots.iter().position(|r| r.is_none())?;
        self.used += 1;
        let use_seq = self.use_counter[id];
        self.use_counter[id] = use_seq.wrapping_add(1);
        self.slots[id] = Some(Region {
            handle,
            len,
            base,
            req,
            use_seq,
        });
        Some((id as u8, use_seq))
    }

    pub fn get(&self, id: usize) -> Option<&Region> {
        self.slots.get(id)?.as_ref()
    }

    pub fn release(&mut self, id: u8) {
        if self.slots[id as usize].take().is_some() {
            self.used -= 1;
        }
    }

    /// Releases region `id` if send `req` still holds it.
    pub fn release_if_held_by(&mut self, id: u8, req: Key) {
        if self.get(id as usize).is_some_and(|r| r.req == req) {
            self.release(id);
        }
    }

    pub fn is_full(&self) -> bool {
        self.used >= MAX_LARGE_SENDS
    }

    pub fn len(&self) -> usize {
        self.used
    }

    pub fn iter(&self) -> impl Iterator<Item = &Region> {
        self.slots.iter().flatten()
    }

    /// Queues a send behind the ones waiting for a region.
    pub fn wait(&mut self, k: Key) {
        self.waitq.push_back(k);
    }

    pub fn nobody_waits(&self) -> bool {
        self.waitq.is_empty()
    }

    pub fn waiting(&self) -> impl Iterator<Item = Key> + '_ {
        self.waitq.iter().copied()
    }

    pub fn next_waiting(&self) -> Option<Key> {
        self.waitq.front().copied()
    }

    pub fn pop_waiting(&mut self) -> Option<Key> {
        self.waitq.pop_front()
    }

    pub fn stop_waiting(&mut self, k: Key) {
        self.waitq.retain(|&x| x != k);
    }
}
