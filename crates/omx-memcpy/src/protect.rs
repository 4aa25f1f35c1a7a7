//! Page protection for copies in flight. A destination's pages get a protection key
//! that every application thread has access-disabled (Linux starts every thread with
//! keys 1-15 disabled), so any touch faults, while the copy engine can still write
//! them: the copy thread runs with the key enabled, and the copy service writes
//! with `process_vm_writev`, to which keys do not apply (foreign access). Plain
//! `PROT_NONE` would stop the engine too. A source becomes read-only (`PROT_READ`):
//! the engine only reads it.

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

pub const PAGE: usize = 4096;

pub fn page_down(a: usize) -> usize {
    a & !(PAGE - 1)
}

pub fn page_up(a: usize) -> usize {
    (a + PAGE - 1) & !(PAGE - 1)
}

/// The protection key of destinations in flight (-1: none, so no copy is asynchronous).
static KEY: AtomicI32 = AtomicI32::new(-1);
const PKEY_DISABLE_ACCESS: libc::c_ulong = 1;

/// Allocates the key, access-disabled for the calling thread as for every other.
pub fn init_key() -> Option<i32> {
    // SAFETY: plain system call.
    let k = unsafe { libc::syscall(libc::SYS_pkey_alloc, 0, PKEY_DISABLE_ACCESS) } as i32;
    if k <= 0 {
        return None;
    }
    KEY.store(k, Ordering::Relaxed);
    Some(k)
}

pub fn key() -> i32 {
    KEY.load(Ordering::Relaxed)
}

fn pkru() -> u32 {
    let v: u32;
    // SAFETY: RDPKRU reads the thread's key rights (the CPU supports keys: a key was
    // allocated before this is called).
    unsafe {
        std::arch::asm!("rdpkru", in("ecx") 0, out("eax") v, out("edx") _, options(nomem, nostack))
    };
    v
}

fn set_pkru(v: u32) {
    // SAFETY: WRPKRU sets this thread's key rights only.
    unsafe { std::arch::asm!("wrpkru", in("eax") v, in("ecx") 0, in("edx") 0, options(nostack)) };
}

/// Whether this thread may touch destinations in flight (the copy thread may).
pub fn thread_has_key() -> bool {
    let k = key();
    k > 0 && pkru() & (3 << (2 * k)) == 0
}

/// Enables (or disables again) the key for this thread; threads created meanwhile
/// inherit the rights (this is how the copy thread gets them).
pub fn enable_key(on: bool) {
    let k = key();
    if k <= 0 {
        return;
    }
    let bits = 3u32 << (2 * k);
    let v = pkru();
    set_pkru(if on { v & !bits } else { v | (1 << (2 * k)) });
}

/// Gives `[addr, addr+len)` protection `prot` and key `key` (0: the default key).
pub fn set(addr: usize, len: usize, prot: i32, key: i32) -> bool {
    // SAFETY: changes protections of whole pages the program mapped.
    unsafe { libc::syscall(libc::SYS_pkey_mprotect, addr, len, prot, key) == 0 }
}

/// What the kernel says of the mapping around one address (`PROCMAP_QUERY`, Linux 6.11).
#[derive(Clone, Copy, Debug)]
pub struct Vma {
    pub end: usize,
    pub prot: i32,
    pub shared: bool,
}

#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

const PROCMAP_QUERY: libc::c_ulong =
    0xC000_0000 | ((std::mem::size_of::<ProcmapQuery>() as libc::c_ulong) << 16) | (0x66 << 8) | 17;

fn maps_fd() -> Option<i32> {
    static FD: OnceLock<Option<OwnedFd>> = OnceLock::new();
    use std::os::fd::AsRawFd;
    FD.get_or_init(|| {
        // SAFETY: opening a proc file; the descriptor is owned from here on.
        let fd = unsafe {
            libc::open(
                c"/proc/self/maps".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
    })
    .as_ref()
    .map(|f| f.as_raw_fd())
}

/// The mapping that holds `addr`, if any (and if the kernel can say).
pub fn vma(addr: usize) -> Option<Vma> {
    let fd = maps_fd()?;
    let mut q = ProcmapQuery {
        size: std::mem::size_of::<ProcmapQuery>() as u64,
        query_addr: addr as u64,
        ..Default::default()
    };
    // SAFETY: q is a live procmap_query of the size it announces; no name is asked for.
    if unsafe { libc::ioctl(fd, PROCMAP_QUERY, &mut q) } != 0 {
        return None;
    }
    let f = q.vma_flags;
    let prot = (if f & 1 != 0 { libc::PROT_READ } else { 0 })
        | (if f & 2 != 0 { libc::PROT_WRITE } else { 0 })
        | (if f & 4 != 0 { libc::PROT_EXEC } else { 0 });
    Some(Vma {
        end: q.vma_end as usize,
        prot,
        shared: f & 8 != 0,
    })
}
