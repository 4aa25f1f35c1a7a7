//! Self and shared-memory partners at the engine level: every size across the local
//! rendezvous threshold, posted and unexpected receives, ordering across classes,
//! truncation, the pushed fallback, back-pressure, one-sided operations, dead peers.

mod common;
use common::*;
use omx_proto::onesided::{EXPOSE_READ, EXPOSE_WRITE};
use omx_proto::{EngineConfig, PartnerId, PullOutcome, Reach, StatusCode};
use omx_sim::{Buffer, LinkConfig, World};
use omx_wire::WireConfig;

const SIZES: &[usize] = &[
    0,
    1,
    8,
    32,
    128,
    4095,
    4096,
    4097,
    9000,
    32768,
    65536,
    1 << 20,
    3 << 20,
];

fn host(endpoints: usize, seed: u64) -> World {
    World::new(
        1,
        endpoints,
        EngineConfig::new(WireConfig::native_9000()),
        LinkConfig::default(),
        seed,
    )
}

/// Sends every size from endpoint `a` to `b` (possibly the same) with the receive
/// posted first or the message arriving unexpected, and checks bytes and statuses.
fn all_sizes(w: &mut World, a: u8, b: u8, posted_first: bool) {
    let to = w.connect_local(0, a, b);
    for (i, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, i as u64 + 7);
        let tag = 0x100 + i as u64;
        let (r, h, s) = if posted_first {
            let (r, h) = w.recv(0, b, tag, u64::MAX, len, &[]);
            let s = w.send(0, a, to, tag, data.clone(), false);
            (r, h, s)
        } else {
            let s = w.send(0, a, to, tag, data.clone(), false);
            w.pump();
            let (r, h) = w.recv(0, b, tag, u64::MAX, len, &[]);
            (r, h, s)
        };
        let rs = w.wait(0, b, r, w.now + SEC).expect("receive completes");
        let ss = w.wait(0, a, s, w.now + SEC).expect("send completes");
        assert_eq!(
            (rs.code, ss.code),
            (StatusCode::Success, StatusCode::Success),
            "{len}"
        );
        assert_eq!(
            (rs.msg_length as usize, rs.xfer_length as usize),
            (len, len)
        );
        assert_eq!(w.hosts[0].mem.get(h).to_vec(), data, "{len} bytes differ");
    }
    assert_eq!(w.stats.frames, 0, "local traffic never touches the link");
    for e in &w.hosts[0].engines {
        let st = e.stats();
        assert_eq!(
            (
                st.requests,
                st.unexpected,
                st.regions,
                st.local_pulls,
                st.copies
            ),
            (0, 0, 0, 0, 0)
        );
    }
}

#[test]
fn self_partner_every_size_posted_and_unexpected() {
    let mut w = host(1, 1);
    all_sizes(&mut w, 0, 0, true);
    all_sizes(&mut w, 0, 0, false);
    let to = w.connect_local(0, 0, 0);
    assert_eq!(w.engine(0, 0).reach(to), Reach::SelfEndpoint);
}

#[test]
fn shared_partner_every_size_posted_and_unexpected() {
    let mut w = host(2, 2);
    all_sizes(&mut w, 0, 1, true);
    all_sizes(&mut w, 0, 1, false);
    all_sizes(&mut w, 1, 0, true);
    let c = &w.hosts[0].engines[0].counters;
    assert!(c.send_local_eager > 0 && c.send_local_rndv > 0);
    assert_eq!(c.local_copy_refused, 0);
}

/// The runtime's fast paths, run by the simulator too: a small send to a connected
/// shared-memory partner is written straight into its channel and completes at once
/// (before anything else runs), and a posted receive takes it straight from there.
#[test]
fn small_local_sends_take_the_inbox_and_in_place_paths() {
    let mut w = host(2, 4);
    let to = w.connect_local(0, 0, 1);
    assert_eq!(
        w.engine(0, 0).plan_send(to, 9, 64, false),
        omx_proto::SendPlan::WriteToInbox
    );
    for posted in [true, false] {
        let tag = 9 + u64::from(posted);
        let data = pattern(64, tag);
        let r = posted.then(|| w.recv(0, 1, tag, u64::MAX, 64, &[]));
        let s = w.send(0, 0, to, tag, data.clone(), false);
        let done = w.take(0, 0, s).expect("completed at once");
        assert_eq!((done.code, done.xfer_length), (StatusCode::Success, 64));
        let (r, h) = r.unwrap_or_else(|| w.recv(0, 1, tag, u64::MAX, 64, &[]));
        assert_eq!(w.wait(0, 1, r, SEC).unwrap().code, StatusCode::Success);
        assert_eq!(w.hosts[0].mem.get(h).to_vec(), data);
    }
    // The posted message was never queued as unexpected or copied by the engine.
    assert_eq!(w.engine(0, 1).stats().unexpected, 0);
}

#[test]
fn self_message_to_a_posted_receive_is_not_captured() {
    let mut w = host(1, 3);
    let me = w.connect_local(0, 0, 0);
    assert_eq!(
        w.engine(0, 0).plan_send(me, 5, 100, false),
        omx_proto::SendPlan::Capture,
        "nobody waits: capture"
    );
    let (r, _) = w.recv(0, 0, 5, u64::MAX, 100, &[]);
    assert_eq!(
        w.engine(0, 0).plan_send(me, 5, 100, false),
        omx_proto::SendPlan::Lend,
        "copied straight"
    );
    let s = w.send(0, 0, me, 5, pattern(100, 1), false);
    assert_eq!(w.wait(0, 0, r, SEC).unwrap().code, StatusCode::Success);
    assert_eq!(w.wait(0, 0, s, SEC).unwrap().code, StatusCode::Success);
}

#[test]
fn order_is_kept_across_the_local_rendezvous_threshold() {
    for (a, b) in [(0u8, 1u8), (0, 0)] {
        let mut w = host(2, 4);
        let to = w.connect_local(0, a, b);
        let lens = [10usize, 5000, 4096, 100_000, 0, 4097, 64, 1 << 20, 3];
        let sends: Vec<_> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| w.send(0, a, to, 0x7700 + i as u64, pattern(l, i as u64), false))
            .collect();
        w.pump();
        // Wildcard receives match in send order whatever the class.
        for (i, &l) in lens.iter().enumerate() {
            let (r, h) = w.recv(0, b, 0x7700, 0xff00, 1 << 20, &[]);
            let s = w.wait(0, b, r, w.now + SEC).unwrap();
            assert_eq!(s.match_info, 0x7700 + i as u64, "message {i} out of order");
            assert_eq!(s.msg_length as usize, l);
            assert_eq!(
                w.hosts[0].mem.get(h).to_vec()[..l],
                pattern(l, i as u64)[..]
            );
        }
        for s in sends {
            assert_eq!(
                w.wait(0, a, s, w.now + SEC).unwrap().code,
                StatusCode::Success
            );
        }
    }
}

#[test]
fn truncation_and_segments_on_local_paths() {
    for (a, b) in [(0u8, 1u8), (0, 0)] {
        let mut w = host(2, 5);
        let to = w.connect_local(0, a, b);
        for (len, buf) in [(3000usize, 1000usize), (200_000, 150_000), (200_000, 0)] {
            let data = pattern(len, len as u64);
            let (r, h) = w.recv(0, b, 9, u64::MAX, buf, &[7, 100, 1000]);
            let s = w.send(0, a, to, 9, data.clone(), false);
            let rs = w.wait(0, b, r, w.now + SEC).unwrap();
            let ss = w.wait(0, a, s, w.now + SEC).unwrap();
            assert_eq!(rs.code, StatusCode::Truncated);
            assert_eq!(
                (rs.msg_length as usize, rs.xfer_length as usize),
                (len, buf)
            );
            assert_eq!(w.hosts[0].mem.get(h).to_vec(), data[..buf]);
            if len > 4096 {
                // The sender learns how much was taken.
                assert_eq!(
                    (ss.code, ss.xfer_length as usize),
                    (StatusCode::Truncated, buf)
                );
            }
        }
    }
}

#[test]
fn refused_cross_process_copies_fall_back_to_pushed_chunks() {
    let mut w = host(2, 6);
    w.refuse_local_copy = true;
    w.push_chunk = 10_000;
    all_sizes(&mut w, 0, 1, true);
    all_sizes(&mut w, 1, 0, false);
    for e in 0..2 {
        let c = &w.hosts[0].engines[e].counters;
        assert_eq!(
            c.local_copy_refused, 1,
            "refused once, then pushed directly"
        );
        assert!(c.recv_local_pushed > 0);
    }
    // Truncated receive on the fallback path.
    let to = w.connect_local(0, 0, 1);
    let data = pattern(100_000, 1);
    let (r, h) = w.recv(0, 1, 1, u64::MAX, 25_000, &[]);
    w.send(0, 0, to, 1, data.clone(), false);
    let rs = w.wait(0, 1, r, w.now + SEC).unwrap();
    assert_eq!((rs.code, rs.xfer_length), (StatusCode::Truncated, 25_000));
    assert_eq!(w.hosts[0].mem.get(h).to_vec(), data[..25_000]);
}

#[test]
fn unexpected_budget_holds_local_messages_back_without_loss() {
    let mut w = host(2, 7);
    w.engine(0, 1).set_unexpected_max(10_000);
    let to = w.connect_local(0, 0, 1);
    let n = 50;
    for i in 0..n {
        w.send(0, 0, to, i, pattern(3000, i), false);
    }
    w.pump();
    assert!(w.engine(0, 1).stats().unexpected_bytes <= 10_000);
    assert!(w.engine(0, 1).counters.drop_unexp_full > 0, "held back");
    for i in 0..n {
        let (r, h) = w.recv(0, 1, 0, 0, 3000, &[]);
        let s = w.wait(0, 1, r, w.now + SEC).expect("held message arrives");
        assert_eq!(s.match_info, i);
        assert_eq!(w.hosts[0].mem.get(h).to_vec(), pattern(3000, i));
    }
}

#[test]
fn synchronous_local_sends_complete_when_matched() {
    let mut w = host(2, 8);
    let to = w.connect_local(0, 0, 1);
    let s = w.send(0, 0, to, 3, pattern(8, 1), true);
    w.run_idle(w.now + SEC);
    assert!(w.take(0, 0, s).is_none(), "no match yet");
    let (r, h) = w.recv(0, 1, 3, u64::MAX, 8, &[]);
    assert_eq!(
        w.wait(0, 1, r, w.now + SEC).unwrap().code,
        StatusCode::Success
    );
    assert_eq!(
        w.wait(0, 0, s, w.now + SEC).unwrap().code,
        StatusCode::Success
    );
    assert_eq!(w.hosts[0].mem.get(h).to_vec(), pattern(8, 1));
}

#[test]
fn one_sided_get_and_put_with_a_local_partner() {
    for (a, b) in [(0u8, 1u8), (0, 0)] {
        let mut w = host(2, 9);
        let to = w.connect_local(0, a, b);
        let src = w.hosts[0]
            .mem
            .register(Buffer::contiguous(pattern(50_000, 5)));
        let dst = w.hosts[0].mem.register(Buffer::zeroed(50_000, &[]));
        w.engine(0, b)
            .expose(1, 0x1000, 50_000, src, EXPOSE_READ)
            .unwrap();
        w.engine(0, b)
            .expose(2, 0x20000, 50_000, dst, EXPOSE_WRITE)
            .unwrap();
        for (off, len) in [(0u64, 10usize), (100, 20_000), (0, 50_000)] {
            let local = w.hosts[0].mem.register(Buffer::zeroed(len, &[]));
            let now = w.now;
            let g = w
                .engine(0, a)
                .iget(now, to, 0x1000 + off, local, len as u32, 0)
                .unwrap();
            let s = w.wait(0, a, g, w.now + SEC).expect("get completes");
            assert_eq!((s.code, s.xfer_length as usize), (StatusCode::Success, len));
            assert_eq!(
                w.hosts[0].mem.get(local).to_vec(),
                pattern(50_000, 5)[off as usize..off as usize + len]
            );
            let data = w.hosts[0]
                .mem
                .register(Buffer::contiguous(pattern(len, off)));
            let now = w.now;
            let p = w
                .engine(0, a)
                .iput(now, to, 0x20000 + off, data, len as u32, 0)
                .unwrap();
            assert_eq!(
                w.wait(0, a, p, w.now + SEC).unwrap().code,
                StatusCode::Success
            );
            let got = w.hosts[0].mem.get(dst).to_vec();
            assert_eq!(got[off as usize..off as usize + len], pattern(len, off)[..]);
        }
        let local = w.hosts[0].mem.register(Buffer::zeroed(10, &[]));
        let now = w.now;
        let g = w.engine(0, a).iget(now, to, 0x20000, local, 10, 0).unwrap();
        assert_eq!(
            w.wait(0, a, g, w.now + SEC).unwrap().code,
            StatusCode::BadRdmaWin
        );
    }
}

#[test]
fn a_put_notice_reaches_a_local_owner_after_the_data() {
    for (a, b) in [(0u8, 1u8), (0, 0)] {
        let mut w = host(2, 9);
        let to = w.connect_local(0, a, b);
        put_notice_follows_the_data(&mut w, (0, a), to, (0, b));
    }
}

/// A rendezvous to a shared partner whose process then disappears.
fn pending_large_send(w: &mut World) -> (PartnerId, omx_proto::ReqId) {
    let to = w.connect_local(0, 0, 1);
    let s = w.send(0, 0, to, 1, pattern(100_000, 1), false);
    w.pump();
    (to, s)
}

#[test]
fn a_dead_receiver_fails_pending_sends_and_later_ones() {
    let mut w = host(2, 10);
    let (to, s) = pending_large_send(&mut w);
    let now = w.now;
    w.engine(0, 0).local_partner_gone(now, to);
    w.pump();
    assert_eq!(w.take(0, 0, s).unwrap().code, StatusCode::EndpointClosed);
    let s2 = w.send(0, 0, to, 1, pattern(10, 1), false);
    assert_eq!(
        w.wait(0, 0, s2, w.now + SEC).unwrap().code,
        StatusCode::EndpointUnreachable
    );
    assert_eq!(w.engine(0, 0).stats().regions, 0);
}

#[test]
fn a_sender_gone_during_the_copy_fails_the_receive() {
    let mut w = host(2, 11);
    let to = w.connect_local(0, 0, 1);
    let s = w.send(0, 0, to, 1, pattern(100_000, 1), false);
    w.pump();
    // The receiver matches; take its pull by hand and report the sender gone.
    let h = w.hosts[0].mem.register(Buffer::zeroed(100_000, &[]));
    let now = w.now;
    let r = w
        .engine(0, 1)
        .irecv(now, 1, u64::MAX, h, 100_000, 0)
        .unwrap();
    let pull = match w.engine(0, 1).poll() {
        Some(omx_proto::Output::LocalPull(p)) => p,
        other => panic!("a local pull expected, got {other:?}"),
    };
    assert_eq!(pull.len, 100_000);
    w.engine(0, 1)
        .local_pull_done(now, pull.id, PullOutcome::Gone);
    w.pump();
    assert_eq!(w.take(0, 1, r).unwrap().code, StatusCode::EndpointClosed);
    // The sender (still alive here) is told and releases its buffer.
    assert_eq!(w.take(0, 0, s).unwrap().code, StatusCode::BadRdmaWin);
    assert_eq!(w.engine(0, 1).stats().local_pulls, 0);
    // A late report for the same pull is ignored.
    w.engine(0, 1)
        .local_pull_done(now, pull.id, PullOutcome::Done);
}

#[test]
fn a_reopened_shared_peer_is_a_new_session() {
    let mut w = host(2, 12);
    let (to, s) = pending_large_send(&mut w);
    let nic = w.hosts[0].nic_id;
    let now = w.now;
    let _ = now;
    // The peer restarted: the runtime sees a new session in its ring and reconnects.
    let req = w
        .engine(0, 0)
        .connect_local(nic, 1, Ok(0xabcd), true, 0)
        .unwrap();
    w.pump();
    assert_eq!(w.take(0, 0, s).unwrap().code, StatusCode::EndpointClosed);
    assert_eq!(w.take(0, 0, req).unwrap().code, StatusCode::Success);
    assert_eq!(w.engine(0, 0).partner_addr(to).unwrap().2, Some(0xabcd));
}

#[test]
fn wrong_key_fails_a_local_connect() {
    let mut w = host(2, 13);
    let nic = w.hosts[0].nic_id;
    let req = w
        .engine(0, 0)
        .connect_local(nic, 1, Ok(5), false, 0)
        .unwrap();
    w.pump();
    assert_eq!(w.take(0, 0, req).unwrap().code, StatusCode::BadKey);
}

#[test]
fn local_and_network_partners_share_one_matching_queue() {
    let mut w = World::new(
        2,
        2,
        EngineConfig::new(WireConfig::native_9000()),
        LinkConfig::default(),
        14,
    );
    let local = w.connect_local(0, 1, 0);
    let remote = w.connect(1, 0, 0, 0);
    let mut reqs = Vec::new();
    for i in 0..20u64 {
        let len = [5usize, 6000, 70_000][i as usize % 3];
        let r = if i % 2 == 0 {
            w.send(0, 1, local, i, pattern(len, i), false)
        } else {
            w.send(1, 0, remote, i, pattern(len, i), false)
        };
        reqs.push((i, r, len));
    }
    let mut seen = Vec::new();
    for _ in 0..20 {
        let (r, h) = w.recv(0, 0, 0, 0, 70_000, &[]);
        let s = w.wait(0, 0, r, w.now + 10 * SEC).expect("delivered");
        let len = s.msg_length as usize;
        assert_eq!(
            w.hosts[0].mem.get(h).to_vec()[..len],
            pattern(len, s.match_info)[..]
        );
        seen.push(s.match_info);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..20).collect::<Vec<_>>());
    let evens: Vec<_> = reqs.iter().filter(|(i, _, _)| i % 2 == 0).collect();
    assert!(!evens.is_empty());
}

/// More large sends than regions (128), interleaved with eager ones: the eager ones
/// must not overtake the large ones waiting for a region (network and local).
#[test]
fn order_is_kept_when_large_sends_wait_for_regions() {
    for local in [true, false] {
        let mut w = World::new(
            if local { 1 } else { 2 },
            2,
            EngineConfig::new(WireConfig::native_9000()),
            LinkConfig::default(),
            15,
        );
        let (to, rh, re) = if local {
            (w.connect_local(0, 0, 1), 0, 1)
        } else {
            (w.connect(0, 0, 1, 0), 1, 0)
        };
        let n = 300u64;
        let len = |i: u64| if i % 3 == 2 { 10 } else { 40_000 };
        let sends: Vec<_> = (0..n)
            .map(|i| w.send(0, 0, to, i, pattern(len(i), i), false))
            .collect();
        for i in 0..n {
            let (r, h) = w.recv(rh, re, 0, 0, 40_000, &[]);
            let s = w.wait(rh, re, r, w.now + 100 * SEC).expect("delivered");
            assert_eq!(s.match_info, i, "local={local}: message {i} overtaken");
            assert_eq!(
                w.hosts[rh].mem.get(h).to_vec()[..len(i)],
                pattern(len(i), i)[..]
            );
        }
        for s in sends {
            assert_eq!(
                w.wait(0, 0, s, w.now + 100 * SEC).unwrap().code,
                StatusCode::Success
            );
        }
    }
}
