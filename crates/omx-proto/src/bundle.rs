//! Bundling: small frames for the same endpoint that are queued together leave in one
//! Ethernet frame ([`omx_wire::bundle`]), so a burst of small messages is not bounded by
//! the per-frame cost of the host's packet path. It is protocol framing, so it lives
//! here: the runtime and the simulator send what [`crate::Engine::poll`] yields, and a
//! received bundle is taken apart by [`crate::Engine::handle_frame`]. Only partners that
//! advertised [`omx_wire::Extensions::BUNDLE`] get bundles.

use crate::transmit::{Payload, Transmit, MAX_HEADER_LEN};
use bytes::Bytes;
use omx_wire::{
    bundle_push_parts, bundle_start, peek, BUNDLE_HEADER_LEN, BUNDLE_ITEM_OVERHEAD, LATENCY_FLAG,
};
use std::collections::VecDeque;

/// Frames larger than this are sent alone (bundling pays off for small messages).
pub const BUNDLE_ITEM_MAX: usize = 512;

/// The bundle key of a frame: destination board and endpoint, and the size limit.
fn key(t: &Transmit) -> Option<([u8; 6], u8, u32)> {
    if t.bundle_limit == 0 {
        return None;
    }
    let ep = peek::dst_endpoint(t.header())?;
    Some((t.dst_mac(), ep, t.bundle_limit))
}

/// Takes `first` and the frames queued right behind it for the same endpoint, as many
/// as fit one frame of the agreed size, and returns them as one bundle (or `first`
/// unchanged when nothing can join it). Order on the wire is kept: the bundle carries
/// the frames in queue order, and a frame for another destination ends it.
pub(crate) fn gather(first: Transmit, queue: &mut VecDeque<Transmit>) -> (Transmit, bool) {
    let Some(k) = key(&first) else {
        return (first, false);
    };
    let limit = k.2 as usize;
    let mut len = BUNDLE_HEADER_LEN + BUNDLE_ITEM_OVERHEAD + first.content_len();
    let mut joining = 0;
    for t in queue.iter() {
        let next = len + BUNDLE_ITEM_OVERHEAD + t.content_len();
        if key(t) != Some(k) || next > limit {
            break;
        }
        len = next;
        joining += 1;
    }
    if joining == 0 {
        return (first, false);
    }
    let mut frame = Vec::with_capacity(len);
    let src: [u8; 6] = first.header()[6..12].try_into().expect("6 bytes");
    let ethertype = u16::from_be_bytes([first.header()[12], first.header()[13]]);
    bundle_start(&mut frame, k.0, src, ethertype, k.1);
    let mut urgent = false;
    for t in std::iter::once(first).chain(queue.drain(..joining)) {
        push_item(&mut frame, &t);
        urgent |= omx_wire::is_marked(t.header());
    }
    if urgent {
        frame[peek::TYPE_OFFSET] |= LATENCY_FLAG;
    }
    let mut header = [0u8; MAX_HEADER_LEN];
    header[..BUNDLE_HEADER_LEN].copy_from_slice(&frame[..BUNDLE_HEADER_LEN]);
    let body = Bytes::from(frame).slice(BUNDLE_HEADER_LEN..);
    let t = Transmit::new(header, BUNDLE_HEADER_LEN, Payload::Bytes(body), urgent);
    (t, true)
}

/// Appends one frame as a bundle item: header, payload and its own checksum trailer
/// (the bundle header has none: a corrupted item length shifts the items, which then
/// fail their checksums).
fn push_item(out: &mut Vec<u8>, t: &Transmit) {
    let payload: &[u8] = match &t.payload {
        Payload::Bytes(b) => b,
        _ => &[],
    };
    let mut trailer = [0u8; omx_wire::CONNECT_SEAL_LEN];
    let trailer = &mut trailer[..t.trailer_len()];
    omx_wire::write_trailer(&[t.header(), payload], trailer);
    bundle_push_parts(out, &[t.header(), payload, trailer]);
}
