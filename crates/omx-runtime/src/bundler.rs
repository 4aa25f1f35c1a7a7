//! Transmit-side packing of small frames into bundles (see `omx_wire::bundle`): frames
//! for the same board and endpoint that leave in one progress pass share one Ethernet
//! frame. A lone frame is sent as itself.

use omx_proto::demux::{route, Route};
use omx_proto::{Payload, Transmit};
use omx_transport::PacketSocket;
use omx_wire::{bundle_push, bundle_push_parts, bundle_start, BUNDLE_ITEM_OVERHEAD, MIN_FRAME_LEN};

/// Frames larger than this are sent alone (bundling pays off for small messages).
pub const BUNDLE_ITEM_MAX: usize = 512;

pub struct Bundler {
    max_frame: usize,
    ethertype: u16,
    dst: Option<([u8; 6], u8)>,
    first: Vec<u8>,
    bundle: Vec<u8>,
    count: usize,
    pub bundles_sent: u64,
}

impl Bundler {
    pub fn new(max_frame: usize, ethertype: u16) -> Self {
        Bundler {
            max_frame,
            ethertype,
            dst: None,
            first: Vec::with_capacity(BUNDLE_ITEM_MAX),
            bundle: Vec::with_capacity(max_frame),
            count: 0,
            bundles_sent: 0,
        }
    }

    /// Whether `t` may travel in a bundle.
    pub fn eligible(t: &Transmit) -> bool {
        !matches!(t.payload, Payload::User { .. }) && t.content_len() <= BUNDLE_ITEM_MAX
    }

    /// Adds an eligible frame, sending what was pending first when it cannot join it.
    /// `limit(mac, endpoint)` is the largest frame that destination takes (the size
    /// agreed with it, which may be below ours).
    pub fn push(
        &mut self,
        t: &Transmit,
        sock: &mut PacketSocket,
        limit: impl Fn([u8; 6], u8) -> usize,
    ) {
        let header = t.header();
        let payload: &[u8] = match &t.payload {
            Payload::Bytes(b) => b,
            _ => &[],
        };
        let Route::Endpoint(ep) = route(header) else {
            self.emit(sock);
            let _ = sock.queue_send(t.frame_len(), |buf| t.write_to(buf, |_, _, _| {}));
            return;
        };
        let dst = (t.dst_mac(), ep);
        // Each inner frame keeps its own checksum trailer (the bundle header has none:
        // a corrupted item length shifts the items, which then fail their checksums).
        let trailer = t
            .checksummed()
            .then(|| omx_wire::checksum_of_parts(&[header, payload]));
        let trailer: &[u8] = trailer.as_ref().map_or(&[], |c| &c[..]);
        let len = t.content_len();
        let max_frame = self.max_frame.min(limit(dst.0, dst.1));
        if self.dst != Some(dst) || self.bundle_len_with(len) > max_frame {
            self.emit(sock);
        }
        match self.count {
            0 => {
                self.dst = Some(dst);
                self.first.clear();
                self.first.extend_from_slice(header);
                self.first.extend_from_slice(payload);
                self.first.extend_from_slice(trailer);
            }
            1 => {
                let mut src = [0u8; 6];
                src.copy_from_slice(&self.first[6..12]);
                bundle_start(&mut self.bundle, dst.0, src, self.ethertype, ep);
                bundle_push(&mut self.bundle, &self.first);
                bundle_push_parts(&mut self.bundle, &[header, payload, trailer]);
                if omx_wire::is_marked(&self.first) {
                    self.bundle[omx_wire::peek::TYPE_OFFSET] |= omx_wire::LATENCY_FLAG;
                }
            }
            _ => bundle_push_parts(&mut self.bundle, &[header, payload, trailer]),
        }
        if self.count >= 1 && omx_wire::is_marked(header) {
            self.bundle[omx_wire::peek::TYPE_OFFSET] |= omx_wire::LATENCY_FLAG;
        }
        self.count += 1;
    }

    fn bundle_len_with(&self, item: usize) -> usize {
        match self.count {
            0 => item,
            1 => omx_wire::BUNDLE_HEADER_LEN + 2 * BUNDLE_ITEM_OVERHEAD + self.first.len() + item,
            _ => self.bundle.len() + BUNDLE_ITEM_OVERHEAD + item,
        }
    }

    /// Queues whatever is pending on the socket.
    #[inline]
    pub fn emit(&mut self, sock: &mut PacketSocket) {
        if self.count > 0 {
            self.emit_pending(sock);
        }
    }

    fn emit_pending(&mut self, sock: &mut PacketSocket) {
        let frame = match self.count {
            0 => return,
            1 => &self.first,
            _ => {
                self.bundles_sent += 1;
                &self.bundle
            }
        };
        let len = frame.len().max(MIN_FRAME_LEN);
        let _ = sock.queue_send(len, |buf| {
            buf[..frame.len()].copy_from_slice(frame);
            buf[frame.len()..].fill(0);
        });
        self.count = 0;
        self.dst = None;
    }
}
