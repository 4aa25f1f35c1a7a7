//! Pull replies at the puller: checked against their pull, placed, and the pull moved on.

use super::*;

impl Engine {
    /// A pull reply whose frame the engine keeps: its payload becomes a copy action.
    pub(crate) fn on_pull_reply(&mut self, now: Time, r: PullReply, payload: bytes::Bytes) {
        self.on_pull_reply_on(now, r, payload, 0)
    }

    /// As [`Engine::on_pull_reply`], for a reply that came on link `path`.
    pub(crate) fn on_pull_reply_on(
        &mut self,
        now: Time,
        r: PullReply,
        payload: bytes::Bytes,
        path: u8,
    ) {
        let Some(a) = self.accept_pull_reply(now, &r, payload.len(), path) else {
            return;
        };
        self.new_copy(a.req, payload, a.dst, a.dst_offset);
        self.after_pull_reply(now, a);
    }

    /// A pull reply in a frame the caller only lends: `place` copies its payload into
    /// the destination during the call, so the receive needs no copy action.
    pub(crate) fn on_pull_reply_in_place(
        &mut self,
        now: Time,
        r: PullReply,
        payload: &[u8],
        place: &mut dyn FnMut(MemHandle, u64, &[u8]),
    ) {
        let Some(a) = self.accept_pull_reply(now, &r, payload.len(), 0) else {
            return;
        };
        place(a.dst, a.dst_offset, payload);
        self.after_pull_reply(now, a);
    }

    /// Validates a pull reply against its pull and records the frame as received;
    /// `None` if it is dropped (counted).
    fn accept_pull_reply(
        &mut self,
        now: Time,
        r: &PullReply,
        len: usize,
        path: u8,
    ) -> Option<AcceptedReply> {
        self.counters.recv_pull_reply += 1;
        match self.check_pull_reply(r, path) {
            Ok(c) => Some(self.commit_pull_reply(now, c, len)),
            Err(drop) => {
                let c = &mut self.counters;
                match drop {
                    ReplyDrop::BadMagic => c.drop_pull_reply_bad_magic += 1,
                    ReplyDrop::BadHandle => c.drop_pull_reply_bad_handle += 1,
                    ReplyDrop::BadSeqnum => c.drop_pull_reply_bad_seqnum += 1,
                    ReplyDrop::Duplicate => c.drop_pull_reply_duplicate += 1,
                }
                None
            }
        }
    }

    /// Where a pull reply that came on link `path` belongs, changing nothing: its
    /// pull, frame and block.
    fn check_pull_reply(&self, r: &PullReply, path: u8) -> Result<CheckedReply, ReplyDrop> {
        if r.dst_magic != self.pull_magic(path) {
            return Err(ReplyDrop::BadMagic);
        }
        let pk = self
            .pulls
            .by_wire_handle(r.dst_pull_handle)
            .ok_or(ReplyDrop::BadHandle)?;
        let pull = self.pulls.get(pk).expect("handle resolved");
        let k = ((r.msg_offset as u64 + pull.off0 as u64) / pull.reply_max as u64) as u32;
        let valid = k < pull.frames_total
            && pull.frame_start(k) == r.msg_offset
            && k as u8 == r.frame_seqnum
            && pull.frame_end(k) - pull.frame_start(k) == r.frame_length as u32;
        let block = pull.blocks.iter().position(|b| b.start <= k && k < b.end);
        let block = block.filter(|_| valid).ok_or(ReplyDrop::BadSeqnum)?;
        if pull.has(k) {
            return Err(ReplyDrop::Duplicate);
        }
        Ok(CheckedReply {
            pull: pk,
            frame: k,
            block,
            dst: pull.handle,
            dst_offset: pull.base + r.msg_offset as u64,
            path,
        })
    }

    /// Records a checked reply's frame as received.
    fn commit_pull_reply(&mut self, now: Time, c: CheckedReply, len: usize) -> AcceptedReply {
        let pull = self.pulls.get_mut(c.pull).expect("checked");
        let (k, bi) = (c.frame, c.block);
        pull.received[(k / 64) as usize] |= 1 << (k % 64);
        pull.frames_received += 1;
        pull.last_progress = now;
        pull.blocks[bi].missing -= 1;
        let block_done = pull.blocks[bi].missing == 0;
        let pid = pull.partner;
        if block_done {
            pull.blocks.remove(bi);
        }
        let path = c.path;
        let (lost, sample) = self.passed_over(now, pid, path, c.pull, k);
        let pull = self.pulls.get(c.pull).expect("checked");
        let all_done = pull.frames_received == pull.frames_total;
        let req = pull.req;
        let configured = self.cfg.pull_blocks_outstanding;
        let partner = &mut self.partners[pid];
        if path != 0 {
            if let Some(s) = partner.stripes.get_mut(path as usize - 1) {
                s.timeouts = 0;
            }
        }
        let on_path = partner.path_mut(path);
        on_path.heard = now;
        on_path.round_ends = 0;
        match sample {
            Some(rtt) => on_path.rtt.sample(rtt),
            None => on_path.rtt.progress(),
        }
        if block_done {
            on_path.grow_window(configured);
        }
        if !lost.is_empty() {
            self.rerequest_lost(now, pid, path, lost);
        }
        if let Some(Request::Recv(rr)) = self.requests.get_mut(req) {
            if let Some(a) = rr.active.as_mut() {
                a.received += len as u32;
            }
        }
        AcceptedReply {
            pull: c.pull,
            req,
            dst: c.dst,
            dst_offset: c.dst_offset,
            block_done,
            all_done,
        }
    }

    /// A pull reply whose payload the caller receives straight into place: `place(
    /// destination, byte offset, length)` must store the frame's payload there during
    /// the call and say whether it did (the whole frame arrived as announced). `None`
    /// when the reply is not one to place (unknown pull, duplicate, bad fields): the
    /// caller then takes the frame whole through [`crate::Engine::handle_frame`], which
    /// counts its drop, and nothing has changed.
    pub(crate) fn on_pull_reply_direct(
        &mut self,
        now: Time,
        r: PullReply,
        place: &mut dyn FnMut(MemHandle, u64, usize) -> bool,
    ) -> Option<bool> {
        let c = self.check_pull_reply(&r, 0).ok()?;
        let len = r.frame_length as usize;
        if !place(c.dst, c.dst_offset, len) {
            // Nothing recorded: the pull asks for the frame again if it is really lost.
            return Some(false);
        }
        self.counters.recv_pull_reply += 1;
        let a = self.commit_pull_reply(now, c, len);
        self.after_pull_reply(now, a);
        Some(true)
    }

    /// Once the reply's payload is placed (or its copy queued): ends the pull, or
    /// requests the next blocks.
    fn after_pull_reply(&mut self, now: Time, a: AcceptedReply) {
        if a.all_done {
            self.finish_pull(now, a.pull, None);
        } else if a.block_done {
            self.refill_blocks(now, a.pull);
            if self.cfg.pull_blocks_max != u32::MAX {
                self.refill_all(now);
            }
        }
    }
}

/// Why a pull reply is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReplyDrop {
    BadMagic,
    BadHandle,
    BadSeqnum,
    Duplicate,
}

/// A pull reply's place, before anything is recorded.
#[derive(Clone, Copy, Debug)]
struct CheckedReply {
    pull: Key,
    frame: u32,
    block: usize,
    dst: MemHandle,
    dst_offset: u64,
    /// The link it came on.
    path: u8,
}

/// A pull reply accepted by [`Engine::accept_pull_reply`]: where its payload goes and
/// what the pull does next.
struct AcceptedReply {
    pull: Key,
    req: Key,
    dst: MemHandle,
    dst_offset: u64,
    block_done: bool,
    all_done: bool,
}
