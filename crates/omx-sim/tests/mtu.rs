//! Two hosts whose interfaces have different MTUs: the connect handshake agrees on the
//! smaller frame size, and every message class moves both ways in frames that fit it.

mod common;
use common::*;
use omx_proto::{EngineConfig, StatusCode};
use omx_sim::{LinkConfig, World};
use omx_wire::WireConfig;

/// Tiny, small, medium (one and many fragments, around each size's fragment), large.
const SIZES: &[usize] = &[
    0,
    32,
    128,
    129,
    1228,
    1229,
    1352,
    1353,
    1452,
    1453,
    8192,
    8193,
    20_000,
    32_768,
    32_769,
    50_000,
    300_000,
    (1 << 20) + 7,
];

fn two_hosts(mtus: [u32; 2], cfg: EngineConfig, link: LinkConfig, seed: u64) -> World {
    let mut w = World::new(2, 1, cfg, link, seed);
    for (h, &mtu) in mtus.iter().enumerate() {
        w.set_host_mtu(h, mtu);
    }
    w
}

/// Sends every size from `from` to the other host, eager and synchronous, checking
/// the bytes and statuses.
fn every_class(w: &mut World, from: usize, seed: u64) {
    let to_host = 1 - from;
    let to = w.connect(from, 0, to_host, 0);
    for (i, &len) in SIZES.iter().enumerate() {
        for sync in [false, true] {
            let data = pattern(len, seed + i as u64);
            let tag = 0x100 + i as u64;
            let (r, h) = w.recv(to_host, 0, tag, u64::MAX, len, &[]);
            let s = w.send(from, 0, to, tag, data.clone(), sync);
            let limit = w.now + 600 * SEC;
            let rs = w.wait(to_host, 0, r, limit).unwrap_or_else(|| {
                panic!(
                    "{len} bytes from host {from} (sync {sync}) not received: {:?}",
                    w.stats
                )
            });
            let ss = w.wait(from, 0, s, limit).expect("send completes");
            assert_eq!(
                (rs.code, ss.code),
                (StatusCode::Success, StatusCode::Success)
            );
            assert_eq!(rs.xfer_length as usize, len);
            assert_eq!(
                w.hosts[to_host].mem.get(h).to_vec(),
                data,
                "{len} bytes differ"
            );
        }
    }
}

fn agreed_mtu(w: &World, host: usize) -> u32 {
    let e = &w.hosts[host].engines[0];
    let pid = omx_proto::PartnerId(0);
    e.partner_wire(pid).expect("one partner").mtu
}

#[test]
fn different_mtus_agree_on_the_smaller_and_move_every_class_both_ways() {
    for (n, mtus) in [[9000, 1500], [1400, 9000], [1280, 65535], [1500, 1500]]
        .into_iter()
        .enumerate()
    {
        for checksum in [false, true] {
            let wire = WireConfig::native_checksummed(9000, checksum);
            let mut w = two_hosts(mtus, EngineConfig::new(wire), LinkConfig::default(), 1);
            every_class(&mut w, 0, 10 * n as u64);
            every_class(&mut w, 1, 10 * n as u64 + 5);
            let smaller = mtus[0].min(mtus[1]);
            assert_eq!(agreed_mtu(&w, 0), smaller, "{mtus:?}");
            assert_eq!(agreed_mtu(&w, 1), smaller, "{mtus:?}");
            assert_eq!(
                w.stats.oversize, 0,
                "{mtus:?}: a frame exceeded a host's MTU"
            );
            for h in &w.hosts {
                let c = &h.engines[0].counters;
                assert_eq!(c.drop_bad_datalen + c.drop_bad_field, 0, "{mtus:?}: {c:?}");
            }
        }
    }
}

/// A rendezvous threshold above what the small side's fragments can carry: messages
/// between the two limits go eager to a large partner but rendezvous to a small one.
#[test]
fn eager_limit_follows_the_partner() {
    let mut cfg = EngineConfig::new(WireConfig::native_9000());
    cfg.rndv_threshold = 200_000;
    let mut w = two_hosts([9000, 1400], cfg, LinkConfig::default(), 3);
    let to = w.connect(0, 0, 1, 0);
    // 1400: 1352-byte fragments, 32 of them at most.
    assert_eq!(
        w.engine(0, 0).plan_send(to, 1, 43_264, false),
        omx_proto::SendPlan::Capture
    );
    assert_eq!(
        w.engine(0, 0).plan_send(to, 1, 43_265, false),
        omx_proto::SendPlan::Lend
    );
    every_class(&mut w, 0, 40);
    every_class(&mut w, 1, 41);
    assert_eq!(w.stats.oversize, 0);
}

/// Loss, duplication and reordering between a jumbo and a 1500 host: retransmitted and
/// re-requested frames keep the agreed size.
#[test]
fn different_mtus_over_a_faulty_link() {
    let wire = WireConfig::native_checksummed(9000, true);
    let link = LinkConfig::faulty(0.02, 0.01, 0.05);
    let mut w = two_hosts([9000, 1500], EngineConfig::new(wire), link, 7);
    every_class(&mut w, 0, 50);
    every_class(&mut w, 1, 51);
    assert_eq!(w.stats.oversize, 0);
    assert!(w.stats.lost > 0, "the link lost nothing: {:?}", w.stats);
}

/// A peer that never advertises a size (as Open-MX, whose sizes are fixed when it is
/// built and must equal ours) gets the original's default build, 9000, or our own size
/// when smaller (a 1500 board talks to an Open-MX built for 1500), and none of omx's
/// extensions.
#[test]
fn unadvertised_peer_gets_the_original_build() {
    let w = WireConfig::native_9000();
    let legacy = w.unadvertised();
    assert_eq!(legacy.mtu, 9000);
    assert_eq!(legacy.extensions, omx_wire::Extensions::NONE);
    assert_eq!(WireConfig::native(65535).unadvertised().mtu, 9000);
    let small = WireConfig::native_1500().unadvertised();
    assert_eq!((small.mtu, small.medium_frag_max), (1500, 1452));
    // MX-wire mode has one fixed layout and never advertises.
    let mx = WireConfig::mx_compat();
    let mut sim = two_hosts(
        [4144, 9000],
        EngineConfig::new(mx),
        LinkConfig::default(),
        9,
    );
    every_class(&mut sim, 0, 60);
    every_class(&mut sim, 1, 61);
    assert_eq!(agreed_mtu(&sim, 0), 4144);
    assert_eq!(sim.stats.oversize, 0);
}

/// A board nacks a medium for a closed endpoint even when its fragments were cut at a
/// smaller partner's size than the board's own: the sender drops the message at once
/// instead of resending it until it gives up.
#[test]
fn medium_from_a_smaller_partner_to_a_closed_endpoint_is_nacked() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut w = two_hosts(
        [9000, 1500],
        EngineConfig::new(WireConfig::native_9000()),
        LinkConfig::default(),
        11,
    );
    let to = w.connect(1, 0, 0, 0);
    let frags = Rc::new(RefCell::new(Vec::new()));
    let f = frags.clone();
    w.filter = Some(Box::new(move |frame: &[u8]| {
        if omx_wire::type_of(frame[16]) == omx_wire::PacketType::Medium as u8 {
            f.borrow_mut().push(frame.to_vec());
        }
        false
    }));
    w.send(1, 0, to, 9, pattern(5000, 1), false);
    w.run_until(w.now + SEC, |_| frags.borrow().len() >= 4);
    w.filter = None;
    assert_eq!(w.engine(1, 0).stats().unacked, 1);
    let mac = omx_proto::mac_from_nic_id(w.hosts[0].nic_id);
    for frag in frags.borrow().iter().take(4) {
        // Fragments 0..2 carry 1452 bytes and the last one sits at 3 x 1452: none
        // decodes with the 9000 board's sizes.
        assert!(omx_wire::decode(frag, &WireConfig::native_9000()).is_err());
        let nack = omx_proto::demux::closed_endpoint_nack(
            frag,
            &WireConfig::native_9000(),
            mac,
            omx_wire::NackType::EndpointClosed,
        )
        .expect("a nack");
        let now = w.now;
        w.engine(1, 0).handle_frame(now, bytes::Bytes::from(nack));
    }
    w.pump();
    let e = w.engine(1, 0);
    assert_eq!(e.counters.recv_nack_lib, 4);
    // The first nack drops the message; the other three find nothing left.
    assert_eq!(e.counters.drop_bad_peer_addr, 0);
    assert_eq!(e.counters.drop_bad_ack, 3);
    assert_eq!(e.stats().unacked, 0, "the nacked medium was dropped");
}
