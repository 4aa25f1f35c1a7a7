//! What the tools show a user, on a namespace host (needs root; otherwise prints why
//! and passes): omx_info hides the peer table a long-finished run left behind, and
//! omx_counters -s shows the intra-node traffic of processes of one host; omx_info lists
//! every board of a host with several links; omx_init_peers loads peers into the host's
//! table; omx_prepare_binding writes its bindings file; library messages take the
//! OMX_VERBOSE_PREFIX prefix; OMX_DEBUG_SIGNAL dumps each endpoint's state on a signal.

mod common;

use common::*;
use std::time::{Duration, SystemTime};

const MIN: Duration = Duration::from_secs(60);

/// A peer table as an earlier run on h0 would have left it, `age` ago.
fn leave_peer_table(h: &Hosts, age: Duration) {
    let mac = h.mac(0);
    let dir = h.state.join(format!(
        "omx-{}",
        mac.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("peers");
    std::fs::write(
        &file,
        format!("{} h0:0\n02:aa:bb:cc:dd:ee gone:0\n", fmt_mac(mac)),
    )
    .unwrap();
    let f = std::fs::File::options().write(true).open(&file).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

#[test]
fn omx_info_drops_the_peer_table_of_a_long_finished_run() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    // A table from a minute ago is shown (with its age under -v) ...
    leave_peer_table(&h, MIN);
    let recent = h.tool(0, OMX_INFO, &["-v"]);
    assert!(
        recent.contains("gone:0"),
        "recent table not shown:\n{recent}"
    );
    assert!(
        recent.contains("no omx process of this host uses the board"),
        "-v does not say the table is unused:\n{recent}"
    );
    // ... one an hour old, with no process using the board, is a leftover: dropped.
    leave_peer_table(&h, 60 * MIN);
    let old = h.tool(0, OMX_INFO, &[]);
    assert!(!old.contains("gone:0"), "stale peer still listed:\n{old}");
    assert!(old.contains("h0:0"), "the board itself is missing:\n{old}");
}

#[test]
fn omx_counters_shared_shows_intra_node_traffic() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let mut server = h.spawn(0, "omx_perf server", OMX_PERF, &["-e", "0"], &[]);
    // A local connect to an endpoint not open yet fails at once (MX: connection
    // failed), so the client starts once the server is attached.
    assert!(
        server.wait_stdout(MIN, |s| s.contains("Successfully attached")),
        "{}",
        server.report()
    );
    let client = h.run(
        0,
        "omx_perf client (same host)",
        OMX_PERF,
        &[
            "-d", "h0:0", "-e", "1", "-S", "8", "-E", "9", "-N", "50", "-W", "1", "-P", "0",
        ],
        &[],
        2 * MIN,
    );
    server.wait_timeout(MIN);
    let why = reports(&[&client, &server]);
    assert!(client.succeeded() && server.succeeded(), "{why}");
    let shared = h.tool(0, OMX_COUNTERS, &["-s"]);
    let counters = parse_counters(&shared);
    let sent = counters
        .iter()
        .find(|(n, _)| n == "send_local_eager")
        .map(|(_, v)| *v);
    // 51 round trips, 102 messages, plus the parameter exchange.
    assert!(
        sent.is_some_and(|v| v >= 102),
        "omx_counters -s lacks the intra-node sends:\n{shared}"
    );
    assert!(
        counters.iter().all(|(n, _)| n.contains("local")),
        "omx_counters -s shows more than the intra-node counters:\n{shared}"
    );
    let boards = h.tool(0, OMX_COUNTERS, &["-b", "0"]);
    assert!(
        !boards.contains("send_local_eager"),
        "board counters still show intra-node traffic:\n{boards}"
    );
}

/// `omx_perf -L` adds the median, 99th percentile and maximum of the timed iterations
/// to every length's row, after the mean columns the scripts read (shape and order of
/// the values only: never timings).
#[test]
fn omx_perf_percentiles_follow_the_mean_columns() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let mut server = h.spawn(0, "omx_perf server", OMX_PERF, &[], &[]);
    assert!(
        server.wait_stdout(MIN, |s| s.contains("Successfully attached")),
        "{}",
        server.report()
    );
    let client = h.run(
        1,
        "omx_perf -L client",
        OMX_PERF,
        &[
            "-d", "h0:0", "-S", "8", "-E", "70000", "-M", "8", "-N", "50", "-W", "2", "-P", "0",
            "-L",
        ],
        &[],
        2 * MIN,
    );
    server.wait_timeout(MIN);
    let why = reports(&[&client, &server]);
    assert!(client.succeeded() && server.succeeded(), "{why}");
    let out = client.stdout();
    let header: Vec<&str> = out
        .lines()
        .find(|l| l.contains("lat(us)"))
        .unwrap_or_else(|| panic!("no header:\n{why}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["length", "lat(us)", "MB/s", "MiB/s", "p50(us)", "p99(us)", "max(us)"],
        "{why}"
    );
    let rows: Vec<Vec<f64>> = out
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u64>().is_ok())
        })
        .map(|l| l.split_whitespace().map(|w| w.parse().unwrap()).collect())
        .collect();
    let lengths: Vec<f64> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(lengths, [8.0, 64.0, 512.0, 4096.0, 32768.0], "{why}");
    for r in &rows {
        assert_eq!(r.len(), 7, "{why}");
        let (mean, p50, p99, max) = (r[1], r[4], r[5], r[6]);
        assert!(
            mean > 0.0 && p50 > 0.0 && p50 <= p99 && p99 <= max,
            "{r:?}\n{why}"
        );
    }
}

/// `omx_info -c` shows every setting with its value and where it came from: the
/// `OMX_*` variable, an MX alias (unless `OMX_IGNORE_MX_ENV`), or the default.
#[test]
fn omx_info_c_shows_settings_and_their_sources() {
    let run = |env: &[(&str, &str)]| {
        let mut c = std::process::Command::new(OMX_INFO);
        c.arg("-c");
        for k in [
            "OMX_MTU",
            "MX_IMM_ACK",
            "OMX_NOTACKED_MAX",
            "OMX_IGNORE_MX_ENV",
        ] {
            c.env_remove(k);
        }
        c.envs(env.iter().copied());
        let out = c.output().expect("omx_info -c");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let line = |out: &str, name: &str| -> String {
        out.lines()
            .find(|l| l.starts_with(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} line:\n{out}"))
            .to_string()
    };
    let out = run(&[("OMX_MTU", "1500"), ("MX_IMM_ACK", "2")]);
    let mtu = line(&out, "OMX_MTU");
    assert!(
        mtu.starts_with("OMX_MTU=1500 ") && mtu.contains("# environment;"),
        "{mtu}"
    );
    let ack = line(&out, "OMX_NOTACKED_MAX");
    assert!(
        ack.starts_with("OMX_NOTACKED_MAX=2 ") && ack.contains("(MX_IMM_ACK)"),
        "{ack}"
    );
    let rndv = line(&out, "OMX_RNDV_THRESHOLD");
    assert!(
        rndv.starts_with("OMX_RNDV_THRESHOLD=32768 ") && rndv.contains("# default;"),
        "{rndv}"
    );
    let ignored = run(&[("MX_IMM_ACK", "2"), ("OMX_IGNORE_MX_ENV", "1")]);
    let ack = line(&ignored, "OMX_NOTACKED_MAX");
    assert!(
        ack.starts_with("OMX_NOTACKED_MAX=4 ") && ack.contains("# default;"),
        "{ack}"
    );
}

/// `omx_endpoint_info -r` shows an endpoint's round-trip estimates per partner, as the
/// endpoint publishes them (about once a second: the test polls until they appear).
#[test]
fn omx_endpoint_info_r_shows_partner_round_trips() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let mut server = h.spawn(0, "omx_perf server", OMX_PERF, &["-e", "0", "-s"], &[]);
    assert!(
        server.wait_stdout(MIN, |s| s.contains("Successfully attached")),
        "{}",
        server.report()
    );
    let client = h.run(
        1,
        "omx_perf client",
        OMX_PERF,
        &[
            "-d", "h0:0", "-S", "8", "-E", "9", "-N", "200", "-W", "1", "-P", "0",
        ],
        &[],
        2 * MIN,
    );
    assert!(client.succeeded(), "{}", reports(&[&client, &server]));
    let deadline = std::time::Instant::now() + MIN;
    let row = loop {
        let out = h.tool(0, OMX_ENDPOINT_INFO, &["-r"]);
        if let Some(row) = out.lines().find(|l| l.trim_start().starts_with("h1:")) {
            break row.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no round trip toward h1 published:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    server.terminate(MIN);
    // partner, ep, srtt_us, rttvar_us, rto_us, pull_srtt, pull_rto, blocks, extensions
    let f: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(f.len(), 9, "{row}");
    let srtt: f64 = f[2].parse().unwrap_or_else(|_| panic!("srtt in {row}"));
    let rto: f64 = f[4].parse().unwrap_or_else(|_| panic!("rto in {row}"));
    assert!(srtt > 0.0 && rto >= srtt, "{row}");
}

#[test]
fn omx_info_lists_every_board_of_a_host_with_three_links() {
    if skip() {
        return;
    }
    let h = Hosts::up_links(2, 9000, 3);
    let out = h.tool(1, OMX_INFO, &[]);
    assert!(
        out.contains("Found 3 boards"),
        "three boards not found:\n{out}"
    );
    for b in 0..3 {
        assert!(
            out.contains(&format!(
                "h1:{b} (board #{b} name omx{b} addr 02:00:00:0{b}:"
            )),
            "board {b} missing:\n{out}"
        );
    }
}

#[test]
fn omx_init_peers_loads_renames_and_clears_the_peer_table() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let file = h.state.join("peers.txt");
    let h0 = fmt_mac(h.mac(0));
    std::fs::write(
        &file,
        format!("# static peers\n\n{h0} far:0\n02:aa:bb:cc:dd:01 ghost:0\n02:aa:bb:cc:dd:02 -\n"),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let out = h.tool(1, OMX_INIT_PEERS, &["-v", file]);
    assert!(out.contains("far:0") && out.contains("ghost:0"), "{out}");
    let info = h.tool(1, OMX_INFO, &[]);
    for want in ["far:0", "ghost:0", "02:aa:bb:cc:dd:02", "h1:0"] {
        assert!(info.contains(want), "{want} not in the table:\n{info}");
    }
    // One pair: an address already known is renamed.
    h.tool(1, OMX_INIT_PEERS, &["02:aa:bb:cc:dd:01", "spirit:0"]);
    let info = h.tool(1, OMX_INFO, &[]);
    assert!(
        info.contains("spirit:0") && !info.contains("ghost:0"),
        "not renamed:\n{info}"
    );
    // -c keeps only the host's own board, then adds what is named.
    h.tool(1, OMX_INIT_PEERS, &["-c", "02:aa:bb:cc:dd:03", "new:0"]);
    let info = h.tool(1, OMX_INFO, &[]);
    assert!(
        info.contains("h1:0") && info.contains("new:0") && !info.contains("spirit:0"),
        "not cleared:\n{info}"
    );
    // A bad line is an error naming it, and changes nothing.
    let bad = h.state.join("bad.txt");
    std::fs::write(&bad, "02:aa:bb:cc:dd:04 ok:0\nnot-a-mac x\n").unwrap();
    let p = h.run(
        1,
        "omx_init_peers bad",
        OMX_INIT_PEERS,
        &[bad.to_str().unwrap()],
        &[],
        Duration::from_secs(60),
    );
    assert!(!p.succeeded(), "a bad file was accepted");
    assert!(p.stderr().contains("line 2"), "{}", p.report());
    let info = h.tool(1, OMX_INFO, &[]);
    assert!(
        !info.contains("ok:0"),
        "a bad file changed the table:\n{info}"
    );
}

#[test]
fn omx_prepare_binding_writes_the_bindings_file() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let file = h.state.join("bindings.dat");
    let file = file.to_str().unwrap();
    let out = h.tool(0, OMX_PREPARE_BINDING, &["-v", file]);
    assert!(
        out.contains(&format!("Generated bindings in {file}")),
        "{out}"
    );
    // veth has no interrupt of its own: the board is reported, with no bindings.
    assert!(
        out.contains("board #0 (omx0") && out.contains("0 endpoint bindings"),
        "{out}"
    );
    let meta = std::fs::metadata(file).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    assert_eq!(std::fs::read_to_string(file).unwrap(), "");
}

#[test]
fn library_messages_take_the_verbose_prefix() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let run = |prefix: Option<&str>| {
        let mut env = vec![("OMX_RCACHE", "1")];
        env.extend(prefix.map(|p| ("OMX_VERBOSE_PREFIX", p)));
        let p = h.run(0, "omx_info", OMX_INFO, &[], &env, Duration::from_secs(60));
        assert!(p.succeeded(), "{}", p.report());
        (p.pid(), p.stderr())
    };
    let (_, plain) = run(None);
    assert!(
        plain.contains("omx: OMX_RCACHE=1 has no effect"),
        "default prefix:\n{plain}"
    );
    // A message about no endpoint: X for the endpoint and board conversions.
    let (pid, custom) = run(Some("<%p %b.%e %B> "));
    assert!(
        custom.contains(&format!("<{pid} X.X X> OMX_RCACHE=1 has no effect")),
        "custom prefix:\n{custom}"
    );
    let (pid, one) = run(Some("1"));
    assert!(
        one.contains(&format!(":{pid} OMX_RCACHE=1 has no effect")) && one.contains("OMX:"),
        "prefix 1:\n{one}"
    );
}

#[test]
fn a_debug_signal_makes_every_endpoint_print_its_state() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let mut server = h.spawn(
        0,
        "omx_perf server",
        OMX_PERF,
        &["-e", "0"],
        &[("OMX_DEBUG_SIGNAL", "2"), ("OMX_DEBUG_SIGNAL_NUM", "12")],
    );
    // The handler is installed when the endpoint opens (before, the signal's default
    // action would end the process).
    assert!(
        server.wait_stdout(MIN, |s| s.contains("Successfully attached")),
        "{}",
        server.report()
    );
    let sent = std::process::Command::new("kill")
        .args(["-USR2", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    assert!(
        // Level 2: the queues (the server's receive for a client's parameters), then
        // the non-zero counters (its progress thread has slept).
        server.wait_stdout(MIN, |s| s.contains("omx: endpoint 0 of board 0 (h0:0): ")
            && s.contains(", 1 posted receives, 0 unexpected (0 bytes)")
            && s.contains("omx:   sleeps ")),
        "{}",
        server.report()
    );
    assert!(server.try_status().is_none(), "{}", server.report());
}
