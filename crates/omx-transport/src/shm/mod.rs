//! Shared-memory transport between endpoints of the same host.
//!
//! One receiving endpoint owns one *inbox*: a file (normally under
//! `/dev/shm/omx-<mac>/`) mapped by the owner and by every sender. Each sender
//! ([`Outbox`]) claims one *slot* of the inbox, a single-producer /
//! single-consumer byte ring of variable-length records, so the hot paths need
//! no lock, no allocation and no system call: [`Outbox::try_push`] is a few
//! stores ending with one `Release` store of the record's header,
//! [`Inbox::poll`] one `Acquire` load of the bitmap of active slots plus one
//! `Acquire` load of the word at each active slot's head. The record itself is
//! the publication: sender and owner share no counter that changes with every
//! message, so the owner takes a small record with one cache-line transfer
//! (not two: a tail counter's line, then the record's).
//!
//! # File layout (version [`LAYOUT_VERSION`], native endianness)
//!
//! ```text
//! 0      header page (4096 bytes)
//!          0  magic u64 "OMXSHMIB"      (written after pid and version)
//!          8  layout version u32
//!         12  state u32: 0 initializing, 1 ready (published last, Release), 2 closed
//!         16  owner pid u32             20  session u32
//!         24  key u32                   28  endpoint u32 (u8 value)
//!         32  nic_id u64                40  slots u32
//!         48  ring_bytes u64            56  file size u64
//!        128  active-slots bitmap u64   (own 128-byte block; bit i = slot i in use)
//!        256  sleeping flag u32         (own 128-byte block; 0 polling, 1 may sleep, 2 rung)
//! 4096   slot control blocks, 256 bytes each (rounded up to 4096 in total)
//!         +0    state u64 = claimer pid << 32 | (0 free, 1 claiming, 2 active,
//!               3 closed by the sender, 4 broken: the owner found garbage)
//!         +8    sender nic_id u64       +16 sender session u32
//!         +20   sender pid u32          +24 sender endpoint u32 (u8 value)
//!         +128  head u64: bytes consumed, written only by the owner
//! data   slots x ring_bytes: ring i at data_offset + i * ring_bytes
//! ```
//!
//! Positions in a ring are absolute byte counters that only grow (they never
//! wrap in practice: 2^64 bytes); offset in the ring = position mod
//! `ring_bytes`. The owner's *head* is the position of the next record to
//! read; it publishes it in the control block (Release) after each poll that
//! consumed something and every half ring while streaming. The sender's
//! *tail*, the position of its next record, is private to it: it reads the
//! head back only when its cached copy says the ring is full. The head sits
//! 128 bytes away from the state word so that neither the line itself nor the
//! adjacent-line prefetcher makes them share a cache line.
//!
//! A record is an 8-byte header word followed by the payload, padded to 8
//! bytes. The header word is `tag << 32 | len`, where `tag` is the low 32 bits
//! of `position / 8` (of the header itself) XOR `0x4f4d_5852`, and `len` the
//! payload length, or `0xffff_ffff` for padding up to the end of the ring. A
//! record never wraps: when it does not fit before the end of the ring, the
//! producer writes padding and starts the record at offset 0. Records are at
//! most [`Outbox::max_record`] = `ring_bytes / 4` bytes, which always fits
//! into an empty ring even with the padding.
//!
//! The header is the publication point. The sender keeps an *end mark* at its
//! tail: the word `!tag << 32` (with the tag of that position), which is never
//! a valid header there. It writes the claimed slot's first end mark before
//! publishing the slot as active, and pushes a record at position `t` as:
//! the end mark at the position after the record (so the ring needs 8 bytes
//! more than the record), the payload, then the header at `t` with a Release
//! store. When the record wraps, it is written at offset 0 (header included)
//! first and the padding header at `t` is the Release store. The owner
//! Acquire-loads the word at its head: a header with the expected tag is a
//! record (whose end mark, written before, is then visible too), the end mark
//! means nothing yet, anything else is corruption. The word at the head is
//! therefore only ever the end mark or the final header, never bytes of an
//! earlier lap (a half-written record's payload may hold anything, including
//! what would be a valid header at that position a lap later). The tag is a
//! second guard: a header left at the same offset by one of the previous
//! 2^35 / `ring_bytes` laps, or a zero-filled word at the start of a ring,
//! fails the check.
//!
//! # Sleep / wake-up protocol
//!
//! The owner normally polls. Before it blocks in `ppoll` on [`Inbox::wake_fd`]:
//!
//! ```text
//! inbox.set_sleeping(true);         // flag = 1 (SeqCst store + SeqCst fence)
//! if !inbox.has_pending() {         // re-check every ring AFTER the flag is set
//!     ppoll([inbox.wake_fd(), ...], timeout);
//! }
//! inbox.set_sleeping(false);
//! inbox.drain_wake();
//! ```
//!
//! A sender publishes its records (header store, Release), then calls
//! [`Outbox::doorbell`], which issues a SeqCst fence and loads the flag. The two
//! fences form a Dekker pair: either the owner's re-check (a load of the word
//! at each active slot's head) sees the new header, or
//! the sender sees the flag and writes one byte into the FIFO (only the sender
//! that moves the flag from 1 to 2 writes, so a burst costs one write). A
//! record is therefore never left unnoticed while the owner sleeps, and the
//! polling fast path costs the sender one fence and one load of a line the
//! owner rarely writes.
//!
//! # Trust
//!
//! Everything read from the file is untrusted (another process of the same
//! user can write to it). Header values are validated once when mapping; every
//! record header (tag, length, padding) and the head read back by the sender
//! are validated against the ring before they are used;
//! nonsense marks the slot broken (counted in [`Inbox::corrupt`], reported by
//! [`Inbox::reap`]) instead of panicking or reading outside the mapping. Record
//! bytes are handed out in place, so a misbehaving peer can still change them
//! while they are being read: callers must validate what they decode (they do
//! anyway). The one thing that cannot be defended against without giving up
//! named files is another process truncating the file (SIGBUS): the files are
//! mode 0600 in a 0700 directory, so only the same user can do it.

#![deny(unsafe_op_in_unsafe_fn)]

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Largest number of slots (senders) of one inbox: one bitmap word.
pub const MAX_SLOTS: usize = 64;
/// Default number of slots.
pub const DEFAULT_SLOTS: usize = 64;
/// Default ring size of one slot.
pub const DEFAULT_RING_BYTES: usize = 256 * 1024;
/// Smallest ring size accepted.
pub const MIN_RING_BYTES: usize = 4096;
/// Largest ring size accepted.
pub const MAX_RING_BYTES: usize = 1 << 30;
/// Version of the file layout described in the module documentation.
pub const LAYOUT_VERSION: u32 = 2;
/// Bytes of record header in front of each record (also the size of the end
/// mark a sender keeps after its last record).
pub const RECORD_HEADER: usize = 8;
/// Records start at multiples of this.
pub const RECORD_ALIGN: usize = 8;
/// Suffix of the wake-up FIFO next to an inbox file.
pub const WAKE_SUFFIX: &str = ".wake";

const MAGIC: u64 = u64::from_le_bytes(*b"OMXSHMIB");
const PAGE: usize = 4096;
/// Length field of a padding record (up to the end of the ring).
const PAD_LEN: u32 = u32::MAX;
/// Mixed into every record tag, so that a zero-filled word (a fresh file) is
/// not a valid header at the start of a ring.
const TAG_SALT: u32 = 0x4f4d_5852;

const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_STATE: usize = 12;
const H_PID: usize = 16;
const H_SESSION: usize = 20;
const H_KEY: usize = 24;
const H_ENDPOINT: usize = 28;
const H_NIC: usize = 32;
const H_SLOTS: usize = 40;
const H_RING: usize = 48;
const H_SIZE: usize = 56;
const H_ACTIVE: usize = 128;
const H_SLEEP: usize = 256;
const HEADER_BYTES: usize = PAGE;

const HDR_INIT: u32 = 0;
const HDR_READY: u32 = 1;
const HDR_CLOSED: u32 = 2;

const AWAKE: u32 = 0;
const ASLEEP: u32 = 1;
const RUNG: u32 = 2;

const CTRL_STRIDE: usize = 256;
const C_STATE: usize = 0;
const C_NIC: usize = 8;
const C_SESSION: usize = 16;
const C_PID: usize = 20;
const C_ENDPOINT: usize = 24;
const C_HEAD: usize = 128;

const SLOT_FREE: u32 = 0;
const SLOT_CLAIMING: u32 = 1;
const SLOT_ACTIVE: u32 = 2;
const SLOT_CLOSED: u32 = 3;
const SLOT_BROKEN: u32 = 4;

fn pack(state: u32, pid: u32) -> u64 {
    (u64::from(pid) << 32) | u64::from(state)
}

fn unpack(word: u64) -> (u32, u32) {
    (word as u32, (word >> 32) as u32)
}

/// Tag of the record header at absolute ring position `pos`.
#[inline(always)]
fn tag(pos: u64) -> u32 {
    ((pos >> 3) as u32) ^ TAG_SALT
}

/// Header word of a record of length field `len` at position `pos`.
#[inline(always)]
fn header(pos: u64, len: u32) -> u64 {
    (u64::from(tag(pos)) << 32) | u64::from(len)
}

/// The word a sender keeps at its tail `pos`: its tag never matches there.
#[inline(always)]
fn end_mark(pos: u64) -> u64 {
    u64::from(!tag(pos)) << 32
}

/// Bytes a record of `len` payload bytes occupies in a ring (header + padding).
pub const fn record_size(len: usize) -> usize {
    RECORD_HEADER + ((len + RECORD_ALIGN - 1) & !(RECORD_ALIGN - 1))
}

/// Identity of a sender, written by it into its slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SenderId {
    pub nic_id: u64,
    pub endpoint: u8,
    pub session: u32,
    /// As given by the sender (normally its pid). Liveness checks use the pid
    /// of the process that claimed the slot, recorded by [`Outbox::open`].
    pub pid: u32,
}

/// Identity of an inbox's owner, from the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiverInfo {
    pub pid: u32,
    pub session: u32,
    pub key: u32,
    pub nic_id: u64,
    pub endpoint: u8,
}

/// Parameters of [`Inbox::create`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InboxParams {
    /// Number of sender slots, 1..=[`MAX_SLOTS`].
    pub slots: usize,
    /// Bytes of each slot's ring: a power of two in
    /// [`MIN_RING_BYTES`]..=[`MAX_RING_BYTES`].
    pub ring_bytes: usize,
    pub session: u32,
    pub key: u32,
    pub nic_id: u64,
    pub endpoint: u8,
}

impl Default for InboxParams {
    fn default() -> Self {
        InboxParams {
            slots: DEFAULT_SLOTS,
            ring_bytes: DEFAULT_RING_BYTES,
            session: 0,
            key: 0,
            nic_id: 0,
            endpoint: 0,
        }
    }
}

/// Why [`Outbox::open`] failed.
#[derive(Debug)]
pub enum OutboxError {
    /// No such inbox (or it is still being created).
    NotFound,
    /// The owner closed the inbox or is dead.
    Closed,
    /// Every slot is taken.
    Full,
    /// The file is not a consistent inbox (the reason is for logs).
    Corrupt(&'static str),
    /// Any other error of the file system or of `mmap`.
    Io(io::Error),
}

impl fmt::Display for OutboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutboxError::NotFound => f.write_str("no such shared-memory inbox"),
            OutboxError::Closed => f.write_str("shared-memory inbox closed"),
            OutboxError::Full => f.write_str("no free slot in the shared-memory inbox"),
            OutboxError::Corrupt(why) => write!(f, "corrupt shared-memory inbox: {why}"),
            OutboxError::Io(e) => write!(f, "shared-memory inbox: {e}"),
        }
    }
}

impl std::error::Error for OutboxError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OutboxError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for OutboxError {
    fn from(e: io::Error) -> Self {
        OutboxError::Io(e)
    }
}

/// Sizes and offsets derived from (slots, ring_bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    slots: usize,
    ring: usize,
    data: usize,
    size: usize,
}

impl Layout {
    fn new(slots: usize, ring: usize) -> Option<Layout> {
        if !(1..=MAX_SLOTS).contains(&slots)
            || !ring.is_power_of_two()
            || !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&ring)
        {
            return None;
        }
        let ctrl = (slots * CTRL_STRIDE).next_multiple_of(PAGE);
        let data = HEADER_BYTES + ctrl;
        let size = data.checked_add(slots.checked_mul(ring)?)?;
        Some(Layout {
            slots,
            ring,
            data,
            size,
        })
    }

    fn ctrl(&self, slot: usize) -> usize {
        HEADER_BYTES + slot * CTRL_STRIDE
    }

    fn ring_off(&self, slot: usize) -> usize {
        self.data + slot * self.ring
    }

    fn max_record(&self) -> usize {
        max_record_for_ring(self.ring)
    }

    fn valid_mask(&self) -> u64 {
        if self.slots == 64 {
            u64::MAX
        } else {
            (1u64 << self.slots) - 1
        }
    }
}

/// A shared mapping of a whole file. All accesses go through the accessors
/// below, whose offsets the callers derive from a validated [`Layout`].
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access through `Mapping`
// is either atomic or to bytes that the ring protocol hands to one side at a
// time, so sharing or moving the handle between threads adds no hazard.
unsafe impl Send for Mapping {}
// SAFETY: see above; `&Mapping` only allows atomic accesses and reads.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn map(fd: RawFd, len: usize, writable: bool) -> io::Result<Mapping> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: asks the kernel for a new shared mapping of `fd`; no existing
        // memory is affected.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        match NonNull::new(p.cast::<u8>()) {
            Some(ptr) => Ok(Mapping { ptr, len }),
            None => Err(io::Error::other("mmap returned a null mapping")),
        }
    }

    #[inline(always)]
    fn u64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: in bounds and 8-byte aligned (the mapping is page aligned and
        // every offset used is a multiple of 8 inside the validated layout);
        // the word is only ever accessed atomically by this crate.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU64>() }
    }

    #[inline(always)]
    fn u32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: as for `u64`, with 4-byte alignment.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() }
    }

    /// Record bytes in place: the consumer's view of a published record.
    #[inline(always)]
    fn bytes(&self, off: usize, len: usize) -> &[u8] {
        debug_assert!(off + len <= self.len);
        // SAFETY: in bounds (checked by the caller against the ring); the ring
        // protocol guarantees the producer does not write these bytes until the
        // consumer moves its head past them, which happens after this borrow
        // ends. (A misbehaving process could still write them: the bytes are
        // then merely wrong, which the caller's decoding must tolerate.)
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// Free ring bytes being filled by the producer.
    ///
    /// # Safety
    /// The caller must own `off..off + len` exclusively under the ring protocol
    /// (the producer, between its tail and the consumer's head) and
    /// must not create another reference to it while the slice lives.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self, off: usize, len: usize) -> &mut [u8] {
        debug_assert!(off + len <= self.len);
        // SAFETY: in bounds; exclusivity is the caller's contract above.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region mapped in `map`; no reference into
        // it can outlive `self` (all borrows are tied to `&self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Whether process `pid` exists (`kill(pid, 0)` is not `ESRCH`). Invalid pids
/// (0, negative as `pid_t`) count as dead; so never signal a process group.
fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

fn euid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.contains('\0')
        || name.ends_with(WAKE_SUFFIX)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid inbox name {name:?}"),
        ));
    }
    Ok(())
}

fn wake_path_of(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_os_string();
    p.push(WAKE_SUFFIX);
    PathBuf::from(p)
}

fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Unlinks `path` if it is still the file identified by `(dev, ino)`.
fn unlink_if_same(path: &Path, id: (u64, u64)) -> bool {
    match fs::symlink_metadata(path) {
        Ok(m) if (m.dev(), m.ino()) == id => fs::remove_file(path).is_ok(),
        _ => false,
    }
}

fn mkfifo(path: &Path) -> io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens a FIFO read-write and non-blocking: a reader and a writer at once, so
/// neither EOF (owner) nor ENXIO/SIGPIPE (sender, when the owner is gone).
fn open_fifo(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    let m = f.metadata()?;
    if !m.file_type().is_fifo() || m.uid() != euid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "wake-up file is not a FIFO of this user",
        ));
    }
    Ok(f)
}

/// The receiving side: owns the inbox file, drains every sender's ring.
///
/// `Send` and `Sync`: the `&self` methods (`has_pending`, `set_sleeping`,
/// `wake_fd`, `drain_wake`) may be called from any thread; `poll`/`reap` need
/// `&mut self`.
pub struct Inbox {
    map: Mapping,
    layout: Layout,
    wake: File,
    path: PathBuf,
    wake_path: PathBuf,
    file_id: (u64, u64),
    wake_id: (u64, u64),
    owner_pid: u32,
    max_record: usize,
    valid: u64,
    /// Last value of the shared bitmap acted upon.
    seen: u64,
    /// Slots whose identity has been read and which `poll` visits.
    accepted: u64,
    /// Slots found corrupt: not polled any more, freed when the sender leaves.
    broken: u64,
    /// Broken slots already returned by `reap`.
    reported: u64,
    ids: [SenderId; MAX_SLOTS],
    pids: [u32; MAX_SLOTS],
    heads: [u64; MAX_SLOTS],
    next_start: usize,
    corrupt: u64,
    closed: bool,
}

impl fmt::Debug for Inbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbox")
            .field("path", &self.path)
            .field("slots", &self.layout.slots)
            .field("ring_bytes", &self.layout.ring)
            .field("active", &self.accepted)
            .field("corrupt", &self.corrupt)
            .finish()
    }
}

impl Inbox {
    /// Creates `dir/name` (mode 0600, `O_EXCL` after unlinking a stale file of
    /// the same name; `dir` is created with mode 0700 if missing) and the
    /// wake-up FIFO `dir/name.wake` (mode 0600), sized sparse with
    /// `ftruncate`, writes the header and publishes it as ready last.
    pub fn create(dir: &Path, name: &str, p: &InboxParams) -> io::Result<Inbox> {
        check_name(name)?;
        let layout = Layout::new(p.slots, p.ring_bytes).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "inbox needs 1..={MAX_SLOTS} slots and a power-of-two ring of \
                     {MIN_RING_BYTES}..={MAX_RING_BYTES} bytes (got {} x {})",
                    p.slots, p.ring_bytes
                ),
            )
        })?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let path = dir.join(name);
        let wake_path = wake_path_of(&path);
        remove_if_exists(&path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let meta = file.metadata()?;
        let file_id = (meta.dev(), meta.ino());
        // From here on, failures remove what was created.
        let cleanup = |e: io::Error| {
            unlink_if_same(&path, file_id);
            e
        };
        file.set_len(layout.size as u64).map_err(cleanup)?;
        remove_if_exists(&wake_path).map_err(cleanup)?;
        mkfifo(&wake_path).map_err(cleanup)?;
        let wake = match open_fifo(&wake_path) {
            Ok(w) => w,
            Err(e) => {
                let _ = fs::remove_file(&wake_path);
                return Err(cleanup(e));
            }
        };
        let wm = wake.metadata().map_err(cleanup)?;
        let wake_id = (wm.dev(), wm.ino());
        let map = match Mapping::map(file.as_raw_fd(), layout.size, true) {
            Ok(m) => m,
            Err(e) => {
                unlink_if_same(&wake_path, wake_id);
                return Err(cleanup(e));
            }
        };
        drop(file);

        let owner_pid = std::process::id();
        // pid and version first, then the magic (Release): whoever sees the
        // magic (reclaim_stale) also sees a valid pid. Ready is published last.
        map.u32(H_PID).store(owner_pid, Ordering::Relaxed);
        map.u32(H_VERSION).store(LAYOUT_VERSION, Ordering::Relaxed);
        map.u64(H_MAGIC).store(MAGIC, Ordering::Release);
        map.u32(H_SESSION).store(p.session, Ordering::Relaxed);
        map.u32(H_KEY).store(p.key, Ordering::Relaxed);
        map.u32(H_ENDPOINT)
            .store(u32::from(p.endpoint), Ordering::Relaxed);
        map.u64(H_NIC).store(p.nic_id, Ordering::Relaxed);
        map.u32(H_SLOTS)
            .store(layout.slots as u32, Ordering::Relaxed);
        map.u64(H_RING).store(layout.ring as u64, Ordering::Relaxed);
        map.u64(H_SIZE).store(layout.size as u64, Ordering::Relaxed);
        map.u64(H_ACTIVE).store(0, Ordering::Relaxed);
        map.u32(H_SLEEP).store(AWAKE, Ordering::Relaxed);
        map.u32(H_STATE).store(HDR_READY, Ordering::Release);

        Ok(Inbox {
            map,
            layout,
            wake,
            path,
            wake_path,
            file_id,
            wake_id,
            owner_pid,
            max_record: layout.max_record(),
            valid: layout.valid_mask(),
            seen: 0,
            accepted: 0,
            broken: 0,
            reported: 0,
            ids: [SenderId::default(); MAX_SLOTS],
            pids: [0; MAX_SLOTS],
            heads: [0; MAX_SLOTS],
            next_start: 0,
            corrupt: 0,
            closed: false,
        })
    }

    /// Path of the inbox file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.layout.slots
    }

    /// Bytes of each slot's ring.
    pub fn ring_bytes(&self) -> usize {
        self.layout.ring
    }

    /// Largest record a sender can push (`ring_bytes / 4`).
    pub fn max_record(&self) -> usize {
        self.max_record
    }

    /// Records or counters found corrupt so far (each marks its slot broken).
    pub fn corrupt(&self) -> u64 {
        self.corrupt
    }

    /// Identity of the sender polled in `slot`, if any.
    pub fn sender(&self, slot: usize) -> Option<SenderId> {
        (slot < self.layout.slots && self.accepted & (1 << slot) != 0).then(|| self.ids[slot])
    }

    /// Descriptor that becomes readable when a sender rings the doorbell: the
    /// FIFO, opened `O_RDWR | O_NONBLOCK` so it never reports EOF. For `ppoll`.
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Announces that the owner may block (`true`) or is polling again
    /// (`false`). Senders ring the doorbell only while this is set.
    ///
    /// Protocol (see the module documentation): set `true`, then call
    /// [`has_pending`](Self::has_pending) and sleep only if it is false; after
    /// waking, set `false` and [`drain_wake`](Self::drain_wake). Setting `true`
    /// is a SeqCst store followed by a SeqCst fence, pairing with the fence in
    /// [`Outbox::doorbell`], so a record published before the sender's fence is
    /// seen by the re-check or the sender sees the flag.
    pub fn set_sleeping(&self, sleeping: bool) {
        let flag = self.map.u32(H_SLEEP);
        if sleeping {
            flag.store(ASLEEP, Ordering::SeqCst);
            fence(Ordering::SeqCst);
        } else {
            flag.store(AWAKE, Ordering::Release);
        }
    }

    /// Reads the wake-up FIFO empty.
    pub fn drain_wake(&self) {
        let mut buf = [0u8; 256];
        let mut f = &self.wake;
        loop {
            match f.read(&mut buf) {
                Ok(n) if n == buf.len() => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                _ => break,
            }
        }
    }

    /// The word at the head of slot `i`'s ring (Acquire).
    #[inline(always)]
    fn head_word(&self, i: usize, head: u64) -> u64 {
        let pos = (head as usize) & (self.layout.ring - 1);
        self.map
            .u64(self.layout.ring_off(i) + pos)
            .load(Ordering::Acquire)
    }

    /// Whether any ring holds a record: one load of the bitmap and one load
    /// per active slot (of the word at its head: anything but the sender's end
    /// mark counts, so that garbage is polled and found). Also sees slots
    /// claimed since the last `poll` (a claimer writes its end mark at the
    /// head, where the slot's last sender left it, before setting its bit).
    pub fn has_pending(&self) -> bool {
        let active = self.map.u64(H_ACTIVE).load(Ordering::Acquire);
        let mut bits = (active | self.accepted) & self.valid & !self.broken;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let head = self.heads[i];
            if self.head_word(i, head) != end_mark(head) {
                return true;
            }
        }
        false
    }

    /// Visits pending records, in order within each slot, at most `max` in
    /// total. `f(slot, sender, bytes)` sees each record in place and returns
    /// whether it consumed it; `false` leaves the record at the head of its
    /// ring and skips that slot for the rest of this call. Returns the number
    /// of records consumed. The first slot visited rotates from call to call
    /// (and resumes after the slot where `max` was reached).
    pub fn poll(
        &mut self,
        max: usize,
        mut f: impl FnMut(usize, &SenderId, &[u8]) -> bool,
    ) -> usize {
        let active = self.map.u64(H_ACTIVE).load(Ordering::Acquire);
        if active != self.seen {
            self.refresh(active);
        }
        let live = self.accepted & !self.broken;
        if live == 0 || max == 0 {
            return 0;
        }
        let start = self.next_start;
        // Round robin from `start` in one pass: the bitmap rotated so that bit j is
        // slot (start + j) mod 64 (slots start..63, then 0..start).
        let mut bits = live.rotate_right(start as u32);
        let mut done = 0;
        while bits != 0 {
            let i = (bits.trailing_zeros() as usize + start) & 63;
            bits &= bits - 1;
            done += self.poll_slot(i, max - done, &mut f);
            if done >= max {
                self.next_start = self.next_slot(i);
                return done;
            }
        }
        self.next_start = self.next_slot(start);
        done
    }

    /// The slot after `i`, round robin (no division on the polling path).
    #[inline]
    fn next_slot(&self, i: usize) -> usize {
        if i + 1 >= self.layout.slots {
            0
        } else {
            i + 1
        }
    }

    #[inline]
    fn poll_slot<F: FnMut(usize, &SenderId, &[u8]) -> bool>(
        &mut self,
        i: usize,
        budget: usize,
        f: &mut F,
    ) -> usize {
        let ring = self.layout.ring;
        let mask = (ring - 1) as u64;
        let base = self.layout.ring_off(i);
        let ctrl = self.layout.ctrl(i);
        let id = &self.ids[i];
        let mut head = self.heads[i];
        let mut published = head;
        let mut n = 0;
        let mut bad = false;
        while n < budget {
            let pos = (head & mask) as usize;
            let h = self.map.u64(base + pos).load(Ordering::Acquire);
            if (h >> 32) as u32 != tag(head) {
                // Nothing yet, unless the word is not the sender's end mark.
                bad = h != end_mark(head);
                break;
            }
            let len = h as u32;
            if len == PAD_LEN {
                if pos == 0 {
                    bad = true;
                    break;
                }
                head += (ring - pos) as u64;
                continue;
            }
            if len as usize > self.max_record {
                bad = true;
                break;
            }
            let len = len as usize;
            let size = record_size(len);
            if pos + size > ring {
                bad = true;
                break;
            }
            if !f(i, id, self.map.bytes(base + pos + RECORD_HEADER, len)) {
                break;
            }
            head += size as u64;
            n += 1;
            // Streaming through a nearly full ring: give space back early.
            if head - published >= (ring / 2) as u64 {
                self.map.u64(ctrl + C_HEAD).store(head, Ordering::Release);
                published = head;
            }
        }
        if head != published {
            self.map.u64(ctrl + C_HEAD).store(head, Ordering::Release);
        }
        self.heads[i] = head;
        if bad {
            self.mark_broken(i);
        }
        n
    }

    fn mark_broken(&mut self, i: usize) {
        self.corrupt += 1;
        self.broken |= 1 << i;
        let st = self.map.u64(self.layout.ctrl(i) + C_STATE);
        let cur = st.load(Ordering::Acquire);
        let (s, pid) = unpack(cur);
        if s == SLOT_ACTIVE {
            let _ = st.compare_exchange(
                cur,
                pack(SLOT_BROKEN, pid),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// Accepts the slots newly set in the shared bitmap.
    fn refresh(&mut self, active: u64) {
        self.seen = active;
        let mut new = active & self.valid & !self.accepted;
        while new != 0 {
            let i = new.trailing_zeros() as usize;
            new &= new - 1;
            self.try_accept(i);
        }
    }

    /// Reads the identity of slot `i` if a sender owns it (its state is active
    /// or already closed); bits of slots in any other state are ignored.
    fn try_accept(&mut self, i: usize) -> bool {
        let ctrl = self.layout.ctrl(i);
        let (s, pid) = unpack(self.map.u64(ctrl + C_STATE).load(Ordering::Acquire));
        if s != SLOT_ACTIVE && s != SLOT_CLOSED {
            return false;
        }
        self.ids[i] = SenderId {
            nic_id: self.map.u64(ctrl + C_NIC).load(Ordering::Relaxed),
            endpoint: self.map.u32(ctrl + C_ENDPOINT).load(Ordering::Relaxed) as u8,
            session: self.map.u32(ctrl + C_SESSION).load(Ordering::Relaxed),
            pid: self.map.u32(ctrl + C_PID).load(Ordering::Relaxed),
        };
        self.pids[i] = pid;
        self.heads[i] = self.map.u64(ctrl + C_HEAD).load(Ordering::Relaxed);
        self.accepted |= 1 << i;
        true
    }

    /// Returns slot `i` to the free pool. Its ring must be drained (or
    /// discarded: `heads[i]` is what the next sender starts from).
    fn free_slot(&mut self, i: usize) {
        let bit = 1u64 << i;
        let ctrl = self.layout.ctrl(i);
        // Clear the bit before freeing, so a new claimer's bit is never lost.
        self.map.u64(H_ACTIVE).fetch_and(!bit, Ordering::SeqCst);
        self.map
            .u64(ctrl + C_HEAD)
            .store(self.heads[i], Ordering::Release);
        self.map
            .u64(ctrl + C_STATE)
            .store(pack(SLOT_FREE, 0), Ordering::Release);
        self.accepted &= !bit;
        self.broken &= !bit;
        self.reported &= !bit;
        self.seen &= !bit;
    }

    /// Frees the slots whose sender closed its outbox or died, once their ring
    /// is drained, and returns their identities (so the caller can fail that
    /// partner's requests). Slots found corrupt are returned at once (they are
    /// no longer polled) and freed silently when their sender goes away. A
    /// sender that died while claiming a slot is cleaned up too. Costs one
    /// `kill(pid, 0)` per active slot: call it about once a second.
    pub fn reap(&mut self) -> Vec<(usize, SenderId)> {
        let mut out = Vec::new();
        let active = self.map.u64(H_ACTIVE).load(Ordering::Acquire);
        self.refresh(active);
        for i in 0..self.layout.slots {
            let bit = 1u64 << i;
            let ctrl = self.layout.ctrl(i);
            let word = self.map.u64(ctrl + C_STATE).load(Ordering::Acquire);
            let (s, pid) = unpack(word);
            if self.accepted & bit != 0 {
                let broken = self.broken & bit != 0;
                if broken && self.reported & bit == 0 {
                    self.reported |= bit;
                    out.push((i, self.ids[i]));
                }
                let gone = match s {
                    SLOT_CLOSED => true,
                    SLOT_ACTIVE | SLOT_BROKEN => pid != self.pids[i] || !pid_alive(pid),
                    // Freed or re-claimed behind our back: nobody legitimate
                    // does that; treat the sender as gone.
                    _ => true,
                };
                if !gone {
                    continue;
                }
                let head = self.heads[i];
                let word = self.head_word(i, head);
                if broken {
                    // Discard whatever is left: the next sender starts at the
                    // head with its own end mark, so nothing of it is read.
                    self.free_slot(i);
                } else if word == end_mark(head) {
                    // Drained (a record the sender did not finish before dying
                    // was never published).
                    let id = self.ids[i];
                    self.free_slot(i);
                    out.push((i, id));
                } else if (word >> 32) as u32 != tag(head) {
                    // Garbage at the head: cannot be drained; report and discard.
                    self.corrupt += 1;
                    let id = self.ids[i];
                    self.free_slot(i);
                    out.push((i, id));
                }
            } else if s != SLOT_FREE && active & bit == 0 && !pid_alive(pid) {
                // Died while claiming (or between publishing the slot and
                // setting its bit): nothing was ever delivered from it.
                let st = self.map.u64(ctrl + C_STATE);
                if st
                    .compare_exchange(
                        word,
                        pack(SLOT_FREE, 0),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    // The next claimer starts where the owner's head is.
                    self.heads[i] = self.map.u64(ctrl + C_HEAD).load(Ordering::Relaxed);
                }
            }
        }
        out
    }

    /// Marks the inbox closed (senders see it), unlinks the file and the
    /// FIFO. Also done on drop (only by the process that created the inbox).
    pub fn close(self) {}

    fn shutdown(&mut self) {
        if self.closed || std::process::id() != self.owner_pid {
            return;
        }
        self.closed = true;
        self.map.u32(H_STATE).store(HDR_CLOSED, Ordering::Release);
        unlink_if_same(&self.path, self.file_id);
        unlink_if_same(&self.wake_path, self.wake_id);
    }

    /// Removes the inbox files in `dir` (and their FIFOs) whose owner process
    /// no longer exists, e.g. after `kill -9`; returns how many. Only files of
    /// this user that carry the inbox magic and layout version are considered
    /// (the magic is written after the pid, so a partially written header is
    /// either ignored or has a valid pid); files of live processes stay.
    pub fn reclaim_stale(dir: &Path) -> io::Result<usize> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            if entry
                .file_name()
                .as_bytes()
                .ends_with(WAKE_SUFFIX.as_bytes())
            {
                continue;
            }
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let path = entry.path();
            if let Some(id) = stale_inbox(&path) {
                if unlink_if_same(&path, id) {
                    removed += 1;
                    let wake = wake_path_of(&path);
                    if fs::symlink_metadata(&wake).is_ok_and(|m| m.file_type().is_fifo()) {
                        let _ = fs::remove_file(&wake);
                    }
                }
            }
        }
        Ok(removed)
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `Some((dev, ino))` when `path` is an inbox of this user whose owner is dead.
fn stale_inbox(path: &Path) -> Option<(u64, u64)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() < HEADER_BYTES as u64 || meta.uid() != euid() {
        return None;
    }
    let map = Mapping::map(file.as_raw_fd(), HEADER_BYTES, false).ok()?;
    if map.u64(H_MAGIC).load(Ordering::Acquire) != MAGIC
        || map.u32(H_VERSION).load(Ordering::Relaxed) != LAYOUT_VERSION
    {
        return None;
    }
    let pid = map.u32(H_PID).load(Ordering::Relaxed);
    if pid == 0 || pid > i32::MAX as u32 || pid_alive(pid) {
        return None;
    }
    Some((meta.dev(), meta.ino()))
}

/// The sending side: one claimed slot of somebody's inbox.
pub struct Outbox {
    map: Mapping,
    slot: usize,
    ring: usize,
    base: usize,
    ctrl: usize,
    max_record: usize,
    /// Our tail: position of the next record, where our end mark is.
    tail: u64,
    /// Last head read from the owner.
    head_cache: u64,
    broken: bool,
    me: SenderId,
    my_pid: u32,
    receiver: ReceiverInfo,
    wake_path: PathBuf,
    wake: Option<File>,
}

impl fmt::Debug for Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("slot", &self.slot)
            .field("ring_bytes", &self.ring)
            .field("receiver", &self.receiver)
            .field("me", &self.me)
            .finish()
    }
}

fn ne_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_ne_bytes(a)
}

fn ne_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}

impl Outbox {
    /// Maps `dir/name`, checks it (magic, version, geometry, file size: a
    /// malformed or truncated file is [`OutboxError::Corrupt`]), and claims a
    /// free slot with a CAS, writing `me` before publishing the slot as active
    /// in the header's bitmap.
    pub fn open(dir: &Path, name: &str, me: SenderId) -> Result<Outbox, OutboxError> {
        check_name(name)?;
        let path = dir.join(name);
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(OutboxError::NotFound),
            Err(e) => return Err(OutboxError::Io(e)),
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(OutboxError::Corrupt("not a regular file"));
        }
        if meta.uid() != euid() {
            return Err(OutboxError::Io(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "inbox belongs to another user",
            )));
        }
        let size = meta.len();
        if size == 0 {
            // Created but not sized yet.
            return Err(OutboxError::NotFound);
        }
        if size < HEADER_BYTES as u64 {
            return Err(OutboxError::Corrupt("shorter than the header"));
        }
        let mut hdr = [0u8; 64];
        file.read_exact_at(&mut hdr, 0)?;
        let magic = ne_u64(&hdr, H_MAGIC);
        let state = ne_u32(&hdr, H_STATE);
        if magic == 0 && state == HDR_INIT {
            return Err(OutboxError::NotFound);
        }
        if magic != MAGIC {
            return Err(OutboxError::Corrupt("bad magic"));
        }
        if ne_u32(&hdr, H_VERSION) != LAYOUT_VERSION {
            return Err(OutboxError::Corrupt("unknown layout version"));
        }
        match state {
            HDR_READY => {}
            HDR_INIT => return Err(OutboxError::NotFound),
            HDR_CLOSED => return Err(OutboxError::Closed),
            _ => return Err(OutboxError::Corrupt("bad state")),
        }
        let layout = Layout::new(
            ne_u32(&hdr, H_SLOTS) as usize,
            usize::try_from(ne_u64(&hdr, H_RING)).unwrap_or(0),
        )
        .ok_or(OutboxError::Corrupt("bad geometry"))?;
        if ne_u64(&hdr, H_SIZE) != layout.size as u64 || size != layout.size as u64 {
            return Err(OutboxError::Corrupt("size does not match the geometry"));
        }
        let receiver = ReceiverInfo {
            pid: ne_u32(&hdr, H_PID),
            session: ne_u32(&hdr, H_SESSION),
            key: ne_u32(&hdr, H_KEY),
            nic_id: ne_u64(&hdr, H_NIC),
            endpoint: ne_u32(&hdr, H_ENDPOINT) as u8,
        };
        if receiver.pid == 0 || receiver.pid > i32::MAX as u32 {
            return Err(OutboxError::Corrupt("bad owner pid"));
        }
        if !pid_alive(receiver.pid) {
            return Err(OutboxError::Closed);
        }
        let map = Mapping::map(file.as_raw_fd(), layout.size, true)?;
        drop(file);
        if map.u32(H_STATE).load(Ordering::Acquire) != HDR_READY {
            return Err(OutboxError::Closed);
        }

        let my_pid = std::process::id();
        let claiming = pack(SLOT_CLAIMING, my_pid);
        let slot = (0..layout.slots)
            .find(|&i| {
                let st = map.u64(layout.ctrl(i) + C_STATE);
                st.load(Ordering::Relaxed) == pack(SLOT_FREE, 0)
                    && st
                        .compare_exchange(
                            pack(SLOT_FREE, 0),
                            claiming,
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        )
                        .is_ok()
            })
            .ok_or(OutboxError::Full)?;
        let ctrl = layout.ctrl(slot);
        map.u64(ctrl + C_NIC).store(me.nic_id, Ordering::Relaxed);
        map.u32(ctrl + C_SESSION)
            .store(me.session, Ordering::Relaxed);
        map.u32(ctrl + C_PID).store(me.pid, Ordering::Relaxed);
        map.u32(ctrl + C_ENDPOINT)
            .store(u32::from(me.endpoint), Ordering::Relaxed);
        // Start where the previous sender's records were consumed up to, with
        // our end mark there (published with the state below).
        let head = map.u64(ctrl + C_HEAD).load(Ordering::Acquire);
        let pos = (head as usize) & (layout.ring - 1);
        map.u64(layout.ring_off(slot) + pos)
            .store(end_mark(head), Ordering::Relaxed);
        map.u64(ctrl + C_STATE)
            .store(pack(SLOT_ACTIVE, my_pid), Ordering::Release);
        map.u64(H_ACTIVE).fetch_or(1 << slot, Ordering::SeqCst);

        Ok(Outbox {
            slot,
            ring: layout.ring,
            base: layout.ring_off(slot),
            ctrl,
            max_record: layout.max_record(),
            tail: head,
            head_cache: head,
            broken: false,
            me,
            my_pid,
            receiver,
            wake_path: wake_path_of(&path),
            wake: None,
            map,
        })
    }

    /// The owner's identity, from the header.
    pub fn receiver(&self) -> ReceiverInfo {
        self.receiver
    }

    /// The identity written into the slot.
    pub fn sender(&self) -> SenderId {
        self.me
    }

    /// Index of the claimed slot.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Largest record that will ever fit: `ring_bytes / 4`.
    pub fn max_record(&self) -> usize {
        self.max_record
    }

    /// Bytes of the ring.
    pub fn ring_bytes(&self) -> usize {
        self.ring
    }

    /// Reserves a record of `len` bytes, lets `write` fill it in place, and
    /// publishes it (its header, Release). Returns false, without calling
    /// `write`, when the ring lacks space (retry later), when
    /// `len > max_record()`, or when the owner's head is inconsistent (then
    /// [`receiver_alive`] is false). No system call, lock or allocation;
    /// reads the owner's head only when the cached copy says the record does
    /// not fit.
    ///
    /// [`receiver_alive`]: Self::receiver_alive
    #[inline]
    pub fn try_push(&mut self, len: usize, write: impl FnOnce(&mut [u8])) -> bool {
        if len > self.max_record || self.broken {
            return false;
        }
        let ring = self.ring;
        let mask = ring - 1;
        let size = record_size(len);
        let tail = self.tail;
        let pos = (tail as usize) & mask;
        let to_end = ring - pos;
        let wrap = size > to_end;
        // Where the record starts (offset 0 of the next lap when it wraps) and
        // where the next one will, which gets our end mark.
        let start = if wrap { tail + to_end as u64 } else { tail };
        let end = start + size as u64;
        let need = end + RECORD_HEADER as u64 - tail;
        if (ring as u64) - (tail - self.head_cache) < need {
            let head = self.map.u64(self.ctrl + C_HEAD).load(Ordering::Acquire);
            if head < self.head_cache || head > tail || tail - head > ring as u64 {
                self.broken = true;
                return false;
            }
            self.head_cache = head;
            if (ring as u64) - (tail - head) < need {
                return false;
            }
        }
        let off = self.base + ((start as usize) & mask);
        self.map
            .u64(self.base + ((end as usize) & mask))
            .store(end_mark(end), Ordering::Relaxed);
        // SAFETY: `off + 8 .. off + 8 + len` lies inside this slot's ring
        // (the record does not cross the ring's end) in the free part between
        // our tail and the owner's head, which only this producer writes until
        // it publishes the header below; the end mark written above lies after
        // it; `&mut self` excludes any other borrow of it.
        write(unsafe { self.map.bytes_mut(off + RECORD_HEADER, len) });
        if wrap {
            // The owner reads offset 0 only after the padding header.
            self.map
                .u64(off)
                .store(header(start, len as u32), Ordering::Relaxed);
            self.map
                .u64(self.base + pos)
                .store(header(tail, PAD_LEN), Ordering::Release);
        } else {
            self.map
                .u64(off)
                .store(header(tail, len as u32), Ordering::Release);
        }
        self.tail = end;
        true
    }

    /// Free bytes in the ring now (reads the owner's head). A record of `len`
    /// bytes needs [`record_size`]`(len)` of them plus [`RECORD_HEADER`] for
    /// the end mark after it, plus the rest of the ring when it has to wrap.
    pub fn free_bytes(&self) -> usize {
        let head = self.map.u64(self.ctrl + C_HEAD).load(Ordering::Acquire);
        if head < self.head_cache || head > self.tail || self.tail - head > self.ring as u64 {
            return 0;
        }
        self.ring - (self.tail - head) as usize
    }

    /// Whether everything pushed has been consumed (reads the owner's head).
    pub fn is_drained(&self) -> bool {
        self.free_bytes() == self.ring
    }

    /// After one or more pushes: rings the doorbell (one byte into the FIFO,
    /// opened lazily) only if the owner announced it may sleep. Costs a SeqCst
    /// fence and a load otherwise. See the protocol in the module docs.
    #[inline]
    pub fn doorbell(&mut self) {
        fence(Ordering::SeqCst);
        let flag = self.map.u32(H_SLEEP);
        if flag.load(Ordering::Relaxed) != ASLEEP {
            return;
        }
        if flag
            .compare_exchange(ASLEEP, RUNG, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        self.ring_fifo();
    }

    #[cold]
    fn ring_fifo(&mut self) {
        if self.wake.is_none() {
            // Opened read-write: a write can then never raise SIGPIPE, even
            // when the owner died (the pipe just fills up and says EAGAIN).
            self.wake = open_fifo(&self.wake_path).ok();
        }
        if let Some(mut f) = self.wake.as_ref() {
            let _ = f.write(&[1]);
        }
    }

    /// Whether the owner is still there: inbox not closed, same session, our
    /// slot not declared broken, and the owner's pid alive (a `kill(pid, 0)`:
    /// call it on timers or when the ring stays full, not per push).
    pub fn receiver_alive(&self) -> bool {
        if self.broken
            || self.map.u32(H_STATE).load(Ordering::Acquire) != HDR_READY
            || self.map.u32(H_SESSION).load(Ordering::Relaxed) != self.receiver.session
        {
            return false;
        }
        let word = self.map.u64(self.ctrl + C_STATE).load(Ordering::Acquire);
        word == pack(SLOT_ACTIVE, self.my_pid) && pid_alive(self.receiver.pid)
    }
}

impl Drop for Outbox {
    /// Marks the slot closed: the owner frees it once its ring is drained.
    fn drop(&mut self) {
        let st = self.map.u64(self.ctrl + C_STATE);
        let mut cur = st.load(Ordering::Relaxed);
        loop {
            let (s, pid) = unpack(cur);
            if pid != self.my_pid || (s != SLOT_ACTIVE && s != SLOT_BROKEN) {
                return;
            }
            match st.compare_exchange_weak(
                cur,
                pack(SLOT_CLOSED, pid),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(x) => cur = x,
            }
        }
    }
}

/// The largest record a ring of `ring_bytes` takes ([`Outbox::max_record`]): a quarter
/// of the ring, so that a record always fits once the reader has caught up.
pub fn max_record_for_ring(ring_bytes: usize) -> usize {
    ring_bytes / 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A unique directory under the system temp dir, removed on drop (never
    /// under /dev/shm/omx-*). Not created here: `Inbox::create` makes it.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new() -> TempDir {
            static N: AtomicUsize = AtomicUsize::new(0);
            TempDir(std::env::temp_dir().join(format!(
                "omxshm-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            )))
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn params(slots: usize, ring_bytes: usize) -> InboxParams {
        InboxParams {
            slots,
            ring_bytes,
            session: 0xabcd,
            key: 0x5eed,
            nic_id: 0x0200_0000_4b01,
            endpoint: 3,
        }
    }

    fn me(endpoint: u8) -> SenderId {
        SenderId {
            nic_id: 0x0200_0000_4b02,
            endpoint,
            session: 99,
            pid: std::process::id(),
        }
    }

    fn fill(seq: u64, buf: &mut [u8]) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
        }
    }

    fn check(seq: u64, buf: &[u8]) -> bool {
        buf.iter()
            .enumerate()
            .all(|(i, &b)| b == (seq as u8).wrapping_mul(31).wrapping_add(i as u8))
    }

    fn fork_child(f: impl FnOnce() -> i32) -> libc::pid_t {
        // SAFETY: the child only runs `f` (our own code: file and mmap calls,
        // allocations, which glibc makes fork-safe) and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(99);
            // SAFETY: terminates the child without running the parent's
            // destructors or atexit handlers.
            unsafe { libc::_exit(code) };
        }
        pid
    }

    fn wait_child(pid: libc::pid_t) -> i32 {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(r, pid);
        assert!(libc::WIFEXITED(status), "child status {status:#x}");
        libc::WEXITSTATUS(status)
    }

    fn readable(fd: RawFd, timeout_ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        r == 1 && p.revents & libc::POLLIN != 0
    }

    #[test]
    fn create_modes_header_and_receiver_info() {
        let d = TempDir::new();
        let dir = d.0.join("sub");
        let p = params(4, 8192);
        let inbox = Inbox::create(&dir, "ep3", &p).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(inbox.path()), 0o600);
        let wake = dir.join("ep3.wake");
        assert!(fs::metadata(&wake).unwrap().file_type().is_fifo());
        assert_eq!(mode(&wake), 0o600);
        let layout = Layout::new(4, 8192).unwrap();
        assert_eq!(
            fs::metadata(inbox.path()).unwrap().len(),
            layout.size as u64
        );
        assert_eq!(layout.data, 8192);

        let out = Outbox::open(&dir, "ep3", me(1)).unwrap();
        assert_eq!(
            out.receiver(),
            ReceiverInfo {
                pid: std::process::id(),
                session: p.session,
                key: p.key,
                nic_id: p.nic_id,
                endpoint: p.endpoint,
            }
        );
        assert_eq!(out.max_record(), 2048);
        assert_eq!(out.free_bytes(), 8192);
        assert!(out.receiver_alive());

        // A stale file of the same name is replaced.
        drop(out);
        let path = inbox.path().to_path_buf();
        std::mem::forget(inbox); // like a crash: nothing unlinked
        let inbox = Inbox::create(&dir, "ep3", &p).unwrap();
        assert!(path.exists());
        inbox.close();
        assert!(!path.exists());
        assert!(!wake.exists());
    }

    #[test]
    fn invalid_parameters() {
        let d = TempDir::new();
        for (slots, ring) in [(0, 4096), (65, 4096), (4, 3000), (4, 2048), (4, 1 << 31)] {
            let e = Inbox::create(&d.0, "x", &params(slots, ring)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{slots} x {ring}");
        }
        for name in ["", ".", "..", "a/b", "x.wake"] {
            let e = Inbox::create(&d.0, name, &params(1, 4096)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{name:?}");
        }
        assert!(matches!(
            Outbox::open(&d.0, "none", me(0)),
            Err(OutboxError::NotFound)
        ));
        assert!(matches!(
            Outbox::open(&d.0.join("nodir"), "none", me(0)),
            Err(OutboxError::NotFound)
        ));
    }

    #[test]
    fn round_trip_random_sizes_with_wraparound() {
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "rt", &params(2, 4096)).unwrap();
        let mut out = Outbox::open(&d.0, "rt", me(7)).unwrap();
        let max = out.max_record();
        assert_eq!(max, 1024);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut sent, mut got) = (0u64, 0u64);
        let mut lens = std::collections::VecDeque::new();
        let mut bytes = 0usize;
        while got < 20_000 {
            // Push a random number of records (until full), then poll a random number.
            for _ in 0..rng.below(12) {
                let len = if rng.below(8) == 0 {
                    max
                } else {
                    rng.below(max + 1)
                };
                let seq = sent;
                if !out.try_push(len, |b| {
                    assert_eq!(b.len(), len);
                    fill(seq, b)
                }) {
                    break;
                }
                lens.push_back(len);
                bytes += record_size(len);
                sent += 1;
            }
            let want = rng.below(10);
            let n = inbox.poll(want, |slot, id, b| {
                assert_eq!(slot, out.slot());
                assert_eq!(*id, me(7));
                assert_eq!(Some(b.len()), lens.pop_front());
                assert!(check(got, b), "record {got} corrupted");
                got += 1;
                true
            });
            assert!(n <= want);
        }
        assert!(bytes > 100 * 4096, "wrapped many times");
        assert_eq!(inbox.corrupt(), 0);
        // Oversized records never fit.
        assert!(!out.try_push(max + 1, |_| unreachable!()));
    }

    #[test]
    fn back_pressure_keeps_the_record() {
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "bp", &params(2, 4096)).unwrap();
        let mut a = Outbox::open(&d.0, "bp", me(1)).unwrap();
        let mut b = Outbox::open(&d.0, "bp", me(2)).unwrap();
        for i in 0..3u8 {
            assert!(a.try_push(1, |d| d[0] = i));
            assert!(b.try_push(1, |d| d[0] = 10 + i));
        }
        assert!(inbox.has_pending());
        // Refuse a's second record: a is skipped for the rest of the call, b is not.
        let mut seen = Vec::new();
        let n = inbox.poll(100, |slot, _, d| {
            if slot == a.slot() && d[0] == 1 {
                return false;
            }
            seen.push(d[0]);
            true
        });
        assert_eq!(n, 4);
        assert_eq!(seen, [0, 10, 11, 12]);
        let mut seen = Vec::new();
        inbox.poll(100, |_, _, d| {
            seen.push(d[0]);
            true
        });
        assert_eq!(seen, [1, 2]);
        assert!(!inbox.has_pending());
        assert_eq!(inbox.poll(100, |_, _, _| true), 0);
    }

    #[test]
    fn full_ring_refuses_then_accepts_after_drain() {
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "full", &params(1, 4096)).unwrap();
        let mut out = Outbox::open(&d.0, "full", me(1)).unwrap();
        let mut n = 0u64;
        while out.try_push(100, |b| fill(n, b)) {
            n += 1;
        }
        assert_eq!(n, 4096 / record_size(100) as u64);
        assert!(out.free_bytes() < record_size(100) + RECORD_HEADER);
        // 39 records of 104 bytes leave 40 bytes at the end of the ring: after
        // consuming two, the next record needs those 40 (padding) + 104 + 8
        // (the end mark after it); after consuming one, it does not fit.
        let mut got = 0u64;
        for expect_fit in [false, true] {
            assert_eq!(
                inbox.poll(1, |_, _, b| {
                    assert!(check(got, b));
                    got += 1;
                    true
                }),
                1
            );
            assert_eq!(out.try_push(100, |b| fill(n, b)), expect_fit);
        }
        n += 1;
        while got < n {
            inbox.poll(usize::MAX, |_, _, b| {
                assert!(check(got, b));
                got += 1;
                true
            });
        }
        assert!(out.is_drained());
        assert!(out.try_push(out.max_record(), |_| {}));
        assert_eq!(inbox.poll(10, |_, _, b| b.len() == 1024), 1);
        assert_eq!(inbox.corrupt(), 0);
    }

    /// Producer and consumer on two threads, the producer's payloads made of
    /// the headers (and end marks) that later laps would have at their
    /// offsets: a record read before its header is published, or a stale
    /// word taken for a header, shows as a wrong sequence number or length.
    #[test]
    fn threads_with_poisoned_payloads() {
        const N: u64 = 1_000_000;
        const RING: u64 = 16 * 1024;
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "poison", &params(1, RING as usize)).unwrap();
        let mut out = Outbox::open(&d.0, "poison", me(1)).unwrap();
        let producer = std::thread::spawn(move || {
            let mut seq = 0u64;
            while seq < N {
                let len = 8 * (1 + (seq % 37) as usize);
                let at = out.tail;
                let pushed = out.try_push(len, |b| {
                    b[..8].copy_from_slice(&seq.to_le_bytes());
                    for (w, chunk) in b[8..].chunks_exact_mut(8).enumerate() {
                        // This word's position, one to three laps later.
                        let p = at + 16 + 8 * w as u64 + RING * (1 + seq % 3);
                        let v = if w % 4 == 3 {
                            end_mark(p)
                        } else {
                            header(p, 8 * (w % 5) as u32)
                        };
                        chunk.copy_from_slice(&v.to_ne_bytes());
                    }
                });
                if pushed {
                    seq += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            out
        });
        let mut next = 0u64;
        while next < N {
            let n = inbox.poll(64, |_, _, b| {
                let seq = u64::from_le_bytes(b[..8].try_into().unwrap());
                assert_eq!(seq, next);
                assert_eq!(b.len(), 8 * (1 + (seq % 37) as usize));
                next += 1;
                true
            });
            assert_eq!(inbox.corrupt(), 0);
            if n == 0 {
                std::thread::yield_now();
            }
        }
        let out = producer.join().unwrap();
        assert!(out.is_drained());
        assert!(!inbox.has_pending());
    }

    #[test]
    fn producer_and_consumer_threads_million_records() {
        const N: u64 = 1_000_000;
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "mt", &params(4, 64 * 1024)).unwrap();
        let mut out = Outbox::open(&d.0, "mt", me(1)).unwrap();
        let producer = std::thread::spawn(move || {
            let mut seq = 0u64;
            let mut spins = 0u32;
            while seq < N {
                let len = 8 + (seq % 57) as usize;
                if out.try_push(len, |b| {
                    b[..8].copy_from_slice(&seq.to_le_bytes());
                    fill(seq, &mut b[8..]);
                }) {
                    seq += 1;
                    spins = 0;
                } else {
                    spins += 1;
                    if spins % 64 == 0 {
                        std::thread::yield_now();
                    }
                    std::hint::spin_loop();
                }
            }
            out
        });
        let mut next = 0u64;
        let mut idle = 0u32;
        while next < N {
            let n = inbox.poll(64, |_, _, b| {
                let seq = u64::from_le_bytes(b[..8].try_into().unwrap());
                assert_eq!(seq, next);
                assert_eq!(b.len(), 8 + (seq % 57) as usize);
                assert!(check(seq, &b[8..]));
                next += 1;
                true
            });
            if n == 0 {
                idle += 1;
                if idle % 64 == 0 {
                    std::thread::yield_now();
                }
                std::hint::spin_loop();
            }
        }
        let out = producer.join().unwrap();
        assert!(out.is_drained());
        assert_eq!(inbox.corrupt(), 0);
    }

    #[test]
    fn slots_are_served_fairly() {
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "fair", &params(8, 4096)).unwrap();
        let mut outs: Vec<Outbox> = (0..4)
            .map(|i| Outbox::open(&d.0, "fair", me(i)).unwrap())
            .collect();
        for o in &mut outs {
            for _ in 0..20 {
                assert!(o.try_push(8, |_| {}));
            }
        }
        // One record per call: every sender gets a turn in round-robin order.
        let mut order = Vec::new();
        for _ in 0..8 {
            inbox.poll(1, |slot, id, _| {
                assert_eq!(id.endpoint as usize, slot);
                order.push(slot);
                true
            });
        }
        assert_eq!(order, [0, 1, 2, 3, 0, 1, 2, 3]);
        // With a budget of 10 per call, no sender is starved over 4 calls.
        let mut count = [0usize; 4];
        for _ in 0..4 {
            inbox.poll(10, |slot, _, _| {
                count[slot] += 1;
                true
            });
        }
        assert!(count.iter().all(|&c| c >= 5), "{count:?}");
        assert_eq!(
            inbox.sender(2),
            Some(me(2)),
            "identity visible to the owner"
        );
    }

    #[test]
    fn dropped_outbox_is_reaped_after_draining_and_slot_reused() {
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "reap", &params(2, 4096)).unwrap();
        let mut a = Outbox::open(&d.0, "reap", me(1)).unwrap();
        let b = Outbox::open(&d.0, "reap", me(2)).unwrap();
        assert!(matches!(
            Outbox::open(&d.0, "reap", me(3)),
            Err(OutboxError::Full)
        ));
        let slot_a = a.slot();
        for i in 0..5u8 {
            assert!(a.try_push(1, |d| d[0] = i));
        }
        drop(a);
        assert!(inbox.reap().is_empty(), "not drained yet");
        let mut seen = Vec::new();
        inbox.poll(100, |_, _, d| {
            seen.push(d[0]);
            true
        });
        assert_eq!(
            seen,
            [0, 1, 2, 3, 4],
            "records of a closed sender still arrive"
        );
        assert_eq!(inbox.reap(), [(slot_a, me(1))]);
        assert!(inbox.reap().is_empty(), "reported once");
        assert_eq!(inbox.sender(slot_a), None);

        let mut c = Outbox::open(&d.0, "reap", me(4)).unwrap();
        assert_eq!(c.slot(), slot_a);
        assert!(c.is_drained());
        assert!(c.try_push(3, |d| d.copy_from_slice(b"new")));
        let mut got = Vec::new();
        inbox.poll(10, |slot, id, d| {
            got.push((slot, *id, d.to_vec()));
            true
        });
        assert_eq!(got, [(slot_a, me(4), b"new".to_vec())]);
        drop(b);
        drop(c);
        let mut reaped = inbox.reap();
        reaped.sort_by_key(|r| r.0);
        assert_eq!(reaped.len(), 2);
        assert_eq!(inbox.map.u64(H_ACTIVE).load(Ordering::Relaxed), 0);
    }

    #[test]
    fn dead_sender_process_is_reaped_after_draining() {
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "dead", &params(4, 4096)).unwrap();
        let dir = d.0.clone();
        let child = fork_child(|| {
            let Ok(mut out) = Outbox::open(&dir, "dead", me(9)) else {
                return 1;
            };
            for i in 0..3u8 {
                if !out.try_push(2, |d| d.copy_from_slice(&[i, 0xee])) {
                    return 2;
                }
            }
            out.doorbell();
            std::mem::forget(out); // die without closing
            0
        });
        assert_eq!(wait_child(child), 0);
        let id = SenderId {
            pid: child as u32,
            ..me(9)
        };
        assert!(inbox.reap().is_empty(), "records pending");
        let mut seen = Vec::new();
        inbox.poll(10, |_, sid, d| {
            assert_eq!(*sid, id);
            seen.push(d.to_vec());
            true
        });
        assert_eq!(seen, [[0, 0xee], [1, 0xee], [2, 0xee]]);
        let reaped = inbox.reap();
        assert_eq!(reaped.len(), 1);
        assert_eq!(reaped[0].1, id);
        // The slot is free again.
        let o = Outbox::open(&d.0, "dead", me(1)).unwrap();
        assert_eq!(o.slot(), reaped[0].0);
    }

    #[test]
    fn malformed_files_are_rejected() {
        let d = TempDir::new();
        let inbox = Inbox::create(&d.0, "good", &params(2, 4096)).unwrap();
        let good = fs::read(inbox.path()).unwrap();
        let write = |name: &str, bytes: &[u8]| {
            fs::write(d.0.join(name), bytes).unwrap();
        };
        let corrupt = |name: &str| {
            let r = Outbox::open(&d.0, name, me(0));
            assert!(matches!(r, Err(OutboxError::Corrupt(_))), "{name}: {r:?}");
        };
        let mut rng = Rng(42);
        let garbage: Vec<u8> = (0..20_000).map(|_| rng.next() as u8).collect();
        write("garbage", &garbage);
        corrupt("garbage");
        write("short", &good[..100]);
        corrupt("short");
        write("truncated", &good[..good.len() / 2]);
        corrupt("truncated");
        let mut longer = good.clone();
        longer.extend_from_slice(&[0; 4096]);
        write("longer", &longer);
        corrupt("longer");
        let patch = |name: &str, off: usize, val: &[u8]| {
            let mut g = good.clone();
            g[off..off + val.len()].copy_from_slice(val);
            write(name, &g);
        };
        patch("version", H_VERSION, &7u32.to_ne_bytes());
        corrupt("version");
        patch("slots", H_SLOTS, &65u32.to_ne_bytes());
        corrupt("slots");
        patch("ring", H_RING, &4097u64.to_ne_bytes());
        corrupt("ring");
        patch("pid", H_PID, &0u32.to_ne_bytes());
        corrupt("pid");
        patch("state", H_STATE, &9u32.to_ne_bytes());
        corrupt("state");
        patch("closed", H_STATE, &HDR_CLOSED.to_ne_bytes());
        assert!(matches!(
            Outbox::open(&d.0, "closed", me(0)),
            Err(OutboxError::Closed)
        ));
        write("empty", &[]);
        assert!(matches!(
            Outbox::open(&d.0, "empty", me(0)),
            Err(OutboxError::NotFound)
        ));
        fs::create_dir(d.0.join("adir")).unwrap();
        assert!(Outbox::open(&d.0, "adir", me(0)).is_err());
    }

    #[test]
    fn corrupt_ring_marks_the_slot_broken() {
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "bad", &params(2, 4096)).unwrap();
        let mut a = Outbox::open(&d.0, "bad", me(1)).unwrap();
        let mut b = Outbox::open(&d.0, "bad", me(2)).unwrap();
        assert!(a.try_push(8, |_| {}));
        assert!(b.try_push(8, |_| {}));
        // An impossible length, with the right tag, in a's record header.
        let off = inbox.layout.ring_off(a.slot());
        inbox
            .map
            .u64(off)
            .store(header(0, 1 << 20), Ordering::Relaxed);
        let mut from = Vec::new();
        inbox.poll(10, |slot, _, _| {
            from.push(slot);
            true
        });
        assert_eq!(from, [b.slot()]);
        assert_eq!(inbox.corrupt(), 1);
        assert!(!a.receiver_alive());
        assert!(b.receiver_alive());
        assert_eq!(inbox.reap(), [(a.slot(), me(1))]);
        assert!(inbox.reap().is_empty());
        // Not polled any more, not freed while its sender lives.
        assert!(a.try_push(8, |_| {}));
        assert_eq!(inbox.poll(10, |_, _, _| true), 0);
        let slot_a = a.slot();
        drop(a);
        assert!(inbox.reap().is_empty(), "freed silently");
        let mut c = Outbox::open(&d.0, "bad", me(3)).unwrap();
        assert_eq!(c.slot(), slot_a);
        assert!(c.try_push(4, |d| d.copy_from_slice(b"good")));
        assert_eq!(inbox.poll(10, |_, id, d| *id == me(3) && d == b"good"), 1);

        // Garbage at b's head (neither a header of that position nor the end
        // mark): polled rather than slept on, and broken.
        let head_b = inbox.heads[b.slot()];
        inbox
            .map
            .u64(inbox.layout.ring_off(b.slot()) + (head_b & 4095) as usize)
            .store(0x1234, Ordering::Relaxed);
        assert!(inbox.has_pending());
        assert_eq!(inbox.poll(10, |_, _, _| true), 0);
        assert_eq!(inbox.corrupt(), 2);
        assert!(!inbox.has_pending(), "broken slots are not checked");
        assert!(!b.receiver_alive());
        assert!(c.receiver_alive());
    }

    /// Pushes one record of `len` bytes from a fresh sender, forges its header
    /// with `forge(position of the record)` and polls: the slot must be found
    /// broken, nothing delivered. `skip` records are pushed and consumed first.
    fn forged(skip: usize, len: usize, forge: impl Fn(u64) -> (u64, u64)) {
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "forge", &params(1, 4096)).unwrap();
        let mut out = Outbox::open(&d.0, "forge", me(1)).unwrap();
        for _ in 0..skip {
            assert!(out.try_push(8, |_| {}));
            assert_eq!(inbox.poll(1, |_, _, _| true), 1);
        }
        let at = out.tail;
        assert!(out.try_push(len, |_| {}));
        let (where_, word) = forge(at);
        inbox
            .map
            .u64(inbox.layout.ring_off(0) + (where_ & 4095) as usize)
            .store(word, Ordering::Relaxed);
        assert!(inbox.has_pending());
        assert_eq!(inbox.poll(10, |_, _, _| true), 0, "at {at}");
        assert_eq!(inbox.corrupt(), 1, "at {at}");
        assert!(!out.receiver_alive());
        assert_eq!(inbox.reap(), [(0, me(1))]);
    }

    #[test]
    fn forged_headers_mark_the_slot_broken() {
        // Right tag, absurd lengths.
        forged(0, 8, |at| (at, header(at, 1025)));
        forged(3, 8, |at| (at, header(at, PAD_LEN - 1)));
        // Padding at offset 0 (it would skip a whole ring).
        forged(512, 8, |at| (at, header(at, PAD_LEN)));
        // A length running past the end of the ring: the record at offset 4064.
        forged(510, 8, |at| (at, header(at, 1024)));
        // The header of the same offset one lap later, or earlier: a stale
        // word, never what a sender leaves at its tail.
        forged(5, 8, |at| (at, header(at + 4096, 8)));
        forged(600, 8, |at| (at, header(at - 4096, 8)));
        // The end mark of another lap.
        forged(7, 8, |at| (at, end_mark(at + 4096)));
        // A garbage end mark after a good record: the record arrives, then
        // the slot is broken.
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "mark", &params(1, 4096)).unwrap();
        let mut out = Outbox::open(&d.0, "mark", me(1)).unwrap();
        assert!(out.try_push(8, |b| b.copy_from_slice(b"12345678")));
        inbox
            .map
            .u64(inbox.layout.ring_off(0) + 16)
            .store(0, Ordering::Relaxed);
        assert_eq!(inbox.poll(10, |_, _, b| b == b"12345678"), 1);
        assert_eq!(inbox.corrupt(), 1);
        // A closed sender whose head holds garbage: reported, counted, freed.
        let mut inbox = Inbox::create(&d.0, "closed", &params(1, 4096)).unwrap();
        let mut out = Outbox::open(&d.0, "closed", me(2)).unwrap();
        assert!(out.try_push(8, |_| {}));
        assert_eq!(inbox.poll(10, |_, _, _| true), 1);
        drop(out);
        inbox
            .map
            .u64(inbox.layout.ring_off(0) + 16)
            .store(header(16 + 4096, 8), Ordering::Relaxed);
        assert_eq!(inbox.reap(), [(0, me(2))]);
        assert_eq!(inbox.corrupt(), 1);
        assert!(Outbox::open(&d.0, "closed", me(3)).is_ok(), "slot freed");
    }

    /// Fills the ring with payload words that are exactly the headers a later
    /// lap would have at their offsets (and the end mark of a later lap), then
    /// checks at every step of the next laps, including while a record is
    /// half written (from inside the `write` callback), that the owner sees
    /// only published records.
    #[test]
    fn stale_lap_bytes_are_never_read_as_records() {
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "stale", &params(1, 4096)).unwrap();
        let mut out = Outbox::open(&d.0, "stale", me(1)).unwrap();
        // Poison: every payload word at position p holds header(p + k * 4096, 8)
        // for some later lap k, or an end mark of a later lap.
        let poison = |at: u64, b: &mut [u8], k: u64| {
            for (w, chunk) in b.chunks_exact_mut(8).enumerate() {
                let p = at + 8 + 8 * w as u64 + k * 4096;
                let v = if w % 5 == 4 {
                    end_mark(p)
                } else {
                    header(p, (w % 3) as u32 * 8)
                };
                chunk.copy_from_slice(&v.to_ne_bytes());
            }
        };
        let mut rng = Rng(7);
        let (mut sent, mut got) = (0u64, 0u64);
        while got < 4000 {
            // A poisoned record (big, so that it covers many later headers).
            let at = out.tail;
            let k = 1 + rng.below(3) as u64;
            if out.try_push(8 * (1 + rng.below(100)), |b| poison(at, b, k)) {
                assert_eq!(inbox.poll(1, |_, _, _| true), 1);
            }
            // A data record of another alignment, checked half written.
            let len = 8 + rng.below(200);
            let seq = sent;
            let pushed = out.try_push(len, |b| {
                fill(seq, b);
                assert!(!inbox.has_pending(), "half-written record pending");
                assert_eq!(
                    inbox.poll(10, |_, _, _| true),
                    0,
                    "half-written record read"
                );
                inbox.set_sleeping(true);
                assert!(!inbox.has_pending());
                inbox.set_sleeping(false);
            });
            if pushed {
                sent += 1;
                assert!(inbox.has_pending());
                let n = inbox.poll(10, |_, _, b| {
                    assert_eq!(b.len(), len);
                    assert!(check(got, b));
                    got += 1;
                    true
                });
                assert_eq!(n, 1);
            }
            assert!(!inbox.has_pending());
            assert_eq!(inbox.poll(10, |_, _, _| true), 0);
        }
        assert!(out.tail > 100 * 4096, "many laps");
        assert_eq!(inbox.corrupt(), 0);
    }

    #[test]
    fn owner_close_is_seen_by_senders() {
        let d = TempDir::new();
        let inbox = Inbox::create(&d.0, "cl", &params(1, 4096)).unwrap();
        let out = Outbox::open(&d.0, "cl", me(1)).unwrap();
        assert!(out.receiver_alive());
        inbox.close();
        assert!(!out.receiver_alive());
        assert!(matches!(
            Outbox::open(&d.0, "cl", me(1)),
            Err(OutboxError::NotFound)
        ));
        assert_eq!(fs::read_dir(&d.0).unwrap().count(), 0);
    }

    #[test]
    fn reclaim_stale_removes_dead_owners_only() {
        let d = TempDir::new();
        let live = Inbox::create(&d.0, "live", &params(1, 4096)).unwrap();
        let dir = d.0.clone();
        let child = fork_child(|| {
            let Ok(inbox) = Inbox::create(&dir, "orphan", &params(1, 4096)) else {
                return 1;
            };
            std::mem::forget(inbox);
            0
        });
        assert_eq!(wait_child(child), 0);
        assert!(d.0.join("orphan").exists());
        assert!(d.0.join("orphan.wake").exists());
        // Files that are not (complete) inboxes are left alone.
        fs::write(d.0.join("zeros"), vec![0u8; 8192]).unwrap();
        fs::write(d.0.join("tiny"), b"OMXSHMIB").unwrap();
        let mut nopid = fs::read(live.path()).unwrap();
        nopid[H_PID..H_PID + 4].copy_from_slice(&0u32.to_ne_bytes());
        fs::write(d.0.join("nopid"), &nopid).unwrap();
        fs::write(d.0.join("lock"), b"").unwrap();
        // A sender of the dead inbox sees it as closed.
        assert!(matches!(
            Outbox::open(&d.0, "orphan", me(0)),
            Err(OutboxError::Closed)
        ));

        assert_eq!(Inbox::reclaim_stale(&d.0).unwrap(), 1);
        assert!(!d.0.join("orphan").exists());
        assert!(!d.0.join("orphan.wake").exists());
        for kept in ["live", "live.wake", "zeros", "tiny", "nopid", "lock"] {
            assert!(d.0.join(kept).exists(), "{kept} kept");
        }
        assert_eq!(Inbox::reclaim_stale(&d.0).unwrap(), 0);
        assert_eq!(Inbox::reclaim_stale(&d.0.join("missing")).unwrap(), 0);
        drop(live);
    }

    #[test]
    fn doorbell_wakes_a_sleeping_owner_only() {
        let d = TempDir::new();
        let mut inbox = Inbox::create(&d.0, "wake", &params(2, 4096)).unwrap();
        let mut out = Outbox::open(&d.0, "wake", me(1)).unwrap();
        let fd = inbox.wake_fd();
        // Polling owner: no byte written.
        assert!(out.try_push(1, |_| {}));
        out.doorbell();
        assert!(!readable(fd, 0));
        assert!(out.wake.is_none(), "FIFO not even opened");
        assert_eq!(inbox.poll(10, |_, _, _| true), 1);

        inbox.set_sleeping(true);
        assert!(!inbox.has_pending());
        assert!(out.try_push(1, |_| {}));
        assert!(inbox.has_pending());
        out.doorbell();
        out.doorbell(); // a burst rings once
        assert!(readable(fd, 1000));
        let mut buf = [0u8; 8];
        assert_eq!((&inbox.wake).read(&mut buf).unwrap(), 1);
        inbox.set_sleeping(false);
        inbox.drain_wake();
        assert!(!readable(fd, 0));
        assert_eq!(inbox.poll(10, |_, _, _| true), 1);

        // Sleeping again: the next doorbell rings again; drain empties it.
        inbox.set_sleeping(true);
        assert!(out.try_push(1, |_| {}));
        out.doorbell();
        assert!(readable(fd, 1000));
        inbox.set_sleeping(false);
        inbox.drain_wake();
        assert!(!readable(fd, 0));
        // A doorbell after the owner closed neither fails nor blocks.
        inbox.set_sleeping(true);
        inbox.close();
        out.doorbell();
        assert!(!out.receiver_alive());
    }
}
