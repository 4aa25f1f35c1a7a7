//! The caller's context of each pending connect (the engine reports a connect's
//! context as its match info, for mx_test_any). Completions, forgets and cancels of
//! every request ask here, so an endpoint with no connect pending answers from one
//! atomic load, without the lock.

use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[derive(Default)]
pub(crate) struct ConnectContexts {
    map: Mutex<HashMap<u64, usize>>,
    /// Entries in `map`. A request reaches the application only after its entry is
    /// in, so a zero here means no entry for any request the caller may name.
    pending: AtomicUsize,
}

impl ConnectContexts {
    pub(crate) fn insert(&self, req: u64, context: usize) {
        let mut m = self.map.lock().expect("connects");
        m.insert(req, context);
        self.pending.store(m.len(), Ordering::Release);
    }

    /// The context of `req`'s connect, removed.
    #[inline]
    pub(crate) fn remove(&self, req: u64) -> Option<usize> {
        if self.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut m = self.map.lock().expect("connects");
        let c = m.remove(&req);
        self.pending.store(m.len(), Ordering::Release);
        c
    }

    /// The context of `req`'s connect, left in place.
    pub(crate) fn get(&self, req: u64) -> Option<usize> {
        if self.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.map.lock().expect("connects").get(&req).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_found_until_removed() {
        let c = ConnectContexts::default();
        assert_eq!(c.get(1), None);
        assert_eq!(c.remove(1), None);
        c.insert(1, 10);
        c.insert(2, 20);
        assert_eq!(c.get(1), Some(10));
        assert_eq!(c.remove(1), Some(10));
        assert_eq!((c.get(1), c.remove(1)), (None, None));
        assert_eq!(c.remove(2), Some(20));
        assert_eq!(c.pending.load(Ordering::Relaxed), 0);
    }
}
