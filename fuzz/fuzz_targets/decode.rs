//! Decodes arbitrary bytes in every reference configuration; whatever
//! decodes must re-encode without error and decode back to the same value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use omx_wire::{decode, encode, Packet, WireConfig};

fuzz_target!(|data: &[u8]| {
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
            // RAW payloads run to the end of the frame, so re-encoding may
            // add zero padding after them.
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
});
