//! Release batching: the server's close of handles the kernel released that were
//! never locked through this mount (closing them tells no one anything) waits to go
//! with others in one request, [`RELEASE_BATCH`] of them or [`RELEASE_DELAY`] after
//! the first. This module also owns the one layout of a release request, used as
//! well for the immediate closes (a handle that locked, a reopen or open that found
//! another file).

use super::request::req;
use super::shared::Shared;
use crate::proto::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Closed handles released on the server in one request once this many are waiting...
pub const RELEASE_BATCH: usize = 32;
/// ... or once the first has waited this long.
pub const RELEASE_DELAY: Duration = Duration::from_millis(20);

/// Handles the kernel released that the server has yet to close (never locked through
/// this mount: closing them there has nothing to tell anyone), sent together.
#[derive(Default)]
pub struct Releases {
    fhs: Vec<u64>,
    generation: u64,
    /// When the first waiting one was queued.
    since: Option<Instant>,
}

/// A request closing the server's handles `fhs`; `owner`: the lock owner whose locks
/// go with the first (a handle that locked: one handle only).
pub fn release_request(fhs: &[u64], owner: Option<u64>) -> Writer {
    let mut w = req(Op::Release);
    for &fh in fhs {
        w.u64(fh)
            .u64(owner.unwrap_or(0))
            .u32(owner.is_some() as u32);
    }
    w
}

impl Shared {
    /// Closes the server's handle `server_fh` now, answered to no one (an open that
    /// found another file than the kernel's, or a reopen that did). Safe on the
    /// completion thread: it neither waits nor reconnects.
    pub fn close_now(&self, server_fh: u64) {
        let w = release_request(&[server_fh], None);
        self.conn.submit(w, None, 0, true, Box::new(|_| {}));
    }

    /// Queues the server's close of handle `server_fh` (of session `generation`): sent
    /// with others by [`Shared::release_now`] ([`RELEASE_BATCH`] of them, or
    /// [`RELEASE_DELAY`] after the first, by [`Shared::run_releases`]).
    pub fn release_later(self: &Arc<Self>, server_fh: u64, generation: u64) {
        let mut r = self.releases.lock();
        if r.generation != generation {
            // Those of an older session were closed with it on the server.
            r.fhs.clear();
            r.generation = generation;
        }
        r.fhs.push(server_fh);
        if r.since.is_none() {
            r.since = Some(Instant::now());
            self.releases_queued.notify_one();
        }
        if r.fhs.len() >= RELEASE_BATCH {
            self.release_now(&mut r);
        }
    }

    /// Sends the waiting releases in one request (not waited for; an error has no
    /// one to go to: the kernel was answered).
    fn release_now(self: &Arc<Self>, r: &mut Releases) {
        let fhs = std::mem::take(&mut r.fhs);
        r.since = None;
        if fhs.is_empty() || r.generation != self.conn.generation() {
            return;
        }
        let w = release_request(&fhs, None).0;
        self.request_now(
            Box::new(move |_| Ok(Writer(w.clone()))),
            None,
            0,
            Box::new(|_| {}),
            false,
        );
    }

    /// Sends the queued releases and waits for the answer (at unmount: the process
    /// ends right after).
    pub fn release_all_now(&self) {
        let (fhs, generation) = {
            let mut r = self.releases.lock();
            r.since = None;
            (std::mem::take(&mut r.fhs), r.generation)
        };
        if fhs.is_empty() || generation != self.conn.generation() {
            return;
        }
        let _ = self.conn.call(release_request(&fhs, None), None, 0);
    }

    /// Sends queued releases [`RELEASE_DELAY`] after the first (a thread of its own).
    pub fn run_releases(self: Arc<Self>) {
        let mut r = self.releases.lock();
        loop {
            match r.since {
                None => self.releases_queued.wait(&mut r),
                Some(t) if t.elapsed() >= RELEASE_DELAY => self.release_now(&mut r),
                Some(t) => {
                    self.releases_queued.wait_until(&mut r, t + RELEASE_DELAY);
                }
            }
        }
    }
}
