//! A third party decodes every medium fragment of every frame size with
//! `observer_config`, knowing neither the sender's MTU nor its checksum setting.

use omx_wire::{
    decode, encode, observer_config, Header, Medium, Packet, PullReply, WireConfig, WireMode,
    COMPAT_FRAG_PIPELINE, DEFAULT_ETHERTYPE,
};

fn header() -> Header {
    Header {
        dst_mac: [2, 0, 0, 0, 0, 1],
        src_mac: [2, 0, 0, 0, 0, 2],
        ethertype: DEFAULT_ETHERTYPE,
        dst_src_peer_index: 3,
    }
}

/// Every fragment of a message of `total` bytes sent with `cfg`.
fn fragments(cfg: &WireConfig, total: u32) -> Vec<Vec<u8>> {
    let frag = cfg.medium_frag_max;
    let count = total.div_ceil(frag).max(1);
    (0..count)
        .map(|i| {
            let len = (total - i * frag).min(frag) as u16;
            let m = Medium {
                dst_endpoint: 1,
                src_endpoint: 2,
                length: total,
                lib_seqnum: 7,
                match_info: 0x1122_3344_5566_7788,
                frag_length: len,
                frag_seqnum: i as u8,
                frag_pipeline: COMPAT_FRAG_PIPELINE,
                ..Medium::default()
            };
            let mut f = Vec::new();
            let payload = vec![0xA5; len as usize];
            encode(&header(), &Packet::Medium(m), &payload, cfg, &mut f).unwrap();
            f
        })
        .collect()
}

#[test]
fn medium_fragments_of_any_frame_size_decode() {
    let mut cfgs = Vec::new();
    for mtu in [1280, 1500, 4000, 4144, 8000, 9000, 65535] {
        for checksum in [false, true] {
            cfgs.push(WireConfig::native_checksummed(mtu, checksum));
        }
    }
    cfgs.push(WireConfig::mx_compat());
    for cfg in cfgs {
        for total in [
            1,
            1000,
            cfg.medium_frag_max,
            3 * cfg.medium_frag_max - 5,
            32768,
        ] {
            if total > cfg.medium_max() {
                continue;
            }
            for f in fragments(&cfg, total) {
                let seen = observer_config(&f, cfg.mode, DEFAULT_ETHERTYPE);
                let want = decode(&f, &cfg).unwrap();
                let got = decode(&f, &seen).unwrap_or_else(|e| {
                    panic!(
                        "{e} at MTU {} total {total} {seen:?} {:?}",
                        cfg.mtu, want.packet
                    )
                });
                assert_eq!(got, want);
            }
        }
    }
}

#[test]
fn other_types_decode_at_the_largest_size() {
    for cfg in [
        WireConfig::native_1500(),
        WireConfig::native_checksummed(9000, true),
    ] {
        let p = PullReply {
            frame_length: cfg.pull_reply_max as u16,
            ..PullReply::default()
        };
        let mut f = Vec::new();
        let payload = vec![1; cfg.pull_reply_max as usize];
        encode(&header(), &Packet::PullReply(p), &payload, &cfg, &mut f).unwrap();
        let seen = observer_config(&f, WireMode::Native, DEFAULT_ETHERTYPE);
        assert_eq!(decode(&f, &seen).unwrap(), decode(&f, &cfg).unwrap());
    }
    // Frames too short for a type byte get the plain configuration, and no panic.
    assert_eq!(
        observer_config(&[0; 10], WireMode::Native, DEFAULT_ETHERTYPE).mode,
        WireMode::Native
    );
}
