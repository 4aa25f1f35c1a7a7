//! The scale scenarios at 64 hosts (`make sim-scale` runs them up to 1,024): every
//! message exactly once and intact, congestion drops at the switch recovered, and the
//! endpoints' memory, measured by the counting allocator, bounded per partner.

mod common;

use common::{pattern, SEC};
use omx_proto::{EngineConfig, StatusCode};
use omx_sim::heap::{self, Counting};
use omx_sim::scale::{run, Pattern, ScaleConfig, ScaleReport};
use omx_sim::{LinkConfig, PortConfig, Switch, World};
use omx_wire::WireConfig;
use std::sync::Mutex;

#[global_allocator]
static ALLOC: Counting = Counting;

/// The heap counters are process-wide: one test measures at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run_clean(cfg: &ScaleConfig) -> ScaleReport {
    let r = run(cfg);
    assert!(
        r.clean(),
        "{:?} at {} hosts: delivered {} of {}, {} duplicates, {} corrupted, {} failed, {} left unexpected, {} buffers left",
        cfg.pattern,
        cfg.hosts,
        r.delivered,
        r.messages,
        r.duplicates,
        r.corrupted,
        r.failed,
        r.leftover_unexpected,
        r.leftover_buffers
    );
    assert_eq!(r.bytes, (r.messages * cfg.size) as u64);
    r
}

#[test]
fn all_to_all_small_at_64_hosts_is_exact_and_deterministic() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = ScaleConfig::new(64, Pattern::AllToAll, 64);
    let r = run_clean(&cfg);
    assert_eq!(r.messages, 64 * 63);
    assert_eq!(r.partners_max, 63, "every endpoint knows every other");
    assert!(heap::installed());
    // Measured: a fresh endpoint holds its peer table; each partner adds a bounded
    // amount, whatever the traffic was.
    assert!(r.peer_table_bytes > 0 && r.endpoint_bytes > r.peer_table_bytes);
    assert!(
        r.partner_bytes > 0 && r.partner_bytes < 16 << 10,
        "{} bytes per partner",
        r.partner_bytes
    );
    // The same seed replays the same run.
    let again = run(&cfg);
    assert_eq!(
        (again.frames, again.sim_time, again.retransmits),
        (r.frames, r.sim_time, r.retransmits)
    );
}

#[test]
fn incast_at_64_hosts_overflows_the_port_and_recovers() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let r = run_clean(&ScaleConfig::new(
        64,
        Pattern::Incast { messages: 2 },
        16 << 10,
    ));
    assert_eq!(r.messages, 63 * 2);
    // 63 senders of 32 KiB each into a 512 KiB queue: the port drops, in runs.
    assert!(r.switch.dropped > 0, "no congestion: {:?}", r.switch);
    assert!(r.switch.drop_bursts < r.switch.dropped, "{:?}", r.switch);
    assert!(r.retransmits > 0);
    assert!(r.switch.peak_queue_bytes <= PortConfig::default().queue_bytes);
}

#[test]
fn shifts_of_large_messages_and_a_two_plane_ring_at_64_hosts() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let r = run_clean(&ScaleConfig::new(64, Pattern::Shifts, 64 << 10));
    assert_eq!(r.messages, 64 * 6);
    // Six peers each way, s+32 and s-32 being the same host.
    assert_eq!(r.partners_max, 11);
    let mut ring = ScaleConfig::new(64, Pattern::Ring { messages: 4 }, 40 << 10);
    ring.endpoints = 2;
    let r = run_clean(&ring);
    assert_eq!((r.endpoints, r.messages), (128, 128 * 4));
    assert_eq!(r.partners_max, 2);
    assert_eq!(r.leftover_unexpected, 0);
}

#[test]
fn switch_congestion_drops_come_in_bursts_and_are_recovered() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Two 10 Gb/s senders into one 1 Gb/s port with 64 KiB of queue: the loss-recovery
    // case of a congested switch, not of random loss.
    let link = LinkConfig {
        bandwidth: 1_250_000_000,
        ..LinkConfig::default()
    };
    let mut w = World::new(3, 1, EngineConfig::new(WireConfig::native_9000()), link, 7);
    let mut switch = Switch::new(3, PortConfig::default());
    *switch.port_config_mut(2) = PortConfig {
        bandwidth: 125_000_000,
        latency: 5_000,
        queue_bytes: 64 << 10,
    };
    w.switch = Some(switch);
    let len = 1 << 20;
    let to: Vec<_> = (0..2).map(|h| w.connect(h, 0, 2, 0)).collect();
    let recvs: Vec<_> = (0..2)
        .map(|h| w.recv(2, 0, h as u64, u64::MAX, len, &[]))
        .collect();
    let sends: Vec<_> = (0..2)
        .map(|h| w.send(h, 0, to[h], h as u64, pattern(len, h as u64), false))
        .collect();
    let limit = w.now + 60 * SEC;
    for (h, (req, mem)) in recvs.into_iter().enumerate() {
        let status = w.wait(2, 0, req, limit).expect("receive completes");
        assert_eq!(status.code, StatusCode::Success);
        assert_eq!(w.hosts[2].mem.get(mem).to_vec(), pattern(len, h as u64));
    }
    for (h, req) in sends.into_iter().enumerate() {
        let status = w.wait(h, 0, req, limit).expect("send completes");
        assert_eq!(status.code, StatusCode::Success);
    }
    let switch = w.switch.as_ref().expect("switch");
    let port = switch.port_stats(2);
    assert!(port.dropped > 0, "{port:?}");
    assert!(port.drop_bursts < port.dropped, "{port:?}");
    assert!(port.peak_queue_bytes <= 64 << 10);
    assert_eq!(
        w.stats.lost,
        switch.total().dropped,
        "the switch's are the only losses"
    );
}

#[test]
fn send_buffers_of_two_endpoints_of_one_host_are_released_apart() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Request ids are per endpoint: both endpoints' first sends have the same one, and
    // releasing one must not free (or forget) the other's buffer.
    let cfg = EngineConfig::new(WireConfig::native_9000());
    let mut w = World::new(2, 2, cfg, LinkConfig::default(), 3);
    let len = 100_000;
    let to: Vec<_> = (0..2u8).map(|ep| w.connect(0, ep, 1, ep)).collect();
    let sends: Vec<_> = (0..2u8)
        .map(|ep| {
            let data = pattern(len, ep as u64);
            (ep, w.send(0, ep, to[ep as usize], 9, data, false))
        })
        .collect();
    assert_eq!(
        sends[0].1, sends[1].1,
        "the case of this test: equal request ids"
    );
    assert_eq!(w.hosts[0].mem.len(), 2);
    let limit = w.now + 60 * SEC;
    for ep in 0..2u8 {
        let (req, mem) = w.recv(1, ep, 9, u64::MAX, len, &[]);
        let status = w.wait(1, ep, req, limit).expect("receive completes");
        assert_eq!(status.code, StatusCode::Success);
        assert_eq!(w.hosts[1].mem.get(mem).to_vec(), pattern(len, ep as u64));
        let (ep, req) = sends[ep as usize];
        assert_eq!(
            w.wait(0, ep, req, limit).map(|s| s.code),
            Some(StatusCode::Success)
        );
        assert_eq!(
            w.hosts[0].mem.len(),
            1 - ep as usize,
            "exactly this send's buffer freed"
        );
    }
}
