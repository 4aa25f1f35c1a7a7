//! Typed views of the common header and of every packet body (spec §2–§4).
//!
//! The structs hold header fields only; payload bytes stay in the frame
//! buffer (see [`crate::Decoded::payload`]) so decoding never copies data.
//! Fields the original sender leaves unset (`src_generation`, pads) have no
//! representation: they are ignored on receive and written as zero.

use crate::config::{WireConfig, WireMode};

/// Ethernet header plus the Open-MX reverse peer index (frame bytes 0..16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    /// Destination MAC (frame offset 0).
    pub dst_mac: [u8; 6],
    /// Source MAC (frame offset 6).
    pub src_mac: [u8; 6],
    /// EtherType (frame offset 12).
    pub ethertype: u16,
    /// Index of the sender in the receiver's peer table (frame offset 14);
    /// [`crate::PEER_INDEX_NONE`] when unknown, meaningless for RAW/HOST_*.
    pub dst_src_peer_index: u16,
}

/// Packet type byte (frame offset 16).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketType {
    Raw = 1,
    MfmNicReply = 2,
    HostQuery = 3,
    HostReply = 4,
    EtherUnicast = 32,
    EtherMulticast = 33,
    EtherNative = 34,
    Truc = 35,
    Connect = 36,
    Tiny = 37,
    Small = 38,
    Medium = 39,
    Rndv = 40,
    Pull = 41,
    PullReply = 42,
    Notify = 43,
    NackLib = 44,
    NackMcp = 45,
}

impl PacketType {
    /// Maps a type byte to a defined type; `None` for NONE (0), MAX (255)
    /// and every undefined value.
    pub fn from_u8(v: u8) -> Option<PacketType> {
        use PacketType::*;
        Some(match v {
            1 => Raw,
            2 => MfmNicReply,
            3 => HostQuery,
            4 => HostReply,
            32 => EtherUnicast,
            33 => EtherMulticast,
            34 => EtherNative,
            35 => Truc,
            36 => Connect,
            37 => Tiny,
            38 => Small,
            39 => Medium,
            40 => Rndv,
            41 => Pull,
            42 => PullReply,
            43 => Notify,
            44 => NackLib,
            45 => NackMcp,
            _ => return None,
        })
    }

    /// The type's name in omx's tools (`omx_dump`, the Wireshark dissector's
    /// `omx.type`): lower case, words joined by `_`.
    pub fn name(self) -> &'static str {
        use PacketType::*;
        match self {
            Raw => "raw",
            MfmNicReply => "mfm_nic_reply",
            HostQuery => "host_query",
            HostReply => "host_reply",
            EtherUnicast => "ether_unicast",
            EtherMulticast => "ether_multicast",
            EtherNative => "ether_native",
            Truc => "truc",
            Connect => "connect",
            Tiny => "tiny",
            Small => "small",
            Medium => "medium",
            Rndv => "rndv",
            Pull => "pull",
            PullReply => "pull_reply",
            Notify => "notify",
            NackLib => "nack_lib",
            NackMcp => "nack_mcp",
        }
    }

    /// True for types that are defined but have no implementation (the
    /// original driver counts them as "invalid type" and drops them).
    pub fn is_supported(self) -> bool {
        !matches!(
            self,
            PacketType::MfmNicReply
                | PacketType::EtherUnicast
                | PacketType::EtherMulticast
                | PacketType::EtherNative
        )
    }

    /// Body header size (after the 16-byte common header, payload excluded)
    /// for supported types; `None` for unsupported ones. RAW has no body
    /// header: its type byte is part of the raw payload.
    pub fn body_len(self, cfg: &WireConfig) -> Option<usize> {
        use PacketType::*;
        Some(match self {
            Raw => 0,
            HostQuery | HostReply | PullReply | NackLib | NackMcp => 16,
            Tiny | Small | Notify => 24,
            Truc => 28,
            Connect | Medium | Rndv => 32,
            Pull => match cfg.mode {
                WireMode::Native => PULL_BODY_NATIVE,
                WireMode::MxCompat => PULL_BODY_COMPAT,
            },
            MfmNicReply | EtherUnicast | EtherMulticast | EtherNative => return None,
        })
    }
}

impl TryFrom<u8> for PacketType {
    type Error = u8;
    fn try_from(v: u8) -> Result<Self, u8> {
        PacketType::from_u8(v).ok_or(v)
    }
}

/// Size of the native PULL body.
pub(crate) const PULL_BODY_NATIVE: usize = 44;
/// Size of the MX-compat PULL body.
pub(crate) const PULL_BODY_COMPAT: usize = 32;

/// Reason carried by NACK_LIB / NACK_MCP (spec §4.11).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NackType {
    /// Destination endpoint index beyond the driver's endpoint max.
    BadEndpoint = 1,
    /// Endpoint index valid but not open.
    EndpointClosed = 2,
    /// Session field differs from the endpoint's current session.
    BadSession = 3,
    /// PULL names an unregistered region (NACK_MCP only).
    BadRdmaWin = 4,
}

impl NackType {
    /// Maps a wire byte to a nack type; `None` for NONE (0), MAX (5) and above.
    pub fn from_u8(v: u8) -> Option<NackType> {
        match v {
            1 => Some(NackType::BadEndpoint),
            2 => Some(NackType::EndpointClosed),
            3 => Some(NackType::BadSession),
            4 => Some(NackType::BadRdmaWin),
            _ => None,
        }
    }
}

impl TryFrom<u8> for NackType {
    type Error = u8;
    fn try_from(v: u8) -> Result<Self, u8> {
        NackType::from_u8(v).ok_or(v)
    }
}

/// TINY / SMALL body, also the first 24 bytes of RNDV (spec §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Msg {
    pub dst_endpoint: u8,
    pub src_endpoint: u8,
    /// Body byte 3 (`src_generation`, unset in the original): omx native-mode flags
    /// (one-sided operations); 0 otherwise, and ignored in MX-wire-compatible mode.
    pub flags: u8,
    /// Payload bytes following the body (RNDV: rendezvous data length, 8).
    pub length: u16,
    /// Debug checksum, 0 normally.
    pub checksum: u16,
    pub lib_seqnum: u16,
    pub lib_piggyack: u16,
    /// `match_a` in bits 63..32, `match_b` in bits 31..0.
    pub match_info: u64,
    /// Destination endpoint's session.
    pub session: u32,
}

/// RNDV body (spec §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Rndv {
    /// Common "msg" part; `msg.length` is [`crate::RNDV_DATA_LEN`].
    pub msg: Msg,
    pub msg_length: u32,
    pub pulled_rdma_id: u8,
    pub pulled_rdma_seqnum: u8,
    pub pulled_rdma_offset: u16,
}

/// MEDIUM fragment body (spec §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Medium {
    pub dst_endpoint: u8,
    pub src_endpoint: u8,
    /// Total message length (16 bits on the wire in MX-compat mode).
    pub length: u32,
    pub lib_seqnum: u16,
    pub lib_piggyack: u16,
    pub match_info: u64,
    pub session: u32,
    /// Payload bytes of this fragment.
    pub frag_length: u16,
    /// 0-based fragment index.
    pub frag_seqnum: u8,
    /// log2 of the fragment size: MX-compat only (must be 12). In native
    /// mode the byte is unused: encode writes 0 and decode reports 0.
    pub frag_pipeline: u8,
    pub checksum: u16,
}

/// NOTIFY body (spec §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Notify {
    pub dst_endpoint: u8,
    pub src_endpoint: u8,
    /// Body byte 3, as [`Msg::flags`].
    pub flags: u8,
    pub session: u32,
    pub total_length: u32,
    pub pulled_rdma_id: u8,
    pub pulled_rdma_seqnum: u8,
    pub lib_seqnum: u16,
    pub lib_piggyack: u16,
}

/// PULL block request (spec §4.5). Fields are widened to the native layout;
/// the MX-compat layout narrows `pulled_rdma_id` to 8 bits and
/// `pulled_rdma_offset`, `first_frame_offset`, `block_length` to 16 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Pull {
    pub dst_endpoint: u8,
    pub src_endpoint: u8,
    pub session: u32,
    pub total_length: u32,
    pub pulled_rdma_id: u32,
    pub pulled_rdma_seqnum: u8,
    pub pulled_rdma_offset: u32,
    pub src_pull_handle: u32,
    /// Puller endpoint index XOR [`crate::PULL_MAGIC_XOR`].
    pub src_magic: u32,
    pub first_frame_offset: u32,
    pub block_length: u32,
    pub frame_index: u32,
}

/// PULL_REPLY body (spec §4.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PullReply {
    /// Frame index modulo 256.
    pub frame_seqnum: u8,
    /// Payload bytes in this frame.
    pub frame_length: u16,
    pub msg_offset: u32,
    pub dst_pull_handle: u32,
    pub dst_magic: u32,
}

/// CONNECT request or reply body (spec §4.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Connect {
    pub dst_endpoint: u8,
    pub src_endpoint: u8,
    /// Connect data length, [`crate::CONNECT_DATA_LEN`].
    pub length: u8,
    /// Always 0 in Open-MX.
    pub lib_seqnum: u16,
    /// Index of the destination in the sender's peer table.
    pub src_dst_peer_index: u16,
    pub src_session_id: u32,
    /// Request: application key. Reply: replier's session id.
    pub app_key_or_target_session: u32,
    pub target_recv_seqnum_start: u16,
    pub is_reply: bool,
    pub connect_seqnum: u8,
    /// Reply only: [`crate::CONNECT_STATUS_SUCCESS`] or
    /// [`crate::CONNECT_STATUS_BAD_KEY`]. The byte is a pad in requests, so
    /// encode ignores it there and decode reports 0.
    pub status_code: u8,
    /// omx native mode: the largest frame (MTU) the sender's board carries, so that
    /// both ends can agree on the smaller one. 0 = not advertised (Open-MX and MX
    /// peers, and omx in MX-wire mode), encoded as all-zero pad bytes. See
    /// [`crate::CONNECT_MTU_MARKER`].
    pub link_mtu: u16,
    /// omx: the extensions the sender understands ([`crate::Extensions`]), in pads the
    /// original ignores behind [`crate::CONNECT_EXT_MARKER`]; none from Open-MX peers.
    pub extensions: crate::Extensions,
    /// omx, with [`crate::Extensions::STRIPE`]: how many other boards of the sender
    /// follow the body as 6-byte addresses (body byte 14; the payload of the frame).
    pub stripe_boards: u8,
}

/// TRUC (explicit library ack) body (spec §4.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Truc {
    pub dst_endpoint: u8,
    pub src_endpoint: u8,
    /// Truc data length, [`crate::TRUC_DATA_LEN`].
    pub length: u8,
    pub session: u32,
    /// [`crate::TRUC_TYPE_ACK`].
    pub truc_type: u8,
    /// Ack-up-to value.
    pub lib_seqnum: u16,
    /// Copy of `session`.
    pub session_id: u32,
    pub acknum: u32,
    pub send_seq: u16,
    pub resent: u8,
}

/// NACK_LIB body (spec §4.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NackLib {
    /// Endpoint that rejected the packet.
    pub src_endpoint: u8,
    /// [`NackType`] as a byte.
    pub nack_type: u8,
    /// Original sender's endpoint.
    pub dst_endpoint: u8,
    /// Copy of the rejected packet's common-header peer index.
    pub dst_src_peer_index: u16,
    pub lib_seqnum: u16,
}

/// NACK_MCP body (spec §4.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NackMcp {
    pub src_endpoint: u8,
    /// [`NackType`] as a byte.
    pub nack_type: u8,
    pub src_pull_handle: u32,
    pub src_magic: u32,
}

/// HOST_QUERY body (spec §4.12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct HostQuery {
    /// Index of the queried peer in the querier's table.
    pub src_dst_peer_index: u16,
    pub magic: u32,
}

/// HOST_REPLY body (spec §4.12); the hostname is the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct HostReply {
    /// Hostname bytes including the NUL (1..=80).
    pub length: u8,
    /// Index of the querier in the replier's table.
    pub src_dst_peer_index: u16,
    pub magic: u32,
}

/// One decoded (or to-be-encoded) packet header, without payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    /// RAW: the payload is the whole frame from offset 16 (type byte included).
    Raw,
    HostQuery(HostQuery),
    HostReply(HostReply),
    Truc(Truc),
    Connect(Connect),
    Tiny(Msg),
    Small(Msg),
    Medium(Medium),
    Rndv(Rndv),
    Pull(Pull),
    PullReply(PullReply),
    Notify(Notify),
    NackLib(NackLib),
    NackMcp(NackMcp),
}

impl Packet {
    /// The type byte this packet is sent with.
    pub fn packet_type(&self) -> PacketType {
        match self {
            Packet::Raw => PacketType::Raw,
            Packet::HostQuery(_) => PacketType::HostQuery,
            Packet::HostReply(_) => PacketType::HostReply,
            Packet::Truc(_) => PacketType::Truc,
            Packet::Connect(_) => PacketType::Connect,
            Packet::Tiny(_) => PacketType::Tiny,
            Packet::Small(_) => PacketType::Small,
            Packet::Medium(_) => PacketType::Medium,
            Packet::Rndv(_) => PacketType::Rndv,
            Packet::Pull(_) => PacketType::Pull,
            Packet::PullReply(_) => PacketType::PullReply,
            Packet::Notify(_) => PacketType::Notify,
            Packet::NackLib(_) => PacketType::NackLib,
            Packet::NackMcp(_) => PacketType::NackMcp,
        }
    }

    /// Body header bytes after the common header, payload excluded
    /// (0 for RAW, whose type byte belongs to the payload).
    pub fn body_len(&self, cfg: &WireConfig) -> usize {
        // Every `Packet` variant is a supported type.
        self.packet_type().body_len(cfg).unwrap_or(0)
    }

    /// Common header + body header bytes: where the payload starts.
    pub fn header_len(&self, cfg: &WireConfig) -> usize {
        crate::config::COMMON_HEADER_LEN + self.body_len(cfg)
    }

    /// Payload length the packet's own length field declares, or `None`
    /// where the payload is free-form (RAW). Types without payload give 0.
    pub fn declared_payload_len(&self) -> Option<usize> {
        Some(match self {
            Packet::Raw => return None,
            Packet::Tiny(m) | Packet::Small(m) => usize::from(m.length),
            Packet::Medium(m) => usize::from(m.frag_length),
            Packet::PullReply(p) => usize::from(p.frame_length),
            Packet::HostReply(h) => usize::from(h.length),
            // The sender's other boards (6-byte MACs) when it offers striping.
            Packet::Connect(c) => 6 * usize::from(c.stripe_boards),
            Packet::HostQuery(_)
            | Packet::Truc(_)
            | Packet::Rndv(_)
            | Packet::Pull(_)
            | Packet::Notify(_)
            | Packet::NackLib(_)
            | Packet::NackMcp(_) => 0,
        })
    }
}
