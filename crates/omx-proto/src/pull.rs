//! Large messages: the receiver pulls blocks of frames from the sender's registered
//! region, several blocks in flight, re-requesting only missing frames.
//!
//! Loss recovery: the sender answers each request with its frames in order and a link
//! keeps them in order, so a reply that arrives past frames not yet seen proves those
//! lost: they are re-requested at once (a per-pull queue of requested runs is walked
//! as replies arrive). Only losses at the very end of the traffic wait for the block
//! timeout, which follows the measured block round trip. A burst of lost frames (a
//! full ring or switch queue) halves the blocks in flight toward that partner; they
//! grow back as blocks complete.

use crate::engine::Engine;
use crate::recv::nack_status;
use crate::requests::Request;
use crate::slab::{Key, Slab};
use crate::transmit::Payload;
use crate::types::*;
use omx_wire::{
    Header, NackMcp, NackType, Notify, Packet, Pull as PullPacket, PullReply, PULL_MAGIC_XOR,
};
use std::collections::VecDeque;

/// Wire handle: slot index in the high 10 bits, 22 bits of generation.
const HANDLE_GEN_BITS: u32 = 22;
const HANDLE_GEN_MASK: u32 = (1 << HANDLE_GEN_BITS) - 1;

pub(crate) struct Block {
    start: u32,
    end: u32,
    missing: u32,
    /// Last (re)request of any of its frames, and the timeout armed then: its missing
    /// frames are asked for again once the partner has sent no reply for that long
    /// since (see [`Pull::deadline`]).
    requested_at: Time,
    rto: Time,
    /// The link its frames are requested on (see `stripe.rs`; 0 without striping).
    path: u8,
}

/// Frames `[start, end)` of a pull asked for in one request. A partner's runs are
/// awaited in request order, across all pulls from it (it serves requests in order).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pull: Key,
    start: u32,
    end: u32,
    asked_at: Time,
    /// None of its frames was asked for before: its first reply times a round trip.
    fresh: bool,
}

pub(crate) struct Pull {
    req: Key,
    pub(crate) partner: PartnerId,
    handle: MemHandle,
    /// Offset of the pulled data in `handle` (one-sided puts land mid-buffer).
    base: u64,
    rdma_id: u8,
    rdma_seq: u8,
    rdma_offset: u32,
    xfer: u32,
    /// Frame geometry: frame 0 is shortened by `off0` so later frames are aligned.
    off0: u32,
    reply_max: u32,
    frames_total: u32,
    received: Vec<u64>,
    frames_received: u32,
    next_frame: u32,
    blocks: Vec<Block>,
    last_progress: Time,
    /// The path the next block goes to first (round-robin over open paths).
    next_path: u8,
}

impl Pull {
    fn frame_start(&self, k: u32) -> u32 {
        if k == 0 {
            0
        } else {
            k * self.reply_max - self.off0
        }
    }

    fn frame_end(&self, k: u32) -> u32 {
        ((k as u64 + 1) * self.reply_max as u64 - self.off0 as u64).min(self.xfer as u64) as u32
    }

    fn has(&self, k: u32) -> bool {
        self.received[(k / 64) as usize] & (1 << (k % 64)) != 0
    }

    /// Missing frames of the blocks in flight, in order, to `f` (see
    /// [`Engine::expected_pull_replies`]); false when `f` asked to stop.
    pub(crate) fn expected_replies(
        &self,
        f: &mut dyn FnMut(MemHandle, u64, usize) -> bool,
    ) -> bool {
        for b in &self.blocks {
            for k in (b.start..b.end).filter(|&k| !self.has(k)) {
                let start = self.frame_start(k);
                let len = (self.frame_end(k) - start) as usize;
                if !f(self.handle, self.base + start as u64, len) {
                    return false;
                }
            }
        }
        true
    }

    /// When the first block times out: its timeout after its last request or after the
    /// partner's last pull reply, whichever is later. A sender serves requests in
    /// order, so replies to earlier ones delay a block's without any loss: only
    /// silence from the partner is a timeout. (The deadline only moves later, except
    /// when a block is re-armed, which hints the engine's timer.)
    pub(crate) fn deadline(&self, partner: &crate::partner::Partner) -> Option<Time> {
        self.blocks
            .iter()
            .map(|b| b.requested_at.max(partner.path(b.path).heard) + b.rto)
            .min()
    }

    /// Blocks in flight on `path`.
    fn blocks_on(&self, path: u8) -> usize {
        self.blocks.iter().filter(|b| b.path == path).count()
    }

    /// Runs of missing frames within `[start, end)`.
    fn missing_runs(&self, start: u32, end: u32, out: &mut Vec<(u32, u32)>) {
        let mut k = start;
        while k < end {
            if self.has(k) {
                k += 1;
                continue;
            }
            let s = k;
            while k < end && !self.has(k) {
                k += 1;
            }
            out.push((s, k));
        }
    }
}

/// Pull handles per endpoint (10 bits of the wire handle).
const MAX_PULLS: usize = 1024;

/// The pulls in progress, by key (their wire handle), and the matched large receives
/// waiting for a free handle.
#[derive(Default)]
pub(crate) struct Pulls {
    slab: Slab<Pull>,
    waitq: VecDeque<Key>,
}

impl Pulls {
    pub fn insert(&mut self, p: Pull) -> Key {
        self.slab.insert(p)
    }

    pub fn get(&self, k: Key) -> Option<&Pull> {
        self.slab.get(k)
    }

    pub fn get_mut(&mut self, k: Key) -> Option<&mut Pull> {
        self.slab.get_mut(k)
    }

    pub fn remove(&mut self, k: Key) -> Option<Pull> {
        self.slab.remove(k)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Pull> {
        self.slab.keys().filter_map(|k| self.slab.get(k))
    }

    /// Keys of the pulls in progress, oldest slot first (a copy: callers change pulls).
    pub fn keys(&self) -> Vec<Key> {
        self.slab.keys().collect()
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// No handle is free: new large receives wait.
    pub fn is_full(&self) -> bool {
        self.slab.len() >= MAX_PULLS
    }

    /// The pull a wire handle names, if it is still in progress.
    pub fn by_wire_handle(&self, handle: u32) -> Option<Key> {
        let index = handle >> HANDLE_GEN_BITS;
        let key = self.slab.key_at(index)?;
        (key.generation() & HANDLE_GEN_MASK == handle & HANDLE_GEN_MASK).then_some(key)
    }

    /// Pull blocks requested and not complete, across all pulls.
    pub fn blocks_outstanding(&self) -> usize {
        self.iter().map(|p| p.blocks.len()).sum()
    }

    /// Queues a matched receive until a handle frees up.
    pub fn wait(&mut self, k: Key) {
        self.waitq.push_back(k);
    }

    pub fn pop_waiting(&mut self) -> Option<Key> {
        self.waitq.pop_front()
    }

    pub fn waiting(&self) -> Vec<Key> {
        self.waitq.iter().copied().collect()
    }

    pub fn stop_waiting(&mut self, k: Key) {
        self.waitq.retain(|&x| x != k);
    }
}

fn wire_handle(k: Key) -> u32 {
    (k.index() << HANDLE_GEN_BITS) | (k.generation() & HANDLE_GEN_MASK)
}

impl Engine {
    /// A matched rendezvous: pull `min(buffer, message)` bytes, or notify at once when
    /// there is nothing to pull.
    pub(crate) fn start_large_recv(
        &mut self,
        now: Time,
        k: Key,
        rdma_id: u8,
        rdma_seq: u8,
        rdma_offset: u16,
    ) {
        let Some(Request::Recv(r)) = self.requests.get_mut(k) else {
            return;
        };
        let local = r
            .active
            .as_ref()
            .is_some_and(|a| self.partners[a.partner].reach != Reach::Network);
        if local {
            self.start_local_recv(now, k, rdma_id, rdma_seq);
            return;
        }
        let Some(Request::Recv(r)) = self.requests.get_mut(k) else {
            return;
        };
        let (handle, base) = (r.handle, r.base);
        let Some(a) = r.active.as_mut() else { return };
        a.rndv = Some((rdma_id, rdma_seq, rdma_offset));
        let (pid, xfer) = (a.partner, a.xfer);
        if xfer == 0 {
            a.data_done = true;
            self.notify_sender(now, pid, rdma_id, rdma_seq, 0);
            self.try_finish_recv(now, k);
            return;
        }
        if self.pulls.is_full() {
            self.pulls.wait(k);
            return;
        }
        let reply_max = self.partners[pid].wire.pull_reply_max;
        let off0 = rdma_offset as u32 % reply_max;
        let frames_total = ((xfer as u64 + off0 as u64).div_ceil(reply_max as u64)) as u32;
        let pull = Pull {
            req: k,
            partner: pid,
            handle,
            base,
            rdma_id,
            rdma_seq,
            rdma_offset: rdma_offset as u32,
            xfer,
            off0,
            reply_max,
            frames_total,
            received: vec![0; frames_total.div_ceil(64) as usize],
            frames_received: 0,
            next_frame: 0,
            blocks: Vec::new(),
            last_progress: now,
            next_path: 0,
        };
        let pk = self.pulls.insert(pull);
        self.refill_blocks(now, pk);
    }

    /// Keeps the configured number of blocks requested ahead on each open path.
    fn refill_blocks(&mut self, now: Time, pk: Key) {
        let Some(pid) = self.pulls.get(pk).map(|p| p.partner) else {
            return;
        };
        if !self.partners[pid].stripes.is_empty() {
            self.probe_closed_paths(now, pid);
        }
        let per_block = self.partners[pid].wire.pull_block_replies;
        let cap = self.cfg.pull_blocks_max.max(1) as usize;
        let mut total = self.pulls.blocks_outstanding();
        loop {
            if total >= cap {
                return;
            }
            let Some(path) = self.path_with_room(pk) else {
                return;
            };
            let rto = self.partners[pid].path(path).rto(&self.cfg);
            let pull = self.pulls.get_mut(pk).expect("path found");
            total += 1;
            let start = pull.next_frame;
            let end = (start + per_block).min(pull.frames_total);
            pull.next_frame = end;
            pull.blocks.push(Block {
                start,
                end,
                missing: end - start,
                requested_at: now,
                rto,
                path,
            });
            self.hint_deadline(now + rto);
            self.request_frames(now, pk, start, end, true, path);
        }
    }

    /// The path the pull's next block goes to: the first open one, from the pull's
    /// round-robin position, with fewer of its blocks in flight than the path's
    /// window allows; `None` when all are full or nothing is left to request.
    fn path_with_room(&mut self, pk: Key) -> Option<u8> {
        let pull = self.pulls.get(pk)?;
        if pull.next_frame >= pull.frames_total {
            return None;
        }
        let pid = pull.partner;
        let configured = self.cfg.pull_blocks_outstanding;
        let paths = self.path_count(pid);
        let found = (0..paths)
            .map(|i| (pull.next_path + i) % paths)
            .find(|&path| {
                self.path_open(pid, path)
                    && pull.blocks_on(path)
                        < self.partners[pid].path(path).blocks_allowed(configured) as usize
            })?;
        self.pulls.get_mut(pk)?.next_path = (found + 1) % paths;
        Some(found)
    }

    /// Tops up every pull (in order) up to the per-pull and global block limits: a
    /// pull held back by the global limit starts when others complete blocks.
    fn refill_all(&mut self, now: Time) {
        let keys = self.pulls.keys();
        for k in keys {
            self.refill_blocks(now, k);
        }
    }

    /// Sends one PULL for frames `[start, end)` of the pull on `path` (`fresh`: never
    /// asked for).
    fn request_frames(&mut self, now: Time, pk: Key, start: u32, end: u32, fresh: bool, path: u8) {
        let Some(pull) = self.pulls.get(pk) else {
            return;
        };
        self.partners[pull.partner]
            .path_mut(path)
            .awaited
            .push_back(Run {
                pull: pk,
                start,
                end,
                asked_at: now,
                fresh,
            });
        let first_frame_offset = if start == 0 { pull.off0 } else { 0 };
        let block_length = pull.frame_end(end - 1) - pull.frame_start(start);
        let packet = PullPacket {
            dst_endpoint: 0,
            src_endpoint: self.me.endpoint,
            session: 0,
            total_length: pull.xfer,
            pulled_rdma_id: pull.rdma_id as u32,
            pulled_rdma_seqnum: pull.rdma_seq,
            pulled_rdma_offset: pull.rdma_offset,
            src_pull_handle: wire_handle(pk),
            src_magic: self.pull_magic(path),
            first_frame_offset,
            block_length,
            frame_index: start,
        };
        let pid = pull.partner;
        let p = &self.partners[pid];
        let packet = PullPacket {
            dst_endpoint: p.endpoint,
            session: p.session.unwrap_or(0),
            ..packet
        };
        let header = self.header_on(pid, path);
        let wire = p.wire;
        self.counters.send_pull_req += 1;
        if path != 0 {
            self.counters.send_stripe_pull += 1;
        }
        self.emit_on(
            path,
            &wire,
            header,
            Packet::Pull(packet),
            Payload::None,
            true,
        );
    }

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
        if let Some(Request::Recv(rr)) = self.requests.get_mut(a.req) {
            if let Some(act) = rr.active.as_mut() {
                act.copies_pending += 1;
            }
        }
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

    /// Ends a pull: notifies the sender (of the bytes pulled, 0 on error) and lets the
    /// receive complete once its copies are done.
    fn finish_pull(&mut self, now: Time, pk: Key, error: Option<StatusCode>) {
        let Some(pull) = self.pulls.remove(pk) else {
            return;
        };
        self.forget_awaited(pull.partner, pk);
        let xfer = if error.is_some() { 0 } else { pull.xfer };
        self.notify_sender(now, pull.partner, pull.rdma_id, pull.rdma_seq, xfer);
        match error {
            Some(code) => self.fail_recv(pull.req, code),
            None => {
                if let Some(Request::Recv(r)) = self.requests.get_mut(pull.req) {
                    if let Some(a) = r.active.as_mut() {
                        a.data_done = true;
                    }
                }
                self.try_finish_recv(now, pull.req);
            }
        }
        self.start_waiting_pulls(now);
    }

    /// After a pull ended: waiting receives start, and pulls held back by the global
    /// block limit get the freed blocks.
    fn start_waiting_pulls(&mut self, now: Time) {
        if self.cfg.pull_blocks_max != u32::MAX {
            self.refill_all(now);
        }
        while !self.pulls.is_full() {
            let Some(k) = self.pulls.pop_waiting() else {
                return;
            };
            let rndv = match self.requests.get(k) {
                Some(Request::Recv(r)) => r.active.as_ref().and_then(|a| a.rndv),
                _ => None,
            };
            if let Some((id, seq, off)) = rndv {
                self.start_large_recv(now, k, id, seq, off);
            }
        }
    }

    /// A rendezvous discarded by the unexpected handler: the sender completes with
    /// nothing transferred.
    pub(crate) fn notify_discarded(
        &mut self,
        now: Time,
        pid: PartnerId,
        rdma_id: u8,
        rdma_seq: u8,
    ) {
        self.notify_sender(now, pid, rdma_id, rdma_seq, 0);
    }

    fn notify_sender(&mut self, now: Time, pid: PartnerId, rdma_id: u8, rdma_seq: u8, xfer: u32) {
        self.notify_sender_flags(now, pid, rdma_id, rdma_seq, xfer, 0);
    }

    pub(crate) fn notify_sender_flags(
        &mut self,
        now: Time,
        pid: PartnerId,
        rdma_id: u8,
        rdma_seq: u8,
        xfer: u32,
        flags: u8,
    ) {
        if self.partners[pid].session.is_none() {
            return;
        }
        if self.partners[pid].reach != Reach::Network {
            self.notify_local(now, pid, rdma_id, rdma_seq, xfer, flags);
            return;
        }
        let n = Notify {
            flags,
            dst_endpoint: 0,
            src_endpoint: self.me.endpoint,
            session: 0,
            total_length: xfer,
            pulled_rdma_id: rdma_id,
            pulled_rdma_seqnum: rdma_seq,
            lib_seqnum: 0,
            lib_piggyack: 0,
        };
        self.send_notify(now, pid, n);
    }

    /// Frame `k` of pull `pk` arrived from partner `pid`: every frame it asked for
    /// before that one is lost (replies come in request order). Returns the runs of
    /// those still missing, and a round-trip sample when `k` is the first reply to a
    /// request for frames never asked for before.
    fn passed_over(
        &mut self,
        now: Time,
        pid: PartnerId,
        path: u8,
        pk: Key,
        k: u32,
    ) -> (Vec<(Key, u32, u32)>, Option<Time>) {
        let awaited = &mut self.partners[pid].path_mut(path).awaited;
        let Some(at) = awaited
            .iter()
            .position(|r| r.pull == pk && r.start <= k && k < r.end)
        else {
            return (Vec::new(), None);
        };
        let mut lost = Vec::new();
        let mut runs = Vec::new();
        // Requests sent shortly before this one may just have been overtaken (a link
        // may reorder a little): they are lost only when asked a quarter round trip
        // earlier, as in TCP's RACK.
        let asked = awaited[at].asked_at;
        let reorder_window = self.partners[pid].path(path).rtt.srtt / 4;
        let awaited = &mut self.partners[pid].path_mut(path).awaited;
        let mut kept = 0;
        for _ in 0..at {
            let r = awaited.remove(kept).expect("counted");
            if r.asked_at + reorder_window > asked {
                awaited.insert(kept, r);
                kept += 1;
                continue;
            }
            if let Some(pull) = self.pulls.get(r.pull) {
                runs.clear();
                pull.missing_runs(r.start, r.end, &mut runs);
                lost.extend(runs.iter().map(|&(s, e)| (r.pull, s, e)));
            }
        }
        let at = kept;
        let front = &mut awaited[at];
        let run = *front;
        let sample = (run.fresh && run.start == k && at == 0).then(|| now - run.asked_at);
        if k + 1 >= run.end {
            awaited.remove(at);
        } else {
            front.start = k + 1;
            front.fresh = false;
        }
        if let Some(pull) = self.pulls.get(pk) {
            runs.clear();
            pull.missing_runs(run.start, k, &mut runs);
            lost.extend(runs.iter().map(|&(s, e)| (pk, s, e)));
        }
        (lost, sample)
    }

    /// A pull ended: its replies are no longer awaited.
    fn forget_awaited(&mut self, pid: PartnerId, pk: Key) {
        let p = &mut self.partners[pid];
        p.pull.awaited.retain(|r| r.pull != pk);
        for s in &mut p.stripes {
            s.pull.awaited.retain(|r| r.pull != pk);
        }
    }

    /// Frames passed over by a later reply: request them again now. A long run of them
    /// is a burst (a full queue somewhere): fewer blocks go in flight for a while.
    fn rerequest_lost(&mut self, now: Time, pid: PartnerId, path: u8, lost: Vec<(Key, u32, u32)>) {
        let rto = self.partners[pid].path(path).rto(&self.cfg);
        let burst = lost
            .iter()
            .any(|&(_, s, e)| e - s >= self.cfg.pull_burst_frames.max(1));
        if burst {
            self.cut_pull_window(now, pid, path);
        }
        for (pk, s, e) in lost {
            let Some(pull) = self.pulls.get_mut(pk) else {
                continue;
            };
            // Asked again on the path its block is on now (it may have moved).
            let mut on = path;
            if let Some(b) = pull.blocks.iter_mut().find(|b| b.start <= s && e <= b.end) {
                b.requested_at = now;
                b.rto = rto;
                on = b.path;
            }
            self.counters.pull_rerequests += 1;
            self.counters.pull_fast_rerequests += 1;
            self.counters.pull_frames_rerequested += (e - s) as u64;
            self.request_frames(now, pk, s, e, false, on);
        }
        self.hint_deadline(now + rto);
    }

    fn cut_pull_window(&mut self, now: Time, pid: PartnerId, path: u8) {
        let configured = self.cfg.pull_blocks_outstanding;
        let p = self.partners[pid].path_mut(path);
        let rtt = p.rtt.srtt;
        if p.cut_window(now, configured, rtt) {
            self.counters.pull_window_cuts += 1;
        }
    }

    /// Re-requests missing frames of blocks without progress for a timeout (the tail
    /// of the traffic, where no later reply reveals a loss); aborts stalled pulls.
    pub(crate) fn pull_timeouts(&mut self, now: Time) {
        let abort_after = self.cfg.pull_timeout_total();
        let keys = self.pulls.keys();
        for pk in keys {
            let Some(pull) = self.pulls.get(pk) else {
                continue;
            };
            if now.saturating_sub(pull.last_progress) >= abort_after {
                self.counters.pull_timeout_abort += 1;
                self.finish_pull(now, pk, Some(StatusCode::EndpointUnreachable));
                continue;
            }
            let pid = pull.partner;
            let partner = &self.partners[pid];
            let overdue = |b: &Block| b.requested_at.max(partner.path(b.path).heard) + b.rto <= now;
            let mut timed_out: Vec<u8> = pull
                .blocks
                .iter()
                .filter(|b| overdue(b))
                .map(|b| b.path)
                .collect();
            if timed_out.is_empty() {
                continue;
            }
            timed_out.sort_unstable();
            timed_out.dedup();
            for &path in &timed_out {
                self.path_timed_out(now, pid, path);
            }
            let partner = &self.partners[pid];
            let overdue = |b: &Block| b.requested_at.max(partner.path(b.path).heard) + b.rto <= now;
            let pull = self.pulls.get_mut(pk).expect("present");
            let mut expired = Vec::new();
            let blocks_on =
                |blocks: &[Block], path: u8| blocks.iter().filter(|b| b.path == path).count();
            for i in 0..pull.blocks.len() {
                if !overdue(&pull.blocks[i]) {
                    continue;
                }
                let old = pull.blocks[i].path;
                if old != 0
                    && partner
                        .stripes
                        .get(old as usize - 1)
                        .is_none_or(|s| s.closed)
                {
                    // Its path was closed: the open path with the fewest of its blocks.
                    let open = (0..=partner.stripes.len() as u8)
                        .filter(|&p| p == 0 || !partner.stripes[p as usize - 1].closed);
                    let to = open
                        .min_by_key(|&p| blocks_on(&pull.blocks, p))
                        .unwrap_or(0);
                    pull.blocks[i].path = to;
                }
                let b = &mut pull.blocks[i];
                b.requested_at = now;
                b.rto = partner.path(b.path).rto(&self.cfg);
                expired.push((b.start, b.end, b.path));
            }
            let mut runs = Vec::new();
            let mut missing = Vec::new();
            for &(s, e, path) in &expired {
                missing.clear();
                pull.missing_runs(s, e, &mut missing);
                runs.extend(missing.iter().map(|&(s, e)| (s, e, path)));
            }
            // What was awaited of these blocks is asked for again below.
            let p = &mut self.partners[pid];
            for path in 0..=p.stripes.len() as u8 {
                p.path_mut(path).awaited.retain(|r| {
                    r.pull != pk || !expired.iter().any(|&(s, e, _)| s <= r.start && r.end <= e)
                });
            }
            self.counters.pull_block_timeouts += 1;
            for &(_, _, path) in &expired {
                let rto = self.partners[pid].path(path).rto(&self.cfg);
                self.hint_deadline(now + rto);
            }
            for (s, e, path) in runs {
                self.counters.pull_rerequests += 1;
                self.counters.pull_frames_rerequested += (e - s) as u64;
                self.request_frames(now, pk, s, e, false, path);
            }
        }
    }

    /// Blocks on `path` timed out: its timeout backs off and its window shrinks; a
    /// path other than 0 that times out [`crate::stripe::STRIPE_TIMEOUTS_MAX`] times in
    /// a row without a reply is closed (its blocks move when they time out next).
    fn path_timed_out(&mut self, now: Time, pid: PartnerId, path: u8) {
        self.partners[pid].path_mut(path).rtt.back_off();
        self.cut_pull_window(now, pid, path);
        let Some(s) = self.partners[pid]
            .stripes
            .get_mut((path as usize).wrapping_sub(1))
        else {
            return;
        };
        s.timeouts += 1;
        if s.timeouts >= crate::stripe::STRIPE_TIMEOUTS_MAX && !s.closed {
            s.closed = true;
            s.closed_at = now;
            s.pull.awaited.clear();
            self.counters.stripe_paths_closed += 1;
        }
    }

    pub(crate) fn abort_pulls_from(&mut self, now: Time, pid: PartnerId, code: StatusCode) {
        let keys = self.pulls.keys();
        for pk in keys {
            if self.pulls.get(pk).is_some_and(|p| p.partner == pid) {
                if let Some(pull) = self.pulls.remove(pk) {
                    self.forget_awaited(pid, pk);
                    self.fail_recv(pull.req, code);
                }
            }
        }
        let waiting = self.pulls.waiting();
        for k in waiting {
            let from = matches!(self.requests.get(k), Some(Request::Recv(r)) if r.active.as_ref().is_some_and(|a| a.partner == pid));
            if from {
                self.pulls.stop_waiting(k);
                self.fail_recv(k, code);
            }
        }
        self.start_waiting_pulls(now);
    }

    pub(crate) fn on_nack_mcp(&mut self, now: Time, n: NackMcp) {
        self.counters.recv_nack_mcp += 1;
        if n.src_magic ^ PULL_MAGIC_XOR != self.me.endpoint as u32 {
            self.counters.drop_pull_reply_bad_magic += 1;
            return;
        }
        let Some(pk) = self.pulls.by_wire_handle(n.src_pull_handle) else {
            self.counters.drop_nack_mcp_bad_handle += 1;
            return;
        };
        let code = nack_status(n.nack_type);
        let Some(pull) = self.pulls.remove(pk) else {
            return;
        };
        self.forget_awaited(pull.partner, pk);
        self.fail_recv(pull.req, code);
        self.start_waiting_pulls(now);
    }

    fn nack_mcp(&mut self, src: NicId, p: &PullPacket, kind: NackType) {
        let nack = NackMcp {
            src_endpoint: p.src_endpoint,
            nack_type: kind as u8,
            src_pull_handle: p.src_pull_handle,
            src_magic: p.src_magic,
        };
        let header = Header {
            dst_mac: mac_from_nic_id(src),
            src_mac: self.mac,
            ethertype: self.cfg.wire.ethertype,
            dst_src_peer_index: omx_wire::PEER_INDEX_NONE,
        };
        let wire = self.wire_to(src, p.src_endpoint);
        self.counters.send_nack_mcp += 1;
        self.emit(&wire, header, Packet::NackMcp(nack), Payload::None, true);
    }

    /// Data owner side: answer a block request with pull replies read from the region.
    pub(crate) fn on_pull(&mut self, now: Time, src: NicId, p: PullPacket) {
        self.counters.recv_pull_req += 1;
        if !self.for_me(p.dst_endpoint) {
            return;
        }
        if p.session != self.me.session {
            self.counters.drop_bad_session += 1;
            self.nack_mcp(src, &p, NackType::BadSession);
            return;
        }
        let Some(pid) = self.known_partner(now, src, p.src_endpoint) else {
            return;
        };
        self.serve_pull(pid, p, 0);
    }

    /// Answers a checked PULL from partner `pid` that came on link `path`, on that
    /// link (a bad request on another link than 0 is dropped without a nack).
    pub(crate) fn serve_pull(&mut self, pid: PartnerId, p: PullPacket, path: u8) {
        let src = self.partners[pid].nic_id;
        let region = self.regions.get(p.pulled_rdma_id as usize);
        // A region is readable only by the partner its rendezvous was sent to.
        let region = region.filter(
            |r| matches!(self.requests.get(r.req), Some(Request::Send(s)) if s.partner == pid),
        );
        let Some(region) = region else {
            self.counters.drop_pull_bad_region += 1;
            if path == 0 {
                self.nack_mcp(src, &p, NackType::BadRdmaWin);
            }
            return;
        };
        let (handle, region_len, base) = (region.handle, region.len as u64, region.base);
        let wire = self.partners[pid].wire;
        let r = wire.pull_reply_max as u64;
        let off0 = p.pulled_rdma_offset as u64 % r;
        let first = (p.frame_index as u64 * r + p.first_frame_offset as u64).checked_sub(off0);
        let in_range = first.filter(|f| {
            p.first_frame_offset as u64 + p.block_length as u64 <= wire.pull_block_max() as u64
                && f + p.block_length as u64 + p.pulled_rdma_offset as u64 <= region_len
                && p.first_frame_offset as u64 + p.block_length as u64 > 0
                && f + p.block_length as u64 <= u32::MAX as u64
        });
        let Some(mut msg_offset) = in_range else {
            self.counters.drop_pull_bad_offset_length += 1;
            return;
        };
        let header = Header {
            dst_src_peer_index: omx_wire::PEER_INDEX_NONE,
            ..self.header_on(pid, path)
        };
        let mut remaining = p.block_length as u64;
        let mut frame_len = r - p.first_frame_offset as u64;
        let mut i = 0u32;
        while remaining > 0 {
            let len = frame_len.min(remaining);
            remaining -= len;
            let reply = PullReply {
                frame_seqnum: (p.frame_index.wrapping_add(i)) as u8,
                frame_length: len as u16,
                msg_offset: msg_offset as u32,
                dst_pull_handle: p.src_pull_handle,
                dst_magic: p.src_magic,
            };
            let payload = Payload::User {
                handle,
                offset: base + msg_offset + p.pulled_rdma_offset as u64,
                len: len as u32,
            };
            self.counters.send_pull_reply += 1;
            self.emit_on(
                path,
                &wire,
                header,
                Packet::PullReply(reply),
                payload,
                remaining == 0,
            );
            msg_offset += len;
            frame_len = r;
            i += 1;
        }
    }
}

/// A pull reply accepted by [`Engine::accept_pull_reply`]: where its payload goes and
/// what the pull does next.
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

struct AcceptedReply {
    pull: Key,
    req: Key,
    dst: MemHandle,
    dst_offset: u64,
    block_done: bool,
    all_done: bool,
}
