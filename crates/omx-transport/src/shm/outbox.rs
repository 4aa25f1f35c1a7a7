//! The sending side: claiming a slot of another endpoint's inbox and pushing records.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::doorbell::wake_path_of;
use super::file::{check_name, euid, pid_alive, Mapping};
use super::layout::*;
use super::{record_size, ReceiverInfo, SenderId, LAYOUT_VERSION, RECORD_HEADER};

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
/// The sending side: one claimed slot of somebody's inbox.
pub struct Outbox {
    pub(super) map: Mapping,
    pub(super) slot: usize,
    pub(super) ring: usize,
    pub(super) base: usize,
    pub(super) ctrl: usize,
    pub(super) max_record: usize,
    /// Our tail: position of the next record, where our end mark is.
    pub(super) tail: u64,
    /// Last head read from the owner.
    pub(super) head_cache: u64,
    pub(super) broken: bool,
    pub(super) me: SenderId,
    pub(super) my_pid: u32,
    pub(super) receiver: ReceiverInfo,
    pub(super) wake_path: PathBuf,
    pub(super) wake: Option<File>,
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
