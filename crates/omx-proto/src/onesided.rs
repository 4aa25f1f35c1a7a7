//! One-sided operations (MX `mx_iget`/`mx_iput`, native mode only), built on the
//! ordinary reliable message stream and the pull machinery. Message headers carry
//! flags in body byte 3 (`src_generation`, unused by the original):
//! - get: the requester sends a tiny GET_REQ (get id, remote address, length); the
//!   owner checks the range against its exposed regions and answers with a rendezvous
//!   flagged GET_REPLY (match info = get id) that the requester pulls straight into its
//!   buffer, or with a tiny GET_DENIED;
//! - put: the requester sends a rendezvous flagged PUT_REQ whose match info is the
//!   remote address; the owner pulls it into the exposed region, or answers with a
//!   notify flagged DENIED (no byte touched).
//!
//! - atomic: the requester sends an eager ATOMIC_REQ (atomic id, remote address,
//!   operation, type, fetch flag, element count, operand and compare vectors); the
//!   owner checks it and the range, hands it to its caller as an [`AtomicJob`] and,
//!   once applied ([`Engine::atomic_done`]), answers with an eager ATOMIC_REPLY
//!   carrying the old values when fetched, or with a GET_DENIED. The reliable stream
//!   delivers each request once, so each is applied once.
//!
//! A put may carry a notice ([`Engine::iput_notify`]): once the owner's notify says the
//! data is in place, the requester's engine sends the owner that ordinary message itself
//! (the libfabric provider's remote CQ data), so it needs no later call of the
//! requester's application; a refused put sends nothing.
//!
//! A remote access must lie entirely inside one region exposed with the right
//! permission; anything else fails with `BadRdmaWin` and touches nothing.

use crate::atomic::{atomic_valid, AtomicJob, AtomicKind, AtomicOp, AtomicType};
use crate::engine::Engine;
use crate::requests::{RecvReq, Request, SendReq};
use crate::slab::Key;
use crate::types::*;
use bytes::Bytes;
use omx_wire::{Extensions, Msg, Rndv};
use rustc_hash::FxHashMap as HashMap;

pub const GET_REQ: u8 = 0x01;
pub const GET_REPLY: u8 = 0x02;
pub const GET_DENIED: u8 = 0x04;
pub const PUT_REQ: u8 = 0x08;
/// On a notify: the put was refused.
pub const DENIED: u8 = 0x10;
pub const ATOMIC_REQ: u8 = 0x20;
pub const ATOMIC_REPLY: u8 = 0x40;

/// Largest payload of a put's notice, in bytes (one eager message).
pub const PUT_NOTICE_MAX: usize = 64;

/// The message a put sends its owner once the data is in place: an ordinary message
/// with this match info and payload, matched by the owner's receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutNotice {
    pub match_info: u64,
    pub payload: Bytes,
}

pub const EXPOSE_READ: u32 = 1;
pub const EXPOSE_WRITE: u32 = 2;

/// A buffer the application lets remote endpoints read and/or write.
#[derive(Clone, Copy, Debug)]
struct Exposed {
    pub id: u64,
    pub addr: u64,
    pub len: u64,
    pub handle: MemHandle,
    pub flags: u32,
}

const GET_REQ_LEN: usize = 16;
/// id, address, operation, type, fetch flag, pad, element count.
const ATOMIC_REQ_LEN: usize = 20;
const _: () = assert!(ATOMIC_REQ_LEN + 2 * crate::atomic::ATOMIC_MAX_BYTES <= omx_wire::SMALL_MAX);

/// The endpoint's one-sided state: its exposed regions (the windows remote endpoints
/// may access) and its gets waiting for their reply, by wire id.
pub(crate) struct OneSided {
    exposed: Vec<Exposed>,
    gets: HashMap<u32, Key>,
    next_get: u32,
}

impl Default for OneSided {
    fn default() -> Self {
        OneSided {
            exposed: Vec::new(),
            gets: HashMap::default(),
            next_get: 1,
        }
    }
}

impl OneSided {
    fn expose(&mut self, region: Exposed) -> Result<(), EngineError> {
        if self.exposed.iter().any(|e| e.id == region.id) {
            return Err(EngineError::RegionExposed);
        }
        self.exposed.push(region);
        Ok(())
    }

    fn unexpose(&mut self, id: u64) -> Result<MemHandle, EngineError> {
        let i = self
            .exposed
            .iter()
            .position(|e| e.id == id)
            .ok_or(EngineError::BadRequest)?;
        Ok(self.exposed.remove(i).handle)
    }

    /// The exposed region holding `[addr, addr + len)` with permissions `need`, and the
    /// offset of `addr` in it.
    fn range(&self, addr: u64, len: u64, need: u32) -> Option<(MemHandle, u64)> {
        let end = addr.checked_add(len)?;
        self.exposed
            .iter()
            .find(|e| e.flags & need == need && addr >= e.addr && end <= e.addr + e.len)
            .map(|e| (e.handle, addr - e.addr))
    }

    /// A wire id for a new get (never 0).
    fn next_get_id(&mut self) -> u32 {
        let id = self.next_get;
        self.next_get = self.next_get.wrapping_add(1).max(1);
        id
    }

    fn await_get(&mut self, id: u32, k: Key) {
        self.gets.insert(id, k);
    }

    /// The receive waiting for the reply to get `id`, no longer waiting.
    fn take_get(&mut self, id: u32) -> Option<Key> {
        self.gets.remove(&id)
    }
}

impl Engine {
    /// Exposes `len` bytes at the application's address `addr` (held by `handle`) to
    /// one-sided access, under the application's `id`.
    pub fn expose(
        &mut self,
        id: u64,
        addr: u64,
        len: u64,
        handle: MemHandle,
        flags: u32,
    ) -> Result<(), EngineError> {
        if flags & !(EXPOSE_READ | EXPOSE_WRITE) != 0
            || flags == 0
            || addr.checked_add(len).is_none()
        {
            return Err(EngineError::BadRegion);
        }
        self.one_sided.expose(Exposed {
            id,
            addr,
            len,
            handle,
            flags,
        })
    }

    /// Withdraws a region; returns its memory handle. Accesses already granted (pulls
    /// in progress) finish; no new one is accepted.
    pub fn unexpose(&mut self, id: u64) -> Result<MemHandle, EngineError> {
        self.one_sided.unexpose(id)
    }

    /// One-sided requests travel as flagged messages that a peer without the
    /// extension (Open-MX, MX, an omx that refused it) would take for ordinary ones.
    fn one_sided_to(&self, partner: PartnerId) -> Result<(), EngineError> {
        let p = self
            .partners
            .get(partner)
            .ok_or(EngineError::UnknownPartner)?;
        if p.wire.uses(Extensions::ONE_SIDED) {
            Ok(())
        } else {
            Err(EngineError::NeedsNativeWire)
        }
    }

    /// Reads `len` bytes at the owner's address `remote_addr` into `handle`.
    pub fn iget(
        &mut self,
        now: Time,
        partner: PartnerId,
        remote_addr: u64,
        handle: MemHandle,
        len: u32,
        context: u64,
    ) -> Result<ReqId, EngineError> {
        self.one_sided_to(partner)?;
        let id = self.one_sided.next_get_id();
        let k = self.requests.insert(Request::Recv(RecvReq::new(
            id as u64,
            u64::MAX,
            handle,
            len,
            context,
        )));
        self.one_sided.await_get(id, k);
        let mut req = [0u8; GET_REQ_LEN];
        req[..4].copy_from_slice(&id.to_be_bytes());
        req[4..12].copy_from_slice(&remote_addr.to_be_bytes());
        req[12..16].copy_from_slice(&len.to_be_bytes());
        self.internal_send(
            now,
            partner,
            GET_REQ,
            id as u64,
            SendData::Eager(Bytes::copy_from_slice(&req)),
            0,
        );
        Ok(ReqId(k.0))
    }

    /// Writes `len` bytes of `handle` at the owner's address `remote_addr`. Completes
    /// like a rendezvous send (status `BadRdmaWin` if the owner refused).
    pub fn iput(
        &mut self,
        now: Time,
        partner: PartnerId,
        remote_addr: u64,
        handle: MemHandle,
        len: u32,
        context: u64,
    ) -> Result<ReqId, EngineError> {
        self.iput_notify(now, partner, remote_addr, handle, len, context, None)
    }

    /// [`Engine::iput`] that, once the data is in place at the owner, sends the owner
    /// `notice` (at most [`PUT_NOTICE_MAX`] bytes) as an ordinary message from this
    /// endpoint. The put completes as usual; the notice has no completion here.
    #[allow(clippy::too_many_arguments)]
    pub fn iput_notify(
        &mut self,
        now: Time,
        partner: PartnerId,
        remote_addr: u64,
        handle: MemHandle,
        len: u32,
        context: u64,
        notice: Option<PutNotice>,
    ) -> Result<ReqId, EngineError> {
        if notice
            .as_ref()
            .is_some_and(|n| n.payload.len() > PUT_NOTICE_MAX)
        {
            return Err(EngineError::BadRequest);
        }
        self.one_sided_to(partner)?;
        let req = SendReq {
            flags: PUT_REQ,
            notice,
            ..SendReq::new(
                partner,
                remote_addr,
                SendData::Region { handle, len },
                context,
                self.cfg.resends_max,
            )
        };
        let k = self.post_send_req(now, req)?;
        Ok(ReqId(k.0))
    }

    /// The notice of put `k`, taken out if the put succeeded (`code`).
    pub(crate) fn take_put_notice(&mut self, k: Key, code: StatusCode) -> Option<PutNotice> {
        match self.requests.get_mut(k) {
            Some(Request::Send(s)) if code == StatusCode::Success => s.notice.take(),
            _ => None,
        }
    }

    /// A put with a notice landed at `pid`: send the notice (no completion event).
    pub(crate) fn send_put_notice(&mut self, now: Time, pid: PartnerId, notice: PutNotice) {
        let data = SendData::Eager(notice.payload);
        self.internal_send(now, pid, 0, notice.match_info, data, 0);
    }

    /// Applies `op` on `count` elements of `ty` at the owner's address `remote_addr`:
    /// `operands` holds the operand vector (none for reads), then for compare
    /// operations the compare vector. The old values land in `result` (`count`
    /// elements) for fetching kinds. Completes like a receive of the old values
    /// (status `BadRdmaWin` if the owner refused).
    #[allow(clippy::too_many_arguments)]
    pub fn iatomic(
        &mut self,
        now: Time,
        partner: PartnerId,
        remote_addr: u64,
        (op, ty, kind): (AtomicOp, AtomicType, AtomicKind),
        count: u32,
        operands: &[u8],
        result: MemHandle,
        context: u64,
    ) -> Result<ReqId, EngineError> {
        let len = count as usize * ty.size();
        let vectors = if op.reads_only() {
            0
        } else if op.compares() {
            2
        } else {
            1
        };
        if count == 0
            || count as usize > atomic_valid(op, ty, kind)
            || operands.len() != len * vectors
        {
            return Err(EngineError::BadAtomic);
        }
        self.one_sided_to(partner)?;
        let id = self.one_sided.next_get_id();
        let fetch = kind != AtomicKind::Plain;
        let reply_len = if fetch { len as u32 } else { 0 };
        let k = self.requests.insert(Request::Recv(RecvReq::new(
            id as u64,
            u64::MAX,
            result,
            reply_len,
            context,
        )));
        self.one_sided.await_get(id, k);
        let mut req = Vec::with_capacity(ATOMIC_REQ_LEN + operands.len());
        req.extend_from_slice(&id.to_be_bytes());
        req.extend_from_slice(&remote_addr.to_be_bytes());
        req.extend_from_slice(&[op.code(), ty.code(), fetch as u8, 0]);
        req.extend_from_slice(&count.to_be_bytes());
        req.extend_from_slice(operands);
        let data = SendData::Eager(Bytes::from(req));
        self.internal_send(now, partner, ATOMIC_REQ, id as u64, data, 0);
        Ok(ReqId(k.0))
    }

    /// The caller applied atomic `job`: answer its requester, with `fetched` (the old
    /// values) when it asked for them.
    pub fn atomic_done(&mut self, now: Time, job: &AtomicJob, fetched: Bytes) {
        let data = if job.fetch { fetched } else { Bytes::new() };
        let data = SendData::Eager(data);
        self.internal_send(now, job.partner, ATOMIC_REPLY, job.id as u64, data, 0);
    }

    /// The owner's checks of an atomic request: a job to apply, or `None` to refuse
    /// it (malformed, unknown operation, or a range outside the exposed memory).
    fn atomic_job(&mut self, pid: PartnerId, payload: &Bytes) -> Option<AtomicJob> {
        let head = payload.get(..ATOMIC_REQ_LEN)?;
        let id = u32::from_be_bytes(head[..4].try_into().expect("4 bytes"));
        let addr = u64::from_be_bytes(head[4..12].try_into().expect("8 bytes"));
        let op = AtomicOp::from_code(head[12])?;
        let ty = AtomicType::from_code(head[13])?;
        let fetch = head[14] != 0;
        let count = u32::from_be_bytes(head[16..20].try_into().expect("4 bytes"));
        let kind = match (fetch, op.compares()) {
            (_, true) => AtomicKind::Compare,
            (true, false) => AtomicKind::Fetch,
            (false, false) => AtomicKind::Plain,
        };
        let len = count as usize * ty.size();
        let vectors = if op.reads_only() {
            0
        } else if op.compares() {
            2
        } else {
            1
        };
        let operands = payload.slice(ATOMIC_REQ_LEN..);
        if count == 0
            || count as usize > atomic_valid(op, ty, kind)
            || operands.len() != len * vectors
        {
            return None;
        }
        let need = if op.reads_only() {
            EXPOSE_READ
        } else if fetch {
            EXPOSE_READ | EXPOSE_WRITE
        } else {
            EXPOSE_WRITE
        };
        let (handle, offset) = self.one_sided.range(addr, len as u64, need)?;
        Some(AtomicJob {
            partner: pid,
            id,
            handle,
            offset,
            len: len as u32,
            op,
            ty,
            operands,
            fetch,
        })
    }

    fn internal_send(
        &mut self,
        now: Time,
        pid: PartnerId,
        flags: u8,
        match_info: u64,
        data: SendData,
        base: u64,
    ) {
        let _ = self.post_flagged(now, pid, match_info, data, 0, flags, base, true);
    }

    /// The owner's side of a get request, or the requester's side of a refusal.
    pub(crate) fn take_one_sided_eager(
        &mut self,
        now: Time,
        pid: PartnerId,
        m: Msg,
        payload: Bytes,
    ) -> bool {
        if m.flags & GET_REQ != 0 && payload.len() >= GET_REQ_LEN {
            let id = u32::from_be_bytes(payload[..4].try_into().expect("4 bytes"));
            let addr = u64::from_be_bytes(payload[4..12].try_into().expect("8 bytes"));
            let len = u32::from_be_bytes(payload[12..16].try_into().expect("4 bytes"));
            match self.one_sided.range(addr, len as u64, EXPOSE_READ) {
                Some((handle, base)) => {
                    let data = SendData::Region { handle, len };
                    self.internal_send(now, pid, GET_REPLY, id as u64, data, base);
                }
                None => {
                    self.counters.drop_pull_bad_region += 1;
                    self.internal_send(
                        now,
                        pid,
                        GET_DENIED,
                        id as u64,
                        SendData::Eager(Bytes::new()),
                        0,
                    );
                }
            }
        } else if m.flags & ATOMIC_REQ != 0 {
            match self.atomic_job(pid, &payload) {
                Some(job) => self.outputs.atomic(job),
                None => {
                    self.counters.drop_pull_bad_region += 1;
                    let id = payload
                        .get(..4)
                        .map_or(0, |b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
                    let data = SendData::Eager(Bytes::new());
                    self.internal_send(now, pid, GET_DENIED, id as u64, data, 0);
                }
            }
        } else if m.flags & ATOMIC_REPLY != 0 {
            if let Some(k) = self.one_sided.take_get(m.match_info as u32) {
                self.activate(k, pid, None, payload.len() as u32);
                self.deliver_chunk(k, 0, payload);
                self.try_finish_recv(now, k);
            }
        } else if m.flags & GET_DENIED != 0 {
            if let Some(k) = self.one_sided.take_get(m.match_info as u32) {
                self.activate(k, pid, None, 0);
                self.fail_recv(k, StatusCode::BadRdmaWin);
            }
        }
        true
    }

    /// The requester's side of a get reply, or the owner's side of a put.
    pub(crate) fn take_one_sided_rndv(&mut self, now: Time, pid: PartnerId, r: Rndv) -> bool {
        if r.msg.flags & GET_REPLY != 0 {
            match self.one_sided.take_get(r.msg.match_info as u32) {
                Some(k) => {
                    self.activate(k, pid, None, r.msg_length);
                    self.start_large_recv(
                        now,
                        k,
                        r.pulled_rdma_id,
                        r.pulled_rdma_seqnum,
                        r.pulled_rdma_offset,
                    );
                }
                // Nobody waits (cancelled or unknown): let the owner release its region.
                None => self.notify_sender_flags(
                    now,
                    pid,
                    r.pulled_rdma_id,
                    r.pulled_rdma_seqnum,
                    0,
                    DENIED,
                ),
            }
        } else if r.msg.flags & PUT_REQ != 0 {
            let addr = r.msg.match_info;
            match self
                .one_sided
                .range(addr, r.msg_length as u64, EXPOSE_WRITE)
            {
                Some((handle, base)) => {
                    let k = self.requests.insert(Request::Recv(RecvReq {
                        base,
                        internal: true,
                        ..RecvReq::new(addr, u64::MAX, handle, r.msg_length, 0)
                    }));
                    self.activate(k, pid, None, r.msg_length);
                    self.start_large_recv(
                        now,
                        k,
                        r.pulled_rdma_id,
                        r.pulled_rdma_seqnum,
                        r.pulled_rdma_offset,
                    );
                }
                None => {
                    self.counters.drop_pull_bad_region += 1;
                    self.notify_sender_flags(
                        now,
                        pid,
                        r.pulled_rdma_id,
                        r.pulled_rdma_seqnum,
                        0,
                        DENIED,
                    );
                }
            }
        }
        true
    }
}
