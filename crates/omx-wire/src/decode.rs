//! Frame parsing and receive-side validation (spec §2–§4, §12).
//!
//! Checks run in a fixed order, mirroring the original driver: frame long
//! enough for the common header, EtherType, type byte, frame long enough for
//! the type's body header, field rules (`BadField` / `BadDataLength`), and
//! finally that the declared payload is present. Every access is either a
//! checked `get`/`first_chunk` or a compile-time checked constant offset, so
//! no input can make decoding panic; nothing is allocated or copied.
//! Clippy enforces the no-panic discipline for this module.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::arithmetic_side_effects
)]

use crate::bytes::Reader;
use crate::config::{
    checksum_of, type_of, unstriped_type, Extensions, WireConfig, WireMode, CHECKSUM_FLAG,
    CHECKSUM_LEN, COMMON_HEADER_LEN, COMPAT_FRAG_PIPELINE, CONNECT_DATA_LEN, CONNECT_EXT_MARKER,
    CONNECT_MTU_MARKER, CONNECT_SEAL_MAGIC, HOSTNAME_MAX, RNDV_DATA_LEN, SMALL_MAX,
    STRIPE_BOARDS_MAX, TINY_MAX, TRUC_DATA_LEN, TRUC_TYPE_ACK,
};
use crate::error::DecodeError;
use crate::packet::{
    Connect, Header, HostQuery, HostReply, Medium, Msg, NackLib, NackMcp, NackType, Notify, Packet,
    PacketType, Pull, PullReply, Rndv, Truc, PULL_BODY_COMPAT, PULL_BODY_NATIVE,
};

/// A validated frame: typed header fields plus the payload, borrowed from
/// the input (zero-copy). Padding past the declared payload is not included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded<'a> {
    pub header: Header,
    pub packet: Packet,
    pub payload: &'a [u8],
    /// The frame carried a checksum trailer (verified).
    pub checksummed: bool,
    /// A striped PULL or PULL_REPLY ([`crate::STRIPE_PULL_TYPE`]), decoded as the
    /// type it stands for.
    pub striped: bool,
}

/// Parses and validates one received Ethernet frame (FCS excluded).
///
/// Unset fields and pads are ignored, so frames from a sender that does not
/// zero its buffers decode fine. The payload is a sub-slice of `frame`.
pub fn decode<'a>(frame: &'a [u8], cfg: &WireConfig) -> Result<Decoded<'a>, DecodeError> {
    let have = frame.len();
    let too_short = DecodeError::TooShort {
        need: COMMON_HEADER_LEN + 1,
        have,
    };
    let (header, rest) = common_header(frame, cfg, too_short)?;
    let &type_byte = rest.first().ok_or(too_short)?;
    let bare = bare_type(type_byte, cfg);
    let striped = cfg.mode == WireMode::Native && unstriped_type(bare).is_some();
    let bare = unstriped_type(bare).filter(|_| striped).unwrap_or(bare);
    let ptype = PacketType::from_u8(bare).ok_or(DecodeError::UnknownType(type_byte))?;

    let (packet, payload) = match ptype {
        PacketType::Raw => (Packet::Raw, rest),
        PacketType::HostQuery => {
            let b = body::<16>(rest, have)?;
            let p = HostQuery {
                src_dst_peer_index: b.u16::<2>(),
                magic: b.u32::<8>(),
            };
            (Packet::HostQuery(p), &[][..])
        }
        PacketType::HostReply => {
            let b = body::<16>(rest, have)?;
            let p = HostReply {
                length: b.u8::<1>(),
                src_dst_peer_index: b.u16::<2>(),
                magic: b.u32::<8>(),
            };
            if p.length == 0 || usize::from(p.length) > HOSTNAME_MAX {
                return Err(DecodeError::BadDataLength);
            }
            (Packet::HostReply(p), payload(frame, 16, p.length.into())?)
        }
        PacketType::Tiny | PacketType::Small => {
            let m = msg(body::<24>(rest, have)?);
            let (max, packet) = if ptype == PacketType::Tiny {
                (TINY_MAX, Packet::Tiny(m))
            } else {
                (SMALL_MAX, Packet::Small(m))
            };
            if usize::from(m.length) > max {
                return Err(DecodeError::BadDataLength);
            }
            (packet, payload(frame, 24, m.length.into())?)
        }
        PacketType::Rndv => (Packet::Rndv(rndv(body::<32>(rest, have)?)?), &[][..]),
        PacketType::Medium => {
            let m = medium(body::<32>(rest, have)?, cfg)?;
            (Packet::Medium(m), payload(frame, 32, m.frag_length.into())?)
        }
        PacketType::Notify => (Packet::Notify(notify(body::<24>(rest, have)?)), &[][..]),
        PacketType::Pull => {
            let p = match cfg.mode {
                WireMode::Native => pull_native(body::<PULL_BODY_NATIVE>(rest, have)?),
                WireMode::MxCompat => pull_compat(body::<PULL_BODY_COMPAT>(rest, have)?),
            };
            check_pull(&p, cfg)?;
            (Packet::Pull(p), &[][..])
        }
        PacketType::PullReply => {
            let p = pull_reply(body::<16>(rest, have)?, cfg)?;
            (
                Packet::PullReply(p),
                payload(frame, 16, p.frame_length.into())?,
            )
        }
        PacketType::Connect => {
            let c = connect(body::<32>(rest, have)?)?;
            let boards = usize::from(c.stripe_boards) * 6;
            (Packet::Connect(c), payload(frame, 32, boards)?)
        }
        PacketType::Truc => (Packet::Truc(truc(body::<28>(rest, have)?)?), &[][..]),
        PacketType::NackLib => {
            let b = body::<16>(rest, have)?;
            let p = NackLib {
                src_endpoint: b.u8::<1>(),
                nack_type: check_nack_type(b.u8::<3>())?,
                dst_endpoint: b.u8::<9>(),
                dst_src_peer_index: b.u16::<10>(),
                lib_seqnum: b.u16::<12>(),
            };
            (Packet::NackLib(p), &[][..])
        }
        PacketType::NackMcp => {
            let b = body::<16>(rest, have)?;
            let p = NackMcp {
                src_endpoint: b.u8::<1>(),
                nack_type: check_nack_type(b.u8::<3>())?,
                src_pull_handle: b.u32::<8>(),
                src_magic: b.u32::<12>(),
            };
            (Packet::NackMcp(p), &[][..])
        }
        PacketType::MfmNicReply
        | PacketType::EtherUnicast
        | PacketType::EtherMulticast
        | PacketType::EtherNative => return Err(DecodeError::UnsupportedType(ptype)),
    };
    // Only native endpoint types get past the type check with the flag set. A receiver
    // with checksums on requires them on every endpoint frame: otherwise a corruption
    // that clears the flag would let another one in the payload through.
    let checksummed = type_byte & CHECKSUM_FLAG != 0;
    if checksummed {
        verify_trailer(frame, &packet, payload, cfg, true)?;
    } else if cfg.checksums(type_byte) {
        return Err(DecodeError::BadChecksum);
    } else if let Packet::Connect(_) = packet {
        verify_trailer(frame, &packet, payload, cfg, false)?;
    }
    Ok(Decoded {
        header,
        packet,
        payload,
        checksummed,
        striped,
    })
}

/// The common header (Ethernet addresses, EtherType, peer index) and the bytes after
/// it; `too_short` when the frame cannot hold it.
fn common_header<'a>(
    frame: &'a [u8],
    cfg: &WireConfig,
    too_short: DecodeError,
) -> Result<(Header, &'a [u8]), DecodeError> {
    let (common, rest) = frame
        .split_first_chunk::<COMMON_HEADER_LEN>()
        .ok_or(too_short)?;
    let common = Reader(common);
    let header = Header {
        dst_mac: common.mac::<0>(),
        src_mac: common.mac::<6>(),
        ethertype: common.u16::<12>(),
        dst_src_peer_index: common.u16::<14>(),
    };
    if header.ethertype != cfg.ethertype {
        return Err(DecodeError::WrongEtherType(header.ethertype));
    }
    Ok((header, rest))
}

/// The packet type without flags: native endpoint frames (TRUC..NACK_MCP) may carry the
/// latency and checksum flags in the type byte; board frames never do.
fn bare_type(type_byte: u8, cfg: &WireConfig) -> u8 {
    match type_of(type_byte) {
        t if cfg.mode == WireMode::Native && crate::peek::is_endpoint_type(t) => t,
        _ => type_byte,
    }
}

/// Bytes of a pull reply before its payload: common header and body header.
pub const PULL_REPLY_HEAD_LEN: usize = COMMON_HEADER_LEN + 16;

/// Parses a pull reply from its first [`PULL_REPLY_HEAD_LEN`] bytes (`head`), for
/// receiving its payload straight into place; `frame_len` is the whole frame's length.
/// Checks what [`decode`] checks of a pull reply except the payload bytes themselves.
/// Frames with a checksum trailer (and, with checksums on, frames without) are refused
/// with `BadChecksum`: their bytes must be verified before any is placed.
pub fn decode_pull_reply_head(
    head: &[u8],
    frame_len: usize,
    cfg: &WireConfig,
) -> Result<(Header, PullReply), DecodeError> {
    let have = head.len();
    let too_short = DecodeError::TooShort {
        need: PULL_REPLY_HEAD_LEN,
        have,
    };
    let (header, rest) = common_header(head, cfg, too_short)?;
    let b = body::<16>(rest, have)?;
    let type_byte = b.u8::<0>();
    let bare = bare_type(type_byte, cfg);
    if PacketType::from_u8(bare) != Some(PacketType::PullReply) {
        return Err(DecodeError::UnknownType(type_byte));
    }
    if type_byte & CHECKSUM_FLAG != 0 || cfg.checksums(type_byte) {
        return Err(DecodeError::BadChecksum);
    }
    let p = pull_reply(b, cfg)?;
    let end = PULL_REPLY_HEAD_LEN.saturating_add(p.frame_length.into());
    if frame_len < end {
        return Err(DecodeError::PayloadTruncated {
            need: end,
            have: frame_len,
        });
    }
    Ok((header, p))
}

/// The PULL_REPLY body header, its length checked against the configuration.
fn pull_reply(b: Reader<'_, 16>, cfg: &WireConfig) -> Result<PullReply, DecodeError> {
    let p = PullReply {
        frame_seqnum: b.u8::<1>(),
        frame_length: b.u16::<2>(),
        msg_offset: b.u32::<4>(),
        dst_pull_handle: b.u32::<8>(),
        dst_magic: b.u32::<12>(),
    };
    if u32::from(p.frame_length) > cfg.pull_reply_max {
        return Err(DecodeError::BadDataLength);
    }
    Ok(p)
}

/// Checks what follows the payload (or the body header, for types without payload):
/// the checksum trailer of a frame with [`CHECKSUM_FLAG`] (`flagged`: required), else
/// the seal of a CONNECT when its magic is there ([`CONNECT_SEAL_MAGIC`]; a connect
/// without one, an Open-MX peer's, passes).
fn verify_trailer(
    frame: &[u8],
    packet: &Packet,
    payload: &[u8],
    cfg: &WireConfig,
    flagged: bool,
) -> Result<(), DecodeError> {
    let end = packet.header_len(cfg).saturating_add(payload.len());
    let covered = frame.get(..end).ok_or(DecodeError::BadChecksum)?;
    let tail = frame.get(end..).unwrap_or_default();
    let sum = if flagged {
        tail.get(..CHECKSUM_LEN)
    } else {
        match tail.split_first_chunk::<4>() {
            Some((magic, rest)) if *magic == CONNECT_SEAL_MAGIC => rest.get(..CHECKSUM_LEN),
            _ => return Ok(()),
        }
    };
    match sum {
        Some(sum) if checksum_of(covered) == sum => Ok(()),
        _ => Err(DecodeError::BadChecksum),
    }
}

/// The first `N` body bytes (type byte included), or `TooShort`.
#[inline(always)]
fn body<const N: usize>(rest: &[u8], have: usize) -> Result<Reader<'_, N>, DecodeError> {
    rest.first_chunk::<N>()
        .map(Reader)
        .ok_or(DecodeError::TooShort {
            need: COMMON_HEADER_LEN.saturating_add(N),
            have,
        })
}

/// `len` payload bytes after a body of `body_len` bytes, or `PayloadTruncated`.
#[inline(always)]
fn payload(frame: &[u8], body_len: usize, len: usize) -> Result<&[u8], DecodeError> {
    // Operands are bounded by 16 bits, so saturation never actually happens.
    let start = COMMON_HEADER_LEN.saturating_add(body_len);
    let end = start.saturating_add(len);
    frame.get(start..end).ok_or(DecodeError::PayloadTruncated {
        need: end,
        have: frame.len(),
    })
}

/// The 24-byte "msg" body shared by TINY, SMALL and RNDV (§4.1).
#[inline(always)]
fn msg<const N: usize>(b: Reader<'_, N>) -> Msg {
    Msg {
        dst_endpoint: b.u8::<1>(),
        src_endpoint: b.u8::<2>(),
        flags: b.u8::<3>(),
        length: b.u16::<4>(),
        checksum: b.u16::<6>(),
        lib_seqnum: b.u16::<8>(),
        lib_piggyack: b.u16::<10>(),
        match_info: b.u64::<12>(),
        session: b.u32::<20>(),
    }
}

fn rndv(b: Reader<'_, 32>) -> Result<Rndv, DecodeError> {
    let r = Rndv {
        msg: msg(b),
        msg_length: b.u32::<24>(),
        pulled_rdma_id: b.u8::<28>(),
        pulled_rdma_seqnum: b.u8::<29>(),
        pulled_rdma_offset: b.u16::<30>(),
    };
    if r.msg.length < RNDV_DATA_LEN {
        return Err(DecodeError::BadDataLength);
    }
    Ok(r)
}

/// MEDIUM body in either layout (§4.3) plus fragment geometry checks.
fn medium(b: Reader<'_, 32>, cfg: &WireConfig) -> Result<Medium, DecodeError> {
    let m = medium_fields(b, cfg.mode);
    check_medium(&m, cfg)?;
    Ok(m)
}

/// The MEDIUM body fields in `mode`'s layout, unchecked.
fn medium_fields(b: Reader<'_, 32>, mode: WireMode) -> Medium {
    let (length, frag_pipeline) = match mode {
        WireMode::Native => (b.u32::<4>(), 0),
        WireMode::MxCompat => (u32::from(b.u16::<4>()), b.u8::<27>()),
    };
    Medium {
        dst_endpoint: b.u8::<1>(),
        src_endpoint: b.u8::<2>(),
        length,
        lib_seqnum: b.u16::<8>(),
        lib_piggyack: b.u16::<10>(),
        match_info: b.u64::<12>(),
        session: b.u32::<20>(),
        frag_length: b.u16::<24>(),
        frag_seqnum: b.u8::<26>(),
        frag_pipeline,
        checksum: b.u16::<28>(),
    }
}

fn check_medium(m: &Medium, cfg: &WireConfig) -> Result<(), DecodeError> {
    // MX announces the fragment size per frame; we only speak 4 KiB.
    if cfg.mode == WireMode::MxCompat && m.frag_pipeline != COMPAT_FRAG_PIPELINE {
        return Err(DecodeError::BadField("medium frag_pipeline"));
    }
    let frag_len = u64::from(m.frag_length);
    let frag_max = u64::from(cfg.medium_frag_max);
    let total = u64::from(m.length);
    if frag_len > frag_max
        || u32::from(m.frag_seqnum) >= cfg.medium_frags_max
        || total > u64::from(cfg.medium_max())
    {
        return Err(DecodeError::BadDataLength);
    }
    let end =
        u64::from(cfg.medium_frag_offset(m.frag_seqnum, m.frag_pipeline)).saturating_add(frag_len);
    // Fragments tile the message: none may overrun it, and all but the last
    // are full, so the receiver can place each one by index alone.
    if end > total || (end < total && frag_len != frag_max) {
        return Err(DecodeError::BadDataLength);
    }
    Ok(())
}

/// The configuration a third party (a capture tool, which never saw the CONNECT that
/// agreed on the frame size) decodes `frame` with, in layout `mode`: the largest native
/// frame size, with the checksum setting the frame's own flag tells, except for a native
/// MEDIUM fragment, whose sender's fragment size (hence frame size) is inferred from
/// the fragment itself: a fragment that is not the last one is full, and the last one
/// ends the message. Sizes of other types only bound their length fields, which the
/// largest frame size accepts whenever the sender's did.
pub fn observer_config(frame: &[u8], mode: WireMode, ethertype: u16) -> WireConfig {
    let base = WireConfig {
        ethertype,
        ..match mode {
            WireMode::Native => WireConfig::native(u32::from(u16::MAX)),
            WireMode::MxCompat => WireConfig::mx_compat(),
        }
    };
    let Some(&type_byte) = frame.get(COMMON_HEADER_LEN) else {
        return base;
    };
    if mode == WireMode::MxCompat {
        return base;
    }
    let checksum = type_byte & CHECKSUM_FLAG != 0;
    let cfg = WireConfig::native_checksummed(u32::from(u16::MAX), checksum);
    let cfg = WireConfig { ethertype, ..cfg };
    let medium = bare_type(type_byte, &cfg) == PacketType::Medium as u8;
    let Some(b) = frame
        .get(COMMON_HEADER_LEN..)
        .and_then(|rest| rest.first_chunk::<32>())
        .filter(|_| medium)
    else {
        return cfg;
    };
    let m = medium_fields(Reader(b), WireMode::Native);
    let (len, seq) = (u32::from(m.frag_length), u32::from(m.frag_seqnum));
    // The last fragment ends the message after `seq` full ones; any other is full.
    // Where both readings fit, they decode to the same fields.
    let before = m.length.saturating_sub(len);
    let last = match (before.checked_div(seq), before.checked_rem(seq)) {
        (Some(f), Some(0)) => Some(f),
        _ => None,
    };
    // The inverse of the native sizes: fragments of MTU - headers up to 4 KiB, and
    // 8 KiB from any frame size that holds one.
    const HEADERS: u32 = COMMON_HEADER_LEN as u32 + 32;
    let headers = HEADERS.saturating_add(if checksum { CHECKSUM_LEN as u32 } else { 0 });
    [last, Some(len)]
        .into_iter()
        .flatten()
        .filter_map(|f| match f {
            8192 => Some(cfg),
            f if f <= 4096 => Some(cfg.with_mtu(f.saturating_add(headers))),
            _ => None,
        })
        .find(|c| check_medium(&m, c).is_ok())
        // No frame size fits: decoding reports the bad length.
        .unwrap_or(cfg)
}

fn notify(b: Reader<'_, 24>) -> Notify {
    Notify {
        dst_endpoint: b.u8::<1>(),
        src_endpoint: b.u8::<2>(),
        flags: b.u8::<3>(),
        session: b.u32::<4>(),
        total_length: b.u32::<8>(),
        pulled_rdma_id: b.u8::<12>(),
        pulled_rdma_seqnum: b.u8::<13>(),
        lib_seqnum: b.u16::<18>(),
        lib_piggyack: b.u16::<20>(),
    }
}

fn pull_native(b: Reader<'_, PULL_BODY_NATIVE>) -> Pull {
    Pull {
        dst_endpoint: b.u8::<1>(),
        src_endpoint: b.u8::<2>(),
        session: b.u32::<4>(),
        total_length: b.u32::<8>(),
        pulled_rdma_id: b.u32::<12>(),
        pulled_rdma_seqnum: b.u8::<16>(),
        pulled_rdma_offset: b.u32::<20>(),
        src_pull_handle: b.u32::<24>(),
        src_magic: b.u32::<28>(),
        first_frame_offset: b.u32::<32>(),
        block_length: b.u32::<36>(),
        frame_index: b.u32::<40>(),
    }
}

fn pull_compat(b: Reader<'_, PULL_BODY_COMPAT>) -> Pull {
    Pull {
        dst_endpoint: b.u8::<1>(),
        src_endpoint: b.u8::<2>(),
        session: b.u32::<4>(),
        total_length: b.u32::<8>(),
        pulled_rdma_id: b.u8::<12>().into(),
        pulled_rdma_seqnum: b.u8::<13>(),
        pulled_rdma_offset: b.u16::<14>().into(),
        src_pull_handle: b.u32::<16>(),
        src_magic: b.u32::<20>(),
        first_frame_offset: b.u16::<24>().into(),
        block_length: b.u16::<26>().into(),
        frame_index: b.u32::<28>(),
    }
}

/// A block must be non-empty and answerable within `pull_block_replies`
/// frames, otherwise the replier would overrun the puller's frame bitmap.
fn check_pull(p: &Pull, cfg: &WireConfig) -> Result<(), DecodeError> {
    if p.block_length == 0 {
        return Err(DecodeError::BadField("pull block_length is zero"));
    }
    if p.first_frame_offset >= cfg.pull_reply_max {
        return Err(DecodeError::BadField("pull first_frame_offset"));
    }
    if cfg.pull_block_frames(p.first_frame_offset, p.block_length)
        > u64::from(cfg.pull_block_replies)
    {
        return Err(DecodeError::BadField("pull frames per block"));
    }
    Ok(())
}

fn connect(b: Reader<'_, 32>) -> Result<Connect, DecodeError> {
    let is_reply = match b.u8::<26>() {
        0 => false,
        1 => true,
        _ => return Err(DecodeError::BadField("connect is_reply")),
    };
    let c = Connect {
        dst_endpoint: b.u8::<1>(),
        src_endpoint: b.u8::<2>(),
        length: b.u8::<4>(),
        lib_seqnum: b.u16::<8>(),
        src_dst_peer_index: b.u16::<10>(),
        src_session_id: b.u32::<16>(),
        app_key_or_target_session: b.u32::<20>(),
        target_recv_seqnum_start: b.u16::<24>(),
        is_reply,
        connect_seqnum: b.u8::<27>(),
        // Byte 28 is a pad in requests; report it as 0 there so garbage from
        // a non-zeroing sender never looks like a status.
        status_code: if is_reply { b.u8::<28>() } else { 0 },
        // Only behind the marker: an Open-MX sender leaves these pads unset.
        link_mtu: if b.u8::<29>() == CONNECT_MTU_MARKER {
            b.u16::<30>()
        } else {
            0
        },
        extensions: if b.u8::<12>() == CONNECT_EXT_MARKER {
            Extensions::from_bits(b.u8::<13>())
        } else {
            Extensions::NONE
        },
        stripe_boards: 0,
    };
    let c = Connect {
        stripe_boards: if c.extensions.contains(Extensions::STRIPE) {
            b.u8::<14>()
        } else {
            0
        },
        ..c
    };
    if usize::from(c.stripe_boards) > STRIPE_BOARDS_MAX {
        return Err(DecodeError::BadField("connect stripe boards"));
    }
    if c.length < CONNECT_DATA_LEN {
        return Err(DecodeError::BadDataLength);
    }
    Ok(c)
}

fn truc(b: Reader<'_, 28>) -> Result<Truc, DecodeError> {
    let t = Truc {
        dst_endpoint: b.u8::<1>(),
        src_endpoint: b.u8::<2>(),
        length: b.u8::<4>(),
        session: b.u32::<8>(),
        truc_type: b.u8::<12>(),
        lib_seqnum: b.u16::<14>(),
        session_id: b.u32::<16>(),
        acknum: b.u32::<20>(),
        send_seq: b.u16::<24>(),
        resent: b.u8::<26>(),
    };
    if t.truc_type != TRUC_TYPE_ACK {
        return Err(DecodeError::BadField("truc type"));
    }
    if t.length < TRUC_DATA_LEN {
        return Err(DecodeError::BadDataLength);
    }
    if t.session_id != t.session {
        return Err(DecodeError::BadField(
            "truc session_id differs from session",
        ));
    }
    Ok(t)
}

fn check_nack_type(v: u8) -> Result<u8, DecodeError> {
    NackType::from_u8(v)
        .map(|t| t as u8)
        .ok_or(DecodeError::BadField("nack_type"))
}
