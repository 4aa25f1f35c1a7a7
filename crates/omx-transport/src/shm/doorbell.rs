//! The sleep / wake-up protocol (see the module documentation of [`super`]): the
//! owner's sleeping flag and re-check, the sender's doorbell, and the FIFO next to
//! the inbox file that carries the wake-up.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

use super::file::euid;
use super::layout::*;
use super::{Inbox, Outbox, WAKE_SUFFIX};

impl Inbox {
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

    /// One of possibly several threads of the owner is about to sleep on
    /// [`Inbox::wake_fd`]: arms the flag (every time, not only for the first
    /// sleeper: a ring moves the flag off, and a thread that sleeps again while
    /// another still sleeps must re-arm it or the next record rings nobody), then
    /// re-checks the rings. False: a record is pending, do not sleep (the call
    /// is already undone).
    pub fn begin_sleep(&mut self) -> bool {
        self.sleepers += 1;
        self.set_sleeping(true);
        if self.has_pending() {
            self.end_sleep(false);
            return false;
        }
        true
    }

    /// After a [`Inbox::begin_sleep`]'s sleep; `rang`: the FIFO was readable. The
    /// last thread out disarms the flag; one that leaves others asleep after a
    /// ring re-arms it, since that ring moved the flag off and drained FIFO
    /// bytes wake nobody (the waking thread polls the rings itself next).
    pub fn end_sleep(&mut self, rang: bool) {
        self.sleepers = self.sleepers.saturating_sub(1);
        if self.sleepers == 0 {
            self.set_sleeping(false);
        } else if rang {
            self.set_sleeping(true);
        }
        if rang {
            self.drain_wake();
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
}

impl Outbox {
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
}

pub(super) fn wake_path_of(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_os_string();
    p.push(WAKE_SUFFIX);
    PathBuf::from(p)
}
pub(super) fn mkfifo(path: &Path) -> io::Result<()> {
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
pub(super) fn open_fifo(path: &Path) -> io::Result<File> {
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
