//! Read-ahead of large messages. A message above the eager limit is pulled by the
//! receiver once a receive is posted for it: a reader that posts one receive per read
//! (iperf3 reads 128 KiB at a time) would wait a whole pull round trip per read, with
//! the link idle while it copies. So when a reader takes a message, the large ones that
//! arrived behind it are posted at once into buffers of the library (up to `DEPTH`):
//! their pulls run while the program works, and later reads copy from them. Receives
//! match in the order they are posted, so the stream keeps its order: a reader always
//! takes the messages posted ahead before any other.

use super::{Conn, Rx};
use crate::fabric;
use omx_proto::ReqId;
use omx_runtime::Segment;
use std::io::Result;

/// Messages posted ahead per connection.
const DEPTH: usize = 4;
/// Messages up to this length arrive whole with their first frames (eager): posting
/// them early gains nothing.
const EAGER_MAX: u32 = 32 * 1024;

/// A receive posted ahead of the reader into a buffer of the library.
pub(super) struct Ahead {
    req: ReqId,
    buf: Vec<u8>,
}

impl Conn {
    /// Posts receives for the large messages waiting behind those already posted, up
    /// to `DEPTH`; stops at the first small one (it must be taken after them).
    pub(super) fn read_ahead(&self, rx: &mut Rx) {
        let m = self.id as u64;
        while rx.ahead.len() < DEPTH {
            let Some(st) = self.fab.ep.iprobe(m, !0) else {
                return;
            };
            if st.msg_length <= EAGER_MAX {
                return;
            }
            let mut buf = vec![0u8; st.msg_length as usize];
            let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
            // SAFETY: buf moves into `rx.ahead` (its heap block stays put) and is freed
            // only once the receive completed (`take_ahead`, `drain_ahead`) or leaked.
            match unsafe { self.fab.ep.irecv(&[seg], m, !0, 0) } {
                Ok(req) => rx.ahead.push_back(Ahead { req, buf }),
                Err(_) => return,
            }
        }
    }

    /// The next message posted ahead, once it arrived whole (its bytes), if any.
    pub(super) fn take_ahead(&self, rx: &mut Rx) -> Option<Result<Vec<u8>>> {
        let Ahead { req, mut buf } = rx.ahead.pop_front()?;
        Some(self.wait_received(req).map(|len| {
            buf.truncate(len);
            buf
        }))
    }

    /// Every message posted ahead, in order, once arrived (for a hand-back to TCP).
    pub(super) fn drain_ahead(&self, rx: &mut Rx) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(r) = self.take_ahead(rx) {
            match r {
                Ok(bytes) => out.push(bytes),
                Err(_) => break,
            }
        }
        out
    }

    /// Length of the next message posted ahead (`FIONREAD`).
    pub(super) fn ahead_len(rx: &Rx) -> Option<usize> {
        rx.ahead.front().map(|a| a.buf.len())
    }

    /// A connection going away with receives still posted ahead: each one is waited
    /// for briefly; a buffer whose pull is still under way is leaked, never freed under
    /// the endpoint's feet. In a forked child the requests are the parent's.
    pub(super) fn abandon_ahead(&self, rx: &mut Rx) {
        for a in rx.ahead.drain(..) {
            let done = !fabric::in_forked_child()
                && (self.fab.ep.cancel(a.req).unwrap_or(false)
                    || self
                        .fab
                        .ep
                        .wait(a.req, Some(std::time::Duration::from_secs(1)))
                        .is_some());
            if !done {
                std::mem::forget(a.buf);
            }
        }
    }
}
