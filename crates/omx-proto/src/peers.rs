//! The board's peer table: nic id <-> 16-bit peer index, plus the peer's name.

use crate::types::NicId;
use rustc_hash::FxHashMap as HashMap;

#[derive(Clone, Debug, Default)]
pub struct PeerTable {
    entries: Vec<Option<Peer>>,
    by_nic: HashMap<NicId, u16>,
    max: usize,
    /// Slots given up by evicted peers, reused by later ones.
    free: Vec<u16>,
    /// Where the next search for an eviction victim starts (round robin).
    evict_cursor: usize,
    /// Peers evicted so far.
    pub evicted: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub nic_id: NicId,
    pub name: Option<String>,
}

impl PeerTable {
    /// A table of at most `max` peers (the original's default is 1024, hard max 65535).
    pub fn new(max: usize) -> Self {
        PeerTable {
            entries: Vec::new(),
            by_nic: HashMap::default(),
            max: max.min(0xFFFF),
            free: Vec::new(),
            evict_cursor: 0,
            evicted: 0,
        }
    }

    /// Adds (or renames) a peer and returns its index, or `None` when the table is full.
    pub fn add(&mut self, nic_id: NicId, name: Option<String>) -> Option<u16> {
        if let Some(&i) = self.by_nic.get(&nic_id) {
            if name.is_some() {
                self.entries[i as usize]
                    .as_mut()
                    .expect("indexed peer")
                    .name = name;
            }
            return Some(i);
        }
        let index = match self.free.pop() {
            Some(i) => {
                self.entries[i as usize] = Some(Peer { nic_id, name });
                i
            }
            None if self.entries.len() < self.max => {
                self.entries.push(Some(Peer { nic_id, name }));
                (self.entries.len() - 1) as u16
            }
            None => return None,
        };
        self.by_nic.insert(nic_id, index);
        Some(index)
    }

    /// As [`PeerTable::add`], but a full table first evicts a peer that never told its
    /// name (so never answered a host query: announcements from made-up boards fill a
    /// table with such peers) and for which `in_use(index)` is false. Returns the index
    /// and the evicted peer, if any; `None` when no peer can be evicted.
    pub fn add_or_evict(
        &mut self,
        nic_id: NicId,
        name: Option<String>,
        in_use: impl Fn(u16) -> bool,
    ) -> Option<(u16, Option<NicId>)> {
        if self.by_nic.contains_key(&nic_id) || !self.is_full() {
            return self.add(nic_id, name).map(|i| (i, None));
        }
        let n = self.entries.len();
        let victim = (0..n).map(|k| (self.evict_cursor + k) % n).find(|&i| {
            matches!(&self.entries[i], Some(p) if p.name.is_none()) && !in_use(i as u16)
        })?;
        self.evict_cursor = (victim + 1) % n;
        let old = self.entries[victim].take().map(|p| p.nic_id);
        if let Some(old) = old {
            self.by_nic.remove(&old);
        }
        self.free.push(victim as u16);
        self.evicted += 1;
        self.add(nic_id, name).map(|i| (i, old))
    }

    /// Forgets a peer; its index is not reused (other tables may still name it), unlike
    /// the slot of a peer evicted by [`PeerTable::add_or_evict`].
    pub fn remove(&mut self, nic_id: NicId) -> bool {
        match self.by_nic.remove(&nic_id) {
            Some(i) => {
                self.entries[i as usize] = None;
                true
            }
            None => false,
        }
    }

    /// No new peer fits without an eviction.
    pub fn is_full(&self) -> bool {
        self.len() >= self.max && self.free.is_empty()
    }

    pub fn index_of(&self, nic_id: NicId) -> Option<u16> {
        self.by_nic.get(&nic_id).copied()
    }

    pub fn get(&self, index: u16) -> Option<&Peer> {
        self.entries.get(index as usize)?.as_ref()
    }

    pub fn find_by_name(&self, name: &str) -> Option<(u16, &Peer)> {
        self.entries.iter().enumerate().find_map(|(i, p)| {
            p.as_ref()
                .filter(|p| p.name.as_deref() == Some(name))
                .map(|p| (i as u16, p))
        })
    }

    pub fn len(&self) -> usize {
        self.by_nic.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_nic.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u16, &Peer)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (i as u16, p)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_table_evicts_unnamed_peers_not_in_use() {
        let mut t = PeerTable::new(4);
        t.add(1, Some("a".into()));
        t.add(2, None);
        t.add(3, None);
        t.add(4, None);
        assert_eq!(t.add(5, None), None);
        // Index 1 (nic 2) is in use: nic 3 goes.
        assert_eq!(t.add_or_evict(5, None, |i| i == 1), Some((2, Some(3))));
        assert_eq!(t.index_of(3), None);
        assert_eq!(t.index_of(5), Some(2));
        assert_eq!(t.get(2).map(|p| p.nic_id), Some(5));
        // Named peers are never evicted.
        assert_eq!(t.add_or_evict(6, None, |i| i != 0), None);
        assert_eq!(
            t.add_or_evict(6, Some("f".into()), |_| false),
            Some((3, Some(4)))
        );
        assert_eq!(
            t.add_or_evict(6, None, |_| true),
            Some((3, None)),
            "already there"
        );
        assert_eq!(t.len(), 4);
        assert_eq!(t.evicted, 2);
    }
}
