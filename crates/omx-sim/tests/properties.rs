//! Property tests: random message sizes (0 B to 8 MiB), random match/mask patterns and
//! random interleavings of sends and receives always deliver every message exactly once,
//! byte-identical, to the receive the MX matching rules choose.

mod common;
use common::*;
use omx_proto::StatusCode;
use omx_sim::LinkConfig;
use omx_wire::WireConfig;
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Msg {
    len: usize,
    tag: u64,
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..=32,
        3 => 33usize..=128,
        3 => 129usize..=40_000,
        2 => 40_001usize..=600_000,
        1 => 600_001usize..=(8 << 20),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Receives with random masks, posted before or after their messages: each message
    /// goes to the first posted receive whose mask matches, in send order.
    #[test]
    fn random_sizes_masks_and_interleavings(
        msgs in prop::collection::vec((size(), 0u64..4), 1..12),
        recv_first in prop::collection::vec(any::<bool>(), 12),
        wildcard in prop::collection::vec(any::<bool>(), 12),
        seed in any::<u64>(),
    ) {
        let msgs: Vec<Msg> = msgs.into_iter().map(|(len, t)| Msg { len, tag: t << 8 }).collect();
        let mut w = world(WireConfig::native_9000(), LinkConfig::faulty(0.02, 0.01, 0.05), seed);
        let to = w.connect(0, 0, 1, 0);
        // Receive i takes message i: exact receives name its tag and index; wildcard ones
        // match any message whose low byte is i (so they cannot steal another's message).
        let mut recvs = Vec::new();
        let mut sends = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            let m_info = m.tag | i as u64;
            let (info, mask) = if wildcard[i] { (i as u64, 0xFF) } else { (m_info, u64::MAX) };
            if recv_first[i] {
                recvs.push(w.recv(1, 0, info, mask, m.len, &[]));
                sends.push(w.send(0, 0, to, m_info, pattern(m.len, seed ^ i as u64), false));
            } else {
                sends.push(w.send(0, 0, to, m_info, pattern(m.len, seed ^ i as u64), false));
                w.run_idle(w.now + 1_000_000);
                recvs.push(w.recv(1, 0, info, mask, m.len, &[]));
            }
        }
        for (i, (r, h)) in recvs.into_iter().enumerate() {
            let s = w.wait(1, 0, r, w.now + 3_600 * SEC).expect("receive completes");
            prop_assert_eq!(s.code, StatusCode::Success);
            prop_assert_eq!(s.match_info, msgs[i].tag | i as u64);
            prop_assert_eq!(s.xfer_length as usize, msgs[i].len);
            prop_assert!(w.hosts[1].mem.get(h).to_vec() == pattern(msgs[i].len, seed ^ i as u64));
        }
        for s in sends {
            prop_assert_eq!(w.wait(0, 0, s, w.now + 3_600 * SEC).expect("send completes").code, StatusCode::Success);
        }
        w.run_idle(w.now + 10 * SEC);
        for h in 0..2 {
            let st = w.engine(h, 0).stats();
            prop_assert_eq!((st.requests, st.unexpected, st.unacked, st.pulls, st.copies), (0, 0, 0, 0, 0));
        }
    }
}

/// More than 2^14 messages on one stream: sequence numbers wrap and nothing is lost.
#[test]
fn sequence_numbers_wrap() {
    let mut w = world(
        WireConfig::native_9000(),
        LinkConfig::faulty(0.01, 0.01, 0.02),
        3,
    );
    let to = w.connect(0, 0, 1, 0);
    const N: u64 = 20_000;
    let mut recvs = Vec::new();
    for i in 0..N {
        recvs.push(w.recv(1, 0, i, u64::MAX, 4, &[]));
        w.send(0, 0, to, i, (i as u32).to_le_bytes().to_vec(), false);
        if i % 64 == 63 {
            w.run_idle(w.now + 1_000_000);
        }
    }
    let done = w.run_until(w.now + 3_600 * SEC, |w| {
        w.hosts[1].completions.len() >= N as usize
    });
    assert!(
        done,
        "only {} of {N} delivered",
        w.hosts[1].completions.len()
    );
    assert_eq!(
        w.hosts[1].completions.len(),
        N as usize,
        "completions on the receiver"
    );
    // Receive i names match info i exactly, so it must hold message i and nothing else.
    for (i, (r, h)) in recvs.into_iter().enumerate() {
        let s = w.take(1, 0, r).expect("receive completed");
        assert_eq!(s.code, StatusCode::Success, "receive {i}");
        assert_eq!(s.match_info, i as u64, "receive {i}");
        assert_eq!(s.xfer_length, 4, "receive {i}");
        assert_eq!(
            w.hosts[1].mem.get(h).to_vec(),
            (i as u32).to_le_bytes(),
            "receive {i}"
        );
    }
    assert!(
        w.hosts[1].completions.is_empty(),
        "completions of no receive"
    );
}
