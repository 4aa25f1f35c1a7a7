//! encode → decode gives back the same header, packet and payload for any
//! valid field values, in each reference configuration.

mod common;

use omx_wire::*;
use proptest::prelude::*;

fn roundtrip(cfg: &WireConfig, h: Header, p: Packet, payload: &[u8]) -> Result<(), TestCaseError> {
    let mut out = Vec::new();
    encode(&h, &p, payload, cfg, &mut out).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(out.len() >= MIN_FRAME_LEN);
    let checksummed = cfg.checksums(p.packet_type() as u8);
    // A connect advertising extensions without a checksum trailer carries a seal.
    let sealed =
        !checksummed && matches!(p, Packet::Connect(c) if c.extensions != Extensions::NONE);
    let trailer = match (checksummed, sealed) {
        (true, _) => CHECKSUM_LEN,
        (false, true) => CONNECT_SEAL_LEN,
        _ => 0,
    };
    let covered = p.header_len(cfg) + payload.len();
    prop_assert_eq!(out.len(), (covered + trailer).max(MIN_FRAME_LEN));
    let d = decode(&out, cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(d.checksummed, checksummed);
    prop_assert_eq!(d.header, h);
    prop_assert_eq!(d.packet, p);
    if p == Packet::Raw {
        // RAW hands back the whole frame tail, padding included.
        prop_assert_eq!(&d.payload[..payload.len()], payload);
        prop_assert!(d.payload[payload.len()..].iter().all(|&b| b == 0));
    } else {
        prop_assert_eq!(d.payload, payload);
    }

    // encode_header + payload copied by the caller gives the same bytes.
    let mut buf = vec![0u8; out.len()];
    let n = encode_header(&h, &p, cfg, &mut buf).map_err(|e| TestCaseError::fail(e.to_string()))?;
    buf[n..n + payload.len()].copy_from_slice(payload);
    prop_assert_eq!(trailer_len(&buf[..n]), trailer);
    let (head, tail) = buf.split_at_mut(covered);
    write_trailer(&[&head[..n], payload], &mut tail[..trailer]);
    prop_assert_eq!(buf, out);
    Ok(())
}

/// Every single-bit flip of a checksummed frame before its padding is rejected by a
/// receiver with checksums on; flips inside the payload by the checksum itself.
fn flips_are_caught(
    cfg: &WireConfig,
    h: Header,
    p: Packet,
    payload: &[u8],
) -> Result<(), TestCaseError> {
    let mut out = Vec::new();
    encode(&h, &p, payload, cfg, &mut out).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let original = decode(&out, cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let checked = original.checksummed;
    let header_len = p.header_len(cfg);
    // Every byte outside the payload, and 32 bytes spread over it.
    let payload_at = header_len..header_len + payload.len();
    let step = payload.len().div_ceil(32).max(1);
    let bytes = (0..out.len()).filter(|i| !payload_at.contains(i) || (i - header_len) % step == 0);
    let mut bad = out.clone();
    for bit in bytes.flat_map(|i| (0..8).map(move |b| i * 8 + b)) {
        let at = bit / 8;
        bad[at] ^= 1 << (bit % 8);
        let result = decode(&bad, cfg).map(|d| (d.header, d.packet, d.payload.to_vec()));
        bad[at] ^= 1 << (bit % 8);
        match result {
            Err(e) => {
                if checked && (header_len..header_len + payload.len()).contains(&at) {
                    prop_assert_eq!(e, DecodeError::BadChecksum, "flip at byte {}", at);
                }
            }
            Ok(d) => {
                if checked {
                    // The receiver has checksums on: clearing the flag is caught too.
                    let padding = at >= header_len + payload.len() + CHECKSUM_LEN;
                    prop_assert!(padding, "flip at byte {} accepted", at);
                    prop_assert_eq!(d.0, original.header);
                    prop_assert_eq!(d.1, original.packet);
                    prop_assert_eq!(&d.2[..], original.payload);
                }
            }
        }
    }
    Ok(())
}

/// Endpoint packets (the ones that can carry a checksum), with their payloads.
fn endpoint_packet(cfg: WireConfig) -> impl Strategy<Value = (Packet, Vec<u8>)> {
    common::packet(cfg).prop_filter("endpoint types only", move |(p, _)| {
        cfg.checksums(p.packet_type() as u8)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn roundtrip_native_9000(h in common::header(WireConfig::native_9000()),
                             (p, payload) in common::packet(WireConfig::native_9000())) {
        roundtrip(&WireConfig::native_9000(), h, p, &payload)?;
    }

    #[test]
    fn roundtrip_native_1500(h in common::header(WireConfig::native_1500()),
                             (p, payload) in common::packet(WireConfig::native_1500())) {
        roundtrip(&WireConfig::native_1500(), h, p, &payload)?;
    }

    #[test]
    fn roundtrip_mx_compat(h in common::header(WireConfig::mx_compat()),
                           (p, payload) in common::packet(WireConfig::mx_compat())) {
        roundtrip(&WireConfig::mx_compat(), h, p, &payload)?;
    }

    #[test]
    fn roundtrip_native_9000_checksummed(h in common::header(WireConfig::native_9000()),
                             (p, payload) in common::packet(WireConfig::native_checksummed(9000, true))) {
        roundtrip(&WireConfig::native_checksummed(9000, true), h, p, &payload)?;
    }

    #[test]
    fn roundtrip_native_1500_checksummed(h in common::header(WireConfig::native_1500()),
                             (p, payload) in common::packet(WireConfig::native_checksummed(1500, true))) {
        roundtrip(&WireConfig::native_checksummed(1500, true), h, p, &payload)?;
    }

    /// A receiver without checksums of its own still verifies checksummed frames.
    #[test]
    fn checksummed_frames_decode_under_any_native_config(h in common::header(WireConfig::native_9000()),
                             (p, payload) in endpoint_packet(WireConfig::native_checksummed(9000, true))) {
        let on = WireConfig::native_checksummed(9000, true);
        let mut out = Vec::new();
        encode(&h, &p, &payload, &on, &mut out).unwrap();
        // Pull replies are sized by the sender's configuration; the rest decode alike.
        let off = WireConfig { pull_reply_max: on.pull_reply_max, ..WireConfig::native_9000() };
        let d = decode(&out, &off).unwrap();
        prop_assert!(d.checksummed);
        prop_assert_eq!(d.packet, p);
        prop_assert_eq!(d.payload, &payload[..]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn single_bit_flips_are_caught_native_9000(h in common::header(WireConfig::native_9000()),
                             (p, payload) in endpoint_packet(WireConfig::native_checksummed(9000, true))) {
        flips_are_caught(&WireConfig::native_checksummed(9000, true), h, p, &payload)?;
    }

    #[test]
    fn single_bit_flips_are_caught_native_1500(h in common::header(WireConfig::native_1500()),
                             (p, payload) in endpoint_packet(WireConfig::native_checksummed(1500, true))) {
        flips_are_caught(&WireConfig::native_checksummed(1500, true), h, p, &payload)?;
    }
}

/// One frame of each endpoint type, every bit flipped in turn: a checksummed frame
/// never decodes to something else.
#[test]
fn corrupted_bit_is_caught_in_every_frame_type() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let cfg = WireConfig::native_checksummed(9000, true);
    let mut runner = TestRunner::deterministic();
    let mut seen = std::collections::HashSet::new();
    let strategy = (common::header(cfg), endpoint_packet(cfg));
    for _ in 0..100_000 {
        let (h, (p, payload)) = strategy.new_tree(&mut runner).unwrap().current();
        if seen.insert(p.packet_type()) {
            flips_are_caught(&cfg, h, p, &payload).unwrap();
        }
        if seen.len() == 11 {
            break;
        }
    }
    // TRUC, CONNECT, TINY, SMALL, MEDIUM, RNDV, PULL, PULL_REPLY, NOTIFY, NACK_LIB, NACK_MCP
    assert_eq!(seen.len(), 11, "{seen:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Appending to a non-empty buffer leaves the existing bytes alone and
    /// pads only what this call appended.
    #[test]
    fn encode_appends(prefix in proptest::collection::vec(any::<u8>(), 0..100),
                      h in common::header(WireConfig::native_9000()),
                      (p, payload) in common::packet(WireConfig::native_9000())) {
        let cfg = WireConfig::native_9000();
        let mut alone = Vec::new();
        encode(&h, &p, &payload, &cfg, &mut alone).unwrap();
        let mut out = prefix.clone();
        encode(&h, &p, &payload, &cfg, &mut out).unwrap();
        prop_assert_eq!(&out[..prefix.len()], &prefix[..]);
        prop_assert_eq!(&out[prefix.len()..], &alone[..]);
    }
}

/// Edge values of every width in both medium layouts.
#[test]
fn medium_extremes() {
    for cfg in common::configs() {
        let max = cfg.medium_max();
        let last = (max / cfg.medium_frag_max - 1) as u8;
        let pipeline = if cfg.is_compat() { 12 } else { 0 };
        let m = Medium {
            dst_endpoint: 255,
            src_endpoint: 255,
            length: max,
            lib_seqnum: u16::MAX,
            lib_piggyack: u16::MAX,
            match_info: u64::MAX,
            session: u32::MAX,
            frag_length: cfg.medium_frag_max as u16,
            frag_seqnum: last,
            frag_pipeline: pipeline,
            checksum: u16::MAX,
        };
        let payload = vec![0x5A; cfg.medium_frag_max as usize];
        let h = Header {
            ethertype: cfg.ethertype,
            ..Header::default()
        };
        roundtrip(&cfg, h, Packet::Medium(m), &payload).unwrap();
    }
}

#[test]
fn encode_rejects_layout_overflow() {
    let compat = WireConfig::mx_compat();
    let h = Header::default();
    let mut out = vec![1, 2, 3];
    let medium = Medium {
        length: 65_536,
        ..Medium::default()
    };
    assert_eq!(
        encode(&h, &Packet::Medium(medium), &[], &compat, &mut out),
        Err(EncodeError::FieldRange("medium length exceeds 16 bits"))
    );
    for (p, what) in [
        (
            Pull {
                pulled_rdma_id: 256,
                ..Pull::default()
            },
            "pull pulled_rdma_id exceeds 8 bits",
        ),
        (
            Pull {
                pulled_rdma_offset: 65_536,
                ..Pull::default()
            },
            "pull pulled_rdma_offset exceeds 16 bits",
        ),
        (
            Pull {
                first_frame_offset: 65_536,
                ..Pull::default()
            },
            "pull first_frame_offset exceeds 16 bits",
        ),
        (
            Pull {
                block_length: 65_536,
                ..Pull::default()
            },
            "pull block_length exceeds 16 bits",
        ),
    ] {
        assert_eq!(
            encode(&h, &Packet::Pull(p), &[], &compat, &mut out),
            Err(EncodeError::FieldRange(what))
        );
        // The same values fit the native layout.
        let mut native = Vec::new();
        encode(
            &h,
            &Packet::Pull(p),
            &[],
            &WireConfig::native_9000(),
            &mut native,
        )
        .unwrap();
    }
    // Failed encodes leave the buffer untouched.
    assert_eq!(out, [1, 2, 3]);
}

#[test]
fn encode_checks_payload_length() {
    let cfg = WireConfig::native_9000();
    let h = Header::default();
    let mut out = Vec::new();
    let tiny = Packet::Tiny(Msg {
        length: 3,
        ..Msg::default()
    });
    assert_eq!(
        encode(&h, &tiny, b"ab", &cfg, &mut out),
        Err(EncodeError::PayloadLength {
            declared: 3,
            actual: 2
        })
    );
    assert_eq!(
        encode(&h, &Packet::Notify(Notify::default()), b"x", &cfg, &mut out),
        Err(EncodeError::PayloadLength {
            declared: 0,
            actual: 1
        })
    );
    assert!(matches!(
        encode(&h, &Packet::Raw, b"\x02abc", &cfg, &mut out),
        Err(EncodeError::FieldRange(_))
    ));
    assert!(matches!(
        encode(&h, &Packet::Raw, b"", &cfg, &mut out),
        Err(EncodeError::FieldRange(_))
    ));
    assert!(out.is_empty());
}

#[test]
fn encode_header_needs_room() {
    let cfg = WireConfig::native_9000();
    let p = Packet::Pull(Pull::default());
    let mut buf = [0xEEu8; 59];
    assert_eq!(
        encode_header(&Header::default(), &p, &cfg, &mut buf),
        Err(EncodeError::BufferTooSmall { need: 60, have: 59 })
    );
    assert!(buf.iter().all(|&b| b == 0xEE));
    assert_eq!(
        encode_header(&Header::default(), &p, &WireConfig::mx_compat(), &mut buf),
        Ok(48)
    );
}

#[test]
fn header_lengths() {
    let n = WireConfig::native_9000();
    let c = WireConfig::mx_compat();
    let pull = Packet::Pull(Pull::default());
    assert_eq!(pull.body_len(&n), 44);
    assert_eq!(pull.body_len(&c), 32);
    assert_eq!(pull.header_len(&n), 60);
    let cases = [
        (Packet::Raw, 0),
        (Packet::HostQuery(HostQuery::default()), 16),
        (Packet::HostReply(HostReply::default()), 16),
        (Packet::Truc(Truc::default()), 28),
        (Packet::Connect(Connect::default()), 32),
        (Packet::Tiny(Msg::default()), 24),
        (Packet::Small(Msg::default()), 24),
        (Packet::Medium(Medium::default()), 32),
        (Packet::Rndv(Rndv::default()), 32),
        (Packet::PullReply(PullReply::default()), 16),
        (Packet::Notify(Notify::default()), 24),
        (Packet::NackLib(NackLib::default()), 16),
        (Packet::NackMcp(NackMcp::default()), 16),
    ];
    for (p, len) in cases {
        assert_eq!(p.body_len(&n), len, "{p:?}");
        assert_eq!(p.body_len(&c), len, "{p:?}");
        assert_eq!(p.header_len(&n), COMMON_HEADER_LEN + len);
    }
}

#[test]
fn type_values() {
    for v in 0..=255u8 {
        match PacketType::from_u8(v) {
            Some(t) => assert_eq!(t as u8, v),
            None => assert!(!(1..=4).contains(&v) && !(32..=45).contains(&v), "{v}"),
        }
    }
    assert_eq!(PacketType::try_from(0), Err(0));
    assert_eq!(PacketType::try_from(255), Err(255));
    assert_eq!(NackType::try_from(4), Ok(NackType::BadRdmaWin));
    assert_eq!(NackType::try_from(5), Err(5));
}
