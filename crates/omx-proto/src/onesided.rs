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
//! A remote access must lie entirely inside one region exposed with the right
//! permission; anything else fails with `BadRdmaWin` and touches nothing.

use crate::engine::Engine;
use crate::requests::{RecvReq, Request};
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

    /// The exposed region holding `[addr, addr + len)` with permission `need`, and the
    /// offset of `addr` in it.
    fn range(&self, addr: u64, len: u64, need: u32) -> Option<(MemHandle, u64)> {
        let end = addr.checked_add(len)?;
        self.exposed
            .iter()
            .find(|e| e.flags & need != 0 && addr >= e.addr && end <= e.addr + e.len)
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
        self.one_sided_to(partner)?;
        let k = self.post_flagged(
            now,
            partner,
            remote_addr,
            SendData::Region { handle, len },
            context,
            PUT_REQ,
            0,
            false,
        )?;
        Ok(ReqId(k.0))
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
