//! Which descriptors are carried connections: a state per descriptor number (looked at
//! without a lock in the common, uncarried case) and the connection behind each carried
//! one. After `dup` several descriptors share one connection; it ends with the last.

use crate::stream::{self, Conn};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

/// Descriptors at or above this are never carried.
pub const FD_TABLE: usize = 65536;

/// Not looked at yet (inherited across exec, accepted, or a reused number): its first
/// use reads the saved SYN, so the process that uses an accepted socket first (after a
/// fork, say) is the one that carries it.
const UNKNOWN: u8 = 0;
const PLAIN: u8 = 1;
const CARRIED: u8 = 2;
/// One thread is deciding; the others wait for its answer.
const DECIDING: u8 = 3;

static STATE: [AtomicU8; FD_TABLE] = [const { AtomicU8::new(UNKNOWN) }; FD_TABLE];
/// Descriptors that this process's `accept` returned: no other descriptor names their
/// socket, unless an undecided socket was duplicated (`undecided_duplicated`).
static ACCEPTED_HERE: [AtomicBool; FD_TABLE] = [const { AtomicBool::new(false) }; FD_TABLE];
static UNDECIDED_DUPLICATED: AtomicBool = AtomicBool::new(false);
static CONNS: Mutex<Option<HashMap<i32, Arc<Conn>>>> = Mutex::new(None);

fn slot(fd: i32) -> Option<&'static AtomicU8> {
    STATE.get(usize::try_from(fd).ok()?)
}

/// The connection carried by `fd`, deciding on first use.
pub fn lookup(fd: i32) -> Option<Arc<Conn>> {
    let slot = slot(fd)?;
    loop {
        match slot.load(Ordering::Acquire) {
            PLAIN => return None,
            CARRIED => {
                let conn = CONNS.lock().as_ref()?.get(&fd).cloned()?;
                // A child forked after the connection was carried takes it back to TCP.
                if crate::fabric::in_forked_child()
                    && crate::stream::handover::leave_in_child(&conn)
                {
                    return None;
                }
                return Some(conn);
            }
            UNKNOWN
                if slot
                    .compare_exchange(UNKNOWN, DECIDING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok() =>
            {
                if !stream::adopt_accepted(fd) {
                    slot.store(PLAIN, Ordering::Release);
                }
            }
            _ => std::thread::yield_now(),
        }
    }
}

/// True when `fd` was not looked at yet (no decision is made).
pub fn undecided(fd: i32) -> bool {
    slot(fd).is_some_and(|s| s.load(Ordering::Acquire) == UNKNOWN)
}

/// True when `fd` names a carried connection (or one set up to be: a client's connect
/// under way); no decision is made.
pub fn carried(fd: i32) -> bool {
    slot(fd).is_some_and(|s| s.load(Ordering::Acquire) == CARRIED)
}

/// True when `fd` is known not to be carried (no decision is made).
pub fn known_plain(fd: i32) -> bool {
    slot(fd).is_none_or(|s| s.load(Ordering::Acquire) == PLAIN)
}

pub fn mark_plain(fd: i32) {
    if let Some(s) = slot(fd) {
        s.store(PLAIN, Ordering::Release);
    }
}

/// `fd` now also names `conn`.
pub fn attach(fd: i32, conn: &Arc<Conn>) -> bool {
    let Some(s) = slot(fd) else { return false };
    conn.add_user();
    CONNS
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(fd, conn.clone());
    s.store(CARRIED, Ordering::Release);
    true
}

/// `fd` no longer names its connection (closed, or replaced by `dup2`); the connection is
/// returned when this was its last descriptor, for the caller to end it.
pub fn detach(fd: i32) -> Option<Arc<Conn>> {
    let s = slot(fd)?;
    let conn = CONNS.lock().as_mut().and_then(|m| m.remove(&fd));
    s.store(UNKNOWN, Ordering::Release);
    ACCEPTED_HERE[fd as usize].store(false, Ordering::Release);
    conn.filter(|c| c.remove_user())
}

/// A fresh descriptor number from the kernel: forgets a connection the number still named
/// (closed by a path the library does not see, such as `fclose`).
pub fn fresh(fd: i32, state_plain: bool) {
    if let Some(c) = detach(fd) {
        c.release();
    }
    if state_plain {
        mark_plain(fd);
    }
}

/// `fd` was just returned by this process's `accept`.
pub fn accepted_here(fd: i32) {
    if let Some(a) = usize::try_from(fd).ok().and_then(|i| ACCEPTED_HERE.get(i)) {
        a.store(true, Ordering::Release);
    }
}

/// An undecided socket got a second name in this process.
pub fn undecided_duplicated() {
    UNDECIDED_DUPLICATED.store(true, Ordering::Release);
}

/// Every descriptor naming `conn` becomes plain TCP.
pub fn forget(conn: &Conn) {
    let mut map = CONNS.lock();
    let Some(m) = map.as_mut() else { return };
    m.retain(|&fd, c| {
        let keep = !std::ptr::eq(Arc::as_ptr(c), conn);
        if !keep {
            mark_plain(fd);
        }
        keep
    });
}

/// Descriptors not yet looked at that name the same kernel socket as `fd` (dups
/// inherited across exec, such as a server's stdin and stdout).
pub fn undecided_dups_of(fd: i32) -> Vec<i32> {
    // Scanning the descriptor table cost more than the rest of an accept.
    let accepted = usize::try_from(fd)
        .ok()
        .and_then(|i| ACCEPTED_HERE.get(i))
        .is_some_and(|a| a.load(Ordering::Acquire));
    if accepted && !UNDECIDED_DUPLICATED.load(Ordering::Acquire) {
        return Vec::new();
    }
    let id = |f: i32| {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: st is a local stat buffer.
        (unsafe { libc::fstat(f, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    };
    let Some(me) = id(fd) else { return Vec::new() };
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&f| f != fd)
        .filter(|&f| slot(f).is_some_and(|s| s.load(Ordering::Acquire) == UNKNOWN))
        .filter(|&f| id(f) == Some(me))
        .collect()
}

/// Every carried connection of the process.
pub fn all() -> Vec<Arc<Conn>> {
    match CONNS.lock().as_ref() {
        Some(m) => m.values().cloned().collect(),
        None => Vec::new(),
    }
}

/// The carried connections an `exec` passes on: those with a descriptor without
/// `FD_CLOEXEC`.
pub fn inherited_by_exec() -> Vec<Arc<Conn>> {
    let map = CONNS.lock();
    let Some(m) = map.as_ref() else {
        return Vec::new();
    };
    let mut out: Vec<Arc<Conn>> = Vec::new();
    for (&fd, c) in m {
        // SAFETY: F_GETFD reads a flag of a descriptor number.
        let flags = unsafe { crate::real::fcntl(fd, libc::F_GETFD, 0) };
        if flags >= 0 && flags & libc::FD_CLOEXEC == 0 && !out.iter().any(|o| Arc::ptr_eq(o, c)) {
            out.push(c.clone());
        }
    }
    out
}
