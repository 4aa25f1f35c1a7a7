//! POSIX byte-range locks of the server's clients, kept by the server itself: the
//! server is one process, so the kernel's POSIX locks (owned by a process) would never
//! conflict between its clients. An owner is (session, FUSE lock owner); ranges are
//! inclusive `[start, end]` as FUSE gives them.

use std::collections::HashMap;

pub const F_RDLCK: i32 = libc::F_RDLCK;
pub const F_WRLCK: i32 = libc::F_WRLCK;
pub const F_UNLCK: i32 = libc::F_UNLCK;

/// A file, by device and inode on the server.
pub type FileKey = (u64, u64);
/// (session, lock owner).
pub type Owner = (u32, u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lock {
    pub owner: Owner,
    pub start: u64,
    pub end: u64,
    pub typ: i32,
    pub pid: u32,
}

#[derive(Default)]
pub struct LockTable {
    files: HashMap<FileKey, Vec<Lock>>,
}

impl LockTable {
    /// The first lock of another owner that `want` conflicts with.
    pub fn conflict(&self, file: FileKey, want: &Lock) -> Option<Lock> {
        self.files.get(&file)?.iter().copied().find(|l| {
            l.owner != want.owner
                && l.start <= want.end
                && want.start <= l.end
                && (l.typ == F_WRLCK || want.typ == F_WRLCK)
        })
    }

    /// Sets (or, with `F_UNLCK`, clears) `want` when nothing conflicts; else returns
    /// the conflicting lock. The owner's own overlapping ranges are replaced (split
    /// where they stick out), as POSIX does.
    pub fn set(&mut self, file: FileKey, want: Lock) -> Result<(), Lock> {
        if want.typ != F_UNLCK {
            if let Some(c) = self.conflict(file, &want) {
                return Err(c);
            }
        }
        let locks = self.files.entry(file).or_default();
        let mut kept = Vec::with_capacity(locks.len() + 2);
        for l in locks.drain(..) {
            if l.owner != want.owner || l.end < want.start || want.end < l.start {
                kept.push(l);
                continue;
            }
            if l.start < want.start {
                kept.push(Lock {
                    end: want.start - 1,
                    ..l
                });
            }
            if l.end > want.end {
                kept.push(Lock {
                    start: want.end + 1,
                    ..l
                });
            }
        }
        if want.typ != F_UNLCK {
            kept.push(want);
        }
        if kept.is_empty() {
            self.files.remove(&file);
        } else {
            *locks = kept;
        }
        Ok(())
    }

    /// Drops every lock of `owner` on `file` (a close by that owner).
    pub fn release_owner(&mut self, file: FileKey, owner: Owner) {
        if let Some(locks) = self.files.get_mut(&file) {
            locks.retain(|l| l.owner != owner);
            if locks.is_empty() {
                self.files.remove(&file);
            }
        }
    }

    /// Drops every lock of a session (the client is gone).
    pub fn release_session(&mut self, session: u32) {
        self.files.retain(|_, locks| {
            locks.retain(|l| l.owner.0 != session);
            !locks.is_empty()
        });
    }

    pub fn count(&self) -> usize {
        self.files.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lk(owner: Owner, start: u64, end: u64, typ: i32) -> Lock {
        Lock {
            owner,
            start,
            end,
            typ,
            pid: 1,
        }
    }

    #[test]
    fn readers_share_writers_exclude() {
        let mut t = LockTable::default();
        let f = (1, 2);
        t.set(f, lk((1, 1), 0, 99, F_RDLCK)).unwrap();
        t.set(f, lk((2, 1), 50, 150, F_RDLCK)).unwrap();
        assert_eq!(
            t.set(f, lk((3, 1), 10, 10, F_WRLCK)).unwrap_err().owner,
            (1, 1)
        );
        t.set(f, lk((3, 1), 151, u64::MAX, F_WRLCK)).unwrap();
        t.release_session(2);
        t.release_owner(f, (1, 1));
        t.set(f, lk((4, 4), 0, 150, F_WRLCK)).unwrap();
    }

    #[test]
    fn unlock_splits_own_range() {
        let mut t = LockTable::default();
        let f = (1, 2);
        t.set(f, lk((1, 1), 0, 99, F_WRLCK)).unwrap();
        t.set(f, lk((1, 1), 40, 59, F_UNLCK)).unwrap();
        assert_eq!(t.count(), 2);
        t.set(f, lk((2, 1), 40, 59, F_WRLCK)).unwrap();
        assert!(t.set(f, lk((2, 1), 39, 40, F_WRLCK)).is_err());
        t.set(f, lk((1, 1), 0, u64::MAX, F_UNLCK)).unwrap();
        assert_eq!(t.count(), 1);
    }
}
