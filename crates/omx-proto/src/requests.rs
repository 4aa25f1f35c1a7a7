//! The requests an application posts (sends, receives, connects), their constructors
//! and what they lend to the engine.

use crate::seqnum::Seq;
use crate::types::*;

pub(crate) enum Request {
    Send(SendReq),
    Recv(RecvReq),
    Connect(ConnectReq),
}

pub(crate) struct SendReq {
    pub partner: PartnerId,
    pub match_info: u64,
    pub data: SendData,
    pub context: u64,
    pub resends_max: u32,
    /// Region id and use counter once a rendezvous was announced.
    pub large: Option<(u8, u8)>,
    /// The announcement itself (with its sequence number), re-sent as a liveness probe
    /// while the send waits for its notify.
    pub rndv: Option<(Seq, omx_wire::Rndv)>,
    /// One-sided flags carried in the message header (native mode).
    pub flags: u8,
    /// Byte offset of the data in the region's memory (one-sided replies).
    pub base: u64,
    /// Engine-internal (a one-sided reply): completes without a completion event.
    pub internal: bool,
    /// A put's notice: the message sent to the owner once the data is in place.
    pub notice: Option<crate::onesided::PutNotice>,
}

pub(crate) struct RecvReq {
    pub match_info: u64,
    pub mask: u64,
    pub handle: MemHandle,
    pub len: u32,
    pub context: u64,
    pub active: Option<ActiveRecv>,
    /// Byte offset added to every copy into the buffer (one-sided puts).
    pub base: u64,
    /// Engine-internal (the target of a remote put): no completion event.
    pub internal: bool,
}

/// A receive that has been matched to a message.
pub(crate) struct ActiveRecv {
    pub partner: PartnerId,
    pub match_info: u64,
    pub msg_length: u32,
    pub xfer: u32,
    /// Message bytes seen so far (including bytes beyond a short buffer).
    pub received: u32,
    pub data_done: bool,
    pub copies_pending: u32,
    pub code: StatusCode,
    /// Rendezvous announcement (region id, use counter, offset) of a large message.
    pub rndv: Option<(u8, u8, u16)>,
}

pub(crate) struct ConnectReq {
    pub partner: PartnerId,
    pub key: u32,
    pub context: u64,
    pub connect_seqnum: u8,
    pub last_send: Time,
    pub resends: u32,
    pub resends_max: u32,
}

impl SendReq {
    /// An ordinary send (no one-sided flags, reported on completion).
    pub fn new(
        partner: PartnerId,
        match_info: u64,
        data: SendData,
        context: u64,
        resends_max: u32,
    ) -> Self {
        SendReq {
            partner,
            match_info,
            data,
            context,
            resends_max,
            large: None,
            rndv: None,
            flags: 0,
            base: 0,
            internal: false,
            notice: None,
        }
    }
}

impl RecvReq {
    /// A receive into `len` bytes of `handle`, not matched yet.
    pub fn new(match_info: u64, mask: u64, handle: MemHandle, len: u32, context: u64) -> Self {
        RecvReq {
            match_info,
            mask,
            handle,
            len,
            context,
            active: None,
            base: 0,
            internal: false,
        }
    }
}

impl ActiveRecv {
    /// A receive of `buffer_len` bytes matched to a message of `msg_length` bytes: it
    /// keeps what fits (truncated otherwise).
    pub fn new(partner: PartnerId, match_info: u64, msg_length: u32, buffer_len: u32) -> Self {
        let xfer = buffer_len.min(msg_length);
        ActiveRecv {
            partner,
            match_info,
            msg_length,
            xfer,
            received: 0,
            data_done: msg_length == 0,
            copies_pending: 0,
            code: if xfer < msg_length {
                StatusCode::Truncated
            } else {
                StatusCode::Success
            },
            rndv: None,
        }
    }
}

impl ConnectReq {
    /// A connect request first sent at `now`.
    pub fn new(
        partner: PartnerId,
        key: u32,
        context: u64,
        connect_seqnum: u8,
        now: Time,
        resends_max: u32,
    ) -> Self {
        ConnectReq {
            partner,
            key,
            context,
            connect_seqnum,
            last_send: now,
            resends: 0,
            resends_max,
        }
    }
}

impl Request {
    /// User memory the request lent to the engine (receive buffers, rendezvous send
    /// regions).
    pub fn lent_mem(&self) -> Option<MemHandle> {
        match self {
            Request::Recv(r) => Some(r.handle),
            Request::Send(SendReq {
                data: SendData::Region { handle, .. },
                ..
            }) => Some(*handle),
            _ => None,
        }
    }
}
