//! Clean-up: freeing the slots of senders that closed or died, and removing the
//! inbox files of owners that died.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::Ordering;

use super::doorbell::wake_path_of;
use super::file::{euid, pid_alive, unlink_if_same, Mapping};
use super::layout::*;
use super::{Inbox, SenderId, LAYOUT_VERSION, WAKE_SUFFIX};

impl Inbox {
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
