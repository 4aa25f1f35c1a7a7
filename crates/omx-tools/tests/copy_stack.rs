//! The stack's own copies on the host-wide copy service (`omx_copyd`, issue 27 B.2):
//! receive-offload copies between two namespace hosts and the copy-engine half of
//! intra-node one-copy transfers run on the service (its counters say so), with every
//! byte checked (`omx_perf -c`); a service killed mid-transfer leaves the processes on
//! their own copy threads without losing or corrupting data, under injected faults.
//! Real processes, a real `omx_copyd`, real frames. Without root they print why and pass.

mod common;

use common::*;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);
const OMX_COPYD: &str = env!("CARGO_BIN_EXE_omx_copyd");

/// Receive offload for every frame and message, on the service when one answers.
const OFFLOAD: [(&str, &str); 4] = [
    ("OMX_COPY_OFFLOAD", "1"),
    ("OMX_COPY_MIN_MSG", "0"),
    ("OMX_COPY_MIN_FRAG", "0"),
    ("OMX_COPY_STACK", "auto"),
];

/// `omx_copyd -v` for the hosts' shared state directory (one service per machine:
/// its socket is a file, which network namespaces do not separate), once listening.
fn start_copyd(h: &Hosts) -> Proc {
    let mut d = h.spawn(0, "omx_copyd", OMX_COPYD, &["-v", "--cpu", "1"], &[]);
    assert!(
        d.wait_stderr(MIN, |s| s.contains("serving on CPU")),
        "omx_copyd did not start:{}",
        d.report()
    );
    d
}

/// An `omx_perf -v`'s non-zero counters.
type Counters = Vec<(String, u64)>;

fn counter(c: &[(String, u64)], name: &str) -> u64 {
    c.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v)
}

/// The non-zero counters an `omx_perf -v` printed on stderr at exit.
fn counters_of(p: &Proc) -> Counters {
    p.stderr()
        .lines()
        .filter_map(|l| {
            let (name, v) = l.trim().split_once(' ')?;
            Some((name.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// A data-checked ping-pong of every power of two from 1 MiB to 8 MiB; the client on
/// `client_host` (endpoint 1), the server on h0 endpoint 0. `during` runs once the
/// client printed its first line (the transfers are under way). Returns the server's
/// and the client's counters.
fn pingpong(
    h: &Hosts,
    client_host: usize,
    env: &[(&str, &str)],
    during: impl FnOnce(),
) -> (Counters, Counters) {
    let mut server = h.spawn(0, "omx_perf server", OMX_PERF, &["-e", "0", "-v"], env);
    assert!(
        server.wait_stdout(MIN, |s| s.contains("Successfully attached")),
        "{}",
        server.report()
    );
    let args = [
        "-d", "h0:0", "-e", "1", "-S", "1048576", "-E", "8388609", "-N", "4", "-W", "1", "-P", "0",
        "-c", "-v",
    ];
    let mut client = h.spawn(client_host, "omx_perf client", OMX_PERF, &args, env);
    assert!(
        client.wait_stdout(3 * MIN, |s| s
            .lines()
            .any(|l| l.trim_start().starts_with("1048576"))),
        "no first length:{}",
        reports(&[&client, &server])
    );
    during();
    client.finish(5 * MIN);
    server.wait_timeout(MIN);
    let why = reports(&[&client, &server]);
    assert!(client.succeeded(), "client failed:{why}");
    assert!(server.succeeded(), "server failed:{why}");
    let lengths: Vec<u64> = client
        .stdout()
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(
        lengths,
        [1 << 20, 2 << 20, 4 << 20, 8 << 20],
        "one line per length expected:{why}"
    );
    (counters_of(&server), counters_of(&client))
}

/// Between two hosts: pull replies are copied by the service straight from their held
/// receive-ring slots into the receive buffer, none had to be made again.
#[test]
fn network_receive_copies_run_on_the_service() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let mut d = start_copyd(&h);
    let env = [
        &OFFLOAD[..],
        &[("OMX_MTU", "9000"), ("OMX_DIRECT_RECV", "0")],
    ]
    .concat();
    let (server, client) = pingpong(&h, 1, &env, || {});
    for (side, c) in [("server", &server), ("client", &client)] {
        assert!(
            counter(c, "copy_service") > 0,
            "{side}: no copy on the service: {c:?}"
        );
        assert_eq!(
            counter(c, "copy_service_redone") + counter(c, "copy_service_fallback"),
            0,
            "{side}: the service failed copies: {c:?}"
        );
    }
    assert!(d.try_status().is_none(), "omx_copyd died:{}", d.report());
    d.kill();
}

/// Two processes of one host: the second half of each one-copy transfer is read from
/// the peer by the service on the receiver's behalf (no network copy exists here, so
/// every service copy is one of those).
#[test]
fn intra_node_copies_run_on_the_service() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let mut d = start_copyd(&h);
    let env = [&OFFLOAD[..], &[("OMX_COPY_SYNC_MIN", "262144")]].concat();
    let (server, client) = pingpong(&h, 0, &env, || {});
    for (side, c) in [("server", &server), ("client", &client)] {
        assert!(
            counter(c, "copy_service") > 0,
            "{side}: no copy on the service: {c:?}"
        );
        assert_eq!(
            counter(c, "copy_service_redone") + counter(c, "copy_service_fallback"),
            0,
            "{side}: the service failed copies: {c:?}"
        );
    }
    assert!(d.try_status().is_none(), "omx_copyd died:{}", d.report());
    d.kill();
}

/// The service killed (SIGKILL) once the transfers are under way, with frames dropped,
/// duplicated and reordered: every byte still arrives (omx_perf -c), copies the service
/// had not reported are made again by the process, later ones run on its own copy
/// thread.
#[test]
fn a_service_killed_mid_transfer_under_faults_loses_nothing() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let mut d = start_copyd(&h);
    let env = [
        &OFFLOAD[..],
        &[
            ("OMX_MTU", "9000"),
            ("OMX_DIRECT_RECV", "0"),
            ("OMX_COPY_SYNC_MIN", "262144"),
            ("OMX_FAULTS", "loss:0.01,dup:0.01,reorder:0.03,seed:27"),
            ("OMX_RESEND_DELAY_MS", "20"),
            ("OMX_PULL_RESEND_DELAY_MS", "40"),
        ],
    ]
    .concat();
    let (server, client) = pingpong(&h, 1, &env, || d.kill());
    for (side, c) in [("server", &server), ("client", &client)] {
        assert!(
            counter(c, "copy_service") > 0,
            "{side}: no copy on the service before it died: {c:?}"
        );
        assert!(
            counter(c, "copy_service_fallback") > 0,
            "{side}: no copy on the own thread after it died: {c:?}"
        );
    }
}
