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

mod recovery;
mod reply;
mod serve;

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
}
