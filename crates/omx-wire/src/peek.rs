//! Cheap reads of a raw frame without a full [`crate::decode`]: the fields that
//! route a frame (EtherType, packet type, endpoints) and their byte offsets.
//!
//! This is the one home of those offsets: the kernel socket filter (classic BPF, which
//! can only load bytes at fixed offsets), the board's demultiplexer, the relay daemon
//! and the runtime all read them from here. Nothing here validates a frame; a frame
//! too short to hold a field gives `None` (or `false`), never a panic.
//!
//! The routing fields sit at the same offsets in the native and the MX-wire-compatible
//! layouts (those differ only inside MEDIUM and PULL bodies, after the endpoints), so
//! there is one set of offsets for both; the tests check it on frames of every type
//! built by [`crate::encode`] in each layout.
//!
//! Offsets are frame offsets (from the first byte of the Ethernet header).

use crate::bundle::BUNDLE_TYPE;
use crate::config::{type_of, COMMON_HEADER_LEN, ETH_HEADER_LEN, PULL_MAGIC_XOR};
use crate::packet::PacketType;
use std::ops::RangeInclusive;

/// EtherType (big-endian u16).
pub const ETHERTYPE_OFFSET: usize = 12;
/// `dst_src_peer_index` (big-endian u16): the sender's index in the receiver's table.
pub const PEER_INDEX_OFFSET: usize = ETH_HEADER_LEN;
/// Packet type byte, possibly carrying [`crate::LATENCY_FLAG`] and
/// [`crate::CHECKSUM_FLAG`] (see [`crate::type_of`]).
pub const TYPE_OFFSET: usize = COMMON_HEADER_LEN;
/// `dst_endpoint` of the [`ENDPOINT_TYPES`] except PULL_REPLY, and of bundles.
pub const DST_ENDPOINT_OFFSET: usize = COMMON_HEADER_LEN + 1;
/// `src_endpoint` of the [`ENDPOINT_TYPES`] except PULL_REPLY (which has none).
pub const SRC_ENDPOINT_OFFSET: usize = COMMON_HEADER_LEN + 2;
/// NACK_LIB and NACK_MCP: the body field named `src_endpoint`. In NACK_LIB it is the
/// endpoint that rejected the packet; in NACK_MCP, a copy of the PULL's `src_endpoint`
/// (the puller, that is the nack's destination).
pub const NACK_SRC_ENDPOINT_OFFSET: usize = COMMON_HEADER_LEN + 1;
/// NACK_LIB: its destination, the rejected packet's sender.
pub const NACK_LIB_DST_ENDPOINT_OFFSET: usize = COMMON_HEADER_LEN + 9;
/// PULL_REPLY (`dst_magic`) and NACK_MCP (`src_magic`): the low byte of the pull magic,
/// which is the puller's endpoint XOR [`MAGIC_ENDPOINT_XOR`].
pub const MAGIC_ENDPOINT_OFFSET: usize = COMMON_HEADER_LEN + 15;
/// PULL (and striped PULL): the puller's idea of our session (big-endian u32).
pub const PULL_SESSION_OFFSET: usize = COMMON_HEADER_LEN + 4;
/// PULL_REPLY (and striped PULL_REPLY): the whole pull magic (big-endian u32), whose
/// low byte is at [`MAGIC_ENDPOINT_OFFSET`].
pub const PULL_REPLY_MAGIC_OFFSET: usize = COMMON_HEADER_LEN + 12;
/// What the puller's endpoint is XORed with at [`MAGIC_ENDPOINT_OFFSET`] (the low byte
/// of [`PULL_MAGIC_XOR`]).
pub const MAGIC_ENDPOINT_XOR: u8 = PULL_MAGIC_XOR.to_be_bytes()[3];

/// Packet types handled by a board, not addressed to an endpoint: RAW, HOST_QUERY,
/// HOST_REPLY.
pub const BOARD_TYPES: [u8; 3] = [
    PacketType::Raw as u8,
    PacketType::HostQuery as u8,
    PacketType::HostReply as u8,
];
/// Packet types whose destination endpoint is at [`DST_ENDPOINT_OFFSET`], TRUC to
/// NOTIFY, except PULL_REPLY inside the range (at [`MAGIC_ENDPOINT_OFFSET`]).
pub const ENDPOINT_TYPES: RangeInclusive<u8> = PacketType::Truc as u8..=PacketType::Notify as u8;
/// Every packet type an endpoint sends and receives, TRUC to NACK_MCP: the ones that
/// may carry the latency and checksum flags in native mode.
pub const ENDPOINT_FRAME_TYPES: RangeInclusive<u8> =
    PacketType::Truc as u8..=PacketType::NackMcp as u8;
/// PULL_REPLY's type number.
pub const TYPE_PULL_REPLY: u8 = PacketType::PullReply as u8;
/// NACK_LIB's type number.
pub const TYPE_NACK_LIB: u8 = PacketType::NackLib as u8;
/// NACK_MCP's type number.
pub const TYPE_NACK_MCP: u8 = PacketType::NackMcp as u8;
/// The bundle's type number ([`BUNDLE_TYPE`]); its destination endpoint is at
/// [`DST_ENDPOINT_OFFSET`].
pub const TYPE_BUNDLE: u8 = BUNDLE_TYPE;

/// The EtherType.
#[inline]
pub fn ethertype(frame: &[u8]) -> Option<u16> {
    let b = frame.get(ETHERTYPE_OFFSET..ETHERTYPE_OFFSET + 2)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// The type byte as sent, flags included.
#[inline]
pub fn type_byte(frame: &[u8]) -> Option<u8> {
    frame.get(TYPE_OFFSET).copied()
}

/// The packet type without the latency and checksum flags ([`crate::type_of`]).
#[inline]
pub fn packet_type(frame: &[u8]) -> Option<u8> {
    type_byte(frame).map(type_of)
}

/// Whether a packet type (flags stripped) is one an endpoint sends and receives
/// ([`ENDPOINT_FRAME_TYPES`]).
#[inline]
pub fn is_endpoint_type(t: u8) -> bool {
    ENDPOINT_FRAME_TYPES.contains(&t) || crate::config::unstriped_type(t).is_some()
}

/// Whether the frame is a striped PULL or PULL_REPLY (flags ignored).
#[inline]
pub fn is_striped(frame: &[u8]) -> bool {
    packet_type(frame).is_some_and(|t| crate::config::unstriped_type(t).is_some())
}

/// The big-endian u32 at frame offset `off` (a session or a magic).
#[inline]
pub fn u32_at(frame: &[u8], off: usize) -> Option<u32> {
    let b = frame.get(off..off + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Whether the frame is for the board itself ([`BOARD_TYPES`], flags ignored):
/// discovery and raw frames, host queries and replies.
#[inline]
pub fn is_board_frame(frame: &[u8]) -> bool {
    packet_type(frame).is_some_and(|t| BOARD_TYPES.contains(&t))
}

/// Whether the frame is a RAW frame (discovery, raw endpoint): its type byte is exactly
/// RAW, which never carries flags.
#[inline]
pub fn is_raw(frame: &[u8]) -> bool {
    type_byte(frame) == Some(PacketType::Raw as u8)
}

/// Whether the frame is a PULL_REPLY (flags ignored).
#[inline]
pub fn is_pull_reply(frame: &[u8]) -> bool {
    packet_type(frame) == Some(TYPE_PULL_REPLY)
}

/// Whether the frame is a PULL_REPLY without checksum trailer (the latency flag
/// ignored): one whose payload may be placed before the frame is read whole.
#[inline]
pub fn is_unchecksummed_pull_reply(frame: &[u8]) -> bool {
    type_byte(frame).is_some_and(|t| t & !crate::LATENCY_FLAG == TYPE_PULL_REPLY)
}

/// Whether the frame is a bundle of small frames (flags ignored).
#[inline]
pub fn is_bundle(frame: &[u8]) -> bool {
    packet_type(frame) == Some(TYPE_BUNDLE)
}

/// The local endpoint a received frame is addressed to, per its packet type; `None`
/// for board frames, unknown types and frames too short to carry it.
#[inline]
pub fn dst_endpoint(frame: &[u8]) -> Option<u8> {
    let t = packet_type(frame)?;
    match crate::config::unstriped_type(t).unwrap_or(t) {
        TYPE_PULL_REPLY | TYPE_NACK_MCP => frame
            .get(MAGIC_ENDPOINT_OFFSET)
            .map(|b| b ^ MAGIC_ENDPOINT_XOR),
        TYPE_NACK_LIB => frame.get(NACK_LIB_DST_ENDPOINT_OFFSET).copied(),
        t if ENDPOINT_TYPES.contains(&t) || t == TYPE_BUNDLE => {
            frame.get(DST_ENDPOINT_OFFSET).copied()
        }
        _ => None,
    }
}

/// Offset of the body field named `src_endpoint` of a packet type (flags stripped):
/// [`SRC_ENDPOINT_OFFSET`] for the [`ENDPOINT_TYPES`], [`NACK_SRC_ENDPOINT_OFFSET`] for
/// the nacks; `None` for PULL_REPLY (it names no source: the puller checks its handle
/// and magic), board frames, bundles and unknown types.
#[inline]
pub fn src_endpoint_offset(t: u8) -> Option<usize> {
    match t {
        TYPE_PULL_REPLY => None,
        TYPE_NACK_LIB | TYPE_NACK_MCP => Some(NACK_SRC_ENDPOINT_OFFSET),
        t if ENDPOINT_TYPES.contains(&t) => Some(SRC_ENDPOINT_OFFSET),
        _ => None,
    }
}

/// The body field named `src_endpoint` ([`src_endpoint_offset`]).
#[inline]
pub fn src_endpoint(frame: &[u8]) -> Option<u8> {
    frame
        .get(src_endpoint_offset(packet_type(frame)?)?)
        .copied()
}

/// The `dst_src_peer_index` of the common header.
#[inline]
pub fn peer_index(frame: &[u8]) -> Option<u16> {
    let b = frame.get(PEER_INDEX_OFFSET..PEER_INDEX_OFFSET + 2)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::*;
    use crate::{
        bundle_push, bundle_start, encode, WireConfig, CHECKSUM_FLAG, LATENCY_FLAG, PULL_MAGIC_XOR,
    };

    const DST: u8 = 5;
    const SRC: u8 = 9;

    fn configs() -> [WireConfig; 3] {
        [
            WireConfig::native_9000(),
            WireConfig::native_checksummed(1500, true),
            WireConfig::mx_compat(),
        ]
    }

    /// A packet, its payload, and the endpoints peek should report (destination,
    /// `src_endpoint` field).
    type Case = (Packet, Vec<u8>, Option<u8>, Option<u8>);

    /// One packet of every supported type, addressed from endpoint SRC to endpoint DST.
    fn every_packet() -> Vec<Case> {
        let msg = Msg {
            dst_endpoint: DST,
            src_endpoint: SRC,
            length: 3,
            ..Msg::default()
        };
        let magic = PULL_MAGIC_XOR ^ u32::from(DST);
        vec![
            (Packet::Raw, vec![1, 2, 3], None, None),
            (
                Packet::HostQuery(HostQuery {
                    src_dst_peer_index: 4,
                    magic: 7,
                }),
                vec![],
                None,
                None,
            ),
            (
                Packet::HostReply(HostReply {
                    length: 2,
                    src_dst_peer_index: 4,
                    magic: 7,
                }),
                b"a\0".to_vec(),
                None,
                None,
            ),
            (
                Packet::Truc(Truc {
                    dst_endpoint: DST,
                    src_endpoint: SRC,
                    length: crate::TRUC_DATA_LEN,
                    truc_type: crate::TRUC_TYPE_ACK,
                    ..Truc::default()
                }),
                vec![],
                Some(DST),
                Some(SRC),
            ),
            (
                Packet::Connect(Connect {
                    dst_endpoint: DST,
                    src_endpoint: SRC,
                    length: crate::CONNECT_DATA_LEN,
                    ..Connect::default()
                }),
                vec![],
                Some(DST),
                Some(SRC),
            ),
            (Packet::Tiny(msg), vec![1, 2, 3], Some(DST), Some(SRC)),
            (Packet::Small(msg), vec![1, 2, 3], Some(DST), Some(SRC)),
            (
                Packet::Medium(Medium {
                    dst_endpoint: DST,
                    src_endpoint: SRC,
                    length: 3,
                    frag_length: 3,
                    frag_pipeline: crate::COMPAT_FRAG_PIPELINE,
                    ..Medium::default()
                }),
                vec![1, 2, 3],
                Some(DST),
                Some(SRC),
            ),
            (
                Packet::Rndv(Rndv {
                    msg: Msg {
                        length: crate::RNDV_DATA_LEN,
                        ..msg
                    },
                    ..Rndv::default()
                }),
                vec![],
                Some(DST),
                Some(SRC),
            ),
            (
                Packet::Pull(Pull {
                    dst_endpoint: DST,
                    src_endpoint: SRC,
                    block_length: 100,
                    src_magic: PULL_MAGIC_XOR ^ u32::from(SRC),
                    ..Pull::default()
                }),
                vec![],
                Some(DST),
                Some(SRC),
            ),
            (
                Packet::PullReply(PullReply {
                    frame_length: 3,
                    dst_magic: magic,
                    ..PullReply::default()
                }),
                vec![1, 2, 3],
                Some(DST),
                None,
            ),
            (
                Packet::Notify(Notify {
                    dst_endpoint: DST,
                    src_endpoint: SRC,
                    ..Notify::default()
                }),
                vec![],
                Some(DST),
                Some(SRC),
            ),
            (
                Packet::NackLib(NackLib {
                    src_endpoint: SRC,
                    nack_type: NackType::EndpointClosed as u8,
                    dst_endpoint: DST,
                    ..NackLib::default()
                }),
                vec![],
                Some(DST),
                Some(SRC),
            ),
            (
                Packet::NackMcp(NackMcp {
                    src_endpoint: DST,
                    nack_type: NackType::BadRdmaWin as u8,
                    src_magic: magic,
                    ..NackMcp::default()
                }),
                vec![],
                Some(DST),
                Some(DST),
            ),
        ]
    }

    fn header(cfg: &WireConfig) -> Header {
        Header {
            dst_mac: [2, 0, 0, 0, 0, 1],
            src_mac: [2, 0, 0, 0, 0, 2],
            ethertype: cfg.ethertype,
            dst_src_peer_index: 0x1234,
        }
    }

    #[test]
    fn every_packet_type_in_every_layout() {
        for cfg in configs() {
            for (packet, payload, dst, src) in every_packet() {
                let mut f = Vec::new();
                encode(&header(&cfg), &packet, &payload, &cfg, &mut f).unwrap();
                crate::decode(&f, &cfg).unwrap();
                let t = packet.packet_type() as u8;
                let what = format!("{packet:?} in {:?}", cfg.mode);
                assert_eq!(ethertype(&f), Some(cfg.ethertype), "{what}");
                assert_eq!(peer_index(&f), Some(0x1234), "{what}");
                assert_eq!(packet_type(&f), Some(t), "{what}");
                assert_eq!(dst_endpoint(&f), dst, "{what}");
                assert_eq!(src_endpoint(&f), src, "{what}");
                let board = matches!(
                    packet,
                    Packet::Raw | Packet::HostQuery(_) | Packet::HostReply(_)
                );
                assert_eq!(is_board_frame(&f), board, "{what}");
                assert_eq!(is_raw(&f), packet == Packet::Raw, "{what}");
                assert_eq!(is_endpoint_type(t), !board, "{what}");
                let pull_reply = matches!(packet, Packet::PullReply(_));
                assert_eq!(is_pull_reply(&f), pull_reply, "{what}");
                assert_eq!(
                    is_unchecksummed_pull_reply(&f),
                    pull_reply && !cfg.checksums(t),
                    "{what}"
                );
                assert!(!is_bundle(&f), "{what}");
                // A prefix too short for a field reads it as absent, never panics.
                let dst_at = match t {
                    TYPE_PULL_REPLY | TYPE_NACK_MCP => MAGIC_ENDPOINT_OFFSET,
                    TYPE_NACK_LIB => NACK_LIB_DST_ENDPOINT_OFFSET,
                    _ => DST_ENDPOINT_OFFSET,
                };
                let src_at = src_endpoint_offset(t).unwrap_or(0);
                for cut in 0..f.len() {
                    let g = &f[..cut];
                    assert_eq!(dst_endpoint(g), dst.filter(|_| cut > dst_at), "{what}");
                    assert_eq!(src_endpoint(g), src.filter(|_| cut > src_at), "{what}");
                    let typed = cut > TYPE_OFFSET;
                    assert_eq!(packet_type(g), Some(t).filter(|_| typed), "{what}");
                    assert_eq!(is_board_frame(g), board && typed, "{what}");
                    assert_eq!(is_pull_reply(g), pull_reply && typed, "{what}");
                }
            }
        }
    }

    #[test]
    fn flags_are_stripped_except_for_raw() {
        let cfg = WireConfig::native_9000();
        for (packet, payload, dst, src) in every_packet() {
            let mut f = Vec::new();
            encode(&header(&cfg), &packet, &payload, &cfg, &mut f).unwrap();
            let t = packet.packet_type() as u8;
            for flags in [LATENCY_FLAG, CHECKSUM_FLAG, LATENCY_FLAG | CHECKSUM_FLAG] {
                f[TYPE_OFFSET] = t | flags;
                assert_eq!(type_byte(&f), Some(t | flags));
                assert_eq!(packet_type(&f), Some(t));
                assert_eq!((dst_endpoint(&f), src_endpoint(&f)), (dst, src));
                assert_eq!(is_board_frame(&f), BOARD_TYPES.contains(&t));
                assert!(!is_raw(&f), "RAW never carries flags");
                assert_eq!(is_pull_reply(&f), t == TYPE_PULL_REPLY);
                assert_eq!(
                    is_unchecksummed_pull_reply(&f),
                    t == TYPE_PULL_REPLY && flags & CHECKSUM_FLAG == 0
                );
            }
        }
    }

    #[test]
    fn bundles_route_by_their_own_header() {
        let mut b = Vec::new();
        bundle_start(&mut b, [1; 6], [2; 6], 0x86DF, DST);
        bundle_push(&mut b, &[0u8; 40]);
        assert!(is_bundle(&b) && !is_board_frame(&b) && !is_pull_reply(&b));
        assert_eq!(packet_type(&b), Some(TYPE_BUNDLE));
        assert_eq!(dst_endpoint(&b), Some(DST));
        assert_eq!(src_endpoint(&b), None);
        assert!(!is_endpoint_type(TYPE_BUNDLE));
    }

    #[test]
    fn unknown_types_have_no_endpoint() {
        let mut f = vec![0u8; 64];
        for t in (0..=u8::MAX).filter(|&t| {
            let t = type_of(t);
            !ENDPOINT_FRAME_TYPES.contains(&t)
                && t != TYPE_BUNDLE
                && crate::config::unstriped_type(t).is_none()
        }) {
            f[TYPE_OFFSET] = t;
            assert_eq!((dst_endpoint(&f), src_endpoint(&f)), (None, None), "{t}");
        }
        assert_eq!(MAGIC_ENDPOINT_XOR, 0x80);
    }

    #[test]
    fn striped_pulls_name_their_endpoint_but_are_not_plain_pulls() {
        let mut f = vec![0u8; 64];
        f[TYPE_OFFSET] = crate::STRIPE_PULL_TYPE;
        f[DST_ENDPOINT_OFFSET] = 5;
        assert!(is_striped(&f) && !is_pull_reply(&f));
        assert_eq!(dst_endpoint(&f), Some(5));
        f[TYPE_OFFSET] = crate::STRIPE_PULL_REPLY_TYPE;
        f[MAGIC_ENDPOINT_OFFSET] = 5 ^ MAGIC_ENDPOINT_XOR;
        assert!(is_striped(&f) && !is_pull_reply(&f) && !is_unchecksummed_pull_reply(&f));
        assert_eq!(dst_endpoint(&f), Some(5));
        assert!(!ENDPOINT_TYPES.contains(&crate::STRIPE_PULL_TYPE));
    }
}
