//! Copies in flight: their protected pages, and the waits that end them. One lock
//! guards the table; it is only held by code that touches no protected page, so the
//! fault handler may take it.

use crate::protect::{self, page_down, page_up, PAGE};
use crate::real;
use omx_runtime::memcpy as engine;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Copies in flight at most; one more waits for the oldest.
const SLOTS: usize = 64;

#[derive(Clone, Copy)]
struct Copy {
    cookie: u64,
    /// The copy posted.
    dst: usize,
    src: usize,
    len: usize,
    /// Destination: whole pages, their protection before.
    dst_pages: (usize, usize),
    dst_prot: i32,
    /// Source pages made read-only (`src_prot != 0`: their protection before).
    src_pages: (usize, usize),
    src_prot: i32,
}

impl Copy {
    fn touches(&self, lo: usize, hi: usize) -> bool {
        (lo < self.dst_pages.1 && self.dst_pages.0 < hi)
            || (self.src_prot != 0 && lo < self.src_pages.1 && self.src_pages.0 < hi)
    }
}

struct Table {
    copies: [Option<Copy>; SLOTS],
    engine_started: bool,
}

struct Locked(UnsafeCell<Table>);
// SAFETY: only accessed under LOCK.
unsafe impl Sync for Locked {}

static TABLE: Locked = Locked(UnsafeCell::new(Table {
    copies: [None; SLOTS],
    engine_started: false,
}));
static LOCK: AtomicBool = AtomicBool::new(false);
/// Copies in flight (read without the lock by the fast paths).
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Counters printed at exit with `OMX_MEMCPY_STATS=1`.
pub static ASYNC: AtomicU64 = AtomicU64::new(0);
pub static FAULT_WAITS: AtomicU64 = AtomicU64::new(0);
pub static CALL_WAITS: AtomicU64 = AtomicU64::new(0);
pub static FAILED: AtomicU64 = AtomicU64::new(0);

struct Guard;

fn lock() -> Guard {
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // SAFETY: plain system call (async-signal-safe, unlike a futex-based mutex
        // whose owner could be this thread's interrupted code).
        unsafe { libc::sched_yield() };
    }
    Guard
}

impl Drop for Guard {
    fn drop(&mut self) {
        LOCK.store(false, Ordering::Release);
    }
}

impl Guard {
    fn table(&mut self) -> &mut Table {
        // SAFETY: the lock is held.
        unsafe { &mut *TABLE.0.get() }
    }
}

pub fn any_pending() -> bool {
    PENDING.load(Ordering::Acquire) != 0
}

/// Ends the copies up to `cookie` (all are done: they complete in cookie order):
/// their pages get their protections back; a copy the engine failed is made here.
fn end_upto(g: &mut Guard, cookie: u64) {
    for slot in g.table().copies.iter_mut() {
        let Some(c) = *slot else { continue };
        if c.cookie > cookie {
            continue;
        }
        let failed = engine::test(c.cookie).is_err();
        protect::set(c.dst_pages.0, c.dst_pages.1 - c.dst_pages.0, c.dst_prot, 0);
        if c.src_prot != 0 {
            protect::set(c.src_pages.0, c.src_pages.1 - c.src_pages.0, c.src_prot, 0);
        }
        if failed {
            FAILED.fetch_add(1, Ordering::Relaxed);
            // SAFETY: both ranges are the program's, accessible again.
            unsafe { real::memcpy(c.dst as *mut _, c.src as *const _, c.len) };
        }
        *slot = None;
        PENDING.fetch_sub(1, Ordering::Release);
    }
}

/// Waits for the copies touching `[lo, hi)` and ends them.
fn wait_locked(g: &mut Guard, lo: usize, hi: usize) -> bool {
    let last = g
        .table()
        .copies
        .iter()
        .flatten()
        .filter(|c| c.touches(lo, hi))
        .map(|c| c.cookie)
        .max();
    let Some(last) = last else { return false };
    // A failed copy is redone in end_upto.
    let _ = engine::wait(last);
    end_upto(g, last);
    true
}

/// Ends the copies already done, without waiting.
fn reap_locked(g: &mut Guard) {
    let mut done = 0;
    for c in g.table().copies.iter().flatten() {
        if !matches!(engine::test(c.cookie), Ok(false)) {
            done = done.max(c.cookie);
        }
    }
    if done != 0 {
        end_upto(g, done);
    }
}

/// Before the program (or the kernel on its behalf) uses `[addr, addr+len)`: waits
/// for the copies touching it.
pub fn wait_range(addr: usize, len: usize) {
    if any_pending() && wait_locked(&mut lock(), addr, addr.saturating_add(len.max(1))) {
        CALL_WAITS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Waits for every copy (before fork and at exit).
pub fn wait_all() {
    if any_pending() {
        wait_locked(&mut lock(), 0, usize::MAX);
    }
}

/// From the fault handler: if `addr` is in pages of a copy in flight, waits for it
/// and says so.
pub fn fault_at(addr: usize) -> bool {
    if !any_pending() {
        return false;
    }
    let hit = wait_locked(&mut lock(), addr, addr + 1);
    if hit {
        FAULT_WAITS.fetch_add(1, Ordering::Relaxed);
    }
    hit
}

/// Starts an asynchronous copy of `len` bytes from `src` to `dst` (not overlapping).
/// Posted: the bytes whose destination and source both lie in whole pages of the
/// buffers (so no page shared with other data, such as the allocator's, is
/// protected); the rest (less than two pages at each end) is copied now.
/// `false`: nothing could be posted and the caller copies it all.
pub fn post(dst: usize, src: usize, len: usize) -> bool {
    let dst_pages = (page_up(dst), page_down(dst + len));
    if dst_pages.1 <= dst_pages.0 + PAGE {
        return false;
    }
    // The source of the destination's whole pages, shrunk to whole source pages.
    let s_lo = src + (dst_pages.0 - dst);
    let s_hi = src + (dst_pages.1 - dst);
    let src_pages = (page_up(s_lo), page_down(s_hi));
    if src_pages.1 <= src_pages.0 + PAGE {
        return false;
    }
    let pdst = dst + (src_pages.0 - src);
    let plen = src_pages.1 - src_pages.0;
    if src_pages.0 < dst_pages.1 && dst_pages.0 < src_pages.1 {
        return false; // the source shares pages with the destination
    }
    let mut g = lock();
    if !g.table().engine_started {
        // The copy thread, if one is started, inherits the key's rights.
        protect::enable_key(true);
        let ok = engine::engine_name().is_ok();
        protect::enable_key(false);
        if !ok {
            return false;
        }
        g.table().engine_started = true;
    }
    wait_locked(&mut g, dst, dst + len);
    wait_locked(&mut g, src, src + len);
    reap_locked(&mut g);
    if g.table().copies.iter().all(Option::is_some) {
        let oldest = g.table().copies.iter().flatten().map(|c| c.cookie).min();
        if let Some(c) = oldest {
            let _ = engine::wait(c);
            end_upto(&mut g, c);
        }
    }
    // Only private memory the program can read and write (destination) or read
    // (source), each within one mapping.
    let (Some(dv), Some(sv)) = (protect::vma(dst_pages.0), protect::vma(src_pages.0)) else {
        return false;
    };
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    if dv.shared || dv.end < dst_pages.1 || dv.prot & rw != rw {
        return false;
    }
    if sv.shared || sv.end < src_pages.1 || sv.prot & libc::PROT_READ == 0 {
        return false;
    }
    // SAFETY: the ends are the caller's memory, touched by no copy in flight.
    unsafe {
        real::memcpy(dst as *mut _, src as *const _, pdst - dst);
        real::memcpy(
            (pdst + plen) as *mut _,
            src_pages.1 as *const _,
            dst + len - (pdst + plen),
        );
    }
    let dlen = dst_pages.1 - dst_pages.0;
    if !protect::set(dst_pages.0, dlen, dv.prot, protect::key()) {
        return false;
    }
    let slen = src_pages.1 - src_pages.0;
    let src_prot = if sv.prot & libc::PROT_WRITE != 0 {
        if !protect::set(src_pages.0, slen, sv.prot & !libc::PROT_WRITE, 0) {
            protect::set(dst_pages.0, dlen, dv.prot, 0);
            return false;
        }
        sv.prot
    } else {
        0
    };
    let Ok(cookie) = engine::post(pdst, src_pages.0, plen) else {
        protect::set(dst_pages.0, dlen, dv.prot, 0);
        if src_prot != 0 {
            protect::set(src_pages.0, slen, src_prot, 0);
        }
        return false;
    };
    let slot = g
        .table()
        .copies
        .iter_mut()
        .find(|s| s.is_none())
        .expect("a slot was freed above");
    *slot = Some(Copy {
        cookie,
        dst: pdst,
        src: src_pages.0,
        len: plen,
        dst_pages,
        dst_prot: dv.prot,
        src_pages,
        src_prot,
    });
    PENDING.fetch_add(1, Ordering::Release);
    ASYNC.fetch_add(1, Ordering::Relaxed);
    true
}
