//! Golden frames written by hand from the offset tables of the wire spec
//! (§2, §4, §11.2). Each one is checked both ways: decoding it yields the
//! expected struct and payload, and encoding the struct yields exactly these
//! bytes (zero padding to 60 bytes included). Every field holds a distinct
//! value so that an offset or width mistake shows up.

use omx_wire::*;

const DST: [u8; 6] = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
const SRC: [u8; 6] = [0x02, 0x66, 0x77, 0x88, 0x99, 0xAA];

fn hdr(peer: u16) -> Header {
    Header {
        dst_mac: DST,
        src_mac: SRC,
        ethertype: 0x86DF,
        dst_src_peer_index: peer,
    }
}

fn all_configs() -> [WireConfig; 3] {
    [
        WireConfig::native_9000(),
        WireConfig::native_1500(),
        WireConfig::mx_compat(),
    ]
}

/// Decode and encode `frame` under `cfg` and compare with the expectation.
fn check(cfg: &WireConfig, frame: &[u8], header: Header, packet: Packet, payload: &[u8]) {
    assert!(frame.len() >= MIN_FRAME_LEN, "golden frames are padded");
    let d = decode(frame, cfg).unwrap_or_else(|e| panic!("{cfg:?}: decode failed: {e}"));
    assert_eq!(
        d,
        Decoded {
            header,
            packet,
            payload,
            checksummed: false,
            striped: false,
        },
        "{cfg:?}"
    );

    let mut out = vec![0xA5]; // encode appends: pre-existing bytes stay
    encode(&header, &packet, payload, cfg, &mut out).unwrap();
    assert_eq!(out[0], 0xA5);
    assert_eq!(&out[1..], frame, "{cfg:?}: encode differs from golden");

    let mut buf = [0xEEu8; 128];
    let n = encode_header(&header, &packet, cfg, &mut buf).unwrap();
    assert_eq!(n, packet.header_len(cfg));
    assert_eq!(&buf[..n], &frame[..n]);
    assert_eq!(buf[n], 0xEE, "encode_header wrote past the header");
}

// ---------------------------------------------------------------- TINY / SMALL

#[rustfmt::skip]
const TINY: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,     // eth dst
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,     // eth src
    0x86, 0xDF,                             // ethertype
    0x12, 0x34,                             // dst_src_peer_index
    0x25, 0x07, 0x09, 0x00,                 // ptype 37, dst ep, src ep, src_generation
    0x00, 0x05,                             // length
    0xC0, 0xDE,                             // checksum
    0x41, 0x23,                             // lib_seqnum
    0x83, 0x21,                             // lib_piggyack
    0xA1, 0xA2, 0xA3, 0xA4,                 // match_a
    0xB1, 0xB2, 0xB3, 0xB4,                 // match_b
    0xDE, 0xAD, 0xBE, 0xEF,                 // session
    b'h', b'e', b'l', b'l', b'o',           // payload (frame offset 40)
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // padding to 60
];

#[test]
fn tiny() {
    let m = Msg {
        flags: 0,
        dst_endpoint: 0x07,
        src_endpoint: 0x09,
        length: 5,
        checksum: 0xC0DE,
        lib_seqnum: 0x4123,
        lib_piggyack: 0x8321,
        match_info: 0xA1A2_A3A4_B1B2_B3B4,
        session: 0xDEAD_BEEF,
    };
    for cfg in all_configs() {
        check(&cfg, &TINY, hdr(0x1234), Packet::Tiny(m), b"hello");
    }
}

#[rustfmt::skip]
const SMALL: [u8; 80] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x00, 0x2A,                             // dst_src_peer_index 42
    0x26, 0x11, 0x22, 0x00,                 // ptype 38, dst ep, src ep, src_generation
    0x00, 0x28,                             // length 40
    0x00, 0x00,                             // checksum
    0x00, 0x01,                             // lib_seqnum
    0x00, 0x02,                             // lib_piggyack
    0x01, 0x02, 0x03, 0x04,                 // match_a
    0x05, 0x06, 0x07, 0x08,                 // match_b
    0x0A, 0x0B, 0x0C, 0x0D,                 // session
    // 40 payload bytes 0x80..0xA7 (frame offset 40..80), no padding needed
    0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
    0x8A, 0x8B, 0x8C, 0x8D, 0x8E, 0x8F, 0x90, 0x91, 0x92, 0x93,
    0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D,
    0x9E, 0x9F, 0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7,
];

#[test]
fn small() {
    let m = Msg {
        flags: 0,
        dst_endpoint: 0x11,
        src_endpoint: 0x22,
        length: 40,
        checksum: 0,
        lib_seqnum: 1,
        lib_piggyack: 2,
        match_info: 0x0102_0304_0506_0708,
        session: 0x0A0B_0C0D,
    };
    let payload: Vec<u8> = (0x80..0xA8).collect();
    for cfg in all_configs() {
        check(&cfg, &SMALL, hdr(42), Packet::Small(m), &payload);
    }
}

// ---------------------------------------------------------------- RNDV

#[rustfmt::skip]
const RNDV: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x03, 0x21,                             // dst_src_peer_index
    0x28, 0x03, 0x04, 0x00,                 // ptype 40, dst ep, src ep, src_generation
    0x00, 0x08,                             // length 8
    0x00, 0x00,                             // checksum
    0x00, 0x07,                             // lib_seqnum
    0x00, 0x05,                             // lib_piggyack
    0x11, 0x22, 0x33, 0x44,                 // match_a
    0x55, 0x66, 0x77, 0x88,                 // match_b
    0xCA, 0xFE, 0xBA, 0xBE,                 // session
    0x00, 0x10, 0x00, 0x01,                 // msg_length
    0xAB,                                   // pulled_rdma_id
    0x17,                                   // pulled_rdma_seqnum (23)
    0x03, 0x04,                             // pulled_rdma_offset
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,     // padding to 60
];

#[test]
fn rndv() {
    let r = Rndv {
        msg: Msg {
            flags: 0,
            dst_endpoint: 0x03,
            src_endpoint: 0x04,
            length: 8,
            checksum: 0,
            lib_seqnum: 7,
            lib_piggyack: 5,
            match_info: 0x1122_3344_5566_7788,
            session: 0xCAFE_BABE,
        },
        msg_length: 0x0010_0001,
        pulled_rdma_id: 0xAB,
        pulled_rdma_seqnum: 0x17,
        pulled_rdma_offset: 0x0304,
    };
    for cfg in all_configs() {
        check(&cfg, &RNDV, hdr(0x0321), Packet::Rndv(r), &[]);
    }
}

// ---------------------------------------------------------------- MEDIUM

fn medium(length: u32, frag_seqnum: u8, frag_pipeline: u8) -> Medium {
    Medium {
        dst_endpoint: 0x05,
        src_endpoint: 0x06,
        length,
        lib_seqnum: 0x0033,
        lib_piggyack: 0x0044,
        match_info: 0x89AB_CDEF_0123_4567,
        session: 0x7654_3210,
        frag_length: 6,
        frag_seqnum,
        frag_pipeline,
        checksum: 0x5A5A,
    }
}

const FRAG: &[u8] = &[0xF0, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5];

/// Native MTU 9000: last fragment (index 18) of a 18 * 8192 + 6 byte message.
#[rustfmt::skip]
const MEDIUM_NATIVE_9000: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x00, 0x07,                             // dst_src_peer_index
    0x27, 0x05, 0x06, 0x00,                 // ptype 39, dst ep, src ep, src_generation
    0x00, 0x02, 0x40, 0x06,                 // length u32 = 147462
    0x00, 0x33,                             // lib_seqnum
    0x00, 0x44,                             // lib_piggyack
    0x89, 0xAB, 0xCD, 0xEF,                 // match_a
    0x01, 0x23, 0x45, 0x67,                 // match_b
    0x76, 0x54, 0x32, 0x10,                 // session
    0x00, 0x06,                             // frag_length
    0x12,                                   // frag_seqnum 18
    0x00,                                   // unused
    0x5A, 0x5A,                             // checksum
    0x00, 0x00,                             // pad
    0xF0, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5,     // payload (frame offset 48)
    0, 0, 0, 0, 0, 0,                       // padding to 60
];

/// Native MTU 1500: last fragment (index 3) of a 3 * 1452 + 6 byte message.
#[rustfmt::skip]
const MEDIUM_NATIVE_1500: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x00, 0x07,
    0x27, 0x05, 0x06, 0x00,
    0x00, 0x00, 0x11, 0x0A,                 // length u32 = 4362
    0x00, 0x33,
    0x00, 0x44,
    0x89, 0xAB, 0xCD, 0xEF,
    0x01, 0x23, 0x45, 0x67,
    0x76, 0x54, 0x32, 0x10,
    0x00, 0x06,                             // frag_length
    0x03,                                   // frag_seqnum 3
    0x00,                                   // unused
    0x5A, 0x5A,
    0x00, 0x00,
    0xF0, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5,
    0, 0, 0, 0, 0, 0,
];

/// MX-compat: last fragment (index 5) of a 5 * 4096 + 6 byte message;
/// 16-bit length then pad, frag_pipeline 12 at body offset 27.
#[rustfmt::skip]
const MEDIUM_COMPAT: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x00, 0x07,
    0x27, 0x05, 0x06, 0x00,
    0x50, 0x06,                             // length u16 = 20486
    0x00, 0x00,                             // pad
    0x00, 0x33,
    0x00, 0x44,
    0x89, 0xAB, 0xCD, 0xEF,
    0x01, 0x23, 0x45, 0x67,
    0x76, 0x54, 0x32, 0x10,
    0x00, 0x06,                             // frag_length
    0x05,                                   // frag_seqnum 5
    0x0C,                                   // frag_pipeline 12
    0x5A, 0x5A,
    0x00, 0x00,
    0xF0, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5,
    0, 0, 0, 0, 0, 0,
];

#[test]
fn medium_native_9000() {
    let cfg = WireConfig::native_9000();
    let m = medium(18 * 8192 + 6, 18, 0);
    check(&cfg, &MEDIUM_NATIVE_9000, hdr(7), Packet::Medium(m), FRAG);
    assert_eq!(
        cfg.medium_frag_offset(m.frag_seqnum, m.frag_pipeline),
        18 * 8192
    );
}

#[test]
fn medium_native_1500() {
    let cfg = WireConfig::native_1500();
    let m = medium(3 * 1452 + 6, 3, 0);
    check(&cfg, &MEDIUM_NATIVE_1500, hdr(7), Packet::Medium(m), FRAG);
}

#[test]
fn medium_compat() {
    let cfg = WireConfig::mx_compat();
    let m = medium(5 * 4096 + 6, 5, 12);
    check(&cfg, &MEDIUM_COMPAT, hdr(7), Packet::Medium(m), FRAG);
    assert_eq!(cfg.medium_frag_offset(5, 12), 5 * 4096);
}

#[test]
fn medium_layouts_are_not_interchangeable() {
    // A compat frame read with the native layout sees a 32-bit length of
    // 0x50060000: far beyond the native medium max.
    assert_eq!(
        decode(&MEDIUM_COMPAT, &WireConfig::native_9000()),
        Err(DecodeError::BadDataLength)
    );
}

// ---------------------------------------------------------------- NOTIFY

#[rustfmt::skip]
const NOTIFY: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x00, 0x99,                             // dst_src_peer_index
    0x2B, 0x0A, 0x0B, 0x00,                 // ptype 43, dst ep, src ep, src_generation
    0x13, 0x57, 0x9B, 0xDF,                 // session
    0x02, 0x46, 0x8A, 0xCE,                 // total_length
    0xAB,                                   // pulled_rdma_id
    0x17,                                   // pulled_rdma_seqnum
    0x00, 0x00,                             // pad
    0x00, 0x00,                             // pad
    0x40, 0x02,                             // lib_seqnum
    0x40, 0x03,                             // lib_piggyack
    0x00, 0x00,                             // pad
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0,           // padding to 60
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

#[test]
fn notify() {
    let n = Notify {
        flags: 0,
        dst_endpoint: 0x0A,
        src_endpoint: 0x0B,
        session: 0x1357_9BDF,
        total_length: 0x0246_8ACE,
        pulled_rdma_id: 0xAB,
        pulled_rdma_seqnum: 0x17,
        lib_seqnum: 0x4002,
        lib_piggyack: 0x4003,
    };
    for cfg in all_configs() {
        check(&cfg, &NOTIFY, hdr(0x0099), Packet::Notify(n), &[]);
    }
}

// ---------------------------------------------------------------- PULL

/// Native MTU 9000, a first block shortened by first_frame_offset 0x1234 so
/// that it spans exactly 32 reply frames.
#[rustfmt::skip]
const PULL_NATIVE_9000: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x00, 0x55,                             // dst_src_peer_index
    0x29, 0x0C, 0x0D, 0x00,                 // ptype 41, dst ep, src ep, src_generation
    0x01, 0x02, 0x03, 0x04,                 // session
    0x00, 0x10, 0x00, 0x00,                 // total_length
    0x00, 0x00, 0x00, 0xAB,                 // pulled_rdma_id u32
    0x17,                                   // pulled_rdma_seqnum
    0x00, 0x00, 0x00,                       // pad
    0x00, 0x00, 0x12, 0x34,                 // pulled_rdma_offset u32
    0x00, 0xC0, 0x00, 0x23,                 // src_pull_handle
    0x21, 0x07, 0x19, 0x85,                 // src_magic (endpoint 5 ^ 0x21071980)
    0x00, 0x00, 0x12, 0x34,                 // first_frame_offset u32
    0x00, 0x04, 0x4E, 0xCC,                 // block_length u32 = 282316
    0x7F, 0x00, 0x00, 0x60,                 // frame_index
];

/// Native MTU 1500: same layout, sizes scaled to 1468-byte replies.
#[rustfmt::skip]
const PULL_NATIVE_1500: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x00, 0x55,
    0x29, 0x0C, 0x0D, 0x00,
    0x01, 0x02, 0x03, 0x04,
    0x00, 0x10, 0x00, 0x00,
    0x00, 0x00, 0x00, 0xAB,
    0x17,
    0x00, 0x00, 0x00,
    0x00, 0x00, 0x12, 0x34,
    0x00, 0xC0, 0x00, 0x23,
    0x21, 0x07, 0x19, 0x85,
    0x00, 0x00, 0x01, 0x23,                 // first_frame_offset = 291
    0x00, 0x00, 0xB6, 0x5D,                 // block_length = 46976 - 291
    0x7F, 0x00, 0x00, 0x60,
];

/// MX-compat: 32-byte body with 8/16-bit fields.
#[rustfmt::skip]
const PULL_COMPAT: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x00, 0x55,
    0x29, 0x0C, 0x0D, 0x00,                 // ptype 41, dst ep, src ep, src_generation
    0x01, 0x02, 0x03, 0x04,                 // session
    0x00, 0x10, 0x00, 0x00,                 // total_length
    0xAB,                                   // pulled_rdma_id u8
    0x17,                                   // pulled_rdma_seqnum
    0x12, 0x34,                             // pulled_rdma_offset u16
    0x00, 0xC0, 0x00, 0x23,                 // src_pull_handle
    0x21, 0x07, 0x19, 0x85,                 // src_magic
    0x02, 0x34,                             // first_frame_offset u16
    0x7D, 0xCC,                             // block_length u16 = 32768 - 0x234
    0x7F, 0x00, 0x00, 0x60,                 // frame_index
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,     // padding to 60
];

fn pull(first_frame_offset: u32, block_length: u32) -> Pull {
    Pull {
        dst_endpoint: 0x0C,
        src_endpoint: 0x0D,
        session: 0x0102_0304,
        total_length: 0x0010_0000,
        pulled_rdma_id: 0xAB,
        pulled_rdma_seqnum: 0x17,
        pulled_rdma_offset: 0x1234,
        src_pull_handle: 0x00C0_0023,
        src_magic: 5 ^ PULL_MAGIC_XOR,
        first_frame_offset,
        block_length,
        frame_index: 0x7F00_0060,
    }
}

#[test]
fn pull_native_9000() {
    let cfg = WireConfig::native_9000();
    let p = pull(0x1234, 286_976 - 0x1234);
    check(&cfg, &PULL_NATIVE_9000, hdr(0x55), Packet::Pull(p), &[]);
    assert_eq!(
        cfg.pull_block_frames(p.first_frame_offset, p.block_length),
        32
    );
}

#[test]
fn pull_native_1500() {
    let cfg = WireConfig::native_1500();
    let p = pull(291, 46_976 - 291);
    check(&cfg, &PULL_NATIVE_1500, hdr(0x55), Packet::Pull(p), &[]);
}

#[test]
fn pull_compat() {
    let cfg = WireConfig::mx_compat();
    let p = pull(0x234, 32_768 - 0x234);
    check(&cfg, &PULL_COMPAT, hdr(0x55), Packet::Pull(p), &[]);
    assert_eq!(
        cfg.pull_block_frames(p.first_frame_offset, p.block_length),
        8
    );
}

// ---------------------------------------------------------------- PULL_REPLY

#[rustfmt::skip]
const PULL_REPLY: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0xFF, 0xFF,                             // dst_src_peer_index (ignored by receivers)
    0x2A,                                   // ptype 42
    0x61,                                   // frame_seqnum
    0x00, 0x07,                             // frame_length
    0x00, 0xA1, 0xB2, 0xC3,                 // msg_offset
    0x00, 0xC0, 0x00, 0x23,                 // dst_pull_handle
    0x21, 0x07, 0x19, 0x85,                 // dst_magic
    b'p', b'u', b'l', b'l', b'r', b'e', b'p', // payload (frame offset 32)
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,        // padding to 60
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

#[test]
fn pull_reply() {
    let p = PullReply {
        frame_seqnum: 0x61,
        frame_length: 7,
        msg_offset: 0x00A1_B2C3,
        dst_pull_handle: 0x00C0_0023,
        dst_magic: 0x2107_1985,
    };
    for cfg in all_configs() {
        check(
            &cfg,
            &PULL_REPLY,
            hdr(PEER_INDEX_NONE),
            Packet::PullReply(p),
            b"pullrep",
        );
    }
    // The puller endpoint sits in the low byte of the magic (frame offset 31).
    assert_eq!(PULL_REPLY[31] ^ (PULL_MAGIC_XOR as u8), 5);
    assert_eq!(p.dst_magic ^ PULL_MAGIC_XOR, 5);
}

// ---------------------------------------------------------------- CONNECT

#[rustfmt::skip]
const CONNECT_REQUEST: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0xFF, 0xFF,                             // dst_src_peer_index (unknown yet)
    0x24, 0x02, 0x03, 0x00,                 // ptype 36, dst ep, src ep, src_generation
    0x10,                                   // length 16
    0x00, 0x00, 0x00,                       // pad
    0x0A, 0x0B,                             // lib_seqnum
    0x03, 0x21,                             // src_dst_peer_index
    0x00, 0x00, 0x00, 0x00,                 // pad
    0x11, 0x22, 0x33, 0x44,                 // src_session_id
    0x55, 0x66, 0x77, 0x88,                 // app_key
    0x40, 0x01,                             // target_recv_seqnum_start
    0x00,                                   // is_reply = 0
    0x9C,                                   // connect_seqnum
    0x00, 0x00, 0x00, 0x00,                 // pad (status in replies), pad
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,     // padding to 60
];

#[rustfmt::skip]
const CONNECT_REPLY: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x01, 0x02,                             // dst_src_peer_index
    0x24, 0x03, 0x02, 0x00,                 // ptype 36, dst ep, src ep, src_generation
    0x10,                                   // length 16
    0x00, 0x00, 0x00,
    0x0A, 0x0B,                             // lib_seqnum
    0x03, 0x21,                             // src_dst_peer_index
    0x00, 0x00, 0x00, 0x00,
    0x11, 0x22, 0x33, 0x44,                 // src_session_id (echo)
    0x99, 0xAA, 0xBB, 0xCC,                 // target_session_id
    0x40, 0x01,                             // target_recv_seqnum_start
    0x01,                                   // is_reply = 1
    0x9C,                                   // connect_seqnum (echo)
    0x0B,                                   // connect_status_code = bad key
    0x00, 0x00, 0x00,                       // pad
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

fn connect_request() -> Connect {
    Connect {
        dst_endpoint: 0x02,
        src_endpoint: 0x03,
        length: 16,
        lib_seqnum: 0x0A0B,
        src_dst_peer_index: 0x0321,
        src_session_id: 0x1122_3344,
        app_key_or_target_session: 0x5566_7788,
        target_recv_seqnum_start: 0x4001,
        is_reply: false,
        connect_seqnum: 0x9C,
        status_code: CONNECT_STATUS_SUCCESS,
        link_mtu: 0,
        extensions: Extensions::NONE,
        stripe_boards: 0,
    }
}

#[test]
fn connect() {
    let req = connect_request();
    let rep = Connect {
        dst_endpoint: 0x03,
        src_endpoint: 0x02,
        app_key_or_target_session: 0x99AA_BBCC,
        is_reply: true,
        status_code: CONNECT_STATUS_BAD_KEY,
        ..req
    };
    for cfg in all_configs() {
        check(
            &cfg,
            &CONNECT_REQUEST,
            hdr(PEER_INDEX_NONE),
            Packet::Connect(req),
            &[],
        );
        check(&cfg, &CONNECT_REPLY, hdr(0x0102), Packet::Connect(rep), &[]);
    }
}

/// An omx native peer's advertised frame size and extensions fill pads the original
/// ignores (frame offsets 45..47 and 28..29); everything else is the unadvertised frame
/// byte for byte.
#[test]
fn connect_with_advertised_mtu() {
    let cfg = WireConfig::native_9000();
    for (req, golden) in [
        (connect_request(), &CONNECT_REQUEST),
        (
            Connect {
                dst_endpoint: 0x03,
                src_endpoint: 0x02,
                app_key_or_target_session: 0x99AA_BBCC,
                is_reply: true,
                status_code: CONNECT_STATUS_BAD_KEY,
                ..connect_request()
            },
            &CONNECT_REPLY,
        ),
    ] {
        let advertised = Connect {
            link_mtu: 9000,
            extensions: Extensions::ALL,
            ..req
        };
        let mut f = Vec::new();
        encode(
            &hdr(PEER_INDEX_NONE),
            &Packet::Connect(advertised),
            &[],
            &cfg,
            &mut f,
        )
        .unwrap();
        let mut expected = golden.to_vec();
        expected[14..16].copy_from_slice(&PEER_INDEX_NONE.to_be_bytes());
        expected[45..48].copy_from_slice(&[omx_wire::CONNECT_MTU_MARKER, 0x23, 0x28]);
        expected[28..30].copy_from_slice(&[omx_wire::CONNECT_EXT_MARKER, 0x5F]);
        // The seal in the padding: magic, then the checksum of the 48 bytes before it.
        let sum = omx_wire::checksum_of(&expected[..48]);
        expected[48..52].copy_from_slice(&omx_wire::CONNECT_SEAL_MAGIC);
        expected[52..56].copy_from_slice(&sum);
        assert_eq!(f, expected);
        let d = decode(&f, &cfg).unwrap();
        assert_eq!(d.packet, Packet::Connect(advertised));
        // Any bit flipped before the seal's checksum fails it, but one in its magic
        // (the rest is then intact, and read as an unsealed connect).
        for i in 0..56 {
            let mut g = f.clone();
            g[i] ^= 0x10;
            match decode(&g, &cfg) {
                Ok(d) if (48..52).contains(&i) => assert_eq!(d.packet, Packet::Connect(advertised)),
                r => assert!(r.is_err(), "byte {i} flipped: {r:?}"),
            }
        }
        // Without the markers and the seal the bytes are an Open-MX sender's garbage,
        // not a size or extensions.
        f[45] = 0;
        f[28] = 0;
        f[48..56].fill(0);
        assert_eq!(
            decode(&f, &cfg).unwrap().packet,
            Packet::Connect(Connect {
                link_mtu: 0,
                extensions: Extensions::NONE,
                ..advertised
            })
        );
    }
}

// ---------------------------------------------------------------- TRUC

#[rustfmt::skip]
const TRUC: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x00, 0x0E,                             // dst_src_peer_index
    0x23, 0x04, 0x05, 0x00,                 // ptype 35, dst ep, src ep, src_generation
    0x10,                                   // length 16
    0x00, 0x00, 0x00,                       // pad
    0x89, 0xAB, 0xCD, 0xEF,                 // session
    0x55,                                   // type ACK
    0x00,                                   // pad
    0x4A, 0xBC,                             // lib_seqnum
    0x89, 0xAB, 0xCD, 0xEF,                 // session_id
    0x00, 0x00, 0x0A, 0x0B,                 // acknum
    0x4A, 0xBD,                             // send_seq
    0x01,                                   // resent
    0x00,                                   // pad
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // padding to 60
];

#[test]
fn truc() {
    let t = Truc {
        dst_endpoint: 0x04,
        src_endpoint: 0x05,
        length: 16,
        session: 0x89AB_CDEF,
        truc_type: TRUC_TYPE_ACK,
        lib_seqnum: 0x4ABC,
        session_id: 0x89AB_CDEF,
        acknum: 0x0A0B,
        send_seq: 0x4ABD,
        resent: 1,
    };
    for cfg in all_configs() {
        check(&cfg, &TRUC, hdr(0x000E), Packet::Truc(t), &[]);
    }
}

// ---------------------------------------------------------------- NACKs

#[rustfmt::skip]
const NACK_LIB: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x04, 0x56,                             // dst_src_peer_index
    0x2C,                                   // ptype 44
    0x06,                                   // src_endpoint
    0x00,                                   // src_generation
    0x03,                                   // nack_type BAD_SESSION
    0x00, 0x00, 0x00, 0x00,                 // pad
    0x00,                                   // pad
    0x08,                                   // dst_endpoint
    0x06, 0x54,                             // dst_src_peer_index (copy)
    0x40, 0x07,                             // lib_seqnum
    0x00, 0x00,                             // pad
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // padding to 60
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

#[rustfmt::skip]
const NACK_MCP: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0x00, 0x55,                             // dst_src_peer_index
    0x2D,                                   // ptype 45
    0x0D,                                   // src_endpoint (the puller)
    0x00,                                   // src_generation
    0x04,                                   // nack_type BAD_RDMAWIN
    0x00, 0x00, 0x00, 0x00,                 // pad
    0x00, 0xC0, 0x00, 0x23,                 // src_pull_handle
    0x21, 0x07, 0x19, 0x8D,                 // src_magic (endpoint 13)
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // padding to 60
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

#[test]
fn nack_lib() {
    let n = NackLib {
        src_endpoint: 0x06,
        nack_type: NackType::BadSession as u8,
        dst_endpoint: 0x08,
        dst_src_peer_index: 0x0654,
        lib_seqnum: 0x4007,
    };
    for cfg in all_configs() {
        check(&cfg, &NACK_LIB, hdr(0x0456), Packet::NackLib(n), &[]);
    }
}

#[test]
fn nack_mcp() {
    let n = NackMcp {
        src_endpoint: 0x0D,
        nack_type: NackType::BadRdmaWin as u8,
        src_pull_handle: 0x00C0_0023,
        src_magic: 13 ^ PULL_MAGIC_XOR,
    };
    for cfg in all_configs() {
        check(&cfg, &NACK_MCP, hdr(0x0055), Packet::NackMcp(n), &[]);
    }
}

// ---------------------------------------------------------------- HOST_*

#[rustfmt::skip]
const HOST_QUERY: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0xFF, 0xFF,                             // dst_src_peer_index (not set)
    0x03,                                   // ptype 3
    0x00,                                   // pad
    0x07, 0x89,                             // src_dst_peer_index
    0x00, 0x00, 0x00, 0x00,                 // pad
    0x13, 0x05, 0x20, 0x08,                 // magic
    0x00, 0x00, 0x00, 0x00,                 // pad
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // padding to 60
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

#[rustfmt::skip]
const HOST_REPLY: [u8; 60] = [
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,
    0x86, 0xDF,
    0xFF, 0xFF,                             // dst_src_peer_index (not set)
    0x04,                                   // ptype 4
    0x06,                                   // length (NUL included)
    0x09, 0x87,                             // src_dst_peer_index
    0x00, 0x00, 0x00, 0x00,                 // pad
    0x13, 0x05, 0x20, 0x09,                 // magic
    0x00, 0x00, 0x00, 0x00,                 // pad
    b'n', b'o', b'd', b'e', b'1', 0x00,     // hostname (frame offset 32)
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,        // padding to 60
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

#[test]
fn host_query() {
    let q = HostQuery {
        src_dst_peer_index: 0x0789,
        magic: HOST_QUERY_MAGIC_INIT,
    };
    for cfg in all_configs() {
        check(
            &cfg,
            &HOST_QUERY,
            hdr(PEER_INDEX_NONE),
            Packet::HostQuery(q),
            &[],
        );
    }
}

#[test]
fn host_reply() {
    let r = HostReply {
        length: 6,
        src_dst_peer_index: 0x0987,
        magic: HOST_QUERY_MAGIC_INIT + 1,
    };
    for cfg in all_configs() {
        check(
            &cfg,
            &HOST_REPLY,
            hdr(PEER_INDEX_NONE),
            Packet::HostReply(r),
            b"node1\0",
        );
    }
}

// ---------------------------------------------------------------- RAW

/// omxoed discovery announcement (spec §11.2), 64 bytes, broadcast.
#[rustfmt::skip]
const RAW_DISCOVERY: [u8; 64] = [
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,     // broadcast
    0x02, 0x66, 0x77, 0x88, 0x99, 0xAA,     // sender MAC
    0x86, 0xDF,
    0x00, 0x00,
    0x01,                                   // RAW
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // 15 zero bytes
    0x00, 0x00, 0x02, 0x66,                 // nic id bits 47..32
    0x77, 0x88, 0x99, 0xAA,                 // nic id bits 31..0
    0x5E, 0xED, 0x12, 0x34,                 // daemon serial
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0,           // 20 zero bytes
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

#[test]
fn raw_discovery() {
    let h = Header {
        dst_mac: [0xFF; 6],
        src_mac: SRC,
        ethertype: DEFAULT_ETHERTYPE,
        dst_src_peer_index: 0,
    };
    for cfg in all_configs() {
        // The raw payload is everything from frame offset 16, type byte included.
        check(&cfg, &RAW_DISCOVERY, h, Packet::Raw, &RAW_DISCOVERY[16..]);
    }
}

// ---------------------------------------------------------------- garbage

/// Unset fields (src_generation, pads, the native MEDIUM byte 27, the
/// request status byte) carry garbage from senders that do not zero their
/// buffers; decoding must ignore them.
#[test]
fn unset_fields_are_ignored() {
    let native = WireConfig::native_9000();
    let compat = WireConfig::mx_compat();
    // Body byte 3 (frame offset 19) of TINY, SMALL, RNDV and NOTIFY carries omx's
    // one-sided flags (`Msg::flags`, `Notify::flags`); it is checked by the golden
    // vectors themselves instead.
    let cases: &[(&[u8], &[usize], WireConfig)] = &[
        (&TINY, &[], native),
        (&RNDV, &[], native),
        (&MEDIUM_NATIVE_9000, &[19, 43, 46, 47], native),
        (&MEDIUM_COMPAT, &[19, 22, 23, 46, 47], compat),
        (&NOTIFY, &[30, 31, 32, 33, 38, 39], native),
        (&PULL_NATIVE_9000, &[19, 33, 34, 35], native),
        (&PULL_COMPAT, &[19], compat),
        (
            &CONNECT_REQUEST,
            &[19, 21, 22, 23, 28, 29, 30, 31, 44, 45, 46, 47],
            native,
        ),
        (
            &CONNECT_REPLY,
            &[19, 21, 22, 23, 28, 29, 30, 31, 45, 46, 47],
            native,
        ),
        (&TRUC, &[19, 21, 22, 23, 29, 43], native),
        (&NACK_LIB, &[18, 20, 21, 22, 23, 24, 30, 31], native),
        (&NACK_MCP, &[18, 20, 21, 22, 23], native),
        (&HOST_QUERY, &[17, 20, 21, 22, 23, 28, 29, 30, 31], native),
        (&HOST_REPLY, &[20, 21, 22, 23, 28, 29, 30, 31], native),
    ];
    for (golden, offsets, cfg) in cases {
        let clean = decode(golden, cfg).unwrap();
        let mut dirty = golden.to_vec();
        for &o in *offsets {
            dirty[o] = 0xEE;
        }
        // Padding past the declared payload is garbage too.
        for b in dirty
            .iter_mut()
            .skip(clean.packet.header_len(cfg) + clean.payload.len())
        {
            *b = 0xEE;
        }
        assert_eq!(decode(&dirty, cfg).unwrap(), clean, "offsets {offsets:?}");
    }
}

#[test]
fn ethertype_is_configurable() {
    let cfg = WireConfig {
        ethertype: 0x88B5,
        ..WireConfig::native_9000()
    };
    let mut frame = TINY;
    frame[12] = 0x88;
    frame[13] = 0xB5;
    let d = decode(&frame, &cfg).unwrap();
    assert_eq!(d.header.ethertype, 0x88B5);
    assert_eq!(
        decode(&TINY, &cfg),
        Err(DecodeError::WrongEtherType(0x86DF))
    );
}
