//! Completed requests: collected from the engine (releasing lent memory) into the done
//! table, where test/wait/peek take them.

use super::Core;
use crate::copy::Copier;
use crate::memory::MemRegistry;
use omx_proto::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::VecDeque;

/// Completed requests on their way to the application.
#[derive(Default)]
pub(super) struct Completions {
    done: DoneTable,
    /// Requests whose completion the application no longer wants.
    forgotten: HashSet<ReqId>,
    /// The request a `test` or `wait` is looking for during its progress pass: its
    /// completion goes straight to `wanted` for that call, not through `done`.
    /// Set and cleared within one hold of the lock.
    want: Option<ReqId>,
    wanted: Option<Completion>,
    /// Completions filed for the application so far (the notify descriptor's count).
    filed: u64,
}

impl Completions {
    /// Moves the engine's completions to the done table (releasing lent memory), or the
    /// one of `want` to `wanted`; true if any is for the application.
    pub(super) fn collect(
        &mut self,
        engine: &mut Engine,
        mem: &mut MemRegistry,
        copier: &mut Copier,
        now: Time,
    ) -> bool {
        let mut completed = false;
        while let Some(c) = engine.poll_completion() {
            completed |= self.take_polled(c, engine, mem, copier, now);
        }
        completed
    }

    /// Files a completion the engine produced; true if it is for the application.
    pub(super) fn take_polled(
        &mut self,
        c: Completion,
        engine: &mut Engine,
        mem: &mut MemRegistry,
        copier: &mut Copier,
        now: Time,
    ) -> bool {
        if c.kind == RequestKind::Recv
            && copier.pending() > 0
            && !matches!(c.status.code, StatusCode::Success | StatusCode::Truncated)
        {
            // A failed receive may still have copies in flight into its buffer: the
            // application gets it back only after they land.
            copier.wait_all(|id| engine.copy_done(now, id));
        }
        self.file(c, mem)
    }

    /// Files one completion: releases its lent memory (failing it if a copy into or
    /// out of a typed segment failed), then drops it if the application
    /// forgot the request, hands it to the `test`/`wait` looking for it (`want`), or
    /// puts it in the done table. True if it is for the application.
    #[inline(always)]
    pub(super) fn file(&mut self, mut c: Completion, mem: &mut MemRegistry) -> bool {
        if let Some(h) = c.mem {
            // A file or process segment that failed a copy (a file shortened or a
            // process gone after the post) fails the request: never silently wrong data.
            if mem.release(h).is_some()
                && matches!(c.status.code, StatusCode::Success | StatusCode::Truncated)
            {
                c.status.code = StatusCode::Aborted;
            }
        }
        if !self.forgotten.is_empty() && self.forgotten.remove(&c.req) {
            return false;
        }
        self.filed += 1;
        if self.want == Some(c.req) && self.wanted.is_none() {
            self.wanted = Some(c);
        } else {
            self.done.insert(c);
        }
        true
    }

    /// Hands the completion of `req` to [`Completions::unwatch`] instead of the done
    /// table until then.
    pub(super) fn watch(&mut self, req: ReqId) {
        self.want = Some(req);
    }

    /// Ends [`Completions::watch`]: the completion of the watched request, if it came.
    pub(super) fn unwatch(&mut self) -> Option<Completion> {
        self.want = None;
        self.wanted.take()
    }

    /// The application no longer wants the completion of `req`.
    pub(super) fn forget(&mut self, req: ReqId) {
        if self.done.take(req).is_none() {
            self.forgotten.insert(req);
        }
    }

    #[inline]
    pub(super) fn insert(&mut self, c: Completion) {
        self.filed += 1;
        self.done.insert(c)
    }

    /// Completions filed for the application so far.
    pub(super) fn filed(&self) -> u64 {
        self.filed
    }

    pub(super) fn contains(&self, req: ReqId) -> bool {
        self.done.contains(req)
    }

    pub(super) fn get(&self, req: ReqId) -> Option<&Completion> {
        self.done.get(req)
    }

    #[inline]
    pub(super) fn take(&mut self, req: ReqId) -> Option<Completion> {
        self.done.take(req)
    }

    /// The oldest completed request, left in place.
    pub(super) fn oldest(&mut self) -> Option<ReqId> {
        self.done.oldest()
    }

    /// The oldest completion whose match info satisfies the mask (removes it).
    pub(super) fn take_any(&mut self, match_info: u64, mask: u64) -> Option<Completion> {
        self.done.take_any(match_info, mask)
    }
}

impl Core {
    /// [`Completions::collect`] on this endpoint's own engine and memory.
    pub(super) fn collect_completions(&mut self, now: Time) -> bool {
        let Core {
            completions,
            engine,
            mem,
            copier,
            ..
        } = self;
        completions.collect(engine, mem, copier, now)
    }
}

/// A request as [`Endpoint::request_info`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestInfo {
    pub kind: RequestKind,
    /// The context value given when it was posted.
    pub context: u64,
    /// A send whose buffer may be reused: its data was captured at post time, or it
    /// completed.
    pub buffered: bool,
}

/// Completed requests waiting for test/wait, in completion order. The latest one is
/// kept apart (a request tested right after it completed comes and goes without
/// queueing); older ones sit in a table indexed by the request's engine slot (ids are
/// slab keys: slot index in the high half), checked against the whole id, so finding
/// one costs no hashing. A slot whose earlier tenant's completion is still waiting
/// spills the newer one to a map (rare: the engine reuses a slot only after its request
/// completed).
#[derive(Default)]
struct DoneTable {
    by_slot: Vec<Option<Completion>>,
    spill: HashMap<ReqId, Completion>,
    /// Completion order of the older entries. Cleaned lazily: ids taken by id are
    /// skipped, and popped once they reach the front.
    order: VecDeque<ReqId>,
    latest: Option<Completion>,
}

/// Slots beyond this index go to the spill map (bounds the table for odd ids).
const SLOTS_MAX: usize = 1 << 16;

fn slot_of(req: ReqId) -> usize {
    (req.0 >> 32) as usize
}

impl DoneTable {
    #[inline]
    fn insert(&mut self, c: Completion) {
        if let Some(old) = self.latest.replace(c) {
            self.order.push_back(old.req);
            self.file_older(old);
        }
    }

    fn file_older(&mut self, c: Completion) {
        let slot = slot_of(c.req);
        if slot < SLOTS_MAX {
            if self.by_slot.len() <= slot {
                self.by_slot.resize_with(slot + 1, || None);
            }
            if self.by_slot[slot].is_none() {
                self.by_slot[slot] = Some(c);
                return;
            }
        }
        self.spill.insert(c.req, c);
    }

    fn older(&self, req: ReqId) -> Option<&Completion> {
        match self.by_slot.get(slot_of(req)) {
            Some(Some(c)) if c.req == req => Some(c),
            _ if self.spill.is_empty() => None,
            _ => self.spill.get(&req),
        }
    }

    fn remove_older(&mut self, req: ReqId) -> Option<Completion> {
        if let Some(entry) = self.by_slot.get_mut(slot_of(req)) {
            if entry.as_ref().is_some_and(|c| c.req == req) {
                return entry.take();
            }
        }
        if self.spill.is_empty() {
            return None;
        }
        self.spill.remove(&req)
    }

    fn contains(&self, req: ReqId) -> bool {
        self.get(req).is_some()
    }

    fn get(&self, req: ReqId) -> Option<&Completion> {
        match &self.latest {
            Some(c) if c.req == req => Some(c),
            _ => self.older(req),
        }
    }

    #[inline]
    fn take(&mut self, req: ReqId) -> Option<Completion> {
        if self.latest.as_ref().is_some_and(|c| c.req == req) {
            return self.latest.take();
        }
        if self.order.is_empty() {
            return None;
        }
        self.take_older(req)
    }

    fn take_older(&mut self, req: ReqId) -> Option<Completion> {
        let c = self.remove_older(req)?;
        self.prune();
        Some(c)
    }

    /// Pops ids already taken off the front.
    fn prune(&mut self) {
        while let Some(&r) = self.order.front() {
            if self.older(r).is_some() {
                break;
            }
            self.order.pop_front();
        }
    }

    fn oldest(&mut self) -> Option<ReqId> {
        self.prune();
        self.order
            .front()
            .copied()
            .or_else(|| self.latest.as_ref().map(|c| c.req))
    }

    /// The oldest completion whose match info satisfies the mask.
    fn take_any(&mut self, match_info: u64, mask: u64) -> Option<Completion> {
        let hit = |c: &Completion| c.status.match_info & mask == match_info & mask;
        if let Some(pos) = self
            .order
            .iter()
            .position(|&r| self.older(r).is_some_and(hit))
        {
            let r = self.order.remove(pos)?;
            let c = self.remove_older(r);
            self.prune();
            return c;
        }
        if self.latest.as_ref().is_some_and(hit) {
            return self.latest.take();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(req: u64, match_info: u64) -> Completion {
        Completion {
            req: ReqId(req),
            kind: RequestKind::Send,
            status: Status {
                code: StatusCode::Success,
                source: None,
                match_info,
                msg_length: 0,
                xfer_length: 0,
                context: 0,
            },
            mem: None,
            source_session: 0,
        }
    }

    #[test]
    fn done_table_keeps_completion_order_whatever_is_taken_first() {
        let mut d = DoneTable::default();
        assert!(d.take(ReqId(1)).is_none());
        assert_eq!(d.oldest(), None);
        for r in 1..=4 {
            d.insert(completion(r, r * 10));
        }
        assert!(d.contains(ReqId(4)) && d.contains(ReqId(1)));
        // The latest, then one in the middle, by id.
        assert_eq!(d.take(ReqId(4)).map(|c| c.req), Some(ReqId(4)));
        assert_eq!(d.take(ReqId(2)).map(|c| c.req), Some(ReqId(2)));
        assert!(d.take(ReqId(2)).is_none() && !d.contains(ReqId(4)));
        assert_eq!(d.oldest(), Some(ReqId(1)));
        d.insert(completion(5, 50));
        // By match: the oldest that matches.
        assert_eq!(d.take_any(0, 0).map(|c| c.req), Some(ReqId(1)));
        assert_eq!(d.take_any(50, u64::MAX).map(|c| c.req), Some(ReqId(5)));
        assert_eq!(d.oldest(), Some(ReqId(3)));
        assert_eq!(d.take(ReqId(3)).map(|c| c.req), Some(ReqId(3)));
        assert_eq!(d.oldest(), None);
        // Taken right after completing, with older ones left.
        d.insert(completion(6, 0));
        d.insert(completion(7, 0));
        assert_eq!(d.take(ReqId(7)).map(|c| c.req), Some(ReqId(7)));
        d.insert(completion(8, 0));
        assert_eq!(d.oldest(), Some(ReqId(6)));
        assert_eq!(d.take_any(0, 0).map(|c| c.req), Some(ReqId(6)));
        assert_eq!(d.oldest(), Some(ReqId(8)));
    }

    #[test]
    fn done_table_tells_a_slot_s_tenants_apart() {
        let id = |slot: u64, generation: u64| (slot << 32) | generation;
        let mut d = DoneTable::default();
        // Two completions of slot 3 (the engine reused it) and others around them.
        for r in [id(3, 1), id(1, 1), id(3, 2), id(70_000, 1), id(2, 5)] {
            d.insert(completion(r, r));
        }
        assert!(d.contains(ReqId(id(3, 1))) && d.contains(ReqId(id(3, 2))));
        assert!(!d.contains(ReqId(id(3, 3))) && !d.contains(ReqId(id(1, 2))));
        assert_eq!(
            d.take(ReqId(id(3, 2))).map(|c| c.req),
            Some(ReqId(id(3, 2)))
        );
        assert!(d.take(ReqId(id(3, 2))).is_none());
        assert_eq!(d.oldest(), Some(ReqId(id(3, 1))));
        assert_eq!(
            d.take(ReqId(id(3, 1))).map(|c| c.req),
            Some(ReqId(id(3, 1)))
        );
        assert_eq!(d.oldest(), Some(ReqId(id(1, 1))));
        let m = id(70_000, 1);
        assert_eq!(d.take_any(m, u64::MAX).map(|c| c.req), Some(ReqId(m)));
        assert_eq!(d.take_any(0, 0).map(|c| c.req), Some(ReqId(id(1, 1))));
        assert_eq!(d.take_any(0, 0).map(|c| c.req), Some(ReqId(id(2, 5))));
        assert_eq!(d.oldest(), None);
    }
}
