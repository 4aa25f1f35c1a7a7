//! A slab with generation-tagged keys: a freed slot's old key never finds the new tenant.

pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Key layout: slot index in the high 32 bits, generation in the low 32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub u64);

impl Key {
    pub fn index(self) -> u32 {
        (self.0 >> 32) as u32
    }
    pub fn generation(self) -> u32 {
        self.0 as u32
    }
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    pub fn insert(&mut self, value: T) -> Key {
        self.len += 1;
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 1,
                    value: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.value = Some(value);
        Key(((index as u64) << 32) | slot.generation as u64)
    }

    pub fn get(&self, key: Key) -> Option<&T> {
        let slot = self.slots.get(key.index() as usize)?;
        if slot.generation != key.generation() {
            return None;
        }
        slot.value.as_ref()
    }

    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let slot = self.slots.get_mut(key.index() as usize)?;
        if slot.generation != key.generation() {
            return None;
        }
        slot.value.as_mut()
    }

    pub fn remove(&mut self, key: Key) -> Option<T> {
        let slot = self.slots.get_mut(key.index() as usize)?;
        if slot.generation != key.generation() {
            return None;
        }
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1).max(1);
        self.free.push(key.index());
        self.len -= 1;
        Some(value)
    }

    /// Drops the entry of `key` in place (no move out, unlike `remove`); false when
    /// the key is stale.
    pub fn discard(&mut self, key: Key) -> bool {
        let Some(slot) = self.slots.get_mut(key.index() as usize) else {
            return false;
        };
        if slot.generation != key.generation() || slot.value.is_none() {
            return false;
        }
        slot.value = None;
        slot.generation = slot.generation.wrapping_add(1).max(1);
        self.free.push(key.index());
        self.len -= 1;
        true
    }

    /// A key that names no entry, now or later: what `insert` then `remove` would
    /// return, without building and moving a value (a request that completes at
    /// once still needs an id distinct from every other).
    pub fn retired_key(&mut self) -> Key {
        let index = match self.free.last() {
            Some(&i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 1,
                    value: None,
                });
                let i = (self.slots.len() - 1) as u32;
                self.free.push(i);
                i
            }
        };
        let slot = &mut self.slots[index as usize];
        let key = Key(((index as u64) << 32) | slot.generation as u64);
        slot.generation = slot.generation.wrapping_add(1).max(1);
        key
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.value
                .as_ref()
                .map(|_| Key(((i as u64) << 32) | s.generation as u64))
        })
    }
}

impl<T> Slab<T> {
    /// The live key at a slot index, if any (for wire handles that carry a truncated
    /// generation).
    pub fn key_at(&self, index: u32) -> Option<Key> {
        let slot = self.slots.get(index as usize)?;
        slot.value
            .as_ref()
            .map(|_| Key(((index as u64) << 32) | slot.generation as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_key_misses_new_tenant() {
        let mut s = Slab::default();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_eq!(a.index(), b.index());
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn retired_keys_are_unique_and_name_nothing() {
        let mut s = Slab::default();
        let a = s.retired_key();
        let live = s.insert(7);
        let b = s.retired_key();
        let c = s.retired_key();
        assert!(a != live && a != b && b != c && a != c && live != b && live != c);
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(b), None);
        assert_eq!(s.get(live), Some(&7));
        assert_eq!(s.len(), 1);
        let d = s.insert(8);
        assert!(d != a && d != b && d != c);
        assert_eq!(s.remove(b), None);
        assert_eq!(s.get(d), Some(&8));
        assert!(s.discard(d));
        assert!(!s.discard(d));
        assert_eq!(s.get(d), None);
        assert_eq!(s.len(), 1);
        let e = s.insert(9);
        assert!(e != d);
        assert_eq!(s.get(e), Some(&9));
    }
}
