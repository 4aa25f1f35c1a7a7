//! Every receive-side validation rule yields its specified error (one test
//! per rule), and no input whatsoever makes `decode` panic.

mod common;

use omx_wire::*;
use proptest::collection::vec;
use proptest::prelude::*;

const N9000: fn() -> WireConfig = WireConfig::native_9000;
const COMPAT: fn() -> WireConfig = WireConfig::mx_compat;

fn header(cfg: &WireConfig) -> Header {
    Header {
        dst_mac: [2, 0, 0, 0, 0, 1],
        src_mac: [2, 0, 0, 0, 0, 2],
        ethertype: cfg.ethertype,
        dst_src_peer_index: 7,
    }
}

/// A valid frame, checked to decode, for patching.
fn frame(cfg: &WireConfig, p: Packet, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&header(cfg), &p, payload, cfg, &mut out).unwrap();
    decode(&out, cfg).expect("base frame is valid");
    out
}

fn put16(f: &mut [u8], off: usize, v: u16) {
    f[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

fn put32(f: &mut [u8], off: usize, v: u32) {
    f[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

fn tiny(length: u16) -> Packet {
    Packet::Tiny(Msg {
        length,
        ..Msg::default()
    })
}

fn medium_frame(cfg: &WireConfig, length: u32, seq: u8, frag_length: u16) -> Vec<u8> {
    let m = Medium {
        length,
        frag_seqnum: seq,
        frag_length,
        frag_pipeline: if cfg.is_compat() { 12 } else { 0 },
        ..Medium::default()
    };
    frame(
        cfg,
        Packet::Medium(m),
        &vec![0xAB; usize::from(frag_length)],
    )
}

fn valid_pull(cfg: &WireConfig) -> Pull {
    Pull {
        block_length: cfg.pull_block_max(),
        ..Pull::default()
    }
}

fn pull_frame(cfg: &WireConfig, ffo: u32, block: u32) -> Vec<u8> {
    let mut f = frame(cfg, Packet::Pull(valid_pull(cfg)), &[]);
    if cfg.is_compat() {
        put16(&mut f, 16 + 24, ffo as u16);
        put16(&mut f, 16 + 26, block as u16);
    } else {
        put32(&mut f, 16 + 32, ffo);
        put32(&mut f, 16 + 36, block);
    }
    f
}

fn truc() -> Truc {
    Truc {
        length: 16,
        session: 0x1234_5678,
        session_id: 0x1234_5678,
        truc_type: TRUC_TYPE_ACK,
        ..Truc::default()
    }
}

// ------------------------------------------------------------- TooShort

#[test]
fn too_short_for_common_header() {
    let cfg = N9000();
    let full = frame(&cfg, tiny(0), &[]);
    for len in 0..=16 {
        assert_eq!(
            decode(&full[..len], &cfg),
            Err(DecodeError::TooShort {
                need: 17,
                have: len
            }),
            "{len}"
        );
    }
}

#[test]
fn too_short_for_body_header() {
    let n = N9000();
    let c = COMPAT();
    let cases: Vec<(WireConfig, Vec<u8>, usize)> = vec![
        (n, frame(&n, tiny(0), &[]), 40),
        (
            n,
            frame(
                &n,
                Packet::Rndv(Rndv {
                    msg: Msg {
                        length: 8,
                        ..Msg::default()
                    },
                    ..Rndv::default()
                }),
                &[],
            ),
            48,
        ),
        (n, medium_frame(&n, 0, 0, 0), 48),
        (n, frame(&n, Packet::Pull(valid_pull(&n)), &[]), 60),
        (c, frame(&c, Packet::Pull(valid_pull(&c)), &[]), 48),
        (n, frame(&n, Packet::Truc(truc()), &[]), 44),
        (n, frame(&n, Packet::Notify(Notify::default()), &[]), 40),
        (
            n,
            frame(&n, Packet::HostQuery(HostQuery::default()), &[]),
            32,
        ),
    ];
    for (cfg, f, need) in cases {
        assert_eq!(
            decode(&f[..need - 1], &cfg),
            Err(DecodeError::TooShort {
                need,
                have: need - 1
            })
        );
        assert!(decode(&f[..need], &cfg).is_ok());
    }
}

// ------------------------------------------------------------- framing

#[test]
fn wrong_ethertype() {
    let cfg = N9000();
    let mut f = frame(&cfg, tiny(0), &[]);
    put16(&mut f, 12, 0x0800);
    assert_eq!(decode(&f, &cfg), Err(DecodeError::WrongEtherType(0x0800)));
}

#[test]
fn unknown_types() {
    let cfg = N9000();
    let mut f = frame(&cfg, tiny(0), &[]);
    for t in [0u8, 5, 31, 46, 120, 254, 255] {
        f[16] = t;
        assert_eq!(decode(&f, &cfg), Err(DecodeError::UnknownType(t)));
    }
}

#[test]
fn checksum_flag_without_a_valid_trailer() {
    let cfg = N9000();
    // A frame sent without checksum whose flag bit gets set: its "trailer" is the
    // padding, which does not match.
    let mut f = frame(&cfg, tiny(0), &[]);
    f[16] |= CHECKSUM_FLAG;
    assert_eq!(decode(&f, &cfg), Err(DecodeError::BadChecksum));
    assert_eq!(DecodeError::BadChecksum.drop_reason(), DropReason::Checksum);
    // A checksummed frame cut before its trailer ends.
    let on = WireConfig::native_checksummed(9000, true);
    let mut out = Vec::new();
    let payload = [7u8; 100];
    let small = Packet::Small(Msg {
        length: 100,
        ..Msg::default()
    });
    encode(
        &Header {
            ethertype: on.ethertype,
            ..Header::default()
        },
        &small,
        &payload,
        &on,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), 16 + 24 + 100 + 4);
    assert!(decode(&out, &on).unwrap().checksummed);
    for cut in 16 + 24 + 100..out.len() {
        assert_eq!(
            decode(&out[..cut], &on),
            Err(DecodeError::BadChecksum),
            "cut {cut}"
        );
    }
    // A receiver with checksums on requires them on endpoint frames...
    let plain = frame(&cfg, tiny(0), &[]);
    assert_eq!(decode(&plain, &on), Err(DecodeError::BadChecksum));
    // ...and one without verifies those that carry one.
    let off_reader = WireConfig {
        pull_reply_max: on.pull_reply_max,
        ..cfg
    };
    assert!(decode(&out, &off_reader).unwrap().checksummed);
    let mut bad = out.clone();
    bad[16 + 24 + 50] ^= 4;
    assert_eq!(decode(&bad, &off_reader), Err(DecodeError::BadChecksum));
    // MX-wire-compatible mode knows no flag: the type is unknown.
    let compat = WireConfig::mx_compat();
    let mut f = frame(&compat, tiny(0), &[]);
    f[16] |= CHECKSUM_FLAG;
    assert_eq!(
        decode(&f, &compat),
        Err(DecodeError::UnknownType(37 | CHECKSUM_FLAG))
    );
    // Board frames never carry it.
    let mut f = frame(&cfg, tiny(0), &[]);
    f[16] = PacketType::HostQuery as u8 | CHECKSUM_FLAG;
    assert!(matches!(decode(&f, &cfg), Err(DecodeError::UnknownType(_))));
}

#[test]
fn unsupported_types() {
    let cfg = N9000();
    let mut f = frame(&cfg, tiny(0), &[]);
    for t in [
        PacketType::MfmNicReply,
        PacketType::EtherUnicast,
        PacketType::EtherMulticast,
        PacketType::EtherNative,
    ] {
        f[16] = t as u8;
        assert_eq!(decode(&f, &cfg), Err(DecodeError::UnsupportedType(t)));
    }
}

// ------------------------------------------------------------- BadDataLength

#[test]
fn tiny_over_32() {
    let cfg = N9000();
    // 33 bytes are present: only the limit is violated.
    let mut f = frame(&cfg, tiny(32), &[0x11; 32]);
    f.push(0x11);
    put16(&mut f, 20, 33);
    assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength));
}

#[test]
fn small_over_128() {
    let cfg = N9000();
    let m = Msg {
        length: 128,
        ..Msg::default()
    };
    let mut f = frame(&cfg, Packet::Small(m), &[0; 128]);
    f.push(0);
    put16(&mut f, 20, 129);
    assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength));
}

#[test]
fn medium_frag_over_max() {
    for cfg in common::configs() {
        let fm = cfg.medium_frag_max;
        let mut f = medium_frame(&cfg, 2 * fm, 0, fm as u16);
        f.push(0);
        put16(&mut f, 40, fm as u16 + 1);
        assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength), "{cfg:?}");
    }
}

#[test]
fn medium_frag_seqnum_over_max() {
    for cfg in common::configs() {
        let last = (cfg.medium_frags_max - 1) as u8;
        let mut f = medium_frame(&cfg, cfg.medium_max(), last, cfg.medium_frag_max as u16);
        f[42] = last + 1;
        assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength), "{cfg:?}");
    }
}

#[test]
fn medium_length_over_max() {
    let n = N9000();
    let mut f = medium_frame(&n, 10, 0, 10);
    put32(&mut f, 20, n.medium_max() + 1);
    assert_eq!(decode(&f, &n), Err(DecodeError::BadDataLength));

    let c = COMPAT();
    let mut f = medium_frame(&c, 10, 0, 10);
    put16(&mut f, 20, 32_769);
    assert_eq!(decode(&f, &c), Err(DecodeError::BadDataLength));
}

#[test]
fn medium_fragment_beyond_total_length() {
    for cfg in common::configs() {
        // Last fragment (index 1) claims 11 bytes of a frag_max + 10 message.
        let fm = cfg.medium_frag_max;
        let mut f = medium_frame(&cfg, fm + 10, 1, 10);
        f.push(0);
        put16(&mut f, 40, 11);
        assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength), "{cfg:?}");
        // A fragment index past the end of the message.
        let mut f = medium_frame(&cfg, fm + 10, 1, 10);
        f[42] = 2;
        assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength), "{cfg:?}");
    }
}

#[test]
fn medium_non_last_fragment_not_full() {
    for cfg in common::configs() {
        // Fragment 0 of a 2-fragment message must carry frag_max bytes.
        let fm = cfg.medium_frag_max;
        let mut f = medium_frame(&cfg, fm + 10, 1, 10);
        f[42] = 0;
        assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength), "{cfg:?}");
    }
}

#[test]
fn pull_reply_over_max() {
    for cfg in common::configs() {
        let max = cfg.pull_reply_max as u16;
        let p = PullReply {
            frame_length: max,
            ..PullReply::default()
        };
        let mut f = frame(&cfg, Packet::PullReply(p), &vec![0; usize::from(max)]);
        f.push(0);
        put16(&mut f, 18, max + 1);
        assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength), "{cfg:?}");
    }
}

#[test]
fn rndv_length_under_8() {
    let cfg = N9000();
    let r = Rndv {
        msg: Msg {
            length: 8,
            ..Msg::default()
        },
        ..Rndv::default()
    };
    let mut f = frame(&cfg, Packet::Rndv(r), &[]);
    put16(&mut f, 20, 7);
    assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength));
}

#[test]
fn connect_length_under_16() {
    let cfg = N9000();
    let c = Connect {
        length: 16,
        ..Connect::default()
    };
    let mut f = frame(&cfg, Packet::Connect(c), &[]);
    f[20] = 15;
    assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength));
}

#[test]
fn truc_length_under_16() {
    let cfg = N9000();
    let mut f = frame(&cfg, Packet::Truc(truc()), &[]);
    f[20] = 15;
    assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength));
}

#[test]
fn host_reply_length_over_80() {
    let cfg = N9000();
    let r = HostReply {
        length: 80,
        ..HostReply::default()
    };
    let mut f = frame(&cfg, Packet::HostReply(r), &[b'x'; 80]);
    f.push(0);
    f[17] = 81;
    assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength));
}

#[test]
fn host_reply_length_zero() {
    let cfg = N9000();
    let r = HostReply {
        length: 1,
        ..HostReply::default()
    };
    let mut f = frame(&cfg, Packet::HostReply(r), &[0]);
    f[17] = 0;
    assert_eq!(decode(&f, &cfg), Err(DecodeError::BadDataLength));
}

// ------------------------------------------------------------- PayloadTruncated

#[test]
fn payload_truncated() {
    let n = N9000();
    let small = Packet::Small(Msg {
        length: 100,
        ..Msg::default()
    });
    let medium = medium_frame(&n, 100, 0, 100);
    let pull_reply = Packet::PullReply(PullReply {
        frame_length: 100,
        ..PullReply::default()
    });
    let host_reply = Packet::HostReply(HostReply {
        length: 80,
        ..HostReply::default()
    });
    let cases = [
        frame(&n, small, &[1; 100]),
        medium,
        frame(&n, pull_reply, &[2; 100]),
        frame(&n, host_reply, &[3; 80]),
    ];
    for f in cases {
        let len = f.len();
        assert_eq!(
            decode(&f[..len - 1], &n),
            Err(DecodeError::PayloadTruncated {
                need: len,
                have: len - 1
            })
        );
    }
    // A tiny whose length exceeds what a short (unpadded) frame holds.
    let f = frame(&n, tiny(4), b"abcd");
    assert_eq!(
        decode(&f[..43], &n),
        Err(DecodeError::PayloadTruncated { need: 44, have: 43 })
    );
}

// ------------------------------------------------------------- BadField

#[test]
fn truc_type_not_ack() {
    let cfg = N9000();
    let mut f = frame(&cfg, Packet::Truc(truc()), &[]);
    f[28] = 0x54;
    assert_eq!(decode(&f, &cfg), Err(DecodeError::BadField("truc type")));
}

#[test]
fn truc_session_id_mismatch() {
    let cfg = N9000();
    let mut f = frame(&cfg, Packet::Truc(truc()), &[]);
    put32(&mut f, 32, 0x1234_5679);
    assert!(matches!(decode(&f, &cfg), Err(DecodeError::BadField(_))));
}

#[test]
fn pull_too_many_frames_per_block() {
    for cfg in common::configs() {
        // A full block starting at offset 1 needs one frame too many.
        let f = pull_frame(&cfg, 1, cfg.pull_block_max());
        assert_eq!(
            decode(&f, &cfg),
            Err(DecodeError::BadField("pull frames per block")),
            "{cfg:?}"
        );
        let f = pull_frame(&cfg, 1, cfg.pull_block_max() - 1);
        assert!(decode(&f, &cfg).is_ok());
    }
    // Native 32-bit fields cannot overflow the frame count computation.
    let n = N9000();
    let f = pull_frame(&n, 0, u32::MAX);
    assert_eq!(
        decode(&f, &n),
        Err(DecodeError::BadField("pull frames per block"))
    );
}

#[test]
fn pull_block_length_zero() {
    for cfg in common::configs() {
        let f = pull_frame(&cfg, 0, 0);
        assert_eq!(
            decode(&f, &cfg),
            Err(DecodeError::BadField("pull block_length is zero"))
        );
    }
}

#[test]
fn pull_first_frame_offset_over_max() {
    for cfg in common::configs() {
        let f = pull_frame(&cfg, cfg.pull_reply_max, 1);
        assert_eq!(
            decode(&f, &cfg),
            Err(DecodeError::BadField("pull first_frame_offset"))
        );
        let f = pull_frame(&cfg, cfg.pull_reply_max - 1, 1);
        assert!(decode(&f, &cfg).is_ok());
    }
}

#[test]
fn compat_medium_frag_pipeline_not_12() {
    let c = COMPAT();
    let mut f = medium_frame(&c, 100, 0, 100);
    for p in [0u8, 11, 13, 255] {
        f[43] = p;
        assert_eq!(
            decode(&f, &c),
            Err(DecodeError::BadField("medium frag_pipeline"))
        );
    }
    // The same byte is unused in native mode.
    let n = N9000();
    let mut f = medium_frame(&n, 100, 0, 100);
    f[43] = 13;
    assert!(decode(&f, &n).is_ok());
}

#[test]
fn nack_type_out_of_range() {
    let cfg = N9000();
    let lib = Packet::NackLib(NackLib {
        nack_type: 1,
        ..NackLib::default()
    });
    let mcp = Packet::NackMcp(NackMcp {
        nack_type: 4,
        ..NackMcp::default()
    });
    for p in [lib, mcp] {
        let mut f = frame(&cfg, p, &[]);
        for t in [0u8, 5, 255] {
            f[19] = t;
            assert_eq!(decode(&f, &cfg), Err(DecodeError::BadField("nack_type")));
        }
    }
}

#[test]
fn connect_is_reply_not_boolean() {
    let cfg = N9000();
    let c = Connect {
        length: 16,
        ..Connect::default()
    };
    let mut f = frame(&cfg, Packet::Connect(c), &[]);
    f[42] = 2;
    assert_eq!(
        decode(&f, &cfg),
        Err(DecodeError::BadField("connect is_reply"))
    );
}

// ------------------------------------------------------------- counters

#[test]
fn drop_reasons() {
    use DecodeError as E;
    let cases = [
        (
            E::TooShort { need: 1, have: 0 },
            DropReason::BadHeaderDataLen,
        ),
        (E::WrongEtherType(0), DropReason::WrongEtherType),
        (E::UnknownType(0), DropReason::UnknownType),
        (
            E::UnsupportedType(PacketType::EtherNative),
            DropReason::InvalidType,
        ),
        (E::BadDataLength, DropReason::BadDataLen),
        (
            E::PayloadTruncated { need: 1, have: 0 },
            DropReason::BadSkbLen,
        ),
        (E::BadField("x"), DropReason::BadField),
    ];
    for (e, r) in cases {
        assert_eq!(e.drop_reason(), r);
        assert!(!e.to_string().is_empty());
        assert!(!r.to_string().is_empty());
    }
}

// ------------------------------------------------------------- never panic

/// Whatever decodes must re-encode to a frame that decodes identically.
fn stable(frame: &[u8], cfg: &WireConfig) -> Result<(), TestCaseError> {
    if let Ok(d) = decode(frame, cfg) {
        let mut out = Vec::new();
        encode(&d.header, &d.packet, d.payload, cfg, &mut out)
            .map_err(|e| TestCaseError::fail(format!("re-encode failed: {e}")))?;
        let again = decode(&out, cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(again.header, d.header);
        prop_assert_eq!(again.packet, d.packet);
        if d.packet == Packet::Raw {
            prop_assert_eq!(&again.payload[..d.payload.len()], d.payload);
        } else {
            prop_assert_eq!(again.payload, d.payload);
        }
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip { at: usize, xor: u8 },
    Set { at: usize, value: u8 },
    Truncate { len: usize },
    Extend { bytes: Vec<u8> },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(at, xor)| Mutation::Flip { at, xor }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Mutation::Set { at, value }),
        any::<usize>().prop_map(|len| Mutation::Truncate { len }),
        vec(any::<u8>(), 1..64).prop_map(|bytes| Mutation::Extend { bytes }),
    ]
}

fn apply(frame: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Flip { at, xor } if !frame.is_empty() => {
            let i = at % frame.len();
            frame[i] ^= xor;
        }
        Mutation::Set { at, value } if !frame.is_empty() => {
            let i = at % frame.len();
            frame[i] = *value;
        }
        Mutation::Truncate { len } => frame.truncate(len % (frame.len() + 1)),
        Mutation::Extend { bytes } => frame.extend_from_slice(bytes),
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..10_000)) {
        for cfg in common::configs() {
            stable(&bytes, &cfg)?;
        }
    }

    /// Random bytes behind a plausible header reach the per-type checks.
    #[test]
    fn random_bodies_never_panic(ptype in prop_oneof![1u8..=4, 32u8..=45, any::<u8>()],
                                 body in vec(any::<u8>(), 0..200)) {
        for cfg in common::configs() {
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&cfg.ethertype.to_be_bytes());
            f.extend_from_slice(&[0, 0, ptype]);
            f.extend_from_slice(&body);
            stable(&f, &cfg)?;
        }
    }

    #[test]
    fn mutated_native_9000_frames_never_panic(
        (frame, ..) in common::frame(WireConfig::native_9000()),
        muts in vec(mutation(), 1..6)) {
        mutate_and_check(frame, &muts)?;
    }

    #[test]
    fn mutated_native_1500_frames_never_panic(
        (frame, ..) in common::frame(WireConfig::native_1500()),
        muts in vec(mutation(), 1..6)) {
        mutate_and_check(frame, &muts)?;
    }

    #[test]
    fn mutated_compat_frames_never_panic(
        (frame, ..) in common::frame(WireConfig::mx_compat()),
        muts in vec(mutation(), 1..6)) {
        mutate_and_check(frame, &muts)?;
    }
}

fn mutate_and_check(mut frame: Vec<u8>, muts: &[Mutation]) -> Result<(), TestCaseError> {
    for m in muts {
        apply(&mut frame, m);
        for cfg in common::configs() {
            stable(&frame, &cfg)?;
        }
    }
    Ok(())
}

#[test]
fn latency_flag_is_transparent_in_native_mode_only() {
    for cfg in common::configs() {
        let f = frame(&cfg, tiny(3), &[1, 2, 3]);
        let mut marked = f.clone();
        marked[16] |= omx_wire::LATENCY_FLAG;
        assert!(omx_wire::is_marked(&marked) && !omx_wire::is_marked(&f));
        if cfg.mode == omx_wire::WireMode::Native {
            assert_eq!(decode(&marked, &cfg), decode(&f, &cfg));
        } else {
            assert_eq!(
                decode(&marked, &cfg),
                Err(DecodeError::UnknownType(marked[16]))
            );
        }
    }
    // Board frames never carry it.
    let cfg = N9000();
    let mut raw = frame(&cfg, tiny(0), &[]);
    raw[16] = 1 | omx_wire::LATENCY_FLAG;
    assert_eq!(decode(&raw, &cfg), Err(DecodeError::UnknownType(0x81)));
}

/// The header-only parse of a pull reply (direct receive) agrees with `decode` on every
/// valid reply, short padded ones included, and refuses what `decode` would, plus
/// frames with a checksum trailer and every other type.
#[test]
fn pull_reply_head_agrees_with_decode() {
    for cfg in common::configs() {
        for len in [0u16, 1, 27, 28, 100, cfg.pull_reply_max as u16] {
            let p = PullReply {
                frame_seqnum: 3,
                frame_length: len,
                msg_offset: 4096,
                dst_pull_handle: 0x1234,
                dst_magic: 0x5678,
            };
            let f = frame(&cfg, Packet::PullReply(p), &vec![7; usize::from(len)]);
            let head = &f[..PULL_REPLY_HEAD_LEN];
            let whole = decode(&f, &cfg).unwrap();
            let (h, r) = decode_pull_reply_head(head, f.len(), &cfg).unwrap();
            assert_eq!((h, Packet::PullReply(r)), (whole.header, whole.packet));
            if cfg.checksum {
                continue;
            }
            // The frame cut short of its payload.
            let short = PULL_REPLY_HEAD_LEN + usize::from(len) - 1;
            if usize::from(len) > 0 && short < f.len() {
                assert!(matches!(
                    decode_pull_reply_head(head, short, &cfg),
                    Err(DecodeError::PayloadTruncated { .. })
                ));
            }
            let mut big = head.to_vec();
            put16(&mut big, 18, cfg.pull_reply_max as u16 + 1);
            assert_eq!(
                decode_pull_reply_head(&big, 1 << 17, &cfg),
                Err(DecodeError::BadDataLength)
            );
        }
        let t = frame(&cfg, tiny(4), &[1, 2, 3, 4]);
        assert!(decode_pull_reply_head(&t[..PULL_REPLY_HEAD_LEN], t.len(), &cfg).is_err());
        assert!(decode_pull_reply_head(&[0; 10], 60, &cfg).is_err());
    }
    let cfg = WireConfig::native_checksummed(9000, true);
    let f = frame(&cfg, Packet::PullReply(PullReply::default()), &[]);
    assert_eq!(
        decode_pull_reply_head(&f[..PULL_REPLY_HEAD_LEN], f.len(), &cfg),
        Err(DecodeError::BadChecksum)
    );
}
