//! Every message class, in every wire mode, over a clean simulated link.

mod common;
use common::*;
use omx_proto::StatusCode;
use omx_sim::LinkConfig;

const SIZES: &[usize] = &[
    0,
    1,
    31,
    32,
    33,
    127,
    128,
    129,
    1452,
    1453,
    4095,
    4096,
    4097,
    8192,
    8193,
    20000,
    32767,
    32768,
    32769,
    46464,
    65536,
    100_000,
    286_976,
    286_977,
    1 << 20,
    (1 << 20) + 7,
];

#[test]
fn every_size_every_mode() {
    for wire in wires() {
        for &len in SIZES {
            let mut w = world(wire, LinkConfig::default(), len as u64);
            transfer(&mut w, pattern(len, len as u64), len, &[], false);
        }
    }
}

#[test]
fn eight_mib_large_message() {
    let mut w = world(
        omx_wire::WireConfig::native_9000(),
        LinkConfig::default(),
        1,
    );
    transfer(&mut w, pattern(8 << 20, 3), 8 << 20, &[], false);
}

#[test]
fn truncation_reports_short_buffer() {
    for wire in wires() {
        for (len, buf) in [
            (20usize, 10usize),
            (100, 0),
            (5000, 4000),
            (40_000, 100),
            (1 << 20, 300_000),
        ] {
            let mut w = world(wire, LinkConfig::default(), 7);
            transfer(&mut w, pattern(len, 9), buf, &[], false);
        }
    }
}

#[test]
fn large_send_sees_truncated_xfer() {
    let mut w = world(
        omx_wire::WireConfig::native_9000(),
        LinkConfig::default(),
        5,
    );
    let to = w.connect(0, 0, 1, 0);
    let (r, _) = w.recv(1, 0, 1, u64::MAX, 50_000, &[]);
    let s = w.send(0, 0, to, 1, pattern(100_000, 1), false);
    let rs = w.wait(1, 0, r, 10 * SEC).unwrap();
    let ss = w.wait(0, 0, s, 10 * SEC).unwrap();
    assert_eq!(rs.code, StatusCode::Truncated);
    assert_eq!(ss.code, StatusCode::Truncated);
    assert_eq!(ss.xfer_length, 50_000);
}

#[test]
fn synchronous_sends_complete_only_when_matched() {
    for len in [0usize, 10, 1000, 100_000] {
        let mut w = world(
            omx_wire::WireConfig::native_9000(),
            LinkConfig::default(),
            11,
        );
        let to = w.connect(0, 0, 1, 0);
        let s = w.send(0, 0, to, 5, pattern(len, 2), true);
        w.run_idle(w.now + 5 * omx_proto::NS_PER_MS * 1000);
        assert!(
            w.take(0, 0, s).is_none(),
            "issend completed before a receive was posted"
        );
        let (r, h) = w.recv(1, 0, 5, u64::MAX, len, &[]);
        let rs = w.wait(1, 0, r, w.now + 10 * SEC).unwrap();
        let ss = w.wait(0, 0, s, w.now + 10 * SEC).unwrap();
        assert_eq!(
            (rs.code, ss.code),
            (StatusCode::Success, StatusCode::Success)
        );
        assert_eq!(w.hosts[1].mem.get(h).to_vec(), pattern(len, 2));
    }
}

#[test]
fn segments_on_the_receive_side() {
    // 256 segments of varied sizes, including empty ones.
    let sizes: Vec<usize> = (0..255).map(|i| (i * 37) % 700).collect();
    for len in [100usize, 5000, 30_000, 200_000] {
        let mut w = world(
            omx_wire::WireConfig::native_9000(),
            LinkConfig::default(),
            3,
        );
        transfer(&mut w, pattern(len, 4), len, &sizes, false);
    }
}

#[test]
fn zero_length_buffer_for_large_message() {
    let mut w = world(
        omx_wire::WireConfig::native_9000(),
        LinkConfig::default(),
        3,
    );
    transfer(&mut w, pattern(100_000, 4), 0, &[], false);
}
