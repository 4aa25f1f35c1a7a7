//! Board-level demultiplexing: which local endpoint a received frame is for, read from
//! the fixed offsets the original documents for NIC hashing (type byte at 16, endpoint at
//! 17; pull replies and nacks carry it elsewhere), which [`omx_wire::peek`] reads.

use omx_wire::{peek, PacketType, COMMON_HEADER_LEN};

/// What a board should do with a received frame before any endpoint sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Endpoint(u8),
    /// Discovery and raw frames, handled by the board itself.
    Board,
    /// Too short to tell, or of a type nobody handles: dropped (and counted by the board).
    Drop,
}

pub fn route(frame: &[u8]) -> Route {
    if peek::is_board_frame(frame) {
        return Route::Board;
    }
    peek::dst_endpoint(frame).map_or(Route::Drop, Route::Endpoint)
}

/// The NACK a board sends back for a frame addressed to an endpoint that is not open
/// (`EndpointClosed`) or does not exist (`BadEndpoint`): NACK_LIB for the seq-consuming
/// types and CONNECT, NACK_MCP for PULL, nothing for the others (acks, replies, nacks).
pub fn closed_endpoint_nack(
    frame: &[u8],
    wire: &omx_wire::WireConfig,
    board_mac: [u8; 6],
    kind: omx_wire::NackType,
) -> Option<Vec<u8>> {
    use omx_wire::{Header, NackLib, NackMcp, Packet, PEER_INDEX_NONE};
    let d = match omx_wire::decode(frame, wire) {
        Ok(d) => d,
        Err(_) => return medium_nack(frame, wire, board_mac, kind),
    };
    let (dst_ep, src_ep, seq) = match d.packet {
        Packet::Tiny(m) | Packet::Small(m) => (m.dst_endpoint, m.src_endpoint, m.lib_seqnum),
        Packet::Rndv(r) => (r.msg.dst_endpoint, r.msg.src_endpoint, r.msg.lib_seqnum),
        Packet::Medium(m) => (m.dst_endpoint, m.src_endpoint, m.lib_seqnum),
        Packet::Notify(n) => (n.dst_endpoint, n.src_endpoint, n.lib_seqnum),
        Packet::Connect(c) if !c.is_reply => (c.dst_endpoint, c.src_endpoint, 0),
        Packet::Pull(_) => (0, 0, 0),
        _ => return None,
    };
    let header = Header {
        dst_mac: d.header.src_mac,
        src_mac: board_mac,
        ethertype: wire.ethertype,
        dst_src_peer_index: PEER_INDEX_NONE,
    };
    let nack = match d.packet {
        Packet::Pull(p) => Packet::NackMcp(NackMcp {
            src_endpoint: p.src_endpoint,
            nack_type: kind as u8,
            src_pull_handle: p.src_pull_handle,
            src_magic: p.src_magic,
        }),
        _ => Packet::NackLib(NackLib {
            src_endpoint: dst_ep,
            nack_type: kind as u8,
            dst_endpoint: src_ep,
            dst_src_peer_index: d.header.dst_src_peer_index,
            lib_seqnum: seq,
        }),
    };
    let mut out = Vec::with_capacity(64);
    omx_wire::encode(&header, &nack, &[], wire, &mut out).ok()?;
    Some(out)
}

/// [`closed_endpoint_nack`] for a medium fragment that does not decode with our own
/// sizes: one cut at a smaller partner's agreed size, which this board does not know.
/// The fields a nack needs sit at the same offsets whatever the fragment size.
fn medium_nack(
    frame: &[u8],
    wire: &omx_wire::WireConfig,
    board_mac: [u8; 6],
    kind: omx_wire::NackType,
) -> Option<Vec<u8>> {
    use omx_wire::{Header, NackLib, Packet, PEER_INDEX_NONE};
    let head = frame.get(..COMMON_HEADER_LEN + 32)?;
    if peek::packet_type(head) != Some(PacketType::Medium as u8) {
        return None;
    }
    let be16 = |off: usize| u16::from_be_bytes([head[off], head[off + 1]]);
    let body = COMMON_HEADER_LEN;
    let header = Header {
        dst_mac: head[6..12].try_into().expect("6 bytes"),
        src_mac: board_mac,
        ethertype: wire.ethertype,
        dst_src_peer_index: PEER_INDEX_NONE,
    };
    let nack = Packet::NackLib(NackLib {
        src_endpoint: head[body + 1],
        nack_type: kind as u8,
        dst_endpoint: head[body + 2],
        dst_src_peer_index: be16(14),
        lib_seqnum: be16(body + 8),
    });
    let mut out = Vec::with_capacity(64);
    omx_wire::encode(&header, &nack, &[], wire, &mut out).ok()?;
    Some(out)
}
