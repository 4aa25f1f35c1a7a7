//! Frame building (spec §2–§4).
//!
//! Encoding checks only what the layout itself needs (values fit their wire
//! width, payload matches the declared length); protocol limits such as the
//! TINY maximum are left to the caller, so tests of higher layers can still
//! craft frames that receivers must reject. Pads and unset fields are written
//! as zero.

use crate::bytes::Writer;
use crate::config::{
    trailer_len, write_trailer, Extensions, WireConfig, WireMode, CHECKSUM_FLAG, COMMON_HEADER_LEN,
    CONNECT_EXT_MARKER, CONNECT_MTU_MARKER, MIN_FRAME_LEN,
};
use crate::error::EncodeError;
use crate::packet::{
    Connect, Header, HostQuery, HostReply, Medium, Msg, NackLib, NackMcp, Notify, Packet,
    PacketType, Pull, PullReply, Rndv, Truc, PULL_BODY_COMPAT, PULL_BODY_NATIVE,
};

/// Writes the common header and the body header of `packet` at the start of
/// `out` and returns the number of bytes written ([`Packet::header_len`]).
///
/// The payload is not written; the caller places it at the returned offset
/// (e.g. straight into a send ring slot). When `cfg` has checksums on and the type
/// gets one ([`WireConfig::checksums`]), [`CHECKSUM_FLAG`] is set in the type byte and
/// the caller appends the trailer ([`crate::checksum_of`]) after the payload. `header.ethertype` is written as
/// given, so RAW frames can use the fixed discovery EtherType.
pub fn encode_header(
    header: &Header,
    packet: &Packet,
    cfg: &WireConfig,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let need = packet.header_len(cfg);
    let have = out.len();
    let dst = out
        .get_mut(..need)
        .ok_or(EncodeError::BufferTooSmall { need, have })?;
    let (common, body) = dst
        .split_first_chunk_mut::<COMMON_HEADER_LEN>()
        .ok_or(EncodeError::BufferTooSmall { need, have })?;
    let ptype = packet.packet_type() as u8;
    match packet {
        Packet::Raw => {}
        Packet::HostQuery(p) => put(body, host_query(ptype, p)),
        Packet::HostReply(p) => put(body, host_reply(ptype, p)),
        Packet::Truc(p) => put(body, truc(ptype, p)),
        Packet::Connect(p) => put(body, connect(ptype, p)),
        Packet::Tiny(m) | Packet::Small(m) => {
            let mut w = Writer::<24>::new();
            msg(&mut w, ptype, m);
            put(body, w)
        }
        Packet::Medium(p) => put(body, medium(ptype, p, cfg)?),
        Packet::Rndv(p) => put(body, rndv(ptype, p)),
        Packet::Pull(p) => match cfg.mode {
            WireMode::Native => put(body, pull_native(ptype, p)),
            WireMode::MxCompat => put(body, pull_compat(ptype, p)?),
        },
        Packet::PullReply(p) => put(body, pull_reply(ptype, p)),
        Packet::Notify(p) => put(body, notify(ptype, p)),
        Packet::NackLib(p) => put(body, nack_lib(ptype, p)),
        Packet::NackMcp(p) => put(body, nack_mcp(ptype, p)),
    }
    if cfg.checksums(ptype) {
        body[0] |= CHECKSUM_FLAG;
    }
    // Written last so that a layout error leaves `out` untouched.
    *common = common_header(header).0;
    Ok(need)
}

/// Appends a complete frame (headers + payload, the checksum trailer when `cfg` has
/// checksums on, zero-padded to [`MIN_FRAME_LEN`]) to `out`. On error `out` is left unchanged.
///
/// `payload.len()` must equal the packet's declared length field (TINY/SMALL
/// `length`, MEDIUM `frag_length`, PULL_REPLY `frame_length`, HOST_REPLY
/// `length`); types without payload require it empty. A RAW payload is the
/// frame from offset 16 on, so it must start with the RAW type byte (1) to
/// decode as RAW again.
pub fn encode(
    header: &Header,
    packet: &Packet,
    payload: &[u8],
    cfg: &WireConfig,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    match packet.declared_payload_len() {
        Some(declared) if declared != payload.len() => {
            return Err(EncodeError::PayloadLength {
                declared,
                actual: payload.len(),
            });
        }
        Some(_) => {}
        None => {
            if payload.first() != Some(&(PacketType::Raw as u8)) {
                return Err(EncodeError::FieldRange(
                    "raw payload must start with the RAW type byte",
                ));
            }
        }
    }
    let start = out.len();
    let header_len = packet.header_len(cfg);
    out.resize(start + header_len, 0);
    if let Err(e) = encode_header(header, packet, cfg, &mut out[start..]) {
        out.truncate(start);
        return Err(e);
    }
    let trailer = trailer_len(&out[start..]);
    let frame_len = (header_len + payload.len() + trailer).max(MIN_FRAME_LEN);
    out.reserve(frame_len - header_len);
    out.extend_from_slice(payload);
    let end = out.len();
    out.resize(end + trailer, 0);
    let (covered, tail) = out[start..].split_at_mut(end - start);
    write_trailer(&[covered], tail);
    out.resize(start + frame_len, 0);
    Ok(())
}

#[inline(always)]
fn put<const N: usize>(dst: &mut [u8], w: Writer<N>) {
    // `dst` is exactly the body length of the packet type, which is `N`.
    debug_assert_eq!(dst.len(), N);
    if let Some(d) = dst.first_chunk_mut::<N>() {
        *d = w.0;
    }
}

fn common_header(h: &Header) -> Writer<COMMON_HEADER_LEN> {
    let mut w = Writer::new();
    w.mac::<0>(h.dst_mac);
    w.mac::<6>(h.src_mac);
    w.u16::<12>(h.ethertype);
    w.u16::<14>(h.dst_src_peer_index);
    w
}

fn msg<const N: usize>(w: &mut Writer<N>, ptype: u8, m: &Msg) {
    w.u8::<0>(ptype);
    w.u8::<1>(m.dst_endpoint);
    w.u8::<2>(m.src_endpoint);
    w.u8::<3>(m.flags);
    w.u16::<4>(m.length);
    w.u16::<6>(m.checksum);
    w.u16::<8>(m.lib_seqnum);
    w.u16::<10>(m.lib_piggyack);
    w.u64::<12>(m.match_info);
    w.u32::<20>(m.session);
}

fn rndv(ptype: u8, r: &Rndv) -> Writer<32> {
    let mut w = Writer::new();
    msg(&mut w, ptype, &r.msg);
    w.u32::<24>(r.msg_length);
    w.u8::<28>(r.pulled_rdma_id);
    w.u8::<29>(r.pulled_rdma_seqnum);
    w.u16::<30>(r.pulled_rdma_offset);
    w
}

fn medium(ptype: u8, m: &Medium, cfg: &WireConfig) -> Result<Writer<32>, EncodeError> {
    let mut w = Writer::new();
    w.u8::<0>(ptype);
    w.u8::<1>(m.dst_endpoint);
    w.u8::<2>(m.src_endpoint);
    match cfg.mode {
        // Native: byte 27 is unused, `frag_pipeline` is ignored.
        WireMode::Native => w.u32::<4>(m.length),
        WireMode::MxCompat => {
            let length = u16::try_from(m.length)
                .map_err(|_| EncodeError::FieldRange("medium length exceeds 16 bits"))?;
            w.u16::<4>(length);
            w.u8::<27>(m.frag_pipeline);
        }
    }
    w.u16::<8>(m.lib_seqnum);
    w.u16::<10>(m.lib_piggyack);
    w.u64::<12>(m.match_info);
    w.u32::<20>(m.session);
    w.u16::<24>(m.frag_length);
    w.u8::<26>(m.frag_seqnum);
    w.u16::<28>(m.checksum);
    Ok(w)
}

fn notify(ptype: u8, n: &Notify) -> Writer<24> {
    let mut w = Writer::new();
    w.u8::<0>(ptype);
    w.u8::<1>(n.dst_endpoint);
    w.u8::<2>(n.src_endpoint);
    w.u8::<3>(n.flags);
    w.u32::<4>(n.session);
    w.u32::<8>(n.total_length);
    w.u8::<12>(n.pulled_rdma_id);
    w.u8::<13>(n.pulled_rdma_seqnum);
    w.u16::<18>(n.lib_seqnum);
    w.u16::<20>(n.lib_piggyack);
    w
}

fn pull_native(ptype: u8, p: &Pull) -> Writer<PULL_BODY_NATIVE> {
    let mut w = Writer::new();
    w.u8::<0>(ptype);
    w.u8::<1>(p.dst_endpoint);
    w.u8::<2>(p.src_endpoint);
    w.u32::<4>(p.session);
    w.u32::<8>(p.total_length);
    w.u32::<12>(p.pulled_rdma_id);
    w.u8::<16>(p.pulled_rdma_seqnum);
    w.u32::<20>(p.pulled_rdma_offset);
    w.u32::<24>(p.src_pull_handle);
    w.u32::<28>(p.src_magic);
    w.u32::<32>(p.first_frame_offset);
    w.u32::<36>(p.block_length);
    w.u32::<40>(p.frame_index);
    w
}

fn pull_compat(ptype: u8, p: &Pull) -> Result<Writer<PULL_BODY_COMPAT>, EncodeError> {
    fn narrow<T: TryFrom<u32>>(v: u32, what: &'static str) -> Result<T, EncodeError> {
        T::try_from(v).map_err(|_| EncodeError::FieldRange(what))
    }
    let mut w = Writer::new();
    w.u8::<0>(ptype);
    w.u8::<1>(p.dst_endpoint);
    w.u8::<2>(p.src_endpoint);
    w.u32::<4>(p.session);
    w.u32::<8>(p.total_length);
    w.u8::<12>(narrow(
        p.pulled_rdma_id,
        "pull pulled_rdma_id exceeds 8 bits",
    )?);
    w.u8::<13>(p.pulled_rdma_seqnum);
    w.u16::<14>(narrow(
        p.pulled_rdma_offset,
        "pull pulled_rdma_offset exceeds 16 bits",
    )?);
    w.u32::<16>(p.src_pull_handle);
    w.u32::<20>(p.src_magic);
    w.u16::<24>(narrow(
        p.first_frame_offset,
        "pull first_frame_offset exceeds 16 bits",
    )?);
    w.u16::<26>(narrow(p.block_length, "pull block_length exceeds 16 bits")?);
    w.u32::<28>(p.frame_index);
    Ok(w)
}

fn pull_reply(ptype: u8, p: &PullReply) -> Writer<16> {
    let mut w = Writer::new();
    w.u8::<0>(ptype);
    w.u8::<1>(p.frame_seqnum);
    w.u16::<2>(p.frame_length);
    w.u32::<4>(p.msg_offset);
    w.u32::<8>(p.dst_pull_handle);
    w.u32::<12>(p.dst_magic);
    w
}

fn connect(ptype: u8, c: &Connect) -> Writer<32> {
    let mut w = Writer::new();
    w.u8::<0>(ptype);
    w.u8::<1>(c.dst_endpoint);
    w.u8::<2>(c.src_endpoint);
    w.u8::<4>(c.length);
    w.u16::<8>(c.lib_seqnum);
    w.u16::<10>(c.src_dst_peer_index);
    w.u32::<16>(c.src_session_id);
    w.u32::<20>(c.app_key_or_target_session);
    w.u16::<24>(c.target_recv_seqnum_start);
    w.u8::<26>(u8::from(c.is_reply));
    w.u8::<27>(c.connect_seqnum);
    // Byte 28 is a pad in requests: the status only exists in replies.
    if c.is_reply {
        w.u8::<28>(c.status_code);
    }
    // Bytes 29..31 are pads the original ignores: an advertised size goes there behind
    // a marker, and an unadvertised one leaves them zero (the original's layout).
    if c.link_mtu != 0 {
        w.u8::<29>(CONNECT_MTU_MARKER);
        w.u16::<30>(c.link_mtu);
    }
    if c.extensions != Extensions::NONE {
        w.u8::<12>(CONNECT_EXT_MARKER);
        w.u8::<13>(c.extensions.bits());
        if c.extensions.contains(Extensions::STRIPE) {
            w.u8::<14>(c.stripe_boards);
        }
    }
    w
}

fn truc(ptype: u8, t: &Truc) -> Writer<28> {
    let mut w = Writer::new();
    w.u8::<0>(ptype);
    w.u8::<1>(t.dst_endpoint);
    w.u8::<2>(t.src_endpoint);
    w.u8::<4>(t.length);
    w.u32::<8>(t.session);
    w.u8::<12>(t.truc_type);
    w.u16::<14>(t.lib_seqnum);
    w.u32::<16>(t.session_id);
    w.u32::<20>(t.acknum);
    w.u16::<24>(t.send_seq);
    w.u8::<26>(t.resent);
    w
}

fn nack_lib(ptype: u8, n: &NackLib) -> Writer<16> {
    let mut w = Writer::new();
    w.u8::<0>(ptype);
    w.u8::<1>(n.src_endpoint);
    w.u8::<3>(n.nack_type);
    w.u8::<9>(n.dst_endpoint);
    w.u16::<10>(n.dst_src_peer_index);
    w.u16::<12>(n.lib_seqnum);
    w
}

fn nack_mcp(ptype: u8, n: &NackMcp) -> Writer<16> {
    let mut w = Writer::new();
    w.u8::<0>(ptype);
    w.u8::<1>(n.src_endpoint);
    w.u8::<3>(n.nack_type);
    w.u32::<8>(n.src_pull_handle);
    w.u32::<12>(n.src_magic);
    w
}

fn host_query(ptype: u8, q: &HostQuery) -> Writer<16> {
    let mut w = Writer::new();
    w.u8::<0>(ptype);
    w.u16::<2>(q.src_dst_peer_index);
    w.u32::<8>(q.magic);
    w
}

fn host_reply(ptype: u8, r: &HostReply) -> Writer<16> {
    let mut w = Writer::new();
    w.u8::<0>(ptype);
    w.u8::<1>(r.length);
    w.u16::<2>(r.src_dst_peer_index);
    w.u32::<8>(r.magic);
    w
}
