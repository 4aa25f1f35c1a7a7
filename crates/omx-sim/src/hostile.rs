//! The properties the fuzz targets (fuzz/) check on arbitrary bytes, in one home: the
//! fuzzers call them on generated inputs, and `tests/fuzz_corpus.rs` replays every
//! stored corpus file through them in `make test` (fuzz/ is outside the workspace).

use bytes::Bytes;
use omx_proto::EngineConfig;
use omx_wire::{decode, encode, Packet, WireConfig};

use crate::{LinkConfig, World};

/// Decodes `data` in every reference configuration; whatever decodes must re-encode
/// without error, decode back to the same value, and re-encode to identical bytes.
pub fn decode_roundtrip(data: &[u8]) {
    let configs = [
        WireConfig::native_9000(),
        WireConfig::native_1500(),
        WireConfig::mx_compat(),
        WireConfig::native_checksummed(9000, true),
    ];
    for cfg in &configs {
        let Ok(first) = decode(data, cfg) else {
            continue;
        };
        let mut frame = Vec::new();
        encode(&first.header, &first.packet, first.payload, cfg, &mut frame)
            .expect("a decoded packet must re-encode");
        let second = decode(&frame, cfg).expect("a re-encoded packet must decode");
        assert_eq!(second.header, first.header);
        assert_eq!(second.packet, first.packet);
        if first.packet == Packet::Raw {
            // RAW payloads run to the end of the frame, so re-encoding may add zero
            // padding after them.
            let (head, pad) = second.payload.split_at(first.payload.len());
            assert_eq!(head, first.payload);
            assert!(pad.iter().all(|&b| b == 0));
        } else {
            assert_eq!(second.payload, first.payload);
        }
        // Encoding is canonical: a second round gives identical bytes.
        let mut again = Vec::new();
        encode(
            &second.header,
            &second.packet,
            second.payload,
            cfg,
            &mut again,
        )
        .expect("re-encode");
        assert_eq!(again, frame);
    }
}

/// Feeds `data`, split into frames at 0xA5 bytes (at most 64), to two connected
/// engines: to one behind a valid header prefix (so it looks past the first checks),
/// to the other as is. No input may panic, hang or grow state without bound; a message
/// exchanged afterwards runs to a bounded simulated time (a hostile frame may have been
/// a valid one of the session, so its outcome is not asserted).
pub fn engine_frames(data: &[u8]) {
    let cfg = EngineConfig::new(WireConfig::native_9000());
    let mut w = World::new(2, 1, cfg, LinkConfig::default(), 1);
    w.connect(0, 0, 1, 0);
    let back = w.connect(1, 0, 0, 0);
    let (dst, src) = (w.hosts[1].nic_id, w.hosts[0].nic_id);
    let mut prefix = Vec::new();
    prefix.extend_from_slice(&dst.to_be_bytes()[2..]);
    prefix.extend_from_slice(&src.to_be_bytes()[2..]);
    prefix.extend_from_slice(&0x86DFu16.to_be_bytes());
    prefix.extend_from_slice(&0u16.to_be_bytes());
    let now = w.now;
    for chunk in data.split(|&b| b == 0xA5).take(64) {
        let mut f = prefix.clone();
        f.extend_from_slice(chunk);
        w.engine(1, 0).handle_frame(now, Bytes::from(f));
        w.engine(0, 0)
            .handle_frame(now, Bytes::from(chunk.to_vec()));
    }
    w.run_idle(w.now + 2_000_000_000);
    for h in 0..2 {
        let s = w.engine(h, 0).stats();
        assert!(s.unexpected_bytes <= 64 * 70_000 && s.early_bytes <= 64 * 70_000);
    }
    let (r, _) = w.recv(0, 0, 7, u64::MAX, 100, &[]);
    w.send(1, 0, back, 7, vec![1; 100], false);
    let _ = w.wait(0, 0, r, w.now + 600_000_000_000);
}
