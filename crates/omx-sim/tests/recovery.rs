//! Loss recovery at link speed: a stream of each message class over a link that loses
//! (independently and in bursts), duplicates and reorders frames is delivered exactly
//! once, intact and in order, and finishes within a stated multiple of the same stream's
//! time on a clean link. Times are simulated (deterministic), never wall-clock.
//!
//! Bounds (and what the engine reaches today, worst of two seeds and three wires):
//! 1% loss 2.5x (1.8x), 5% loss 5x (3.7x), bursts of 10 to 100 frames 4x (3.0x),
//! 1% loss with 1% duplication and reordering 12x (8.4x); 20% loss 75x (57x). Large messages stay within 1.1x at 1% loss and 1.4x
//! at 5%.

mod common;
use common::*;
use omx_proto::{EngineConfig, ReqId, StatusCode, Time};
use omx_sim::{LinkConfig, World};
use omx_wire::WireConfig;
use std::collections::VecDeque;

/// A 10 Gb/s-class link: 1.25 GB/s per direction, 5 us one way.
fn link() -> LinkConfig {
    LinkConfig {
        latency: 5_000,
        bandwidth: 1_250_000_000,
        ..Default::default()
    }
}

struct Outcome {
    time: Time,
    resends: u64,
    fast: u64,
}

/// Streams `count` messages of `size` bytes from host 0 to host 1, `window` in flight,
/// each receive posted ahead; checks every byte and the order; returns the time taken.
fn stream(wire: WireConfig, link: LinkConfig, seed: u64, size: usize, count: usize) -> Outcome {
    let window = 8;
    let mut w = World::new(2, 1, EngineConfig::new(wire), link, seed);
    let to = w.connect(0, 0, 1, 0);
    let start = w.now;
    let mut recvs: VecDeque<(usize, ReqId, omx_proto::MemHandle)> = VecDeque::new();
    let mut sends: VecDeque<ReqId> = VecDeque::new();
    let (mut posted, mut done) = (0usize, 0usize);
    let limit = start + 3_600 * SEC;
    while done < count {
        while posted < count && sends.len() < window {
            let (r, h) = w.recv(1, 0, posted as u64, u64::MAX, size, &[]);
            recvs.push_back((posted, r, h));
            let data = pattern(size, posted as u64);
            sends.push_back(w.send(0, 0, to, posted as u64, data, false));
            posted += 1;
        }
        let (i, r, h) = *recvs.front().expect("posted");
        let Some(st) = w.wait(1, 0, r, limit) else {
            panic!(
                "message {i} of {count} ({size} B) not delivered\nsender {:?}\nreceiver {:?}\n{:?}",
                w.hosts[0].engines[0].counters, w.hosts[1].engines[0].counters, w.stats
            );
        };
        recvs.pop_front();
        assert_eq!(st.code, StatusCode::Success, "message {i}");
        assert_eq!(st.match_info, i as u64, "in order");
        assert_eq!(st.xfer_length as usize, size);
        assert!(
            w.hosts[1].mem.get(h).to_vec() == pattern(size, i as u64),
            "message {i} corrupted"
        );
        w.hosts[1].mem.release(h);
        let s = sends.pop_front().expect("posted");
        let ss = w.wait(0, 0, s, limit).expect("send completes");
        assert_eq!(ss.code, StatusCode::Success);
        done += 1;
    }
    // Nothing delivered twice: no receive is left, and the receiver holds nothing.
    let time = w.now - start;
    w.run_idle(w.now + SEC);
    let stats = w.engine(1, 0).stats();
    assert_eq!(stats.unexpected, 0, "a message arrived twice");
    assert_eq!(stats.requests, 0);
    let c = &w.hosts[0].engines[0].counters;
    let r = &w.hosts[1].engines[0].counters;
    Outcome {
        time,
        resends: c.resends + r.pull_rerequests,
        fast: c.fast_retransmits + r.pull_fast_rerequests,
    }
}

/// The classes: tiny, small, medium (several fragments), large (pulled).
const CLASSES: [(usize, usize); 4] = [(8, 4000), (100, 4000), (20_000, 600), (1 << 20, 24)];

/// Runs every class on `wire` under `faulty` and checks the time against the clean link.
fn check(wire: WireConfig, faulty: LinkConfig, bound: f64, label: &str) {
    for (size, count) in CLASSES {
        let clean = stream(wire, link(), 1, size, count);
        for seed in 1..=2 {
            let lossy = stream(wire, faulty.clone(), seed, size, count);
            let ratio = lossy.time as f64 / clean.time as f64;
            eprintln!(
                "{label} {size:>8} B x {count}: {:.3} ms clean, {:.3} ms lossy ({ratio:.2}x), \
                 {} resends ({} fast)",
                clean.time as f64 / 1e6,
                lossy.time as f64 / 1e6,
                lossy.resends,
                lossy.fast
            );
            assert!(
                ratio <= bound,
                "{label}: {size} B messages took {ratio:.2}x the clean time (bound {bound})"
            );
        }
    }
}

fn lossy(loss: f64) -> LinkConfig {
    LinkConfig { loss, ..link() }
}

#[test]
fn one_percent_loss() {
    for wire in wires() {
        check(wire, lossy(0.01), 2.5, "1%");
    }
}

#[test]
fn five_percent_loss() {
    for wire in wires() {
        check(wire, lossy(0.05), 5.0, "5%");
    }
}

#[test]
fn twenty_percent_loss() {
    // Every fifth frame lost, acks and retransmissions included: every message still
    // arrives exactly once, within 75x the clean time (small messages pay a timeout for
    // most losses of a retransmission or of the ack that follows it: 57x at worst).
    // Before round-trip samples excluded packets sent before a resend, acks split
    // around a repaired hole inflated the estimate to milliseconds: up to 11,500x.
    check(WireConfig::native_9000(), lossy(0.20), 75.0, "20%");
}

#[test]
fn burst_losses() {
    for wire in wires() {
        let burst = LinkConfig {
            burst: 0.002,
            burst_len: (10, 100),
            ..link()
        };
        check(wire, burst, 4.0, "bursts");
    }
}

#[test]
fn loss_with_reordering_and_duplication() {
    for wire in wires() {
        let messy = LinkConfig {
            loss: 0.01,
            duplicate: 0.01,
            reorder: 0.01,
            reorder_delay: 20_000,
            ..link()
        };
        check(wire, messy, 12.0, "1% loss, dup, reorder");
    }
}

#[test]
fn duplicated_packets_start_no_retransmission() {
    // A packet that arrives twice makes the receiver repeat its ack (the sender may
    // have missed it). Taken as a loss signal, that repeat resent the next packet,
    // which arrived twice in turn, for as long as the stream lasted. With the gap-acks
    // extension only acks reporting a gap count: nothing is lost here, nothing resent.
    let dup_only = LinkConfig {
        duplicate: 0.05,
        ..link()
    };
    for wire in [WireConfig::native_9000(), WireConfig::native_1500()] {
        for (size, count) in [(8, 4000), (20_000, 600)] {
            let o = stream(wire, dup_only.clone(), 3, size, count);
            assert_eq!(
                (o.resends, o.fast),
                (0, 0),
                "{size} B over a duplicating link: resends (fast)"
            );
        }
    }
}

#[test]
fn a_bundle_is_acked_once() {
    // The count rule (an ack every `not_acked_max` messages) applied inside a bundle
    // sent one ack per few of its messages, each superseding the one before: now one
    // at the bundle's end. 256 8 B messages posted back to back travel in bundles.
    let mut w = World::new(
        2,
        1,
        EngineConfig::new(WireConfig::native_9000()),
        link(),
        1,
    );
    let to = w.connect(0, 0, 1, 0);
    let n = 256;
    let recvs: Vec<_> = (0..n)
        .map(|i| w.recv(1, 0, i, u64::MAX, 8, &[]).0)
        .collect();
    for i in 0..n {
        w.send(0, 0, to, i, pattern(8, i), false);
    }
    let limit = w.now + SEC;
    for r in recvs {
        assert!(w
            .wait(1, 0, r, limit)
            .is_some_and(|s| s.code == StatusCode::Success));
    }
    let c = &w.hosts[1].engines[0].counters;
    assert!(
        c.recv_bundle > 0 && c.recv_bundle < n / 4,
        "bundles: {}",
        c.recv_bundle
    );
    assert!(
        c.send_liback <= c.recv_bundle + 2,
        "{} acks for {} bundles",
        c.send_liback,
        c.recv_bundle
    );
}
