//! Read-ahead of large messages. A message above the eager limit is pulled by the
//! receiver once a receive is posted for it: a reader that posts one receive per read
//! (iperf3 reads 128 KiB at a time) would wait a whole pull round trip per read, with
//! the link idle while it copies. So when a reader takes a message, the large ones that
//! arrived behind it are posted at once into buffers of the library (up to `DEPTH`):
//! their pulls run while the program works, and later reads copy
//! from them. Receives match in the order they are posted, so the stream keeps its
//! order: a reader always takes the messages posted ahead before any other. Buffers
//! that were read out are kept for the next messages while a stream runs (a fresh one
//! costs page faults on every message).

use super::{Conn, Rx, RxMode, CHUNK};
use crate::fabric;
use omx_proto::ReqId;
use std::io::Result;

/// Messages posted ahead per connection. Deeper was slower at MTU 9000 (16 messages of
/// 128 KiB: 0.5-0.9x of this depth's iperf3 in one run; the pulls share the link, so
/// the one the reader waits for completes later).
const DEPTH: usize = 4;
/// Messages from this size on move by pulls (omx's rendezvous threshold), worth reading
/// ahead; smaller ones are in the endpoint as soon as they are announced.
pub(super) const READ_AHEAD_MIN: usize = 32 * 1024;
/// Spare message buffers a connection keeps for reuse.
pub(super) const SPARE_BUFFERS: usize = 4;

/// A receive posted ahead into a buffer of the library.
pub(super) struct Ahead {
    req: ReqId,
    buf: Vec<u8>,
}

impl Rx {
    /// Keeps a message buffer that was read out for the next message.
    pub(super) fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS && buf.capacity() > 0 && buf.capacity() <= CHUNK {
            self.spare.push(buf);
        }
    }

    /// A buffer of `len` bytes for the next message, a spare one when there is one.
    pub(super) fn buffer(&mut self, len: usize) -> Vec<u8> {
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.resize(len, 0);
        buf
    }

    /// Length of the next message posted ahead (`FIONREAD`).
    pub(super) fn ahead_len(&self) -> Option<usize> {
        self.ahead.front().map(|a| a.buf.len())
    }
}

impl Conn {
    /// Posts receives for the large messages already announced behind the one being
    /// read, up to `DEPTH`. Small messages are in the endpoint already and
    /// stop the look (read as they are, without a second copy); so do zero-length ones
    /// (the end of the peer's omx writes) and a connection a forked child may take over.
    pub(super) fn read_ahead(&self, rx: &mut Rx) {
        if !matches!(rx.mode, RxMode::Omx) || self.maybe_shared() {
            return;
        }
        let m = self.id as u64;
        while rx.ahead.len() < DEPTH {
            let Some(status) = self.fab.ep.iprobe(m, !0) else {
                return;
            };
            let len = status.msg_length as usize;
            if len < READ_AHEAD_MIN {
                return;
            }
            let mut buf = rx.buffer(len);
            // SAFETY: the buffer moves into `rx.ahead` (its heap block stays put) and is
            // only touched again once the request completed, or is leaked (`Drop`).
            let Ok(req) = (unsafe { self.post_receive(m, buf.as_mut_ptr(), len) }) else {
                return;
            };
            rx.ahead.push_back(Ahead { req, buf });
        }
    }

    /// The next message posted ahead, once it arrived whole (its bytes), if any.
    pub(super) fn take_ahead(&self, rx: &mut Rx) -> Option<Result<Vec<u8>>> {
        let Ahead { req, mut buf } = rx.ahead.pop_front()?;
        Some(self.await_receive(req).map(|len| {
            buf.truncate(len);
            buf
        }))
    }

    /// Whether the next message posted ahead arrived whole (a read takes it at once).
    pub(super) fn ahead_done(&self, rx: &Rx) -> bool {
        rx.ahead
            .front()
            .is_some_and(|a| self.fab.ep.peek_done(a.req))
    }

    /// Every message posted ahead, in order, once arrived (for a hand-back to TCP).
    pub(super) fn drain_ahead(&self, rx: &mut Rx) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(Ok(bytes)) = self.take_ahead(rx) {
            out.push(bytes);
        }
        out
    }

    /// The connection ends with receives posted ahead that no read takes: each is
    /// cancelled, or, when its pull is under way, its buffer is left to the endpoint
    /// (leaked, at most `DEPTH` messages per connection closed mid-pull). A forked child
    /// does not touch its parent's endpoint.
    pub(super) fn abandon_ahead(&self, rx: &mut Rx) {
        let ep = &self.fab.ep;
        for a in rx.ahead.drain(..) {
            let settled = !fabric::in_forked_child()
                && (ep.test(a.req).is_some() || matches!(ep.cancel(a.req), Ok(true)));
            if !settled {
                if !fabric::in_forked_child() {
                    ep.forget(a.req);
                }
                std::mem::forget(a.buf);
            }
        }
    }

    /// Whether a message waits for a read: one read ahead, or one in the endpoint.
    pub(super) fn message_waiting(&self, rx: &Rx) -> bool {
        !rx.ahead.is_empty() || self.fab.ep.iprobe(self.id as u64, !0).is_some()
    }
}
