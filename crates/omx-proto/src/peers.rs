//! The board's peer table: nic id <-> 16-bit peer index, plus the peer's name.

use crate::types::NicId;
use rustc_hash::FxHashMap as HashMap;

#[derive(Clone, Debug, Default)]
pub struct PeerTable {
    entries: Vec<Option<Peer>>,
    by_nic: HashMap<NicId, u16>,
    max: usize,
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
        if self.entries.len() >= self.max {
            return None;
        }
        let index = self.entries.len() as u16;
        self.entries.push(Some(Peer { nic_id, name }));
        self.by_nic.insert(nic_id, index);
        Some(index)
    }

    /// Forgets a peer; its index is not reused (other tables may still name it).
    pub fn remove(&mut self, nic_id: NicId) -> bool {
        match self.by_nic.remove(&nic_id) {
            Some(i) => {
                self.entries[i as usize] = None;
                true
            }
            None => false,
        }
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
