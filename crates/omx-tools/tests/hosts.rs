//! Real-network tests: omx processes on network-namespace hosts joined by veth or a
//! bridge, exchanging raw Ethernet frames. They check correctness only (exit codes,
//! delivered bytes, statuses, counters), never timings. Without root they print why
//! and pass.

mod common;

use common::traffic::*;
use common::*;
use omx_transport::{netns, PacketSocket, SocketOptions, OMX_ETHERTYPE};
use std::time::{Duration, Instant};

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
