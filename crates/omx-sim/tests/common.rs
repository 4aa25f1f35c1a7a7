#![allow(dead_code)]
//! Helpers shared by the simulation tests.

use omx_proto::{EngineConfig, StatusCode, Time};
use omx_sim::{LinkConfig, Rng, World};
use omx_wire::WireConfig;

pub const SEC: Time = 1_000_000_000;

pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

pub fn world(wire: WireConfig, link: LinkConfig, seed: u64) -> World {
    World::new(2, 1, EngineConfig::new(wire), link, seed)
}

pub fn wires() -> [WireConfig; 3] {
    [
        WireConfig::native_9000(),
        WireConfig::native_1500(),
        WireConfig::mx_compat(),
    ]
}

/// Sends `data` from host 0 to host 1 and checks delivery and statuses.
pub fn transfer(w: &mut World, data: Vec<u8>, recv_len: usize, segments: &[usize], sync: bool) {
    let to = w.connect(0, 0, 1, 0);
    let (r, h) = w.recv(1, 0, 0x42, u64::MAX, recv_len, segments);
    let s = w.send(0, 0, to, 0x42, data.clone(), sync);
    let limit = w.now + 600 * SEC;
    let Some(rs) = w.wait(1, 0, r, limit) else {
        panic!(
            "receive of {} bytes did not complete\nsender {:?}\nreceiver {:?}\n{:?}\n{:?}",
            data.len(),
            w.hosts[0].engines[0].counters,
            w.hosts[1].engines[0].counters,
            w.hosts[1].engines[0].stats(),
            w.stats
        )
    };
    let ss = w.wait(0, 0, s, limit).expect("send completes");
    let xfer = data.len().min(recv_len);
    let expect = if xfer < data.len() {
        StatusCode::Truncated
    } else {
        StatusCode::Success
    };
    assert_eq!(rs.code, expect);
    assert_eq!(rs.msg_length as usize, data.len());
    assert_eq!(rs.xfer_length as usize, xfer);
    assert_eq!(rs.match_info, 0x42);
    let got = w.hosts[1].mem.get(h).to_vec();
    assert_eq!(&got[..xfer], &data[..xfer], "received bytes differ");
    assert!(
        got[xfer..].iter().all(|&b| b == 0),
        "bytes written past the message"
    );
    assert!(ss.code == StatusCode::Success || ss.code == StatusCode::Truncated);
}
