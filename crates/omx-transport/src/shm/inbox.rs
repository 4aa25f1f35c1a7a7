//! The receiving side: creating an inbox and polling its rings.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::doorbell::{mkfifo, open_fifo, wake_path_of};
use super::file::{check_name, remove_if_exists, unlink_if_same, Mapping};
use super::layout::*;
use super::{
    record_size, InboxParams, SenderId, LAYOUT_VERSION, MAX_RING_BYTES, MAX_SLOTS, MIN_RING_BYTES,
    RECORD_HEADER,
};

/// The receiving side: owns the inbox file, drains every sender's ring.
///
/// `Send` and `Sync`: the `&self` methods (`has_pending`, `set_sleeping`,
/// `wake_fd`, `drain_wake`) may be called from any thread; `poll`/`reap` need
/// `&mut self`.
pub struct Inbox {
    pub(super) map: Mapping,
    pub(super) layout: Layout,
    pub(super) wake: File,
    pub(super) path: PathBuf,
    pub(super) wake_path: PathBuf,
    pub(super) file_id: (u64, u64),
    pub(super) wake_id: (u64, u64),
    pub(super) owner_pid: u32,
    pub(super) max_record: usize,
    pub(super) valid: u64,
    /// Last value of the shared bitmap acted upon.
    pub(super) seen: u64,
    /// Slots whose identity has been read and which `poll` visits.
    pub(super) accepted: u64,
    /// Slots found corrupt: not polled any more, freed when the sender leaves.
    pub(super) broken: u64,
    /// Broken slots already returned by `reap`.
    pub(super) reported: u64,
    pub(super) ids: [SenderId; MAX_SLOTS],
    pub(super) pids: [u32; MAX_SLOTS],
    pub(super) heads: [u64; MAX_SLOTS],
    pub(super) next_start: usize,
    pub(super) corrupt: u64,
    pub(super) closed: bool,
    /// Threads of the owner between [`Inbox::begin_sleep`] and [`Inbox::end_sleep`].
    pub(super) sleepers: usize,
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
            sleepers: 0,
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

    /// The word at the head of slot `i`'s ring (Acquire).
    #[inline(always)]
    pub(super) fn head_word(&self, i: usize, head: u64) -> u64 {
        let pos = (head as usize) & (self.layout.ring - 1);
        self.map
            .u64(self.layout.ring_off(i) + pos)
            .load(Ordering::Acquire)
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
    pub(super) fn next_slot(&self, i: usize) -> usize {
        if i + 1 >= self.layout.slots {
            0
        } else {
            i + 1
        }
    }

    #[inline]
    pub(super) fn poll_slot<F: FnMut(usize, &SenderId, &[u8]) -> bool>(
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

    pub(super) fn mark_broken(&mut self, i: usize) {
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
    pub(super) fn refresh(&mut self, active: u64) {
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
    pub(super) fn try_accept(&mut self, i: usize) -> bool {
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

    /// Marks the inbox closed (senders see it), unlinks the file and the
    /// FIFO. Also done on drop (only by the process that created the inbox).
    pub fn close(self) {}

    pub(super) fn shutdown(&mut self) {
        if self.closed || std::process::id() != self.owner_pid {
            return;
        }
        self.closed = true;
        self.map.u32(H_STATE).store(HDR_CLOSED, Ordering::Release);
        unlink_if_same(&self.path, self.file_id);
        unlink_if_same(&self.wake_path, self.wake_id);
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        self.shutdown();
    }
}
