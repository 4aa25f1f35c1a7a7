//! Who takes a carried connection back to TCP once the process carrying it has forked:
//! the first of its children (or of an `exec` in the owner) to use it. Two children
//! forked before either used the connection would otherwise both write the marker, and
//! the second one would reach the peer as stream bytes. One word per claimed
//! connection in memory shared across `fork` (an anonymous shared mapping made when
//! the endpoint opens, before any child that can inherit a connection), claimed with a
//! compare-and-swap: no system call, so a sandboxed child may claim.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// Claimed connections the table holds; past it (a long-lived server whose children
/// took back this many), claims are not recorded and always won, as before the table.
const SLOTS: usize = 1 << 16;
/// Slots looked at from a connection's home slot (open addressing).
const PROBES: usize = 64;

struct Table(&'static [AtomicU32]);

static TABLE: OnceLock<Option<Table>> = OnceLock::new();

/// Maps the table; called in the process that opens the endpoint, before it forks.
pub fn init() {
    TABLE.get_or_init(|| {
        let bytes = SLOTS * std::mem::size_of::<AtomicU32>();
        // SAFETY: a fresh anonymous mapping, zero-filled, never unmapped.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: the mapping is SLOTS aligned u32 words, zeroed, alive for the process.
        Some(Table(unsafe {
            std::slice::from_raw_parts(p as *const AtomicU32, SLOTS)
        }))
    });
}

/// The slots connection `id` may occupy, from its home slot on, with the key it is
/// stored under (0 marks a free slot: id 0 shares its key with id 1, so at worst one
/// of them is taken back by its first user only).
fn slots_of(id: u32) -> Option<(u32, impl Iterator<Item = &'static AtomicU32>)> {
    let Table(slots) = TABLE.get()?.as_ref()?;
    let key = id.max(1);
    let home = (key.wrapping_mul(2_654_435_761) as usize) % SLOTS;
    Some((key, (0..PROBES).map(move |i| &slots[(home + i) % SLOTS])))
}

/// True once connection `id` was claimed (by anyone in this process tree).
pub fn is_claimed(id: u32) -> bool {
    let Some((key, mut slots)) = slots_of(id) else {
        return false;
    };
    slots
        .find_map(|slot| match slot.load(Ordering::Acquire) {
            0 => Some(false),
            held => (held == key).then_some(true),
        })
        .unwrap_or(false)
}

/// Claims connection `id` for the caller: true for the first claimant in this process
/// tree, false once someone else claimed it.
pub fn claim(id: u32) -> bool {
    let Some((key, mut slots)) = slots_of(id) else {
        return true;
    };
    slots
        .find_map(
            |slot| match slot.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => Some(true),
                Err(held) => (held == key).then_some(false),
            },
        )
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_claim_wins_and_is_seen_by_a_forked_child() {
        init();
        assert!(claim(0x1234_5678));
        assert!(!claim(0x1234_5678));
        assert!(is_claimed(0x1234_5678) && !is_claimed(0x0bad_cafe));
        // A child's claim lands in the parent's view of the table.
        // SAFETY: the child only touches the shared table, then exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let won = claim(0x0bad_cafe);
            unsafe { libc::_exit(if won { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(!claim(0x0bad_cafe), "the child's claim is shared");
    }
}
