//! Issue 18 A: every omx extension of the wire is negotiated per peer. A host that
//! offers none (as an Open-MX 1.5 peer, which advertises nothing) must receive only the
//! original's frames: its type numbers without flag bits, no bundles, no checksum
//! trailers, no one-sided flags, and every field where the original's layout puts it
//! (a decode and re-encode under the original's configuration gives the same bytes).
//! Between two omx hosts everything stays on.

mod common;
use common::*;
use omx_proto::{EngineConfig, EngineError, MemHandle, StatusCode};
use omx_sim::{LinkConfig, World};
use omx_wire::{Extensions, Packet, WireConfig};
use std::cell::RefCell;
use std::rc::Rc;

/// Tiny, small, medium (one and several fragments) and large (pulled).
const SIZES: &[usize] = &[0, 32, 128, 129, 8192, 8193, 30_000, 300_000];

/// Two hosts, host 1 offering `offered` (and sending checksum trailers if that says so);
/// frames leaving host 0 are recorded.
fn hosts(offered: Extensions, checksum_wanted: bool) -> (World, Rc<RefCell<Vec<Vec<u8>>>>) {
    let wire = WireConfig::native_checksummed(9000, checksum_wanted);
    let mut w = World::new(2, 1, EngineConfig::new(wire), LinkConfig::default(), 3);
    w.configure_host(1, |cfg| {
        let wants = offered.contains(Extensions::CHECKSUM_WANTED);
        cfg.wire = WireConfig {
            extensions: offered,
            ..cfg.wire.with_checksum(wants)
        };
    });
    let seen = Rc::new(RefCell::new(Vec::new()));
    let from0 = omx_proto::mac_from_nic_id(w.engine(0, 0).params().nic_id);
    let log = seen.clone();
    w.filter = Some(Box::new(move |f: &[u8]| {
        if f[6..12] == from0 {
            log.borrow_mut().push(f.to_vec());
        }
        true
    }));
    (w, seen)
}

/// Every size both ways, many messages at once (so that bundles would form), checked.
fn traffic(w: &mut World) {
    for from in [0, 1] {
        let to_host = 1 - from;
        let to = w.connect(from, 0, to_host, 0);
        let mut posted = Vec::new();
        for (i, &len) in SIZES.iter().enumerate() {
            for copy in 0..4u64 {
                let tag = (i as u64) << 8 | copy;
                let data = pattern(len, tag + 7 * from as u64);
                let (r, h) = w.recv(to_host, 0, tag, u64::MAX, len, &[]);
                let s = w.send(from, 0, to, tag, data.clone(), copy == 3);
                posted.push((r, h, s, data));
            }
        }
        for (r, h, s, data) in posted {
            let limit = w.now + 60 * SEC;
            let rs = w.wait(to_host, 0, r, limit).unwrap_or_else(|| {
                panic!(
                    "{} bytes from host {from} not received: {:?}\nsender {:?}\nreceiver {:?}",
                    data.len(),
                    w.stats,
                    w.hosts[from].engines[0].counters,
                    w.hosts[to_host].engines[0].counters
                )
            });
            let ss = w.wait(from, 0, s, limit).expect("sent");
            assert_eq!(
                (rs.code, ss.code),
                (StatusCode::Success, StatusCode::Success)
            );
            assert_eq!(w.hosts[to_host].mem.get(h).to_vec(), data);
        }
    }
}

/// The original's types: TRUC (35) to NACK_MCP (45), with no flag bit.
const ORIGINAL_TYPES: std::ops::RangeInclusive<u8> = 35..=45;

#[test]
fn a_peer_offering_nothing_gets_the_original_frames_byte_for_byte() {
    // Host 0 even wants checksums: they need the peer's consent.
    let (mut w, seen) = hosts(Extensions::NONE, true);
    traffic(&mut w);
    let legacy = WireConfig::native_9000().unadvertised();
    let frames = seen.borrow();
    let mut types = std::collections::BTreeSet::new();
    for f in frames.iter() {
        let t = f[16];
        assert!(
            ORIGINAL_TYPES.contains(&t),
            "type byte {t:#x} is not the original's"
        );
        types.insert(t);
        let d = omx_wire::decode(f, &legacy).unwrap_or_else(|e| panic!("type {t}: {e}"));
        assert!(!d.checksummed, "type {t} carries a checksum trailer");
        let mut again = Vec::new();
        omx_wire::encode(&d.header, &d.packet, d.payload, &legacy, &mut again).expect("re-encode");
        assert_eq!(&again, f, "type {t}: not the original's layout");
        if let Packet::Tiny(m) | Packet::Small(m) = d.packet {
            assert_eq!(m.flags, 0, "one-sided flags in an ordinary message");
        }
    }
    // Every type a two-way exchange of every class produces was checked.
    for t in [35, 36, 37, 38, 39, 40, 41, 42, 43] {
        assert!(types.contains(&t), "no frame of type {t} seen: {types:?}");
    }
    // Both ends agree: nothing in use either way.
    for h in 0..2 {
        let wire = w.hosts[h].engines[0]
            .partner_wire(omx_proto::PartnerId(0))
            .expect("partner");
        assert_eq!(wire.extensions, Extensions::NONE);
        assert!(!wire.checksum);
        assert_eq!(w.hosts[h].engines[0].counters.send_bundle, 0);
    }
    // One-sided operations are refused toward it rather than sent as plain messages.
    let now = w.now;
    let pid = omx_proto::PartnerId(0);
    let e = w.engine(0, 0);
    assert_eq!(
        e.iput(now, pid, 0, MemHandle(0), 8, 0).err(),
        Some(EngineError::NeedsNativeWire)
    );
}

#[test]
fn two_omx_hosts_use_every_extension() {
    let (mut w, seen) = hosts(Extensions::ALL, false);
    traffic(&mut w);
    let frames = seen.borrow();
    assert!(
        frames.iter().any(|f| f[16] & omx_wire::LATENCY_FLAG != 0),
        "no latency flag"
    );
    assert!(
        frames.iter().any(|f| omx_wire::peek::is_bundle(f)),
        "no bundle"
    );
    // Host 1 wants checksums here (ALL includes the wish): the link uses them.
    assert!(frames.iter().any(|f| f[16] & omx_wire::CHECKSUM_FLAG != 0));
    let wire = w.hosts[0].engines[0]
        .partner_wire(omx_proto::PartnerId(0))
        .expect("partner");
    assert!(wire.uses(Extensions::ONE_SIDED) && wire.uses(Extensions::BUNDLE));
}

#[test]
fn extensions_are_per_peer() {
    // Host 1 takes bundles but nothing else: no flags, no trailers, but bundles.
    let (mut w, seen) = hosts(Extensions::BUNDLE, true);
    traffic(&mut w);
    let frames = seen.borrow();
    assert!(frames.iter().any(|f| omx_wire::peek::is_bundle(f)));
    for f in frames.iter() {
        assert_eq!(
            f[16] & (omx_wire::LATENCY_FLAG | omx_wire::CHECKSUM_FLAG),
            0
        );
    }
}
