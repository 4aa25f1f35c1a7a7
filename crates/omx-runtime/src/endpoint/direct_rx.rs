//! Direct receive (`OMX_DIRECT_RECV`): pull replies taken from their own socket, the
//! payload placed by the kernel straight into the receive buffer.

use super::progress::Pass;
use super::{Core, EndpointInner, RX_BATCH};
use crate::config::DIRECT_RECV_BATCH;
use crate::memory::MemRegistry;
use bytes::Bytes;
use omx_proto::*;
use omx_transport::{DirectRx, ReplyPlace, DIRECT_MAX_PIECES};

impl EndpointInner {
    /// Takes the pull replies waiting on the direct socket, only while pulling: an idle
    /// poll stays free of system calls. (Replies that come late are taken, and dropped,
    /// during the next pull or before a sleep.)
    pub(super) fn take_direct_replies(&self, core: &mut Core, pass: &mut Pass) {
        let Core {
            direct_rx: Some(d),
            engine,
            mem,
            inbound,
            ..
        } = core
        else {
            return;
        };
        if !engine.pulling() {
            return;
        }
        let t = pass.precise_now(&self.rt);
        pass.placed |= drain_direct(d, engine, mem, t, |f| inbound.keep(f));
    }
}

/// Pull replies that arrive after their pull ended wait on the direct socket (progress
/// passes drain it only while pulling). Before a sleep they are handed to the engine,
/// which counts them as dropped: left there, they would wake the sleeper at once.
pub(super) fn take_late_replies(core: &mut Core, now: Time) {
    let Core {
        direct_rx: Some(d),
        engine,
        ..
    } = core
    else {
        return;
    };
    if engine.pulling() {
        return;
    }
    while let Ok(true) = d.recv_owned(|f| engine.handle_frame(now, Bytes::copy_from_slice(f))) {}
}

/// Takes the pull replies waiting on the direct socket (at most a batch): each goes
/// straight into its receive buffer, or, when it is not one to place, whole to `keep`
/// for the ordinary path (which counts its drop). Returns whether any was placed.
fn drain_direct(
    d: &mut DirectRx,
    engine: &mut Engine,
    mem: &MemRegistry,
    now: Time,
    mut keep: impl FnMut(&[u8]),
) -> bool {
    if d.batched() {
        return drain_direct_batch(d, engine, mem, now, keep);
    }
    let mut placed = false;
    let mut head = [0u8; omx_wire::PULL_REPLY_HEAD_LEN];
    for _ in 0..RX_BATCH {
        let Ok(Some(len)) = d.peek(&mut head) else {
            break;
        };
        let mut place = |h: MemHandle, off: u64, n: usize| {
            let mut parts = [(std::ptr::null_mut(), 0); DIRECT_MAX_PIECES];
            let mut scratch = [0u8; omx_wire::PULL_REPLY_HEAD_LEN];
            let Some(k) = mem.scatter(h, off as usize, n, &mut parts) else {
                // More pieces than one receive takes: through a bounce buffer.
                let mut ok = false;
                let _ = d.recv_owned(|f| {
                    let start = omx_wire::PULL_REPLY_HEAD_LEN;
                    if let Some(p) = f.get(start..start + n) {
                        mem.write(h, off as usize, p);
                        ok = f.len() == len;
                    }
                });
                return ok;
            };
            // SAFETY: the pieces lie in a receive buffer lent to the engine for the
            // pull under way (the handle resolves), which nothing else touches until
            // the receive completes, after this pass.
            let got = unsafe { d.recv_into(&mut scratch, &parts[..k]) };
            match got {
                Ok(Some(l)) if l == len => true,
                // Shorter than peeked: not recorded, so the pull asks for it again.
                Ok(Some(_)) => {
                    d.truncated += 1;
                    false
                }
                _ => false,
            }
        };
        match engine.handle_pull_reply_direct(now, &head, len, &mut place) {
            Some(ok) => placed |= ok,
            None => {
                let _ = d.recv_owned(&mut keep);
            }
        }
    }
    placed
}

/// The batched direct receive: one `recvmmsg` whose frames' payloads go straight to
/// the places of the next missing frames the engine expects. Frames up to the first
/// that is not where it was expected are recorded as they are; from there on every
/// frame is rebuilt whole first, then handled as a ring frame (copied to its place).
pub(super) fn drain_direct_batch(
    d: &mut DirectRx,
    engine: &mut Engine,
    mem: &MemRegistry,
    now: Time,
    mut keep: impl FnMut(&[u8]),
) -> bool {
    // Where each expected reply's payload goes, and which destination it names.
    let mut places = [ReplyPlace::NONE; DIRECT_RECV_BATCH];
    let mut dests = [(MemHandle(0), 0u64); DIRECT_RECV_BATCH];
    let mut m = 0;
    engine.expected_pull_replies(&mut |h, off, len| {
        let Some(place) = places.get_mut(m) else {
            return false;
        };
        let Some(k) = mem.scatter(h, off as usize, len, &mut place.pieces) else {
            return false;
        };
        place.count = k;
        place.len = len;
        // Receives posted into one buffer at once: stop before a place another one
        // of this batch already names (the rest arrive whole and are copied).
        let (earlier, this) = places.split_at(m);
        if earlier.iter().any(|e| e.overlaps(&this[0])) {
            return false;
        }
        dests[m] = (h, off);
        m += 1;
        true
    });
    // SAFETY: the places lie in receive buffers lent to the engine for the pulls under
    // way (their handles resolved), which nothing else touches until those receives
    // complete, after this pass; frames written there by mistake land only in frames
    // still missing, which their own reply overwrites.
    let n = unsafe { d.recv_batch_into(DIRECT_RECV_BATCH, &places[..m]) }.unwrap_or(0);
    let mut placed = false;
    let mut first_miss = n;
    for (i, (p, &(h, off))) in places.iter().zip(&dests).enumerate().take(n) {
        let Some((head, len)) = d.head(i) else {
            continue;
        };
        let mut check = |dh: MemHandle, doff: u64, dlen: usize| {
            dh == h && doff == off && dlen == p.len && len == omx_wire::PULL_REPLY_HEAD_LEN + dlen
        };
        if i >= m || engine.handle_pull_reply_direct(now, head, len, &mut check) != Some(true) {
            first_miss = i;
            break;
        }
        placed = true;
    }
    // Every frame from the first miss on is made whole before any is placed: placing
    // one may overwrite another's place.
    for i in first_miss..n {
        // SAFETY: nothing was written to the places since the receive.
        unsafe { d.rebuild(i) };
    }
    for i in first_miss..n {
        if let Some(frame) = d.rebuilt(i) {
            if engine.handle_frame_in_place(now, frame, &mut |h, off, data| {
                mem.write(h, off as usize, data)
            }) {
                placed = true;
            } else {
                keep(frame);
            }
        }
    }
    placed
}
