//! MX semantics at the engine level: matching, unexpected messages, probe, cancel,
//! ordering, connect keys, restarts, unreachable peers, acks, bounded queues.

mod common;
use common::*;
use omx_proto::{EngineConfig, PartnerId, StatusCode, NS_PER_MS};
use omx_sim::{LinkConfig, World, KEY};
use omx_wire::{PacketType, WireConfig};

fn w2() -> World {
    world(WireConfig::native_9000(), LinkConfig::default(), 1)
}

#[test]
fn masks_select_receives_in_post_order() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    let (r_hi, _) = w.recv(1, 0, 0xAB00, 0xFF00, 16, &[]);
    let (r_any, _) = w.recv(1, 0, 0, 0, 16, &[]);
    let (r_hi2, _) = w.recv(1, 0, 0xAB00, 0xFF00, 16, &[]);
    for m in [0x1234u64, 0xAB01, 0xAB02] {
        w.send(0, 0, to, m, vec![1], false);
    }
    let a = w.wait(1, 0, r_any, SEC).unwrap();
    let h1 = w.wait(1, 0, r_hi, SEC).unwrap();
    let h2 = w.wait(1, 0, r_hi2, SEC).unwrap();
    assert_eq!(
        (a.match_info, h1.match_info, h2.match_info),
        (0x1234, 0xAB01, 0xAB02)
    );
}

#[test]
fn match_info_outside_mask_is_rejected() {
    let mut w = w2();
    let h = w.hosts[1].mem.register(omx_sim::Buffer::zeroed(1, &[]));
    assert!(w.engine(1, 0).irecv(0, 0x10, 0x01, h, 1, 0).is_err());
}

#[test]
fn unexpected_messages_every_class_then_probe_and_receive() {
    let sizes = [0usize, 20, 100, 5000, 200_000];
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    let mut sends = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        sends.push(w.send(0, 0, to, 100 + i as u64, pattern(len, i as u64), false));
    }
    w.run_idle(w.now + 10 * NS_PER_MS);
    assert_eq!(w.engine(1, 0).stats().unexpected, sizes.len());
    // Probe does not consume; it reports the full length.
    for _ in 0..2 {
        let p = w
            .engine(1, 0)
            .iprobe(104, u64::MAX)
            .expect("probe finds the large message");
        assert_eq!(p.msg_length, 200_000);
    }
    assert!(w.engine(1, 0).iprobe(999, u64::MAX).is_none());
    for (i, &len) in sizes.iter().enumerate().rev() {
        let (r, h) = w.recv(1, 0, 100 + i as u64, u64::MAX, len, &[]);
        let s = w.wait(1, 0, r, w.now + SEC).unwrap();
        assert_eq!(s.code, StatusCode::Success);
        assert_eq!(w.hosts[1].mem.get(h).to_vec(), pattern(len, i as u64));
    }
    for s in sends {
        assert_eq!(
            w.wait(0, 0, s, w.now + SEC).unwrap().code,
            StatusCode::Success
        );
    }
}

#[test]
fn cancel_only_unmatched_receives() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    let (r, _) = w.recv(1, 0, 7, u64::MAX, 8, &[]);
    assert_eq!(w.engine(1, 0).cancel(r), Ok(true));
    assert!(
        w.engine(1, 0).cancel(r).is_err(),
        "a cancelled request is gone"
    );
    w.send(0, 0, to, 7, vec![9; 8], false);
    w.run_idle(w.now + 10 * NS_PER_MS);
    assert!(
        w.take(1, 0, r).is_none(),
        "cancelled receive must not complete"
    );
    assert_eq!(w.engine(1, 0).stats().unexpected, 1);
    // A receive matched to an in-progress large message cannot be cancelled.
    w.send(0, 0, to, 8, pattern(1 << 20, 1), false);
    let (r2, _) = w.recv(1, 0, 8, u64::MAX, 1 << 20, &[]);
    w.step();
    assert_eq!(w.engine(1, 0).cancel(r2), Ok(false));
}

#[test]
fn sender_order_is_kept_across_classes() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    let sizes = [300_000usize, 5, 40_000, 100, 9000, 0, 1 << 20, 1];
    for (i, &len) in sizes.iter().enumerate() {
        w.send(0, 0, to, i as u64, pattern(len, 1), false);
    }
    let recvs: Vec<_> = sizes
        .iter()
        .map(|_| w.recv(1, 0, 0, 0, 1 << 20, &[]).0)
        .collect();
    for (i, r) in recvs.into_iter().enumerate() {
        let s = w.wait(1, 0, r, w.now + 10 * SEC).unwrap();
        assert_eq!(s.match_info, i as u64, "message overtook an earlier one");
        assert_eq!(s.msg_length as usize, sizes[i]);
    }
}

#[test]
fn wrong_key_fails_connect_and_nothing_is_accepted() {
    let mut w = w2();
    let nic = w.hosts[1].nic_id;
    let req = w.engine(0, 0).connect(0, nic, 0, KEY ^ 1, 0).unwrap();
    let s = w.wait(0, 0, req, SEC).unwrap();
    assert_eq!(s.code, StatusCode::BadKey);
    assert_eq!(w.engine(1, 0).counters.connect_bad_key, 1);
    let to = s.source.unwrap();
    let now = w.now;
    let send = w
        .engine(0, 0)
        .isend(now, to, 1, omx_proto::SendData::Eager(vec![1].into()), 0)
        .unwrap();
    let st = w.wait(0, 0, send, SEC).unwrap();
    assert_eq!(st.code, StatusCode::EndpointUnreachable);
    assert_eq!(w.engine(1, 0).stats().unexpected, 0);
}

#[test]
fn connect_to_missing_endpoint_times_out() {
    let mut cfg = EngineConfig::new(WireConfig::native_9000());
    cfg.resends_max = 5;
    let mut w = World::new(2, 1, cfg, LinkConfig::default(), 3);
    let nic = w.hosts[1].nic_id;
    let req = w.engine(0, 0).connect(0, nic, 7, KEY, 0).unwrap();
    let s = w.wait(0, 0, req, 100 * SEC).unwrap();
    assert_eq!(s.code, StatusCode::EndpointUnreachable);
}

#[test]
fn connect_to_unknown_nic_is_an_error() {
    let mut w = w2();
    assert!(w.engine(0, 0).connect(0, 0xdead, 0, KEY, 0).is_err());
}

#[test]
fn restarted_peer_is_detected_and_talks_again() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    let (r, _) = w.recv(1, 0, 1, u64::MAX, 10, &[]);
    w.send(0, 0, to, 1, vec![1; 10], false);
    assert!(w.wait(1, 0, r, SEC).is_some());
    // A large send is in flight (no receive yet) when host 1's endpoint restarts.
    let big = w.send(0, 0, to, 2, pattern(100_000, 2), false);
    w.run_idle(w.now + 10 * NS_PER_MS);
    w.reopen(1, 0);
    // The new incarnation connects back: host 0 sees a new session and fails the old
    // request cleanly.
    let back = w.connect(1, 0, 0, 0);
    let s = w
        .wait(0, 0, big, w.now + 10 * SEC)
        .expect("old request fails");
    assert_eq!(s.code, StatusCode::EndpointClosed);
    // Host 0 reconnects to the new incarnation; traffic flows both ways.
    let to = w.connect(0, 0, 1, 0);
    for (from, dest, partner) in [(0usize, 1usize, to), (1, 0, back)] {
        let (r, h) = w.recv(dest, 0, 3, u64::MAX, 50_000, &[]);
        w.send(from, 0, partner, 3, pattern(50_000, 5), false);
        let st = w
            .wait(dest, 0, r, w.now + 10 * SEC)
            .expect("delivered after restart");
        assert_eq!(st.code, StatusCode::Success);
        assert_eq!(w.hosts[dest].mem.get(h).to_vec(), pattern(50_000, 5));
    }
}

/// A restarted peer numbers its acks from the start again: its first ones must not be
/// taken for stale repeats of the old incarnation's (they were dropped until the new
/// count passed the old one, so a one-way stream to it stalled on resends: an
/// `omx_sockets` server's second client process on the same endpoint, issue 25).
#[test]
fn restarted_peer_acks_count_afresh() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    // A one-way stream: host 1 acknowledges with explicit acks only.
    for i in 0..40u64 {
        let (r, _) = w.recv(1, 0, i, u64::MAX, 100, &[]);
        let s = w.send(0, 0, to, i, vec![1; 100], false);
        assert!(w.wait(1, 0, r, w.now + SEC).is_some());
        assert!(w.wait(0, 0, s, w.now + SEC).is_some());
        w.run_idle(w.now + 10 * NS_PER_MS);
    }
    assert!(w.engine(1, 0).counters.send_liback >= 10);
    w.reopen(1, 0);
    let _back = w.connect(1, 0, 0, 0);
    let to = w.connect(0, 0, 1, 0);
    let (bad, resends) = {
        let c = &w.engine(0, 0).counters;
        (c.drop_bad_ack, c.resends)
    };
    for i in 0..5u64 {
        let (r, _) = w.recv(1, 0, i, u64::MAX, 100, &[]);
        let s = w.send(0, 0, to, i, vec![2; 100], false);
        assert!(w.wait(1, 0, r, w.now + SEC).is_some());
        let st = w.wait(0, 0, s, w.now + SEC).expect("send acked");
        assert_eq!(st.code, StatusCode::Success);
        w.run_idle(w.now + 10 * NS_PER_MS);
    }
    let c = &w.engine(0, 0).counters;
    assert_eq!((c.drop_bad_ack - bad, c.resends - resends), (0, 0), "{c:?}");
}

#[test]
fn stale_session_gets_nacked() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    w.reopen(1, 0);
    // Host 0 still uses the old session: the new endpoint rejects it with a nack.
    let big = w.send(0, 0, to, 2, pattern(100_000, 2), false);
    let s = w.wait(0, 0, big, 10 * SEC);
    assert!(
        s.is_some(),
        "{:?}\n{:?}",
        w.hosts[0].engines[0].counters,
        w.hosts[1].engines[0].counters
    );
    assert_eq!(s.unwrap().code, StatusCode::BadSession);
    assert!(w.engine(1, 0).counters.send_nack_lib >= 1);
}

#[test]
fn unreachable_peer_fails_requests_and_others_keep_working() {
    let mut cfg = EngineConfig::new(WireConfig::native_9000());
    cfg.resends_max = 10;
    let mut w = World::new(3, 1, cfg, LinkConfig::default(), 4);
    let to1 = w.connect(0, 0, 1, 0);
    let to2 = w.connect(0, 0, 2, 0);
    w.down[1] = true;
    let big = w.send(0, 0, to1, 1, pattern(100_000, 1), false);
    let small = w.send(0, 0, to1, 1, vec![1; 10], false);
    assert_eq!(
        w.wait(0, 0, small, SEC).unwrap().code,
        StatusCode::Success,
        "eager completes early"
    );
    let s = w.wait(0, 0, big, 100 * SEC).unwrap();
    assert_eq!(s.code, StatusCode::EndpointUnreachable);
    assert_eq!(w.engine(0, 0).stats().zombies, 0);
    let (r, _) = w.recv(2, 0, 5, u64::MAX, 100, &[]);
    w.send(0, 0, to2, 5, vec![2; 100], false);
    assert_eq!(
        w.wait(2, 0, r, w.now + SEC).unwrap().code,
        StatusCode::Success
    );
    let after = w.send(0, 0, to1, 1, vec![1; 10], false);
    assert_eq!(
        w.wait(0, 0, after, w.now + SEC).unwrap().code,
        StatusCode::EndpointUnreachable
    );
}

#[test]
fn delayed_and_immediate_explicit_acks() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    w.send(0, 0, to, 1, vec![1; 4], false);
    // Half the ack delay: not acked yet.
    w.run_idle(w.now + 50_000);
    assert_eq!(w.engine(0, 0).stats().unacked, 1, "ack is delayed");
    w.run_idle(w.now + 20 * NS_PER_MS);
    assert_eq!(w.engine(0, 0).stats().unacked, 0);
    assert_eq!(w.engine(1, 0).counters.send_liback, 1);
    for _ in 0..4 {
        w.send(0, 0, to, 1, vec![1; 4], false);
    }
    w.run_idle(w.now + NS_PER_MS);
    assert_eq!(
        w.engine(0, 0).stats().unacked,
        0,
        "4 unacked messages force an ack"
    );
}

#[test]
fn replies_piggyback_acks() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    let back = w.connect(1, 0, 0, 0);
    for i in 0..50 {
        let (r1, _) = w.recv(1, 0, i, u64::MAX, 8, &[]);
        w.send(0, 0, to, i, vec![1; 8], false);
        w.wait(1, 0, r1, w.now + SEC).unwrap();
        let (r0, _) = w.recv(0, 0, i, u64::MAX, 8, &[]);
        w.send(1, 0, back, i, vec![2; 8], false);
        w.wait(0, 0, r0, w.now + SEC).unwrap();
    }
    assert!(w.engine(0, 0).counters.send_liback + w.engine(1, 0).counters.send_liback <= 2);
}

#[test]
fn lost_frames_are_resent() {
    for kind in [
        PacketType::Tiny,
        PacketType::Medium,
        PacketType::Rndv,
        PacketType::Pull,
        PacketType::PullReply,
        PacketType::Notify,
    ] {
        let mut w = w2();
        let to = w.connect(0, 0, 1, 0);
        let mut dropped = false;
        // The first frame of that kind, alone or in a bundle (with the frames it holds).
        w.filter = Some(Box::new(move |f: &[u8]| {
            let is = |g: &[u8]| omx_wire::type_of(g[16]) == kind as u8;
            let holds = omx_wire::peek::is_bundle(f)
                && omx_wire::bundle_items(f)
                    .is_ok_and(|items| items.into_iter().any(|r| is(&f[r])));
            if !dropped && (is(f) || holds) {
                dropped = true;
                return false;
            }
            true
        }));
        let len = match kind {
            PacketType::Tiny => 8,
            PacketType::Medium => 20_000,
            _ => 1 << 20,
        };
        let (r, h) = w.recv(1, 0, 1, u64::MAX, len, &[]);
        let s = w.send(0, 0, to, 1, pattern(len, 8), false);
        assert_eq!(
            w.wait(1, 0, r, 10 * SEC).unwrap().code,
            StatusCode::Success,
            "{kind:?}"
        );
        assert_eq!(
            w.wait(0, 0, s, 10 * SEC).unwrap().code,
            StatusCode::Success,
            "{kind:?}"
        );
        assert_eq!(w.hosts[1].mem.get(h).to_vec(), pattern(len, 8));
        assert_eq!(w.stats.lost, 1);
    }
}

#[test]
fn pull_rerequests_only_missing_frames() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    let mut n = 0;
    w.filter = Some(Box::new(move |f: &[u8]| {
        if omx_wire::type_of(f[16]) == PacketType::PullReply as u8 {
            n += 1;
            return n % 10 != 3;
        }
        true
    }));
    let len = 4 << 20;
    let (r, h) = w.recv(1, 0, 1, u64::MAX, len, &[]);
    w.send(0, 0, to, 1, pattern(len, 8), false);
    assert_eq!(
        w.wait(1, 0, r, 100 * SEC).unwrap().code,
        StatusCode::Success
    );
    assert_eq!(w.hosts[1].mem.get(h).to_vec(), pattern(len, 8));
    let frames = len.div_ceil(8968) as u64;
    let sent = w.engine(0, 0).counters.send_pull_reply;
    assert!(
        sent < frames + frames / 5,
        "resent too much: {sent} for {frames} frames"
    );
    assert_eq!(w.engine(1, 0).counters.drop_pull_reply_duplicate, 0);
}

#[test]
fn unexpected_budget_slows_senders_without_loss() {
    let mut cfg = EngineConfig::new(WireConfig::native_9000());
    cfg.unexp_max_bytes = 100_000;
    let mut w = World::new(2, 1, cfg, LinkConfig::default(), 5);
    let to = w.connect(0, 0, 1, 0);
    for i in 0..50u64 {
        w.send(0, 0, to, i, pattern(10_000, i), false);
    }
    w.run_idle(w.now + 3 * SEC);
    let st = w.engine(1, 0).stats();
    assert!(st.unexpected_bytes <= 100_000, "{st:?}");
    assert!(w.engine(1, 0).counters.drop_unexp_full > 0);
    for i in 0..50u64 {
        let (r, h) = w.recv(1, 0, i, u64::MAX, 10_000, &[]);
        let s = w
            .wait(1, 0, r, w.now + 100 * SEC)
            .expect("every message arrives");
        assert_eq!(s.code, StatusCode::Success);
        assert_eq!(w.hosts[1].mem.get(h).to_vec(), pattern(10_000, i));
    }
}

#[test]
fn thousand_outstanding_requests() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    let recvs: Vec<_> = (0..1000u64)
        .map(|i| w.recv(1, 0, i, u64::MAX, 64, &[]).0)
        .collect();
    let sends: Vec<_> = (0..1000u64)
        .rev()
        .map(|i| w.send(0, 0, to, i, pattern(64, i), false))
        .collect();
    for r in recvs {
        assert_eq!(
            w.wait(1, 0, r, w.now + 10 * SEC).unwrap().code,
            StatusCode::Success
        );
    }
    for s in sends {
        assert_eq!(
            w.wait(0, 0, s, w.now + 10 * SEC).unwrap().code,
            StatusCode::Success
        );
    }
}

#[test]
fn several_endpoints_per_host() {
    let mut w = World::new(
        2,
        3,
        EngineConfig::new(WireConfig::native_9000()),
        LinkConfig::default(),
        6,
    );
    let mut partners: Vec<(u8, u8, PartnerId)> = Vec::new();
    for a in 0..3u8 {
        for b in 0..3u8 {
            partners.push((a, b, w.connect(0, a, 1, b)));
        }
    }
    for &(a, b, p) in &partners {
        let tag = (a as u64) << 8 | b as u64;
        let (r, h) = w.recv(1, b, tag, u64::MAX, 70_000, &[]);
        w.send(0, a, p, tag, pattern(70_000, tag), false);
        assert_eq!(
            w.wait(1, b, r, w.now + SEC).unwrap().code,
            StatusCode::Success
        );
        assert_eq!(w.hosts[1].mem.get(h).to_vec(), pattern(70_000, tag));
    }
}

#[test]
fn self_connect_and_loopback_send() {
    let mut w = w2();
    let me = w.connect(0, 0, 0, 0);
    let (r, h) = w.recv(0, 0, 1, u64::MAX, 100_000, &[]);
    w.send(0, 0, me, 1, pattern(100_000, 3), false);
    assert_eq!(w.wait(0, 0, r, SEC).unwrap().code, StatusCode::Success);
    assert_eq!(w.hosts[0].mem.get(h).to_vec(), pattern(100_000, 3));
}

#[test]
fn receiver_dying_after_rendezvous_ack_fails_the_send() {
    let mut cfg = EngineConfig::new(WireConfig::native_9000());
    cfg.resends_max = 6;
    let mut w = World::new(2, 1, cfg, LinkConfig::default(), 8);
    let to = w.connect(0, 0, 1, 0);
    // No receive posted: the announcement is stored unexpected and acked.
    let big = w.send(0, 0, to, 1, pattern(200_000, 1), false);
    w.run_idle(w.now + SEC);
    assert_eq!(w.engine(0, 0).stats().unacked, 0, "rendezvous acked");
    assert!(w.take(0, 0, big).is_none());
    // The receiver stays alive for a while: probes are answered, nothing fails.
    w.run_idle(w.now + 20 * SEC);
    assert!(
        w.take(0, 0, big).is_none(),
        "a live receiver must not fail the send"
    );
    w.down[1] = true;
    let s = w
        .wait(0, 0, big, w.now + 100 * SEC)
        .expect("send fails once the receiver is gone");
    assert_eq!(s.code, StatusCode::EndpointUnreachable);
}

#[test]
fn connect_is_resent_after_the_peer_talks_to_us_first() {
    // A's connect to B is lost; B then connects to A and sends it a message, whose
    // piggybacked ack must not disarm the resend of A's pending connect.
    let mut w = w2();
    let mut first = true;
    w.filter = Some(Box::new(move |f: &[u8]| {
        let lost = first && omx_wire::type_of(f[16]) == PacketType::Connect as u8;
        first = false;
        !lost
    }));
    let nic_b = w.hosts[1].nic_id;
    let now = w.now;
    let req = w
        .engine(0, 0)
        .connect(now, nic_b, 0, omx_sim::KEY, 0)
        .unwrap();
    let back = w.connect(1, 0, 0, 0);
    let (r, _) = w.recv(0, 0, 1, u64::MAX, 4, &[]);
    w.send(1, 0, back, 1, vec![1; 4], false);
    assert!(w.wait(0, 0, r, w.now + SEC).is_some());
    let s = w
        .wait(0, 0, req, w.now + 5 * SEC)
        .expect("connect resent and completed");
    assert_eq!(s.code, StatusCode::Success);
}

#[test]
fn unexpected_handler_sees_messages_and_decides() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    w.engine(1, 0).set_unexpected_hook(true);
    let tiny = w.send(0, 0, to, 1, vec![7; 20], false);
    let big = w.send(0, 0, to, 2, pattern(100_000, 1), false);
    let medium = w.send(0, 0, to, 3, pattern(20_000, 2), false);
    w.run_idle(w.now + 10 * NS_PER_MS);
    let a = w.engine(1, 0).poll_unexpected().expect("tiny offered");
    assert_eq!((a.match_info, a.msg_length), (1, 20));
    assert_eq!(a.data.as_deref(), Some(&[7u8; 20][..]));
    // Not visible to matching while the handler decides.
    assert!(w.engine(1, 0).iprobe(1, u64::MAX).is_none());
    // The handler posts a receive and continues: the message lands there.
    let (r, h) = w.recv(1, 0, 1, u64::MAX, 20, &[]);
    let now = w.now;
    w.engine(1, 0).resolve_unexpected(now, a.id, false);
    assert_eq!(
        w.wait(1, 0, r, w.now + SEC).unwrap().code,
        StatusCode::Success
    );
    assert_eq!(w.hosts[1].mem.get(h).to_vec(), vec![7; 20]);
    // The rendezvous is discarded: its sender completes with nothing transferred.
    let b = w
        .engine(1, 0)
        .poll_unexpected()
        .expect("rendezvous offered");
    assert_eq!((b.match_info, b.msg_length), (2, 100_000));
    assert!(b.data.is_none());
    let now = w.now;
    w.engine(1, 0).resolve_unexpected(now, b.id, true);
    let s = w.wait(0, 0, big, w.now + SEC).unwrap();
    assert_eq!((s.code, s.xfer_length), (StatusCode::Truncated, 0));
    // The multi-fragment medium continues and stays unexpected until received.
    let c = w.engine(1, 0).poll_unexpected().expect("medium offered");
    assert!(c.data.is_none());
    let now = w.now;
    w.engine(1, 0).resolve_unexpected(now, c.id, false);
    assert!(w.engine(1, 0).iprobe(3, u64::MAX).is_some());
    let (r, h) = w.recv(1, 0, 3, u64::MAX, 20_000, &[]);
    assert_eq!(
        w.wait(1, 0, r, w.now + SEC).unwrap().code,
        StatusCode::Success
    );
    assert_eq!(w.hosts[1].mem.get(h).to_vec(), pattern(20_000, 2));
    assert!(
        w.wait(0, 0, tiny, w.now + SEC).is_some() && w.wait(0, 0, medium, w.now + SEC).is_some()
    );
}

#[test]
fn one_sided_get_and_put_within_exposed_regions_only() {
    use omx_proto::onesided::{EXPOSE_READ, EXPOSE_WRITE};
    use omx_sim::Buffer;
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    // Host 1 exposes 300,000 bytes at its address 0x10000 (read) and 0x80000 (write).
    let src = w.hosts[1]
        .mem
        .register(Buffer::contiguous(pattern(300_000, 5)));
    let dst = w.hosts[1].mem.register(Buffer::zeroed(300_000, &[]));
    w.engine(1, 0)
        .expose(1, 0x10000, 300_000, src, EXPOSE_READ)
        .unwrap();
    w.engine(1, 0)
        .expose(2, 0x80000, 300_000, dst, EXPOSE_WRITE)
        .unwrap();
    assert!(
        w.engine(1, 0).expose(1, 0, 1, src, EXPOSE_READ).is_err(),
        "id in use"
    );
    for (off, len) in [
        (0u64, 0usize),
        (0, 10),
        (1000, 100_000),
        (299_990, 10),
        (0, 300_000),
    ] {
        let local = w.hosts[0].mem.register(Buffer::zeroed(len, &[]));
        let now = w.now;
        let g = w
            .engine(0, 0)
            .iget(now, to, 0x10000 + off, local, len as u32, 0)
            .unwrap();
        let s = w.wait(0, 0, g, w.now + 10 * SEC).expect("get completes");
        assert_eq!(
            (s.code, s.xfer_length as usize),
            (StatusCode::Success, len),
            "get {off}+{len}"
        );
        let want = &pattern(300_000, 5)[off as usize..off as usize + len];
        assert_eq!(w.hosts[0].mem.get(local).to_vec(), want);
        let data = w.hosts[0]
            .mem
            .register(omx_sim::Buffer::contiguous(pattern(len, off)));
        let now = w.now;
        let p = w
            .engine(0, 0)
            .iput(now, to, 0x80000 + off, data, len as u32, 0)
            .unwrap();
        let s = w.wait(0, 0, p, w.now + 10 * SEC).expect("put completes");
        assert_eq!(s.code, StatusCode::Success, "put {off}+{len}");
        let got = w.hosts[1].mem.get(dst).to_vec();
        assert_eq!(
            &got[off as usize..off as usize + len],
            &pattern(len, off)[..]
        );
    }
    // Outside any region, beyond its end, or without permission: refused, nothing touched.
    let before = w.hosts[1].mem.get(dst).to_vec();
    for (addr, len) in [(0x0u64, 10u32), (0x10000 + 299_995, 10), (0x80000, 10)] {
        let local = w.hosts[0].mem.register(Buffer::zeroed(len as usize, &[]));
        let now = w.now;
        let g = w.engine(0, 0).iget(now, to, addr, local, len, 0).unwrap();
        assert_eq!(
            w.wait(0, 0, g, w.now + 10 * SEC).unwrap().code,
            StatusCode::BadRdmaWin
        );
    }
    for (addr, len) in [(0x10000u64, 10u32), (0x80000 + 299_999, 2), (0x5, 1)] {
        let data = w.hosts[0]
            .mem
            .register(Buffer::contiguous(vec![9; len as usize]));
        let now = w.now;
        let p = w.engine(0, 0).iput(now, to, addr, data, len, 0).unwrap();
        assert_eq!(
            w.wait(0, 0, p, w.now + 10 * SEC).unwrap().code,
            StatusCode::BadRdmaWin
        );
    }
    assert_eq!(w.hosts[1].mem.get(dst).to_vec(), before);
    assert_eq!(w.hosts[1].mem.get(src).to_vec(), pattern(300_000, 5));
    // Withdrawn regions refuse new accesses.
    w.engine(1, 0).unexpose(1).unwrap();
    let local = w.hosts[0].mem.register(Buffer::zeroed(10, &[]));
    let now = w.now;
    let g = w.engine(0, 0).iget(now, to, 0x10000, local, 10, 0).unwrap();
    assert_eq!(
        w.wait(0, 0, g, w.now + 10 * SEC).unwrap().code,
        StatusCode::BadRdmaWin
    );
    w.run_idle(w.now + SEC);
    for h in 0..2 {
        let st = w.engine(h, 0).stats();
        assert_eq!((st.requests, st.regions, st.pulls), (0, 0, 0), "{st:?}");
    }
}

#[test]
fn a_put_notice_reaches_the_owner_after_the_data() {
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    put_notice_follows_the_data(&mut w, (0, 0), to, (1, 0));
}

/// Many large receives at once with a global limit on outstanding pull blocks (the
/// runtime sizes it to its receive ring): every pull progresses, none starves.
#[test]
fn global_pull_block_limit_serves_every_pull() {
    for cap in [1u32, 3, 10] {
        let mut cfg = EngineConfig::new(WireConfig::native_9000());
        cfg.pull_blocks_max = cap;
        let mut w = World::new(2, 1, cfg, LinkConfig::default(), 21);
        let to = w.connect(0, 0, 1, 0);
        let n = 12u64;
        let len = |i: u64| 300_000 + i as usize * 70_001;
        let recvs: Vec<_> = (0..n)
            .map(|i| w.recv(1, 0, i, u64::MAX, len(i), &[]))
            .collect();
        for i in 0..n {
            w.send(0, 0, to, i, pattern(len(i), i), false);
        }
        for (i, (r, h)) in recvs.into_iter().enumerate() {
            let s = w
                .wait(1, 0, r, w.now + 60 * SEC)
                .unwrap_or_else(|| panic!("cap {cap}: receive {i} starved"));
            assert_eq!(s.code, StatusCode::Success);
            assert_eq!(
                w.hosts[1].mem.get(h).to_vec(),
                pattern(len(i as u64), i as u64)
            );
        }
        assert_eq!(
            w.hosts[1].engines[0].counters.pull_rerequests, 0,
            "cap {cap}"
        );
    }
}

/// A rendezvous whose announcement was acked, then whose receiver closed: the liveness
/// probe (the announcement again, with its old sequence number) is nacked by the
/// receiver's board as for a closed endpoint, and that fails the send at once.
#[test]
fn nacked_liveness_probe_fails_the_waiting_rendezvous() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut w = w2();
    let to = w.connect(0, 0, 1, 0);
    let s = w.send(0, 0, to, 9, pattern(100_000, 1), false);
    // Announced and acked (unexpected at the receiver), then the receiver goes away.
    w.run_idle(w.now + 100 * NS_PER_MS);
    assert!(w.take(0, 0, s).is_none());
    let probes = Rc::new(RefCell::new(Vec::new()));
    let p = probes.clone();
    w.filter = Some(Box::new(move |f: &[u8]| {
        if omx_wire::type_of(f[16]) == PacketType::Rndv as u8 {
            p.borrow_mut().push(f.to_vec());
        }
        false
    }));
    w.run_until(w.now + 5 * SEC, |_| !probes.borrow().is_empty());
    let probe = probes.borrow().first().cloned().expect("a liveness probe");
    w.filter = None;
    let mac = omx_proto::mac_from_nic_id(w.hosts[1].nic_id);
    let nack = omx_proto::demux::closed_endpoint_nack(
        &probe,
        &WireConfig::native_9000(),
        mac,
        omx_wire::NackType::EndpointClosed,
    )
    .expect("a nack");
    let now = w.now;
    w.engine(0, 0).handle_frame(now, bytes::Bytes::from(nack));
    w.pump();
    assert_eq!(w.take(0, 0, s).unwrap().code, StatusCode::EndpointClosed);
}

/// First contact: a board that has not discovered the requester yet (the requester
/// knew it first) takes its connect request at once, instead of dropping it until its
/// discovery catches up; a full peer table still drops strangers.
#[test]
fn connect_from_an_undiscovered_board_is_taken() {
    let mut w = w2();
    let nic0 = w.engine(0, 0).params().nic_id;
    assert!(w.engine(1, 0).peers_mut().remove(nic0));
    let start = w.now;
    let to = w.connect(0, 0, 1, 0);
    // One round trip, no resend.
    assert_eq!(w.engine(0, 0).counters.resends, 0);
    assert!(w.now - start < SEC / 100);
    assert!(w.engine(1, 0).peers().index_of(nic0).is_some());
    let (r, h) = w.recv(1, 0, 3, u64::MAX, 100, &[]);
    w.send(0, 0, to, 3, pattern(100, 3), false);
    assert_eq!(w.wait(1, 0, r, SEC).unwrap().code, StatusCode::Success);
    assert_eq!(w.hosts[1].mem.get(h).to_vec(), pattern(100, 3));
}
