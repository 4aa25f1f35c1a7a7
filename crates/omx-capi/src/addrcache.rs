//! An endpoint's lock-free memory of the addresses it handed out, so that the per-message
//! paths skip the global address table (a process-wide lock and a hash lookup): a
//! completion's source (partner to address) and a send's destination (address to
//! partner). A miss, a collision or a changed session takes the table as before.

use omx_proto::PartnerId;
use std::sync::atomic::{AtomicU64, Ordering};

/// Entries each way; partners and addresses beyond share slots (a miss, not an error).
const SLOTS: usize = 64;

pub(crate) struct AddrCache {
    /// Slot `partner % SLOTS`: partner (high 32 bits) and the address's table index + 1
    /// (low 32; 0 = empty), with the session it was given under in `sessions`.
    by_partner: [AtomicU64; SLOTS],
    sessions: [AtomicU64; SLOTS],
    /// Slot `(index + 1) % SLOTS`: table index + 1 (high 32 bits) and partner (low 32).
    by_index: [AtomicU64; SLOTS],
}

impl Default for AddrCache {
    fn default() -> Self {
        AddrCache {
            by_partner: [const { AtomicU64::new(0) }; SLOTS],
            sessions: [const { AtomicU64::new(0) }; SLOTS],
            by_index: [const { AtomicU64::new(0) }; SLOTS],
        }
    }
}

impl AddrCache {
    /// The table index + 1 of `partner`'s address, if it was recorded with `session`.
    #[inline]
    pub(crate) fn index_of(&self, partner: PartnerId, session: u32) -> Option<u64> {
        let slot = partner.0 as usize % SLOTS;
        let v = self.by_partner[slot].load(Ordering::Acquire);
        let index = v & u32::MAX as u64;
        // The session is checked after the entry: a writer stores it first, so a
        // match here was written with (or before) this entry; a stale pair only misses.
        (index != 0
            && v >> 32 == partner.0 as u64
            && self.sessions[slot].load(Ordering::Acquire) == session as u64
            && self.by_partner[slot].load(Ordering::Acquire) == v)
            .then_some(index)
    }

    /// The partner of an address of this endpoint (by its table index + 1).
    #[inline]
    pub(crate) fn partner_of(&self, index: u64) -> Option<PartnerId> {
        let v = self.by_index[index as usize % SLOTS].load(Ordering::Acquire);
        (index != 0 && v >> 32 == index).then_some(PartnerId(v as u32))
    }

    /// Records that `partner` has the address of table index + 1 `index` under `session`.
    pub(crate) fn record(&self, partner: PartnerId, index: u64, session: u32) {
        if index > u32::MAX as u64 {
            return;
        }
        let slot = partner.0 as usize % SLOTS;
        // Emptied first so that no reader pairs the new session with the old entry.
        self.by_partner[slot].store(0, Ordering::Release);
        self.sessions[slot].store(session as u64, Ordering::Release);
        self.by_partner[slot].store((partner.0 as u64) << 32 | index, Ordering::Release);
        self.by_index[index as usize % SLOTS]
            .store(index << 32 | partner.0 as u64, Ordering::Release);
    }
}

impl AddrCache {
    /// Forgets every address of `partner` (mx_disconnect made them invalid).
    pub(crate) fn forget(&self, partner: PartnerId) {
        let slot = &self.by_partner[partner.0 as usize % SLOTS];
        if slot.load(Ordering::Acquire) >> 32 == partner.0 as u64 {
            slot.store(0, Ordering::Release);
        }
        for e in &self.by_index {
            let v = e.load(Ordering::Acquire);
            if v != 0 && v as u32 == partner.0 {
                e.store(0, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_only_what_was_recorded_with_its_session() {
        let c = AddrCache::default();
        assert_eq!(c.index_of(PartnerId(3), 7), None);
        assert_eq!(c.partner_of(1), None);
        c.record(PartnerId(3), 1, 7);
        assert_eq!(c.index_of(PartnerId(3), 7), Some(1));
        assert_eq!(c.index_of(PartnerId(3), 8), None, "a new session misses");
        assert_eq!(c.partner_of(1), Some(PartnerId(3)));
        assert_eq!(c.partner_of(2), None);
        // Partner 67 shares partner 3's slot, address 65 address 1's: each replaces.
        c.record(PartnerId(3 + SLOTS as u32), 1 + SLOTS as u64, 0);
        assert_eq!(c.index_of(PartnerId(3), 7), None);
        assert_eq!(c.partner_of(1), None);
        assert_eq!(
            c.index_of(PartnerId(3 + SLOTS as u32), 0),
            Some(1 + SLOTS as u64)
        );
        assert_eq!(
            c.partner_of(1 + SLOTS as u64),
            Some(PartnerId(3 + SLOTS as u32))
        );
        c.record(PartnerId(5), 2, 0);
        c.forget(PartnerId(5));
        assert_eq!((c.index_of(PartnerId(5), 0), c.partner_of(2)), (None, None));
        assert_eq!(
            c.partner_of(1 + SLOTS as u64),
            Some(PartnerId(3 + SLOTS as u32))
        );
    }
}
