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
//! Several threads of the owner may sleep at once (an application thread in a
//! wait and the progress thread): [`Inbox::begin_sleep`] and
//! [`Inbox::end_sleep`] count them, re-arm the flag on every sleep and after a
//! ring that leaves others asleep (a ring moves the flag off for everyone), and
//! disarm it when the last one leaves.
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

mod doorbell;
pub(crate) mod file;
mod inbox;
mod layout;
mod outbox;
mod reclaim;
#[cfg(test)]
mod tests;

pub use inbox::Inbox;
pub use outbox::{Outbox, OutboxError};

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

/// The largest record a ring of `ring_bytes` takes ([`Outbox::max_record`]): a quarter
/// of the ring, so that a record always fits once the reader has caught up.
pub fn max_record_for_ring(ring_bytes: usize) -> usize {
    ring_bytes / 4
}
