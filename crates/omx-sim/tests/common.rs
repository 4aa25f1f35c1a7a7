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

/// A put with a notice from (`h`, `a`) through partner `to` into (`h_owner`, `b`),
/// which exposes a write window at 0x40000: the owner's receive of the notice
/// completes with the notice's match info and payload while the initiator's put
/// completion is never taken, and by then the data is in place; a refused put sends
/// no notice.
pub fn put_notice_follows_the_data(
    w: &mut World,
    (h, a): (usize, u8),
    to: omx_proto::PartnerId,
    (h_owner, b): (usize, u8),
) {
    use omx_proto::onesided::{PutNotice, EXPOSE_WRITE};
    use omx_sim::Buffer;
    let len = 100_000;
    let dst = w.hosts[h_owner].mem.register(Buffer::zeroed(len, &[]));
    w.engine(h_owner, b)
        .expose(7, 0x40000, len as u64, dst, EXPOSE_WRITE)
        .unwrap();
    let notice_match = 0x4000_0000_0000_0001u64;
    let (r, got) = w.recv(h_owner, b, notice_match, u64::MAX, 16, &[]);
    let data = w.hosts[h].mem.register(Buffer::contiguous(pattern(len, 3)));
    let notice = PutNotice {
        match_info: notice_match,
        payload: bytes::Bytes::from_static(b"cq-data!"),
    };
    let now = w.now;
    let put = w
        .engine(h, a)
        .iput_notify(now, to, 0x40000, data, len as u32, 0, Some(notice))
        .unwrap();
    let s = w.wait(h_owner, b, r, w.now + 10 * SEC).expect("notice");
    assert_eq!((s.code, s.match_info), (StatusCode::Success, notice_match));
    assert_eq!(&w.hosts[h_owner].mem.get(got).to_vec()[..8], b"cq-data!");
    assert_eq!(w.hosts[h_owner].mem.get(dst).to_vec(), pattern(len, 3));
    let put = w.wait(h, a, put, w.now + SEC).expect("put completes");
    assert_eq!(put.code, StatusCode::Success);
    // Refused (outside the window): the put fails, the notice never comes.
    let (r, _) = w.recv(h_owner, b, notice_match, u64::MAX, 16, &[]);
    let data = w.hosts[h].mem.register(Buffer::contiguous(vec![1; 10]));
    let notice = PutNotice {
        match_info: notice_match,
        payload: bytes::Bytes::new(),
    };
    let now = w.now;
    let put = w
        .engine(h, a)
        .iput_notify(now, to, 0x10, data, 10, 0, Some(notice))
        .unwrap();
    let put = w.wait(h, a, put, w.now + 10 * SEC).expect("put refused");
    assert_eq!(put.code, StatusCode::BadRdmaWin);
    w.run_idle(w.now + SEC);
    assert!(
        w.take(h_owner, b, r).is_none(),
        "no notice for a refused put"
    );
    // Too long a notice is refused at the call.
    let notice = PutNotice {
        match_info: notice_match,
        payload: bytes::Bytes::from(vec![0; omx_proto::onesided::PUT_NOTICE_MAX + 1]),
    };
    let now = w.now;
    assert!(w
        .engine(h, a)
        .iput_notify(now, to, 0x40000, data, 10, 0, Some(notice))
        .is_err());
}
