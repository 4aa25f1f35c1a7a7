//! proptest strategies producing valid packets (within the ranges a
//! receiver accepts) for a given wire configuration.

#![allow(dead_code)]

use omx_wire::*;
use proptest::collection::vec;
use proptest::prelude::*;

pub fn configs() -> [WireConfig; 3] {
    [
        WireConfig::native_9000(),
        WireConfig::native_1500(),
        WireConfig::mx_compat(),
    ]
}

pub fn header(cfg: WireConfig) -> impl Strategy<Value = Header> {
    (any::<[u8; 6]>(), any::<[u8; 6]>(), any::<u16>()).prop_map(move |(d, s, p)| Header {
        dst_mac: d,
        src_mac: s,
        ethertype: cfg.ethertype,
        dst_src_peer_index: p,
    })
}

fn msg(length: impl Strategy<Value = u16>) -> impl Strategy<Value = Msg> {
    (
        any::<(u8, u8, u16, u16, u16)>(),
        length,
        any::<u64>(),
        any::<u32>(),
        any::<u8>(),
    )
        .prop_map(
            |((dst, src, checksum, seq, piggy), length, match_info, session, flags)| Msg {
                dst_endpoint: dst,
                src_endpoint: src,
                flags,
                length,
                checksum,
                lib_seqnum: seq,
                lib_piggyack: piggy,
                match_info,
                session,
            },
        )
}

/// A message packet with a payload of exactly `msg.length` bytes.
fn msg_with_payload(max: u16, make: fn(Msg) -> Packet) -> impl Strategy<Value = (Packet, Vec<u8>)> {
    msg(0..=max).prop_flat_map(move |m| {
        vec(any::<u8>(), usize::from(m.length)).prop_map(move |p| (make(m), p))
    })
}

fn rndv() -> impl Strategy<Value = (Packet, Vec<u8>)> {
    (msg(8..=u16::MAX), any::<(u32, u8, u8, u16)>()).prop_map(|(m, (len, id, seq, off))| {
        let r = Rndv {
            msg: m,
            msg_length: len,
            pulled_rdma_id: id,
            pulled_rdma_seqnum: seq,
            pulled_rdma_offset: off,
        };
        (Packet::Rndv(r), Vec::new())
    })
}

/// A fragment of a medium message: total length, then which fragment, then
/// a payload whose size follows from both (full except for the last one).
fn medium(cfg: WireConfig) -> impl Strategy<Value = (Packet, Vec<u8>)> {
    let frag_max = cfg.medium_frag_max;
    let pipeline = if cfg.is_compat() {
        COMPAT_FRAG_PIPELINE
    } else {
        0
    };
    (0..=cfg.medium_max())
        .prop_flat_map(move |length| {
            let frags = length.div_ceil(frag_max).max(1);
            (Just(length), 0..frags)
        })
        .prop_flat_map(move |(length, seq)| {
            let offset = seq * frag_max;
            let frag_length = (length - offset).min(frag_max);
            (
                Just((length, seq, frag_length)),
                msg(Just(0)),
                any::<u16>(),
                vec(any::<u8>(), frag_length as usize),
            )
        })
        .prop_map(move |((length, seq, frag_length), m, checksum, payload)| {
            let md = Medium {
                dst_endpoint: m.dst_endpoint,
                src_endpoint: m.src_endpoint,
                length,
                lib_seqnum: m.lib_seqnum,
                lib_piggyack: m.lib_piggyack,
                match_info: m.match_info,
                session: m.session,
                frag_length: frag_length as u16,
                frag_seqnum: seq as u8,
                frag_pipeline: pipeline,
                checksum,
            };
            (Packet::Medium(md), payload)
        })
}

fn notify() -> impl Strategy<Value = (Packet, Vec<u8>)> {
    (any::<(u8, u8, u32, u32, u8, u8, u16, u16)>(), any::<u8>()).prop_map(|(t, flags)| {
        let n = Notify {
            dst_endpoint: t.0,
            src_endpoint: t.1,
            flags,
            session: t.2,
            total_length: t.3,
            pulled_rdma_id: t.4,
            pulled_rdma_seqnum: t.5,
            lib_seqnum: t.6,
            lib_piggyack: t.7,
        };
        (Packet::Notify(n), Vec::new())
    })
}

/// A block that fits `pull_block_replies` frames, with field widths of the
/// configured layout.
fn pull(cfg: WireConfig) -> impl Strategy<Value = (Packet, Vec<u8>)> {
    let (id_max, off_max) = if cfg.is_compat() {
        (u32::from(u8::MAX), u32::from(u16::MAX))
    } else {
        (u32::MAX, u32::MAX)
    };
    (0..cfg.pull_reply_max)
        .prop_flat_map(move |ffo| (Just(ffo), 1..=cfg.pull_block_max() - ffo))
        .prop_flat_map(move |(ffo, block)| {
            (
                Just((ffo, block)),
                any::<(u8, u8, u32, u32, u8, u32, u32, u32)>(),
                0..=id_max,
                0..=off_max,
            )
        })
        .prop_map(|((ffo, block), t, id, off)| {
            let p = Pull {
                dst_endpoint: t.0,
                src_endpoint: t.1,
                session: t.2,
                total_length: t.3,
                pulled_rdma_id: id,
                pulled_rdma_seqnum: t.4,
                pulled_rdma_offset: off,
                src_pull_handle: t.5,
                src_magic: t.6,
                first_frame_offset: ffo,
                block_length: block,
                frame_index: t.7,
            };
            (Packet::Pull(p), Vec::new())
        })
}

fn pull_reply(cfg: WireConfig) -> impl Strategy<Value = (Packet, Vec<u8>)> {
    (0..=cfg.pull_reply_max as u16, any::<(u8, u32, u32, u32)>()).prop_flat_map(|(len, t)| {
        let p = PullReply {
            frame_seqnum: t.0,
            frame_length: len,
            msg_offset: t.1,
            dst_pull_handle: t.2,
            dst_magic: t.3,
        };
        vec(any::<u8>(), usize::from(len)).prop_map(move |v| (Packet::PullReply(p), v))
    })
}

fn connect() -> impl Strategy<Value = (Packet, Vec<u8>)> {
    (
        any::<(u8, u8, u16, u16, u32, u32, u16, u8)>(),
        CONNECT_DATA_LEN..=u8::MAX,
        any::<bool>(),
        any::<u8>(),
    )
        .prop_map(|(t, length, is_reply, status)| {
            let c = Connect {
                dst_endpoint: t.0,
                src_endpoint: t.1,
                length,
                lib_seqnum: t.2,
                src_dst_peer_index: t.3,
                src_session_id: t.4,
                app_key_or_target_session: t.5,
                target_recv_seqnum_start: t.6,
                is_reply,
                connect_seqnum: t.7,
                // Requests have no status byte.
                status_code: if is_reply { status } else { 0 },
                link_mtu: u16::from(t.7) * 257,
                extensions: Extensions::from_bits(t.7),
                stripe_boards: 0,
            };
            (Packet::Connect(c), Vec::new())
        })
}

fn truc() -> impl Strategy<Value = (Packet, Vec<u8>)> {
    (
        any::<(u8, u8, u32, u16, u32, u16, u8)>(),
        TRUC_DATA_LEN..=u8::MAX,
    )
        .prop_map(|(t, length)| {
            let tr = Truc {
                dst_endpoint: t.0,
                src_endpoint: t.1,
                length,
                session: t.2,
                truc_type: TRUC_TYPE_ACK,
                lib_seqnum: t.3,
                session_id: t.2,
                acknum: t.4,
                send_seq: t.5,
                resent: t.6,
            };
            (Packet::Truc(tr), Vec::new())
        })
}

fn nacks() -> impl Strategy<Value = (Packet, Vec<u8>)> {
    prop_oneof![
        (any::<(u8, u8, u16, u16)>(), 1u8..=4).prop_map(|(t, k)| {
            let n = NackLib {
                src_endpoint: t.0,
                nack_type: k,
                dst_endpoint: t.1,
                dst_src_peer_index: t.2,
                lib_seqnum: t.3,
            };
            (Packet::NackLib(n), Vec::new())
        }),
        (any::<(u8, u32, u32)>(), 1u8..=4).prop_map(|(t, k)| {
            let n = NackMcp {
                src_endpoint: t.0,
                nack_type: k,
                src_pull_handle: t.1,
                src_magic: t.2,
            };
            (Packet::NackMcp(n), Vec::new())
        }),
    ]
}

fn host() -> impl Strategy<Value = (Packet, Vec<u8>)> {
    prop_oneof![
        any::<(u16, u32)>().prop_map(|(i, m)| {
            let q = HostQuery {
                src_dst_peer_index: i,
                magic: m,
            };
            (Packet::HostQuery(q), Vec::new())
        }),
        (1..=HOSTNAME_MAX as u8, any::<(u16, u32)>()).prop_flat_map(|(len, (i, m))| {
            let r = HostReply {
                length: len,
                src_dst_peer_index: i,
                magic: m,
            };
            vec(any::<u8>(), usize::from(len)).prop_map(move |v| (Packet::HostReply(r), v))
        }),
    ]
}

fn raw() -> impl Strategy<Value = (Packet, Vec<u8>)> {
    vec(any::<u8>(), 0..RAW_FRAME_MAX - COMMON_HEADER_LEN).prop_map(|mut v| {
        v.insert(0, PacketType::Raw as u8);
        (Packet::Raw, v)
    })
}

/// Any valid packet of any type, with its payload.
pub fn packet(cfg: WireConfig) -> impl Strategy<Value = (Packet, Vec<u8>)> {
    prop_oneof![
        msg_with_payload(TINY_MAX as u16, Packet::Tiny),
        msg_with_payload(SMALL_MAX as u16, Packet::Small),
        rndv(),
        medium(cfg),
        notify(),
        pull(cfg),
        pull_reply(cfg),
        connect(),
        truc(),
        nacks(),
        host(),
        raw(),
    ]
}

/// A valid encoded frame plus what it encodes.
pub fn frame(cfg: WireConfig) -> impl Strategy<Value = (Vec<u8>, Header, Packet, Vec<u8>)> {
    (header(cfg), packet(cfg)).prop_map(move |(h, (p, payload))| {
        let mut out = Vec::new();
        encode(&h, &p, &payload, &cfg, &mut out).expect("valid packet encodes");
        (out, h, p, payload)
    })
}
