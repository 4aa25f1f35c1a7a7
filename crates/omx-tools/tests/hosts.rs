//! Real-network tests: omx processes on network-namespace hosts joined by veth or a
//! bridge, exchanging raw Ethernet frames. They check correctness only (exit codes,
//! delivered bytes, statuses, counters), never timings. Without root they print why
//! and pass.

mod common;

use common::*;
use omx_transport::{netns, PacketSocket, SocketOptions, OMX_ETHERTYPE};
use std::time::{Duration, Instant};

const MIN: Duration = Duration::from_secs(60);

/// `omx_perf -S 0 -E 8388609 -M 2`: 0, 1, 2, 4, ... 8 MiB.
fn perf_lengths() -> Vec<u64> {
    std::iter::once(0)
        .chain((0..=23).map(|k| 1u64 << k))
        .collect()
}

/// The lengths of an omx_perf client table (lines starting with a number).
fn table_lengths(out: &str) -> Vec<u64> {
    out.lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            (t.len() == 4).then(|| t[0].parse().ok()).flatten()
        })
        .collect()
}

/// Ping-pong of every length from 0 to 8 MiB with data checking between h1 (client)
/// and h0 (server), interfaces at `mtu`, omx configured by `env`.
fn pingpong_all_sizes(mtu: u32, env: &[(&str, &str)]) {
    pingpong_sizes_with(mtu, env, &[])
}

/// As `pingpong_all_sizes`, with extra options for both omx_perf sides (e.g. `-w`).
fn pingpong_sizes_with(mtu: u32, env: &[(&str, &str)], extra: &[&str]) {
    pingpong_sizes_upto(mtu, env, extra, 8 << 20)
}

/// Every power of two from 0 to `max` bytes, data checked.
fn pingpong_sizes_upto(mtu: u32, env: &[(&str, &str)], extra: &[&str], max: u64) {
    pingpong_counted(mtu, env, extra, max);
}

/// As `pingpong_sizes_upto`; returns the server's non-zero counters, protocol and
/// runtime (`omx_perf -v` prints them at exit), or `None` when skipped.
fn pingpong_counted(
    mtu: u32,
    env: &[(&str, &str)],
    extra: &[&str],
    max: u64,
) -> Option<Vec<(String, u64)>> {
    pingpong_logged(mtu, env, extra, max).map(|(c, _)| c)
}

/// As `pingpong_counted`, also returning what both sides printed on stderr.
fn pingpong_logged(
    mtu: u32,
    env: &[(&str, &str)],
    extra: &[&str],
    max: u64,
) -> Option<(Vec<(String, u64)>, String)> {
    if skip() {
        return None;
    }
    let h = Hosts::up(2, mtu);
    let server_args: Vec<&str> = extra.iter().copied().chain(["-v"]).collect();
    let mut server = h.spawn(0, "omx_perf server", OMX_PERF, &server_args, env);
    let end = (max + 1).to_string();
    let mut args = vec![
        "-d", "h0:0", "-S", "0", "-E", &end, "-N", "3", "-W", "1", "-P", "0", "-c",
    ];
    args.extend_from_slice(extra);
    let client = h.run(1, "omx_perf client", OMX_PERF, &args, env, 3 * MIN);
    server.wait_timeout(MIN);
    let why = reports(&[&client, &server]);
    assert!(client.succeeded(), "client failed:{why}");
    assert_eq!(
        table_lengths(&client.stdout()),
        perf_lengths()
            .into_iter()
            .filter(|&l| l <= max)
            .collect::<Vec<_>>(),
        "one line per length expected:{why}"
    );
    assert!(server.succeeded(), "server failed:{why}");
    let counters = server
        .stderr()
        .lines()
        .filter_map(|l| {
            let (name, v) = l.trim().split_once(' ')?;
            Some((name.to_string(), v.trim().parse().ok()?))
        })
        .collect();
    Some((counters, client.stderr() + &server.stderr()))
}

#[test]
fn pingpong_0_to_8mib_native_mtu9000() {
    pingpong_all_sizes(9000, &[("OMX_MTU", "9000")]);
}

#[test]
fn pingpong_0_to_8mib_native_mtu1500() {
    pingpong_all_sizes(1500, &[("OMX_MTU", "1500")]);
}

#[test]
fn pingpong_0_to_8mib_mx_wire_compat() {
    pingpong_all_sizes(9000, &[("OMX_WIRE", "mx")]);
}

/// The recvmmsg fallback (no ring): pull replies are placed from its buffers, and,
/// with checksums, gathered pull replies carry a trailer computed over the user memory.
#[test]
fn pingpong_0_to_8mib_recvmmsg_with_checksums() {
    pingpong_all_sizes(9000, &[("OMX_RX_RING_KB", "0"), ("OMX_CHECKSUM", "1")]);
}

/// Largest frames: pull replies of 64 KiB gathered from user memory and received
/// straight into the receive buffer (direct receive, on by default at this size).
#[test]
fn pingpong_0_to_8mib_native_mtu65535() {
    pingpong_all_sizes(65535, &[("OMX_MTU", "65535")]);
}

/// The same with pull replies through the receive ring (direct receive off).
#[test]
fn pingpong_0_to_8mib_native_mtu65535_through_the_ring() {
    pingpong_all_sizes(65535, &[("OMX_MTU", "65535"), ("OMX_DIRECT_RECV", "0")]);
}

/// Direct receive, each frame placed, with 1500-byte frames: many small pieces, short
/// padded frames.
#[test]
fn pingpong_0_to_8mib_direct_receive_mtu1500() {
    pingpong_all_sizes(1500, &[("OMX_MTU", "1500"), ("OMX_DIRECT_RECV", "placed")]);
}

/// Direct receive in batches (the default at MTU 9000) with 1500-byte frames: many
/// frames per `recvmmsg`, short padded frames.
#[test]
fn pingpong_0_to_8mib_batched_direct_receive_mtu1500() {
    pingpong_all_sizes(1500, &[("OMX_MTU", "1500"), ("OMX_DIRECT_RECV", "batched")]);
}

/// Pull replies through the receive ring at MTU 9000 (where the default takes them
/// through the direct socket in batches).
#[test]
fn pingpong_0_to_8mib_native_mtu9000_through_the_ring() {
    pingpong_all_sizes(9000, &[("OMX_MTU", "9000"), ("OMX_DIRECT_RECV", "0")]);
}

/// Receive copies on the copy thread deliver the same bytes as inline copies; the
/// pull replies' copies are made there, from their held ring slots.
#[test]
fn pingpong_0_to_8mib_with_copy_offload() {
    let Some(c) = pingpong_counted(
        9000,
        &[
            ("OMX_COPY_OFFLOAD", "1"),
            ("OMX_COPY_MIN_MSG", "0"),
            ("OMX_COPY_MIN_FRAG", "0"),
        ],
        &[],
        8 << 20,
    ) else {
        return;
    };
    let get = |n: &str| c.iter().find(|(k, _)| k == n).map_or(0, |(_, v)| *v);
    let dropped: u64 = c
        .iter()
        .filter(|(k, _)| k.starts_with("drop_pull_reply_"))
        .map(|(_, v)| v)
        .sum();
    let accepted = get("recv_pull_reply") - dropped;
    let (offloaded, inline) = (
        get("copy_offloaded") + get("copy_inline_full"),
        get("copy_inline_unheld"),
    );
    // Every accepted pull reply is copied by the copy thread from its held slot, or
    // (counted) inline when it was full or the slot could not be held (the engine's
    // copies also include eager fragments).
    assert!(offloaded > 0, "no copy offloaded: {c:?}");
    assert!(
        offloaded + inline >= accepted,
        "replies copied elsewhere: {c:?}"
    );
}

/// Real frames dropped, duplicated and reordered on both hosts (`OMX_FAULTS`), with
/// receive copies inline and on the copy thread: every message of every class arrives
/// intact (omx_perf -c), through resends, duplicate suppression and pull re-requests.
/// With offload, replies the injector copied (reordered, duplicated) cannot be held:
/// they are copied inline and counted, the rest on the copy thread.
#[test]
fn pingpong_under_injected_faults_with_and_without_copy_offload() {
    for offload in ["0", "1"] {
        let Some(c) = pingpong_counted(
            9000,
            &[
                ("OMX_FAULTS", "loss:0.02,dup:0.02,reorder:0.05,seed:5"),
                ("OMX_RESEND_DELAY_MS", "20"),
                ("OMX_PULL_RESEND_DELAY_MS", "40"),
                ("OMX_COPY_OFFLOAD", offload),
                // Every frame offloaded, whatever this host's measured limits.
                ("OMX_COPY_MIN_MSG", "0"),
                ("OMX_COPY_MIN_FRAG", "0"),
            ],
            &[],
            2 << 20,
        ) else {
            return;
        };
        let get = |n: &str| c.iter().find(|(k, _)| k == n).map_or(0, |(_, v)| *v);
        if offload == "1" {
            assert!(get("copy_offloaded") > 0, "no copy offloaded: {c:?}");
            assert!(get("copy_inline_unheld") > 0, "no inline fall-back: {c:?}");
        } else {
            assert_eq!(
                get("copy_offloaded") + get("copy_inline_unheld"),
                0,
                "{c:?}"
            );
        }
    }
}

/// `OMX_CHECKSUM=1` at MTU 1500 (fragments and pull replies 4 bytes shorter for the
/// trailer) with bits flipped in received frames: every length arrives intact (omx_perf
/// -c); in MX-wire mode the variable is ignored and nothing changes.
#[test]
fn pingpong_with_checksums_under_corruption() {
    pingpong_sizes_upto(
        1500,
        &[
            ("OMX_MTU", "1500"),
            ("OMX_CHECKSUM", "1"),
            ("OMX_FAULTS", "loss:0.01,corrupt:0.01,seed:9"),
            ("OMX_RESEND_DELAY_MS", "20"),
            ("OMX_PULL_RESEND_DELAY_MS", "40"),
        ],
        &[],
        2 << 20,
    );
    pingpong_sizes_upto(
        9000,
        &[("OMX_WIRE", "mx"), ("OMX_CHECKSUM", "1")],
        &[],
        1 << 20,
    );
}

/// Blocking waits that sleep at once, under every wake-up policy: nothing is lost or
/// stalls whichever frames wake the sleeper (unmarked ones only by the timer).
#[test]
fn pingpong_sleeping_under_every_wake_up_policy() {
    for policy in ["off", "timer", "marked", "stream"] {
        pingpong_sizes_with(
            1500,
            &[
                ("OMX_MTU", "1500"),
                ("OMX_WAITSPIN_US", "0"),
                ("OMX_COALESCING", policy),
            ],
            &["-w"],
        );
    }
}

/// Tiny, small, medium (one and several fragments) and large (rendezvous) lengths.
const SIZES: &str = "0,17,100,5000,40000,300000,2000000";

/// Runs one omx_testpeer per host with the same arguments (plus `extra[i]`), all at
/// once, and checks every one reports `OK sent=S received=S`.
fn testpeer_everywhere(
    h: &Hosts,
    args: &[&str],
    extra: &[&[&str]],
    env: &[(&str, &str)],
    expect: u64,
) {
    let peers: Vec<String> = (0..h.n).map(|i| format!("h{i}:0")).collect();
    let peers = peers.join(",");
    let mut procs: Vec<Proc> = (0..h.n)
        .map(|i| {
            let mut a = vec!["--peers", &peers];
            a.extend_from_slice(args);
            a.extend_from_slice(extra.get(i).copied().unwrap_or(&[]));
            h.spawn(i, &format!("omx_testpeer h{i}"), OMX_TESTPEER, &a, env)
        })
        .collect();
    for p in procs.iter_mut() {
        p.finish(3 * MIN);
    }
    let why = reports(&procs.iter().collect::<Vec<_>>());
    let ok = format!("OK sent={expect} received={expect}");
    for p in &procs {
        assert!(
            p.succeeded() && p.stdout().lines().any(|l| l == ok),
            "{} did not report `{ok}`:{why}",
            p.label
        );
    }
}

/// Four hosts on a bridge, two endpoints each: every endpoint sends 3 messages of each
/// size to each of the 6 remote endpoints and checks all it receives.
#[test]
fn all_to_all_four_hosts_two_endpoints() {
    if skip() {
        return;
    }
    all_to_all_four_hosts(&[]);
}

/// Four hosts, two endpoints each, every size to every remote endpoint, under `env`.
fn all_to_all_four_hosts(env: &[(&str, &str)]) {
    let h = Hosts::up(4, 9000);
    // Per process: 2 local endpoints x 6 remote endpoints x 7 sizes x 3 messages.
    let args = [
        "--endpoints",
        "2",
        "--sizes",
        SIZES,
        "--count",
        "3",
        "--timeout",
        "150",
    ];
    testpeer_everywhere(&h, &args, &[], env, 2 * 6 * 7 * 3);
}

/// The same with each pull reply placed straight into the receive buffer
/// (`OMX_DIRECT_RECV=placed`; the default at this MTU takes them in batches): several
/// pulls per endpoint at once, padded short last frames, and, through the bridge's
/// flooding, frames for other hosts on the direct socket.
#[test]
fn all_to_all_four_hosts_direct_receive() {
    if skip() {
        return;
    }
    all_to_all_four_hosts(&[("OMX_DIRECT_RECV", "placed")]);
}

/// Endpoints connect to a remote endpoint that opens only later (and that, once open,
/// connects back and sends first): the library must keep resending the pending connect
/// request until it is answered (one connect call, no application-level retry).
#[test]
fn connect_to_endpoint_opened_later() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let args = [
        "--endpoints",
        "2",
        "--sizes",
        "0,100,40000,300000",
        "--count",
        "2",
        "--timeout",
        "30",
        "--connect-attempt-ms",
        "0",
    ];
    // h1 opens endpoint 1 1.5 s after endpoint 0.
    let late: &[&str] = &["--open-delay-ms", "1500"];
    testpeer_everywhere(&h, &args, &[&[], late], &[], 2 * 2 * 4 * 2);
}

/// A receiver killed mid-stream: the sender sees a failure status (with a small resend
/// budget, within a minute), and its endpoint keeps working with another host.
#[test]
fn killed_receiver_fails_sends_and_endpoint_survives() {
    if skip() {
        return;
    }
    let h = Hosts::up(3, 9000);
    let sizes = "0,17,5000,300000";
    let mut h2 = h.spawn(
        2,
        "omx_testpeer h2 (exchange with h0)",
        OMX_TESTPEER,
        &[
            "--peers",
            "h0:0,h2:0",
            "--sizes",
            sizes,
            "--count",
            "2",
            "--timeout",
            "170",
        ],
        &[],
    );
    let mut h1 = h.spawn(
        1,
        "omx_testpeer h1 (sink)",
        OMX_TESTPEER,
        &["--peers", "h0:0,h1:0", "--sink", "1048576"],
        &[],
    );
    let mut h0 = h.spawn(
        0,
        "omx_testpeer h0 (stream to h1, then exchange with h2)",
        OMX_TESTPEER,
        &[
            "--peers",
            "h1:0,h2:0",
            "--stream",
            "1048576",
            "--window",
            "4",
            "--sizes",
            sizes,
            "--count",
            "2",
            "--timeout",
            "120",
        ],
        &[("OMX_RESENDS_MAX", "4")],
    );
    let successes = |s: &str| s.matches("status=Success").count();
    let streaming = h0.wait_stdout(2 * MIN, |s| successes(s) >= 20);
    assert!(
        streaming && h1.try_status().is_none(),
        "the stream did not get going:{}",
        reports(&[&h0, &h1, &h2])
    );
    h1.kill();
    let before = successes(&h0.stdout());
    let failed = h0.wait_stdout(MIN, |s| s.contains("STREAM FAILED"));
    assert!(
        failed,
        "no failure status reported within 60 s of the kill:{}",
        reports(&[&h0, &h1, &h2])
    );
    let out = h0.stdout();
    let line = out
        .lines()
        .find(|l| l.starts_with("STREAM FAILED"))
        .unwrap_or_default()
        .to_string();
    println!(
        "h0 after the kill: {line} ({} successes before the kill)",
        before
    );
    // Nobody answers any more: the resend budget runs out.
    assert!(
        line.contains("status=EndpointUnreachable "),
        "expected EndpointUnreachable: {line}"
    );
    h0.finish(3 * MIN);
    h2.finish(MIN);
    let why = reports(&[&h0, &h1, &h2]);
    // h0 then exchanged with h2: 4 sizes x 2 messages each way.
    assert!(
        h0.succeeded() && h0.stdout().lines().any(|l| l == "OK sent=8 received=8"),
        "h0 did not keep working with h2:{why}"
    );
    assert!(
        h2.succeeded() && h2.stdout().lines().any(|l| l == "OK sent=8 received=8"),
        "h2 failed:{why}"
    );
}

/// An Ethernet frame to `dst` from `src` of the Open-MX EtherType: peer index 0, then
/// `body` (from the packet type byte on).
fn frame(dst: [u8; 6], src: [u8; 6], body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(16 + body.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&OMX_ETHERTYPE.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(body);
    f
}

/// A TINY body for endpoint 0 declaring `length` payload bytes, followed by `present`
/// payload bytes.
fn tiny(length: u16, present: usize) -> Vec<u8> {
    let mut b = vec![0u8; 24 + present];
    b[0] = 37; // TINY
    b[1] = 0; // destination endpoint
    b[4..6].copy_from_slice(&length.to_be_bytes());
    b[12..20].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
    for (i, x) in b[24..].iter_mut().enumerate() {
        *x = i as u8;
    }
    b
}

fn counter(c: &[(String, u64)], name: &str) -> u64 {
    c.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v)
}

/// Malformed frames sent to a host running an omx_perf server are dropped and counted
/// under the matching drop counters, and the server still serves a checked run.
#[test]
fn malformed_frames_are_counted_and_harmless() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let mut server = h.spawn(0, "omx_perf server", OMX_PERF, &[], &[]);
    // The server's endpoint is open (and its socket bound) once it is published.
    let pid = server.pid().to_string();
    let until = Instant::now() + MIN;
    loop {
        let out = h.tool(0, OMX_ENDPOINT_INFO, &[]);
        if out
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(&pid))
        {
            break;
        }
        assert!(
            Instant::now() < until && server.try_status().is_none(),
            "server endpoint never listed:\n{out}{}",
            server.report()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = parse_counters(&h.tool(0, OMX_COUNTERS, &[]));
    let (mac0, mac1) = (h.mac(0), h.mac(1));
    let stranger = [0x02, 0xee, 0xee, 0xee, 0xee, 0x01];
    const K: u64 = 3;
    // (what, frame, counter expected to grow by K; None: filtered before the engine).
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        (
            "common header cut short",
            frame(mac0, mac1, &[])[..15].to_vec(),
            None,
        ),
        ("common header only", frame(mac0, mac1, &[]), None),
        (
            "TINY header truncated",
            frame(mac0, mac1, &tiny(0, 0)[..10]),
            Some("drop_bad_header_datalen"),
        ),
        ("type NONE (0)", frame(mac0, mac1, &[0; 44]), None),
        (
            "unimplemented type MFM_NIC_REPLY (2)",
            frame(mac0, mac1, &[2; 44]),
            None,
        ),
        ("undefined type 200", frame(mac0, mac1, &[200; 44]), None),
        (
            "TINY declaring 100 > 32 bytes",
            frame(mac0, mac1, &tiny(100, 100)),
            Some("drop_bad_datalen"),
        ),
        (
            "TINY declaring 20 bytes, carrying 5",
            frame(mac0, mac1, &tiny(20, 5)),
            Some("drop_bad_skblen"),
        ),
        (
            "valid TINY from an unknown MAC",
            frame(mac0, stranger, &tiny(8, 8)),
            Some("drop_bad_peer_addr"),
        ),
    ];
    let frames: Vec<Vec<u8>> = cases
        .iter()
        .flat_map(|(_, f, _)| (0..K).map(move |_| f.clone()))
        .collect();
    let stats = netns::run_in(&h.ns(1), move || {
        let iface = omx_transport::interface_by_name("omx0")?;
        let mut s = PacketSocket::open(&iface, OMX_ETHERTYPE, &SocketOptions::default())?;
        for f in &frames {
            s.send(f)?;
        }
        s.stats()
    })
    .expect("enter h1")
    .expect("inject frames");
    assert_eq!(stats.send_errors, 0, "injection failed: {stats:?}");
    // Counters are published about once a second: wait for the expected increases.
    let expected: Vec<&str> = cases.iter().filter_map(|c| c.2).collect();
    let grew = |now: &[(String, u64)]| {
        expected
            .iter()
            .all(|n| counter(now, n) >= counter(&before, n) + K)
    };
    let until = Instant::now() + MIN;
    let mut after;
    loop {
        after = parse_counters(&h.tool(0, OMX_COUNTERS, &[]));
        if grew(&after) || Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let delta = |n: &str| counter(&after, n).saturating_sub(counter(&before, n));
    let table: String = cases
        .iter()
        .map(|(what, f, c)| {
            format!(
                "  {what} ({} bytes): {}\n",
                f.len(),
                c.map_or("filtered".to_string(), |c| format!("{c} +{}", delta(c)))
            )
        })
        .collect();
    println!("injected {K} of each:\n{table}");
    for n in &expected {
        assert!(
            delta(n) >= K,
            "{n} should have grown by {K}:\n{table}before {before:?}\nafter {after:?}{}",
            server.report()
        );
    }
    // Frames that do not reach the engine (the kernel filter keeps only frames for open
    // endpoints) are not counted; any that do may only be counted as drops, each once.
    // The runtime's own counters (sleeps and wake-ups of waiting threads, copy
    // offload) move with time, not with frames; those of the direct socket count frames
    // before the engine sees them.
    const RUNTIME: [&str; 13] = [
        "sleeps",
        "wakeups_io",
        "wakeups_timer",
        "copy_offloaded",
        "copy_inline_full",
        "copy_inline_unheld",
        "copy_service",
        "copy_service_redone",
        "copy_service_fallback",
        "direct_received",
        "direct_other_host",
        "direct_truncated",
        "direct_rebuilt",
    ];
    let protocol = |n: &str| !RUNTIME.contains(&n);
    let total: u64 = after
        .iter()
        .filter(|(n, _)| protocol(n))
        .map(|(n, _)| delta(n))
        .sum();
    for (n, _) in after.iter().filter(|(n, _)| protocol(n)) {
        assert!(
            n.starts_with("drop_") || delta(n) == 0,
            "malformed frames changed {n} (+{}):\n{table}{}",
            delta(n),
            server.report()
        );
    }
    assert!(
        total <= K * cases.len() as u64,
        "more drops ({total}) than malformed frames:\n{table}before {before:?}\nafter {after:?}"
    );
    assert!(
        server.try_status().is_none(),
        "server died:{}",
        server.report()
    );
    let client = h.run(
        1,
        "omx_perf client",
        OMX_PERF,
        &[
            "-d", "h0:0", "-S", "0", "-E", "4194305", "-N", "3", "-W", "1", "-P", "0", "-c",
        ],
        &[],
        3 * MIN,
    );
    server.wait_timeout(MIN);
    let why = reports(&[&client, &server]);
    assert!(
        client.succeeded() && server.succeeded(),
        "run after injection failed:{why}"
    );
    assert_eq!(table_lengths(&client.stdout()).len(), 24, "{why}");
}

/// omx_info lists the board and, once two processes talked, the other host by name;
/// omx_endpoint_info lists an open endpoint with its owner's pid.
#[test]
fn info_tools_list_board_peer_and_endpoint() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let (mac0, mac1) = (fmt_mac(h.mac(0)), fmt_mac(h.mac(1)));
    let info0 = h.tool(0, OMX_INFO, &[]);
    let board0 = format!("h0:0 (board #0 name omx0 addr {mac0})");
    assert!(
        info0.contains(&board0),
        "omx_info on h0 lacks `{board0}`:\n{info0}"
    );

    let mut server = h.spawn(0, "omx_perf server", OMX_PERF, &[], &[]);
    let pid = server.pid().to_string();
    let until = Instant::now() + MIN;
    let listed = loop {
        let out = h.tool(0, OMX_ENDPOINT_INFO, &[]);
        let row = out
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .any(|t| t == ["0", pid.as_str(), "omx_perf"]);
        if row || Instant::now() >= until || server.try_status().is_some() {
            break (row, out);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        listed.0 && listed.1.contains("1 regular endpoints open"),
        "omx_endpoint_info on h0 does not list endpoint 0 of pid {pid} (omx_perf):\n{}{}",
        listed.1,
        server.report()
    );
    assert!(
        listed.1.contains(&board0),
        "omx_endpoint_info lacks the board:\n{}",
        listed.1
    );

    let client = h.run(
        1,
        "omx_perf client",
        OMX_PERF,
        &[
            "-d", "h0:0", "-S", "0", "-E", "65537", "-N", "2", "-W", "1", "-P", "0", "-c",
        ],
        &[],
        2 * MIN,
    );
    server.wait_timeout(MIN);
    let why = reports(&[&client, &server]);
    assert!(client.succeeded() && server.succeeded(), "{why}");

    // Each side now knows the other by name.
    let info0 = h.tool(0, OMX_INFO, &[]);
    let info1 = h.tool(1, OMX_INFO, &[]);
    let peer = |out: &str, mac: &str, name: &str| {
        out.lines().any(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            t.len() == 3 && t[0].ends_with(')') && t[1] == mac && t[2] == name
        })
    };
    assert!(
        peer(&info0, &mac1, "h1:0"),
        "h0's omx_info lacks peer h1:0 ({mac1}):\n{info0}"
    );
    assert!(
        peer(&info1, &mac0, "h0:0"),
        "h1's omx_info lacks peer h0:0 ({mac0}):\n{info1}"
    );
    // Its announcements said which wire extensions h1 offers (all by default).
    let detail0 = h.tool(0, OMX_INFO, &["-v"]);
    assert!(
        detail0.lines().any(|l| l.contains(&mac1)
            && l.contains("offers wire extensions: ")
            && l.contains("bundle")),
        "h0's omx_info -v does not show what h1 offers:\n{detail0}"
    );
    let board1 = format!("h1:0 (board #0 name omx0 addr {mac1})");
    assert!(
        info1.contains(&board1),
        "omx_info on h1 lacks `{board1}`:\n{info1}"
    );

    // The server has exited: its endpoint is no longer listed.
    let out = h.tool(0, OMX_ENDPOINT_INFO, &[]);
    assert!(
        out.contains("0 regular endpoints open"),
        "endpoint still listed after its process exited:\n{out}"
    );
}

/// A connect to an endpoint no process has open is nacked by the host's board service
/// at once (as the original driver did), instead of timing out after the resends.
#[test]
fn connect_to_closed_endpoint_is_nacked() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let mut server = h.spawn(0, "omx_perf server", OMX_PERF, &[], &[]);
    assert!(
        server.wait_stdout(MIN, |o| o.contains("Successfully attached")),
        "{}",
        server.report()
    );
    // Without the nack the connect would only fail after its resends ran out (minutes),
    // and the client would be killed by the timeout without reporting EndpointClosed.
    let client = h.run(
        1,
        "omx_perf client to endpoint 5",
        OMX_PERF,
        &["-d", "h0:0", "-r", "5", "-S", "8", "-E", "9", "-N", "1"],
        &[],
        MIN,
    );
    assert!(!client.succeeded(), "{}", client.report());
    assert!(
        client.stderr().contains("EndpointClosed"),
        "expected an EndpointClosed failure:\n{}",
        client.report()
    );
    server.kill();
}

/// A static peers file (`OMX_PEERS_FILE`, the original's `omx_init_peers` format) names
/// peers that no running process announced.
#[test]
fn static_peers_file_names_peers() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let mac1 = fmt_mac(h.mac(1));
    let file = std::env::temp_dir().join(format!("omx-peers-{}", std::process::id()));
    std::fs::write(&file, format!("# test peers\n\n{mac1} far-away:0\n")).unwrap();
    let path = file.to_string_lossy().into_owned();
    let p = h.run(
        0,
        "omx_info",
        OMX_INFO,
        &[],
        &[("OMX_PEERS_FILE", path.as_str())],
        MIN,
    );
    assert!(p.succeeded(), "{}", p.report());
    assert!(
        p.stdout().contains(&format!("{mac1} far-away:0")),
        "the peers file's name is not listed:\n{}",
        p.report()
    );
    // A malformed file is an error naming the line, not a silent skip.
    std::fs::write(&file, "not-a-mac name\n").unwrap();
    let bad = h.run(
        0,
        "omx_info",
        OMX_INFO,
        &[],
        &[("OMX_PEERS_FILE", path.as_str())],
        MIN,
    );
    assert!(
        !bad.succeeded() && bad.stderr().contains("line 1"),
        "{}",
        bad.report()
    );
    let _ = std::fs::remove_file(&file);
}

/// The soak of `make soak`, short: two hosts exchange a few thousand messages of random
/// sizes (0 B to 1 MiB) under injected loss, duplication and reordering of real frames;
/// omx_soak checks every message (checksum, length, per-sender order, duplicates) and
/// that none is lost.
#[test]
fn soak_short_under_faults() {
    soak_short("loss:0.02,dup:0.02,reorder:0.05,corrupt:0,seed:11", &[]);
}

/// The short soak with bits flipped in received frames as well (`corrupt:`, one frame
/// in 100) and `OMX_CHECKSUM=1`: every corrupted frame is dropped by its checksum
/// (`drop_checksum`) and recovered like a lost one, so not one message arrives
/// corrupted.
#[test]
fn soak_short_under_corruption_with_checksums() {
    let Some((injected, caught)) = soak_short(
        "loss:0.01,dup:0.01,reorder:0.02,corrupt:0.01,seed:13",
        &[("OMX_CHECKSUM", "1")],
    ) else {
        return;
    };
    println!("corrupted frames injected {injected}, dropped by checksum {caught}");
    assert!(injected > 0, "no corruption injected");
    // A flip in a frame's padding changes nothing and is not counted; one before it is,
    // twice when the injector also duplicates the corrupted frame.
    assert!(
        caught > 0 && caught <= 2 * injected,
        "{caught} checksum drops"
    );
}

/// Runs omx_soak on two hosts under `faults` (plus `env`), asserts every message arrived
/// once, intact and in order, and returns the frames corrupted by the fault injector and
/// those dropped on a checksum mismatch, summed over both hosts (`None`: skipped).
fn soak_short(faults: &str, env: &[(&str, &str)]) -> Option<(u64, u64)> {
    soak_short_at(9000, faults, env).map(|(injected, caught, _)| (injected, caught))
}

/// As `soak_short` with interfaces at `mtu`; also returns both hosts' stderr.
fn soak_short_at(mtu: u32, faults: &str, env: &[(&str, &str)]) -> Option<(u64, u64, String)> {
    if skip() {
        return None;
    }
    const OMX_SOAK: &str = env!("CARGO_BIN_EXE_omx_soak");
    let h = Hosts::up(2, mtu);
    let mut env: Vec<(&str, &str)> = env.to_vec();
    env.extend([
        ("OMX_FAULTS", faults),
        ("OMX_RESEND_DELAY_MS", "20"),
        ("OMX_PULL_RESEND_DELAY_MS", "40"),
    ]);
    let args = [
        "-p",
        "h0:0,h1:0",
        "--messages",
        "2000",
        "--max-size",
        "1048576",
        "--seed",
        "7",
        "--timeout",
        "20",
    ];
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| h.spawn(i, &format!("omx_soak h{i}"), OMX_SOAK, &args, &env))
        .collect();
    for p in procs.iter_mut() {
        p.finish(MIN);
    }
    let why = reports(&procs.iter().collect::<Vec<_>>());
    let (mut sent, mut delivered, mut injected, mut caught) = (0u64, 0u64, 0u64, 0u64);
    for p in &procs {
        let out = p.stdout();
        let line = out
            .lines()
            .find(|l| l.starts_with("soak: "))
            .unwrap_or_else(|| panic!("{} printed no soak line:{why}", p.label));
        let get = |k: &str| -> u64 {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
                .unwrap_or_else(|| panic!("no {k}= in `{line}`"))
        };
        for k in [
            "lost",
            "duplicated",
            "corrupted",
            "misordered",
            "truncated",
            "errors",
            "stalled",
        ] {
            assert_eq!(get(k), 0, "{}: {k} in `{line}`:{why}", p.label);
        }
        assert_eq!(get("sent"), 2000, "{}:{why}", p.label);
        sent += get("sent");
        delivered += get("delivered");
        injected += get("frames_corrupted");
        caught += get("drop_checksum");
        assert!(p.succeeded(), "{} failed:{why}", p.label);
    }
    assert_eq!(delivered, sent, "{why}");
    let stderr = procs.iter().map(Proc::stderr).collect();
    Some((injected, caught, stderr))
}

/// The AF_XDP data path (`OMX_TRANSPORT=xdp`) in `mode` at `mtu`: every length from 0
/// to 8 MiB with data checked, then the short soak under injected faults; both sides
/// must say (`OMX_VERBOSE`) that their endpoint runs over AF_XDP in that mode.
fn over_xdp(mode: &str, mtu: u32) {
    let mtu_s = mtu.to_string();
    let env = [
        ("OMX_TRANSPORT", "xdp"),
        ("OMX_XDP_MODE", mode),
        ("OMX_VERBOSE", "1"),
        ("OMX_MTU", mtu_s.as_str()),
    ];
    let want = format!("uses AF_XDP ({mode} mode");
    let Some((_, log)) = pingpong_logged(mtu, &env, &[], 8 << 20) else {
        return;
    };
    assert_eq!(log.matches(&want).count(), 2, "pingpong, both sides: {log}");
    let faults = "loss:0.02,dup:0.02,reorder:0.05,corrupt:0,seed:17";
    let (_, _, log) = soak_short_at(mtu, faults, &env).expect("not skipped");
    assert_eq!(log.matches(&want).count(), 2, "soak, both sides: {log}");
}

#[test]
fn over_xdp_native_mtu1500() {
    over_xdp("native", 1500);
}

#[test]
fn over_xdp_generic_mtu3498() {
    over_xdp("generic", 3498);
}

/// `OMX_TRANSPORT=auto` takes what wins on veth: AF_XDP in copy mode at MTU 1500 (veth
/// has no zero-copy), and the data path works there.
#[test]
fn auto_transport_takes_xdp_copy_mode_at_mtu1500() {
    let env = [
        ("OMX_TRANSPORT", "auto"),
        ("OMX_VERBOSE", "1"),
        ("OMX_MTU", "1500"),
    ];
    let Some((_, log)) = pingpong_logged(1500, &env, &[], 1 << 20) else {
        return;
    };
    let chosen = log
        .lines()
        .filter(|l| l.contains("uses AF_XDP (") && l.ends_with(", copy)"))
        .count();
    assert_eq!(chosen, 2, "both sides in copy mode: {log}");
}

/// Where XDP cannot serve (here frames longer than a page at MTU 9000), endpoints fall
/// back to packet sockets, say so once, and work as usual.
#[test]
fn xdp_falls_back_to_packet_sockets() {
    let env = [
        ("OMX_TRANSPORT", "xdp"),
        ("OMX_VERBOSE", "1"),
        ("OMX_MTU", "9000"),
    ];
    let Some((_, log)) = pingpong_logged(9000, &env, &[], 1 << 20) else {
        return;
    };
    assert!(!log.contains("uses AF_XDP"), "{log}");
    assert_eq!(
        log.matches("AF_XDP not available on omx0").count(),
        2,
        "once per process: {log}"
    );
}

/// The value of `key=` in the `flood: received=` line of an omx_flood receiver.
fn flood_value(p: &Proc, key: &str) -> u64 {
    let out = p.stdout();
    let line = out
        .lines()
        .find(|l| l.starts_with("flood: received="))
        .unwrap_or_else(|| panic!("no result line:{}", p.report()));
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in `{line}`"))
}

/// Floods against one receiver (h0 endpoint 0) that posts nothing for 3 s: a peer (h1)
/// sends it small, medium and rendezvous messages as fast as a 512-deep window allows,
/// while a raw socket (also on h1) sends 5000 discovery announcements and 5000 connect
/// requests from made-up boards (spoofed source MACs), the first 256 of them again in rounds. The receiver stays within its
/// configured bounds (unexpected bytes, partners, pulls) and its peak memory within a
/// ceiling derived from them; the flooder is slowed (refused messages are resent) but
/// loses nothing: once the receiver receives, every message arrives once, intact. A
/// well-behaved ping-pong between h2 and h0 endpoint 1 completes meanwhile.
#[test]
fn floods_stay_within_bounds_and_lose_nothing() {
    if skip() {
        return;
    }
    const OMX_FLOOD: &str = env!("CARGO_BIN_EXE_omx_flood");
    const UNEXP_MAX: u64 = 256 << 10;
    const PARTNERS_MAX: u64 = 64;
    const MESSAGES: &str = "4000";
    let h = Hosts::up(3, 9000);
    let sizes = "17,100,5000,20000,100000";
    let unexp = UNEXP_MAX.to_string();
    let partners = PARTNERS_MAX.to_string();
    let mut receiver = h.spawn(
        0,
        "omx_flood receiver",
        OMX_FLOOD,
        &[
            "--receive",
            "--messages",
            MESSAGES,
            "--sizes",
            sizes,
            "--hold-ms",
            "3000",
            "--timeout",
            "150",
        ],
        &[("OMX_UNEXP_MAX", &unexp), ("OMX_PARTNERS_MAX", &partners)],
    );
    assert!(
        receiver.wait_stdout(MIN, |s| s.contains("receiver open")),
        "receiver did not start:{}",
        receiver.report()
    );
    let mut server = h.spawn(0, "omx_perf server (h0:1)", OMX_PERF, &["-e", "1"], &[]);
    let mut flooder = h.spawn(
        1,
        "omx_flood sender",
        OMX_FLOOD,
        &[
            "--to",
            "h0:0",
            "--messages",
            MESSAGES,
            "--sizes",
            sizes,
            "--window",
            "512",
            "--timeout",
            "150",
        ],
        &[("OMX_RESEND_DELAY_MS", "50")],
    );
    // Spoofed boards: announcements (the peer table learns up to its bound), then
    // connect requests from the same MACs to the flooded endpoint. A loaded receiver
    // misses some of these frames (its rings overrun, or a connect overtakes the
    // announcement its board service has not merged yet), so the first boards are
    // announced again and their connects sent in several rounds: a repeated
    // announcement or connect (same session) changes nothing, and enough of them
    // arrive to fill the partner table past its bound whatever the load.
    let (mac0, key) = (h.mac(0), 0x0f1d);
    let spoofed = |i: u64| [0x02, 0x5b, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8];
    let announcement = |i: u64| {
        let mut f = vec![0u8; 64];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&spoofed(i));
        f[12..14].copy_from_slice(&OMX_ETHERTYPE.to_be_bytes());
        f[16] = 1; // RAW announcement: nic id at 32..40, serial at 40..44
        f[34..40].copy_from_slice(&spoofed(i));
        f[40..44].copy_from_slice(&1u32.to_be_bytes());
        f
    };
    let wire = omx_wire::WireConfig::native_9000();
    let connect = |i: u64| {
        let header = omx_wire::Header {
            dst_mac: mac0,
            src_mac: spoofed(i),
            ethertype: OMX_ETHERTYPE,
            dst_src_peer_index: 0,
        };
        let connect = omx_wire::Packet::Connect(omx_wire::Connect {
            dst_endpoint: 0,
            src_endpoint: 0,
            length: omx_wire::CONNECT_DATA_LEN,
            src_session_id: i as u32 + 1,
            app_key_or_target_session: key,
            ..Default::default()
        });
        let mut f = Vec::new();
        omx_wire::encode(&header, &connect, &[], &wire, &mut f).expect("encode connect");
        f
    };
    let mut frames: Vec<Vec<u8>> = (0..5000u64).map(announcement).collect();
    frames.extend((0..5000u64).map(connect));
    const ROUNDS: u64 = 4;
    const REPEATED: u64 = 4 * PARTNERS_MAX;
    for _ in 0..ROUNDS {
        frames.extend((0..REPEATED).map(announcement));
        frames.extend((0..REPEATED).map(connect));
    }
    let stats = netns::run_in(&h.ns(1), move || {
        let iface = omx_transport::interface_by_name("omx0")?;
        let mut s = PacketSocket::open(&iface, OMX_ETHERTYPE, &SocketOptions::default())?;
        for (k, f) in frames.iter().enumerate() {
            s.send(f)?;
            if k % 250 == 249 {
                // Spread over a few seconds so the receive rings are not simply overrun.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        s.stats()
    })
    .expect("enter h1")
    .expect("inject frames");
    assert_eq!(stats.send_errors, 0, "injection failed: {stats:?}");
    let client = h.run(
        2,
        "omx_perf client (h2 -> h0:1)",
        OMX_PERF,
        &[
            "-d", "h0:0", "-r", "1", "-S", "0", "-E", "1048577", "-N", "3", "-W", "1", "-P", "0",
            "-c",
        ],
        &[],
        3 * MIN,
    );
    flooder.finish(3 * MIN);
    receiver.finish(3 * MIN);
    server.wait_timeout(MIN);
    let why = reports(&[&receiver, &flooder, &client, &server]);
    assert!(
        client.succeeded() && server.succeeded(),
        "ping-pong failed:{why}"
    );
    assert_eq!(table_lengths(&client.stdout()).len(), 22, "{why}");
    assert!(flooder.succeeded(), "flooder failed:{why}");
    assert!(receiver.succeeded(), "receiver failed:{why}");
    let v = |k: &str| flood_value(&receiver, k);
    assert_eq!(v("received"), 4000, "{why}");
    for k in ["duplicates", "corrupted", "failed", "missing"] {
        assert_eq!(v(k), 0, "{k}:{why}");
    }
    assert!(v("max_unexpected_bytes") <= UNEXP_MAX, "{why}");
    assert!(
        v("drop_unexp_full") > 0,
        "the flood never hit the budget:{why}"
    );
    assert!(v("max_partners") <= PARTNERS_MAX, "{why}");
    assert!(v("partner_evicted") > 0, "no partner evicted:{why}");
    assert!(v("max_pulls") <= 1024, "{why}");
    // Peak memory: the bounds (unexpected bytes, early packets 64 MiB, the 16 MiB
    // receive ring) plus a generous allowance for code, threads and allocator slack.
    let hwm = v("vmhwm_kb");
    println!(
        "receiver peak memory (VmHWM) {hwm} kB; {}",
        receiver.stdout().lines().last().unwrap_or_default()
    );
    assert!(
        hwm < (UNEXP_MAX >> 10) + (64 << 10) + (16 << 10) + (64 << 10),
        "{why}"
    );
}

/// Open file descriptors and threads of a process.
/// Open descriptors and threads of a process, the least seen over ten samples 10 ms
/// apart: the once-a-second publication of its info file holds a descriptor for an
/// instant, which a single sample may catch; a leak stays in every sample.
fn fds_and_threads(pid: u32) -> (usize, usize) {
    let count = |d: &str| std::fs::read_dir(format!("/proc/{pid}/{d}")).map_or(0, |r| r.count());
    let mut least = (usize::MAX, usize::MAX);
    for _ in 0..10 {
        least = (least.0.min(count("fd")), least.1.min(count("task")));
        std::thread::sleep(Duration::from_millis(10));
    }
    least
}

/// The files of the omx state directory (relative paths, sorted), locks aside: what
/// endpoints leave behind (info, counters, shared-memory inboxes).
fn state_files(h: &Hosts) -> Vec<String> {
    /// A file being rewritten right now: the registry writes `.<name>.<pid>` and
    /// renames it over `<name>`, so one of a live process is in flight (one of a
    /// dead process would be a leak and is kept).
    fn in_flight(p: &std::path::Path) -> bool {
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        name.starts_with('.')
            && name
                .rsplit('.')
                .next()
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
    }
    fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, base, out);
            } else if !p.to_string_lossy().ends_with(".lock") && !in_flight(&p) {
                out.push(p.strip_prefix(base).unwrap_or(&p).display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(&h.state, &h.state, &mut out);
    out.sort();
    out
}

/// Successful sends a `--stream` survivor reported after its reconnection.
fn successes_after_reconnect(out: &str) -> usize {
    out.split("STREAM RECONNECTED")
        .nth(1)
        .map_or(0, |s| s.matches("status=Success").count())
}

/// `kill -9` of a receiver in the middle of large (1 MiB, rendezvous) and eager
/// (5000 B) transfers from two peers, then a restart on the same endpoint index: both
/// peers fail what was in flight with a failure status, reconnect to the new process
/// (new session) and stream to it normally; the survivors leak no file descriptors or
/// threads, and the state directory holds the same files as before the crash (the new
/// process replaced the killed one's inbox).
#[test]
fn killed_receiver_restarts_on_its_endpoint_and_peers_resume() {
    if skip() {
        return;
    }
    let h = Hosts::up(3, 9000);
    let sink_args = ["--peers", "h1:0", "--sink", "1048576"];
    let mut sink = h.spawn(1, "omx_testpeer sink (h1:0)", OMX_TESTPEER, &sink_args, &[]);
    let survivors_env = [("OMX_RESENDS_MAX", "8")];
    let mut survivors: Vec<Proc> = [(0, "1048576"), (2, "5000")]
        .into_iter()
        .map(|(i, size)| {
            h.spawn(
                i,
                &format!("omx_testpeer h{i} (stream {size} B to h1)"),
                OMX_TESTPEER,
                &[
                    "--peers",
                    "h1:0",
                    "--stream",
                    size,
                    "--window",
                    "4",
                    "--timeout",
                    "120",
                ],
                &survivors_env,
            )
        })
        .collect();
    let successes = |s: &str| s.matches("status=Success").count();
    for s in survivors.iter_mut() {
        assert!(
            s.wait_stdout(2 * MIN, |o| successes(o) >= 20),
            "stream did not get going:{}",
            s.report()
        );
    }
    let before: Vec<(usize, usize)> = survivors.iter().map(|s| fds_and_threads(s.pid())).collect();
    let files_before = state_files(&h);
    sink.kill();
    // Restarted at once on the same endpoint index: the survivors meet a new session.
    let mut sink2 = h.spawn(
        1,
        "omx_testpeer sink restarted (h1:0)",
        OMX_TESTPEER,
        &sink_args,
        &[],
    );
    for s in survivors.iter_mut() {
        let ok = s.wait_stdout(MIN, |o| o.contains("STREAM FAILED"));
        assert!(ok, "no failure within 60 s of the kill:{}", s.report());
        let out = s.stdout();
        let line = out
            .lines()
            .find(|l| l.starts_with("STREAM FAILED"))
            .unwrap_or_default();
        // The new process answers frames of the old session with a BadSession nack.
        assert!(
            line.contains("status=BadSession "),
            "expected BadSession: {line}"
        );
        println!("{}: {line}", s.label);
        let resumed = s.wait_stdout(2 * MIN, |o| successes_after_reconnect(o) >= 20);
        assert!(
            resumed,
            "did not resume with the new process:{}{}",
            s.report(),
            sink2.report()
        );
    }
    assert!(
        sink2.try_status().is_none(),
        "restarted sink died:{}",
        sink2.report()
    );
    let after: Vec<(usize, usize)> = survivors.iter().map(|s| fds_and_threads(s.pid())).collect();
    assert_eq!(
        before, after,
        "survivors' (fds, threads) before the crash and after"
    );
    let files_after = state_files(&h);
    assert_eq!(
        files_before, files_after,
        "state directory before the crash and after"
    );
    for s in survivors.iter_mut() {
        s.kill();
    }
    sink2.kill();
}

/// The largest `length=LEN count=N` a sink printed for `len`.
fn sink_count(out: &str, len: u64) -> u64 {
    let prefix = format!("length={len} count=");
    out.lines()
        .filter_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// `kill -9` of a sender in the middle of its 1 MiB rendezvous stream (the receiver is
/// pulling), then a restart on the same endpoint index: the receiver fails what it was
/// pulling from the dead process, if anything, with a failure status, takes the new
/// process's stream normally, and leaks no file descriptor, thread or state file; a
/// second sender's eager stream to the same receiver never notices.
#[test]
fn killed_sender_restarts_on_its_endpoint_and_receiver_resumes() {
    if skip() {
        return;
    }
    let h = Hosts::up(3, 9000);
    let mut sink = h.spawn(
        1,
        "omx_testpeer sink (h1:0)",
        OMX_TESTPEER,
        &["--peers", "h1:0", "--sink", "1048576", "--sink-failures-ok"],
        &[],
    );
    let stream = |size: &'static str| {
        [
            "--peers",
            "h1:0",
            "--stream",
            size,
            "--window",
            "4",
            "--timeout",
            "120",
        ]
    };
    let mut large = h.spawn(
        0,
        "omx_testpeer h0 (stream 1 MiB to h1)",
        OMX_TESTPEER,
        &stream("1048576"),
        &[],
    );
    let mut eager = h.spawn(
        2,
        "omx_testpeer h2 (stream 5000 B to h1)",
        OMX_TESTPEER,
        &stream("5000"),
        &[],
    );
    let going = sink.wait_stdout(2 * MIN, |o| {
        sink_count(o, 1 << 20) >= 20 && sink_count(o, 5000) >= 20
    });
    assert!(
        going,
        "streams did not get going:{}",
        reports(&[&sink, &large, &eager])
    );
    let before = fds_and_threads(sink.pid());
    let files_before = state_files(&h);
    large.kill();
    let at_kill = sink_count(&sink.stdout(), 1 << 20);
    let mut large2 = h.spawn(
        0,
        "omx_testpeer h0 restarted (stream 1 MiB to h1)",
        OMX_TESTPEER,
        &stream("1048576"),
        &[],
    );
    let resumed = sink.wait_stdout(2 * MIN, |o| sink_count(o, 1 << 20) >= at_kill + 20);
    let why = reports(&[&sink, &large, &large2, &eager]);
    assert!(
        resumed,
        "the restarted sender's stream did not arrive:{why}"
    );
    let out = sink.stdout();
    for l in out.lines().filter(|l| l.starts_with("RECV FAILED")) {
        println!("sink: {l}");
        // The old session ended: either the new process's connect reset it
        // (EndpointClosed) or it answered a pull of the old one (BadSession nack).
        assert!(
            l.ends_with("status=EndpointClosed") || l.ends_with("status=BadSession"),
            "expected EndpointClosed or BadSession: {l}"
        );
    }
    assert!(sink.try_status().is_none(), "sink died:{why}");
    assert!(
        large2.try_status().is_none() && !large2.stdout().contains("STREAM FAILED"),
        "restarted sender failed:{why}"
    );
    assert!(
        !eager.stdout().contains("STREAM FAILED"),
        "the eager stream noticed the other sender's crash:{why}"
    );
    assert_eq!(before, fds_and_threads(sink.pid()), "sink (fds, threads)");
    assert_eq!(files_before, state_files(&h), "state directory");
    for p in [&mut large2, &mut eager, &mut sink] {
        p.kill();
    }
}

/// A bundle is routed by its inner frames, not by its own header (which carries no
/// checksum): a bundle whose endpoint byte names a closed endpoint but whose inner
/// frames are for the open one must not be nacked as closed (the board-service owner
/// would otherwise fail the sender's requests on a single flipped bit), while a bundle
/// really addressed to a closed endpoint still is.
#[test]
fn bundles_are_routed_by_their_inner_frames() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let mut server = h.spawn(0, "omx_perf server", OMX_PERF, &[], &[]);
    let pid = server.pid().to_string();
    let until = Instant::now() + MIN;
    while !h
        .tool(0, OMX_ENDPOINT_INFO, &[])
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(&pid))
    {
        assert!(
            Instant::now() < until,
            "server never listed:{}",
            server.report()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mac0, mac1) = (h.mac(0), h.mac(1));
    let bundle = |outer: u8, inner: u8| {
        let mut t = tiny(8, 8);
        t[1] = inner;
        let item = frame(mac0, mac1, &t);
        let mut b = Vec::new();
        omx_wire::bundle_start(&mut b, mac0, mac1, OMX_ETHERTYPE, outer);
        omx_wire::bundle_push(&mut b, &item);
        omx_wire::bundle_push(&mut b, &item);
        b.resize(b.len().max(60), 0);
        b
    };
    let nacks = |h: &Hosts| {
        counter(
            &parse_counters(&h.tool(0, OMX_COUNTERS, &[])),
            "send_nack_lib",
        )
    };
    let before = nacks(&h);
    // Outer endpoint 5 (closed), inner frames for endpoint 0 (the server): no nack; the
    // server's engine drops them (their sender is not a known peer).
    let send = |frames: Vec<Vec<u8>>| {
        netns::run_in(&h.ns(1), move || {
            let iface = omx_transport::interface_by_name("omx0")?;
            let mut s = PacketSocket::open(&iface, OMX_ETHERTYPE, &SocketOptions::default())?;
            for f in &frames {
                s.send(f)?;
            }
            Ok::<_, std::io::Error>(())
        })
        .expect("enter h1")
        .expect("send");
    };
    send(vec![bundle(5, 0); 3]);
    // Then a bundle really for endpoint 5: its two frames are nacked.
    send(vec![bundle(5, 5)]);
    let until = Instant::now() + MIN;
    let mut after = nacks(&h);
    while after < before + 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        after = nacks(&h);
    }
    // Counters are published once a second: give a wrong nack time to show.
    std::thread::sleep(Duration::from_millis(1500));
    after = nacks(&h);
    assert_eq!(after - before, 2, "nacks sent:{}", server.report());
    assert!(
        server.try_status().is_none(),
        "server died:{}",
        server.report()
    );
    server.kill();
}

/// A closing endpoint lingers until what it sent is acknowledged (issue 22): under
/// heavy loss, the client exits right after its last reply of every class, and the
/// server's last send still completes with success (its notify or ack, lost just before
/// the close, is resent by the lingering client instead of meeting a closed endpoint).
#[test]
fn close_lingers_until_the_last_message_is_acknowledged() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    for size in ["8", "100", "5000", "300000"] {
        for seed in 1..=4 {
            let faults = format!("loss:0.3,seed:{seed}");
            let env = [
                ("OMX_FAULTS", faults.as_str()),
                ("OMX_RESEND_DELAY_MS", "20"),
                ("OMX_PULL_RESEND_DELAY_MS", "40"),
            ];
            let mut server = h.spawn(0, "omx_perf server", OMX_PERF, &[], &env);
            assert!(
                server.wait_stdout(MIN, |s| s.contains("Successfully attached")),
                "{}",
                server.report()
            );
            let end = (size.parse::<u32>().unwrap() + 1).to_string();
            let args = [
                "-d", "h0:0", "-S", size, "-E", &end, "-N", "2", "-W", "0", "-P", "0", "-c",
            ];
            let client = h.run(1, "omx_perf client", OMX_PERF, &args, &env, 2 * MIN);
            server.wait_timeout(MIN);
            let why = reports(&[&client, &server]);
            assert!(
                client.succeeded() && server.succeeded(),
                "size {size} seed {seed}:{why}"
            );
        }
    }
}
