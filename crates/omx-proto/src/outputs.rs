//! What the engine hands to its caller, in order: frames to transmit, completions,
//! payload copies (with the receive each belongs to while in flight), and messages
//! and pulls for local partners.

use crate::atomic::AtomicJob;
use crate::local::{LocalPull, LocalSend};
use crate::slab::{Key, Slab};
use crate::transmit::Transmit;
use crate::types::*;
use bytes::Bytes;
use std::collections::VecDeque;

#[derive(Default)]
pub(crate) struct Outputs {
    transmits: VecDeque<Transmit>,
    completions: VecDeque<Completion>,
    copies: VecDeque<CopyOp>,
    /// Copies in flight and the receive each belongs to (ids are slab keys).
    copies_in_flight: Slab<Key>,
    local: VecDeque<LocalSend>,
    local_pulls: VecDeque<LocalPull>,
    atomics: VecDeque<AtomicJob>,
}

impl Outputs {
    pub fn transmit(&mut self, t: Transmit) {
        self.transmits.push_back(t);
    }

    pub fn complete(&mut self, c: Completion) {
        self.completions.push_back(c);
    }

    /// Queues a copy of `src` to `dst` at `dst_offset` for receive `req`, reported
    /// with `copy_done` unless `report` is false (the caller copies as it takes it).
    pub fn copy(
        &mut self,
        req: Key,
        src: Bytes,
        dst: MemHandle,
        dst_offset: u64,
        msg_length: u32,
        report: bool,
    ) {
        let id = match report {
            true => CopyId(self.copies_in_flight.insert(req).0),
            false => CopyId(u64::MAX),
        };
        self.copies.push_back(CopyOp {
            id,
            src,
            dst,
            dst_offset,
            msg_length,
            report,
        });
    }

    /// A copy finished: the receive it belongs to, unless it was forgotten.
    pub fn copy_done(&mut self, id: CopyId) -> Option<Key> {
        self.copies_in_flight.remove(Key(id.0))
    }

    /// Copies in flight for receive `req` will not be waited for (it failed).
    pub fn forget_copies_of(&mut self, req: Key) {
        let stale: Vec<Key> = self
            .copies_in_flight
            .keys()
            .filter(|&c| self.copies_in_flight.get(c) == Some(&req))
            .collect();
        for c in stale {
            self.copies_in_flight.remove(c);
        }
    }

    pub fn atomic(&mut self, job: AtomicJob) {
        self.atomics.push_back(job);
    }

    pub fn pop_atomic(&mut self) -> Option<AtomicJob> {
        self.atomics.pop_front()
    }

    pub fn local(&mut self, m: LocalSend) {
        self.local.push_back(m);
    }

    pub fn local_pull(&mut self, p: LocalPull) {
        self.local_pulls.push_back(p);
    }

    /// The next frame, bundled with the frames queued behind it where they may share
    /// one; also says whether it is a bundle. With `hold_bundles`, a frame that may
    /// share a bundle stays queued (see `Engine::poll_holding_bundles`).
    pub fn pop_transmit_bundled(&mut self, hold_bundles: bool) -> Option<(Transmit, bool)> {
        if hold_bundles && self.transmits.front()?.bundle_limit != 0 {
            return None;
        }
        let first = self.transmits.pop_front()?;
        Some(crate::bundle::gather(first, &mut self.transmits))
    }

    pub fn pop_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    pub fn pop_copy(&mut self) -> Option<CopyOp> {
        self.copies.pop_front()
    }

    pub fn pop_local(&mut self) -> Option<LocalSend> {
        self.local.pop_front()
    }

    pub fn pop_local_pull(&mut self) -> Option<LocalPull> {
        self.local_pulls.pop_front()
    }

    pub fn completions_queued(&self) -> bool {
        !self.completions.is_empty()
    }

    pub fn local_queued(&self) -> bool {
        !self.local.is_empty()
    }

    /// Frames, copies, local messages or pulls to execute (completions aside).
    /// As `has_work`, not counting frames held for bundling.
    pub fn has_work_besides_bundles(&self) -> bool {
        self.transmits.front().is_some_and(|t| t.bundle_limit == 0)
            || !self.copies.is_empty()
            || !self.atomics.is_empty()
            || !self.local.is_empty()
            || !self.local_pulls.is_empty()
    }

    pub fn has_work(&self) -> bool {
        !self.transmits.is_empty()
            || !self.copies.is_empty()
            || !self.atomics.is_empty()
            || !self.local.is_empty()
            || !self.local_pulls.is_empty()
    }

    /// Queue lengths: transmits, completions, copies in flight, local messages.
    pub fn lens(&self) -> (usize, usize, usize, usize) {
        (
            self.transmits.len(),
            self.completions.len(),
            self.copies_in_flight.len(),
            self.local.len(),
        )
    }
}
