//! Who takes a carried connection back to TCP once the process carrying it has forked:
//! the first of its children (or of an `exec` in the owner) to use it. Two children
//! forked before either used the connection would otherwise both write the marker, and
//! the second one would reach the peer as stream bytes. One word per claimed
//! connection in memory shared across `fork` (an anonymous shared mapping made when
//! the endpoint opens, before any child that can inherit a connection), claimed with a
//! compare-and-swap: no system call, so a sandboxed child may claim. The claimant marks
//! the word once its marker is written: until then, another process that finds the
//! connection claimed waits before it uses the kernel socket, or its bytes could reach
//! the peer ahead of the marker (the parent's close and its child's first use race).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Claimed connections the table holds; past it (a long-lived server whose children
/// took back this many), claims are not recorded and always won, as before the table.
const SLOTS: usize = 1 << 16;
/// Slots looked at from a connection's home slot (open addressing).
const PROBES: usize = 64;
/// Set in a claimed word once the claimant's marker is on the kernel socket.
const MARKED: u64 = 1 << 32;
/// How long a process that lost the claim waits for the winner's marker (the winner
/// writes it right after claiming; one that died in between must not hang the other).
const MARK_WAIT: Duration = Duration::from_secs(1);

struct Table(&'static [AtomicU64]);

static TABLE: OnceLock<Option<Table>> = OnceLock::new();

/// Maps the table; called in the process that opens the endpoint, before it forks.
pub fn init() {
    TABLE.get_or_init(|| {
        let bytes = SLOTS * std::mem::size_of::<AtomicU64>();
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
        // SAFETY: the mapping is SLOTS aligned u64 words, zeroed, alive for the process.
        Some(Table(unsafe {
            std::slice::from_raw_parts(p as *const AtomicU64, SLOTS)
        }))
    });
}

/// The slots connection `id` may occupy, from its home slot on, with the key it is
/// stored under (0 marks a free slot: id 0 shares its key with id 1, so at worst one
/// of them is taken back by its first user only).
fn slots_of(id: u32) -> Option<(u64, impl Iterator<Item = &'static AtomicU64>)> {
    let Table(slots) = TABLE.get()?.as_ref()?;
    let key = id.max(1);
    let home = (key.wrapping_mul(2_654_435_761) as usize) % SLOTS;
    Some((
        key as u64,
        (0..PROBES).map(move |i| &slots[(home + i) % SLOTS]),
    ))
}

/// The word holding connection `id`'s claim, if it was claimed.
fn claimed_slot(id: u32) -> Option<&'static AtomicU64> {
    let (key, mut slots) = slots_of(id)?;
    slots.find_map(|slot| match slot.load(Ordering::Acquire) {
        0 => Some(None),
        held => (held & !MARKED == key).then_some(Some(slot)),
    })?
}

/// True once connection `id` was claimed (by anyone in this process tree).
pub fn is_claimed(id: u32) -> bool {
    claimed_slot(id).is_some()
}

/// The claimant of `id` wrote its marker (or gave up writing it).
pub fn mark_written(id: u32) {
    if let Some(slot) = claimed_slot(id) {
        slot.fetch_or(MARKED, Ordering::AcqRel);
    }
}

/// Waits (spinning: no system call, a sandboxed child may call it) until the claimant
/// of `id` marked its marker written, `MARK_WAIT` at most.
pub fn wait_marked(id: u32) {
    let Some(slot) = claimed_slot(id) else { return };
    let start = Instant::now();
    while slot.load(Ordering::Acquire) & MARKED == 0 && start.elapsed() < MARK_WAIT {
        std::hint::spin_loop();
    }
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
                Err(held) => (held & !MARKED == key).then_some(false),
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

    #[test]
    fn a_marker_written_in_a_child_is_seen_by_its_parent() {
        init();
        assert!(claim(0x4242_0001));
        // SAFETY: the child only touches the shared table, then exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            mark_written(0x4242_0001);
            unsafe { libc::_exit(0) };
        }
        // Returns once the child marked it (a missing mark would take MARK_WAIT).
        wait_marked(0x4242_0001);
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        let slot = claimed_slot(0x4242_0001).expect("claimed");
        assert_ne!(slot.load(Ordering::Acquire) & MARKED, 0);
        assert!(is_claimed(0x4242_0001) && !claim(0x4242_0001));
    }
}
