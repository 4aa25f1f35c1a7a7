//! One `omxd` per namespace host at its default socket (an abstract name, one per
//! network namespace): two unprivileged users ping-pong between the hosts, one host's
//! daemon stops on SIGTERM and comes back, and the other host never notices. A daemon
//! never takes a socket another one serves, and removes its files when it stops.
//! Needs root and the test users; otherwise prints why and passes.

mod common;

use common::users::*;
use common::*;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// omxd on host `i` with `args`, once it listens (its `-v` line says where).
fn start_daemon(h: &Hosts, i: usize, args: &[&str]) -> Proc {
    start_daemon_env(h, i, args, &[])
}

fn start_daemon_env(h: &Hosts, i: usize, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut full = vec!["-v"];
    full.extend_from_slice(args);
    let mut d = h.spawn(i, "omxd", OMXD, &full, env);
    assert!(
        d.wait_stderr(MIN, |s| s.contains("omxd: listening on")),
        "omxd did not start:\n{}",
        d.report()
    );
    d
}

/// Stops a daemon with SIGTERM: it must exit at once, and cleanly.
fn stop_daemon(d: &mut Proc) {
    let status = d.terminate(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "omxd did not stop on SIGTERM:\n{}",
        d.report()
    );
}

/// `bin args` on host `i` as `user`, through that host's omxd at the default socket.
fn spawn_as(h: &Hosts, i: usize, user: &str, label: &str, bin: &str, args: &[&str]) -> Proc {
    let mut full = vec!["--reuid", user, "--regid", user, "--clear-groups", bin];
    full.extend_from_slice(args);
    h.spawn(i, label, "setpriv", &full, &[("OMX_VERBOSE", "1")])
}

/// Both users' omx_perf servers on h0 (endpoints 0 and 1), once attached.
fn start_servers(h: &Hosts, perf: &str, daemon: &Proc) -> Vec<Proc> {
    let mut servers = Vec::new();
    for (user, ep) in [(USER_A, "0"), (USER_B, "1")] {
        let mut p = spawn_as(h, 0, user, "server", perf, &["-e", ep, "-s", "-w"]);
        assert!(
            p.wait_stdout(MIN, |s| s.contains("Successfully attached")),
            "{}",
            reports(&[&p, daemon])
        );
        servers.push(p);
    }
    servers
}

/// Counter `name` of host `i`'s daemon (0 until its counters file shows it).
fn daemon_stat(h: &Hosts, i: usize, name: &str) -> u64 {
    daemon_stats(h, i)
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, v)| *v)
}

/// Both users' clients on h1 ping-pong with their servers on h0.
fn pingpong_round(h: &Hosts, perf: &str, others: &[&Proc]) {
    let mut clients = Vec::new();
    for (user, ep) in [(USER_A, "0"), (USER_B, "1")] {
        let args = [
            "-d", "h0:0", "-r", ep, "-N", "20", "-P", "0", "-E", "65537", "-c",
        ];
        clients.push(spawn_as(h, 1, user, "client", perf, &args));
    }
    for c in &mut clients {
        c.finish(3 * MIN);
        let mut all = vec![&*c];
        all.extend_from_slice(others);
        assert!(c.succeeded(), "{}", reports(&all));
        assert!(c.stderr().contains("through omxd"), "{}", c.report());
    }
}

#[test]
fn a_daemon_per_host_restarts_without_disturbing_the_other() {
    if skip_without_users() {
        return;
    }
    let bins = Bins::new("hosts", &[OMX_PERF]);
    let perf = bins.path(OMX_PERF);
    let h = Hosts::up(2, 9000);
    set_mode(&h.state, 0o755);
    // No socket given: both take the default name, each in its own namespace.
    let d0 = start_daemon(&h, 0, &[]);
    let mut d1 = start_daemon(&h, 1, &[]);
    let mut servers = start_servers(&h, &perf, &d0);
    pingpong_round(&h, &perf, &[&servers[0], &servers[1], &d0, &d1]);

    // h1's daemon stops: promptly, taking its files along.
    stop_daemon(&mut d1);
    assert!(
        !board_dir(&h, 1).join("omxd.stats").exists(),
        "h1's omxd left its counters file"
    );
    // Meanwhile an ordinary user on h1 is told what is missing.
    let mut orphan = spawn_as(&h, 1, USER_A, "client without omxd", &perf, &["-d", "h0:0"]);
    orphan.finish(MIN);
    assert!(
        !orphan.succeeded() && orphan.stderr().contains("is omxd running on this host"),
        "{}",
        orphan.report()
    );
    // h0 noticed nothing: its daemon and both relayed servers still run.
    let mut d0 = d0;
    assert!(d0.try_status().is_none(), "{}", d0.report());
    for s in &mut servers {
        assert!(s.try_status().is_none(), "{}", s.report());
    }

    // Back on h1, under the same name: the same servers on h0 answer again.
    let d1 = start_daemon(&h, 1, &[]);
    pingpong_round(&h, &perf, &[&servers[0], &servers[1], &d0, &d1]);
    let opens = |i| daemon_stat(&h, i, "opens");
    // h0's daemon served its two servers from the start, and nothing else (its
    // counters file is rewritten once a second: wait for the opens to show).
    let until = std::time::Instant::now() + MIN;
    while opens(0) < 2 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(opens(0), 2, "{:?}", daemon_stats(&h, 0));
}

/// With `OMX_TRANSPORT=xdp` each daemon owns its board's AF_XDP socket and relays its
/// unprivileged clients' frames through it (native mode on veth at MTU 1500): both
/// users' ping-pongs (up to 64 KiB, data checked) pass between the hosts.
#[test]
fn daemons_relay_their_clients_over_af_xdp() {
    if skip_without_users() {
        return;
    }
    let bins = Bins::new("xdp", &[OMX_PERF]);
    let perf = bins.path(OMX_PERF);
    let h = Hosts::up(2, 1500);
    set_mode(&h.state, 0o755);
    let env = [("OMX_TRANSPORT", "xdp"), ("OMX_XDP_MODE", "native")];
    let d0 = start_daemon_env(&h, 0, &[], &env);
    let d1 = start_daemon_env(&h, 1, &[], &env);
    for d in [&d0, &d1] {
        assert!(
            d.stderr()
                .contains("relays over AF_XDP on omx0 (native mode)"),
            "{}",
            d.report()
        );
    }
    let servers = start_servers(&h, &perf, &d0);
    pingpong_round(&h, &perf, &[&servers[0], &servers[1], &d0, &d1]);
    let stat = |i, name: &str| daemon_stat(&h, i, name);
    // The counters file is rewritten once a second: wait for the relayed frames.
    let until = std::time::Instant::now() + MIN;
    while (stat(0, "frames_to_clients") == 0 || stat(1, "frames_to_wire") == 0)
        && std::time::Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    for i in 0..2 {
        assert!(
            stat(i, "frames_to_clients") > 0,
            "{:?}",
            daemon_stats(&h, i)
        );
        assert!(stat(i, "frames_to_wire") > 0, "{:?}", daemon_stats(&h, i));
        assert_eq!(
            stat(i, "refused_source_endpoint"),
            0,
            "{:?}",
            daemon_stats(&h, i)
        );
    }
}

#[test]
fn a_daemon_never_takes_a_live_socket_and_removes_its_own() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    // The default abstract name: a second daemon in the same namespace is refused,
    // naming the one that serves.
    let d0 = start_daemon(&h, 0, &[]);
    let mut second = h.spawn(0, "second omxd", OMXD, &["-v"], &[]);
    second.finish(MIN);
    let holder = format!("in use by another omxd (pid {}", d0.pid());
    assert!(
        !second.succeeded() && second.stderr().contains(&holder),
        "{}",
        second.report()
    );
    // A socket file: the file system is shared between namespaces, so a daemon on
    // the other host must not take it either.
    let sock = h.state.join("omxd-test.sock");
    let s = sock.to_str().unwrap();
    let mut d1 = start_daemon(&h, 1, &["-s", s]);
    let mut thief = h.spawn(0, "omxd on the same file", OMXD, &["-v", "-s", s], &[]);
    thief.finish(MIN);
    let holder = format!("in use by another omxd (pid {}", d1.pid());
    assert!(
        !thief.succeeded() && thief.stderr().contains(&holder),
        "{}",
        thief.report()
    );
    stop_daemon(&mut d1);
    assert!(!sock.exists(), "omxd left {} behind", sock.display());
    // A file left by a daemon that could not clean up (SIGKILL) is taken over.
    let mut killed = start_daemon(&h, 1, &["-s", s]);
    killed.kill();
    assert!(sock.exists());
    let mut d1 = start_daemon(&h, 1, &["-s", s]);
    stop_daemon(&mut d1);
    assert!(!sock.exists(), "omxd left {} behind", sock.display());
}
