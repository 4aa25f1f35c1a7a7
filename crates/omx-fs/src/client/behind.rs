//! Write-behind: a `write` is answered to the kernel as soon as it is sent, so that
//! a sequential writer has several in flight (the kernel has no write-back cache
//! here: it sends one `WRITE` per `write` call and waits for it). This module owns
//! the rules that keep that invisible to programs: what goes behind and what waits
//! for the server, the bytes in flight at most, overlapping writes in order, every
//! other request after the writes in flight, and an error kept for the file's next
//! `write`, `fsync` or `close`.

use super::request::{body, req};
use super::shared::Shared;
use super::OmxFs;
use crate::proto::*;
use fuser::ReplyWrite;
use std::collections::HashMap;
use std::sync::Arc;

/// Writes ending past this offset are never behind (see [`OmxFs::write_data`]).
pub const SYNC_BEYOND: u64 = 1 << 40;

/// Bytes of writes behind (answered to the kernel before the server) in flight at most.
pub const BEHIND_MAX: usize = 8 << 20;

/// Writes behind: answered to the kernel as soon as they are sent, so that a
/// sequential writer has several in flight (the kernel sends one `WRITE` per `write`
/// call and waits for it). Every other request waits until none is in flight (so it
/// sees them all on the server, whatever order the server's threads serve them in), a
/// write waits for those it overlaps, and an error is kept for the node's next
/// write, flush or fsync (as NFS reports one at close).
#[derive(Default)]
pub struct Behind {
    /// (id, node, start, end) of each write in flight.
    in_flight: Vec<(u64, u64, u64, u64)>,
    bytes: usize,
    next: u64,
    /// The first error of a node's writes behind, until reported.
    errors: HashMap<u64, i32>,
}

impl Shared {
    /// Waits until no write behind is in flight (never on the completion thread).
    pub fn drain(&self) {
        let mut b = self.behind.lock();
        while !b.in_flight.is_empty() {
            self.behind_done.wait(&mut b);
        }
    }

    /// Waits until `node`'s range `start..end` overlaps no write behind in flight and
    /// `len` more bytes fit; then counts it in flight. Its id, for [`Shared::behind_end`].
    pub fn behind_start(&self, node: u64, start: u64, end: u64) -> u64 {
        let len = (end - start) as usize;
        let mut b = self.behind.lock();
        loop {
            let overlaps = b
                .in_flight
                .iter()
                .any(|&(_, n, s, e)| n == node && s < end && start < e);
            let full = !b.in_flight.is_empty() && b.bytes + len > BEHIND_MAX;
            if !overlaps && !full {
                break;
            }
            self.behind_done.wait(&mut b);
        }
        b.next += 1;
        let id = b.next;
        b.in_flight.push((id, node, start, end));
        b.bytes += len;
        id
    }

    /// Write behind `id` of `node` was answered (`error`: how it failed).
    pub fn behind_end(&self, id: u64, node: u64, error: Option<i32>) {
        let mut b = self.behind.lock();
        if let Some(i) = b.in_flight.iter().position(|w| w.0 == id) {
            let (_, _, s, e) = b.in_flight.swap_remove(i);
            b.bytes -= (e - s) as usize;
        }
        if let Some(e) = error {
            b.errors.entry(node).or_insert(e);
        }
        drop(b);
        self.behind_done.notify_all();
    }

    /// The error of a write behind of `node` not reported yet (reported now).
    pub fn behind_error(&self, node: u64) -> Option<i32> {
        self.behind.lock().errors.remove(&node)
    }

    /// The writes behind are on the server (waited for): the error of one of `node`'s
    /// not reported yet (reported now, as a flush's or fsync's).
    pub fn settle(&self, node: u64) -> Option<i32> {
        self.drain();
        self.behind_error(node)
    }
}

impl OmxFs {
    /// A `write`: behind, or synchronous for handles that asked for it.
    pub(super) fn write_data(
        &self,
        ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        reply: ReplyWrite,
    ) {
        self.data_changing(ino);
        if let Some(e) = self.sh.behind_error(ino) {
            return reply.error(e);
        }
        let (inline, separate) = if data.len() <= INLINE_WRITE {
            (data.to_vec(), None)
        } else {
            (Vec::new(), Some(Arc::new(data.to_vec())))
        };
        let len = data.len() as u32;
        let build = move |fh| {
            let mut w = req(Op::Write);
            w.u64(fh).u64(offset as u64).u32(len);
            w.0.extend_from_slice(&inline);
            w
        };
        // Behind (answered now) unless the program asked for each write to be done
        // when it returns, or appends (a log other clients may append to as well:
        // each append on the server when it returns, as before).
        // A write ending past SYNC_BEYOND waits for the server too: the file systems'
        // size limits lie out there (ext4's 16 TiB), and its EFBIG is the write's, as
        // locally, not the next call's.
        let synchronous = libc::O_SYNC | libc::O_DSYNC | libc::O_APPEND | libc::O_DIRECT;
        let behind = self
            .sh
            .handles
            .lock()
            .map
            .get(&fh)
            .is_some_and(|h| h.flags & synchronous == 0)
            && (offset as u64).saturating_add(data.len() as u64) <= SYNC_BEYOND;
        if !behind {
            let append = self
                .sh
                .handles
                .lock()
                .map
                .get(&fh)
                .is_some_and(|h| h.flags & libc::O_APPEND != 0);
            if append {
                // The server appends at the file's end as it finds it: this client's
                // writes behind (other handles of the file) are there first.
                self.sh.drain();
            }
            let notifier = self.sh.notifier.clone();
            return self.send_fh(fh, build, separate, 0, move |r| {
                // An append ends with where the server wrote it (at the file's end).
                match body(r, |_, rd| Ok((rd.u32()?, rd.u64().ok()))) {
                    Ok((n, at)) => {
                        reply.written(n);
                        if at.is_some_and(|at| at != offset as u64) {
                            // Another client appended since this one's kernel learned
                            // the size: the pages it just filled at its offset are not
                            // the file's. Dropped once the write is done (the kernel
                            // holds them locked until it has this reply).
                            super::locking::drop_pages(notifier, ino);
                        }
                    }
                    Err(e) => reply.error(e),
                }
            });
        }
        let start = offset as u64;
        let id = self.sh.behind_start(ino, start, start + len as u64);
        let sh = self.sh.clone();
        let done = move |r| {
            let error = match body(r, |_, rd| rd.u32()) {
                Ok(n) if n == len => None,
                Ok(_) => Some(libc::EIO),
                Err(e) => Some(e),
            };
            sh.behind_end(id, ino, error);
        };
        self.sh.request_now(
            Box::new(move |sh| Ok(build(sh.server_fh(fh)?))),
            separate,
            0,
            Box::new(done),
            true,
        );
        reply.written(len);
    }
}
