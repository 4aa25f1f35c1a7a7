//! Frames leaving the engine. A frame is an encoded header plus a payload that is either
//! absent, engine-held bytes (eager data kept for retransmission) or a range of user
//! memory the runtime gathers while building the frame (pull replies: zero-copy send).

use crate::types::MemHandle;
use bytes::Bytes;
use omx_wire::MIN_FRAME_LEN;

/// Largest header any packet type needs (16-byte common header + 44-byte pull body).
pub const MAX_HEADER_LEN: usize = 64;

#[derive(Clone, Debug)]
pub enum Payload {
    None,
    Bytes(Bytes),
    User {
        handle: MemHandle,
        offset: u64,
        len: u32,
    },
}

impl Payload {
    pub fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Bytes(b) => b.len(),
            Payload::User { len, .. } => *len as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Clone, Debug)]
pub struct Transmit {
    header: [u8; MAX_HEADER_LEN],
    header_len: u8,
    pub payload: Payload,
    /// Set on frames the receiver should act on at once (see the wake-up policies).
    pub latency_sensitive: bool,
    /// Largest bundle (whole frame) this frame may travel in; 0 when it travels alone
    /// (see [`crate::bundle`]).
    pub(crate) bundle_limit: u32,
    /// The link to send it on: 0 for the endpoint's own board, `i` for the `i`-th of
    /// `EngineConfig::stripe_boards` (striped pulls only).
    pub path: u8,
}

impl Transmit {
    pub(crate) fn new(
        header: [u8; MAX_HEADER_LEN],
        header_len: usize,
        payload: Payload,
        latency_sensitive: bool,
    ) -> Self {
        Transmit {
            header,
            header_len: header_len as u8,
            payload,
            latency_sensitive,
            bundle_limit: 0,
            path: 0,
        }
    }

    /// Marks the frame as one that may share a bundle with others for the same
    /// endpoint, when the destination's configuration `wire` takes bundles and the
    /// frame is small and self-contained (no user memory to gather).
    pub(crate) fn bundled_to(mut self, wire: &omx_wire::WireConfig) -> Self {
        let eligible = wire.uses(omx_wire::Extensions::BUNDLE)
            && self.path == 0
            && !matches!(self.payload, Payload::User { .. })
            && self.content_len() <= crate::bundle::BUNDLE_ITEM_MAX
            && omx_wire::peek::dst_endpoint(self.header()).is_some()
            && !omx_wire::peek::is_board_frame(self.header());
        if eligible {
            self.bundle_limit = wire.mtu + omx_wire::ETH_HEADER_LEN as u32;
        }
        self
    }

    pub fn header(&self) -> &[u8] {
        &self.header[..self.header_len as usize]
    }

    pub fn dst_mac(&self) -> [u8; 6] {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.header[..6]);
        m
    }

    /// Bytes after the payload: checksum trailer or connect seal ([`omx_wire::trailer_len`]).
    pub fn trailer_len(&self) -> usize {
        omx_wire::trailer_len(self.header())
    }

    /// Header, payload and checksum trailer, without padding.
    pub fn content_len(&self) -> usize {
        self.header_len as usize + self.payload.len() + self.trailer_len()
    }

    /// Length on the wire, including padding to the Ethernet minimum.
    pub fn frame_len(&self) -> usize {
        self.content_len().max(MIN_FRAME_LEN)
    }

    /// Appends the complete frame to `out` (with its checksum trailer when the header
    /// has [`CHECKSUM_FLAG`]). `read_user` fills a slice from user memory (handle, byte
    /// offset, destination) for pull-reply payloads.
    pub fn assemble(&self, out: &mut Vec<u8>, read_user: impl FnOnce(MemHandle, u64, &mut [u8])) {
        let start = out.len();
        out.extend_from_slice(self.header());
        match &self.payload {
            Payload::None => {}
            Payload::Bytes(b) => out.extend_from_slice(b),
            Payload::User {
                handle,
                offset,
                len,
            } => {
                let at = out.len();
                out.resize(at + *len as usize, 0);
                read_user(*handle, *offset, &mut out[at..]);
            }
        }
        let end = out.len();
        out.resize(end + self.trailer_len(), 0);
        let (covered, tail) = out[start..].split_at_mut(end - start);
        omx_wire::write_trailer(&[covered], tail);
        if out.len() - start < MIN_FRAME_LEN {
            out.resize(start + MIN_FRAME_LEN, 0);
        }
    }

    /// Writes the complete frame into `out`, which must be exactly `frame_len()` bytes
    /// (a transmit-ring slot or batch buffer), padding with zeros.
    pub fn write_to(&self, out: &mut [u8], read_user: impl FnOnce(MemHandle, u64, &mut [u8])) {
        let h = self.header_len as usize;
        out[..h].copy_from_slice(self.header());
        let end = h + self.payload.len();
        match &self.payload {
            Payload::None => {}
            Payload::Bytes(b) => out[h..end].copy_from_slice(b),
            Payload::User { handle, offset, .. } => read_user(*handle, *offset, &mut out[h..end]),
        }
        let (covered, rest) = out.split_at_mut(end);
        let (tail, pad) = rest.split_at_mut(self.trailer_len());
        omx_wire::write_trailer(&[covered], tail);
        pad.fill(0);
    }
}
