//! Unprivileged users through `omxd`: root runs the daemon on each namespace host,
//! two ordinary users run ping-pongs through it, and a hostile user tries to take,
//! sniff, read or impersonate the other's endpoint. Needs root (to create the hosts,
//! the test users and run as them); otherwise prints why and passes.

mod common;

use common::users::*;
use common::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const MIN: Duration = Duration::from_secs(60);

/// Namespace hosts with an omxd on each.
struct Setup {
    h: Hosts,
    daemons: Vec<Proc>,
}

impl Setup {
    fn new(n: usize) -> Setup {
        let h = Hosts::up(n, 9000);
        set_mode(&h.state, 0o755);
        let mut daemons = Vec::new();
        for i in 0..n {
            let sock = Self::socket_of(&h, i);
            let s = sock.to_string_lossy().into_owned();
            // At most 3 endpoints per user: the attacker's fourth is refused.
            let args = ["-v", "-s", &s, "--max-per-user", "3"];
            let p = h.spawn(i, "omxd", OMXD, &args, &[]);
            daemons.push(p);
            let until = Instant::now() + MIN;
            while !sock.exists() {
                assert!(
                    Instant::now() < until && daemons[i].try_status().is_none(),
                    "omxd did not start:\n{}",
                    daemons[i].report()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Setup { h, daemons }
    }

    fn socket_of(h: &Hosts, i: usize) -> PathBuf {
        h.state.join(format!("omxd-h{i}.sock"))
    }

    /// `bin args` in host `i` as `user`, through host `i`'s omxd.
    fn spawn_as(&self, i: usize, user: &str, label: &str, bin: &str, args: &[&str]) -> Proc {
        let sock = Self::socket_of(&self.h, i);
        let mut full = vec!["--reuid", user, "--regid", user, "--clear-groups", bin];
        full.extend_from_slice(args);
        let env = [
            ("OMX_DAEMON_SOCKET", sock.to_str().unwrap()),
            ("OMX_VERBOSE", "1"),
        ];
        self.h.spawn(i, label, "setpriv", &full, &env)
    }

    fn run_as(&self, i: usize, user: &str, label: &str, bin: &str, args: &[&str]) -> Proc {
        let mut p = self.spawn_as(i, user, label, bin, args);
        p.finish(MIN);
        p
    }

    fn stats(&self, i: usize) -> Vec<(String, u64)> {
        daemon_stats(&self.h, i)
    }

    fn stat(&self, i: usize, name: &str) -> u64 {
        self.stats(i)
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }

    /// Waits until omxd's counter `name` on host `i` reaches `want`.
    fn wait_stat(&self, i: usize, name: &str, want: u64) -> u64 {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let v = self.stat(i, name);
            if v >= want || Instant::now() > until {
                return v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn attached(p: &mut Proc) -> bool {
    p.wait_stdout(MIN, |s| s.contains("Successfully attached"))
}

#[test]
fn two_unprivileged_users_pingpong_through_omxd() {
    if skip_without_users() {
        return;
    }
    let bins = Bins::new("users", &[OMX_PERF, OMX_ATTACK]);
    let perf = bins.path(OMX_PERF);
    let s = Setup::new(2);
    let mut servers = Vec::new();
    for (user, ep) in [(USER_A, "0"), (USER_B, "1")] {
        let mut p = s.spawn_as(0, user, "server", &perf, &["-e", ep, "-w"]);
        assert!(attached(&mut p), "{}", p.report());
        assert!(p.stderr().contains("through omxd"), "{}", p.report());
        servers.push(p);
    }
    // The tools (root) list the relayed endpoints with their owners' pids.
    let until = Instant::now() + MIN;
    loop {
        let out = s.h.tool(0, OMX_ENDPOINT_INFO, &[]);
        let listed = |p: &Proc| {
            out.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(&p.pid().to_string()))
        };
        if servers.iter().all(listed) {
            break;
        }
        assert!(
            Instant::now() < until,
            "relayed endpoints not listed:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut clients = Vec::new();
    for (user, ep) in [(USER_A, "0"), (USER_B, "1")] {
        let args = [
            "-d", "h0:0", "-r", ep, "-N", "20", "-P", "0", "-E", "1048577", "-M", "4", "-c",
        ];
        clients.push(s.spawn_as(1, user, "client", &perf, &args));
    }
    for c in &mut clients {
        c.finish(3 * MIN);
        assert!(
            c.succeeded(),
            "{}",
            reports(&[c, &s.daemons[0], &s.daemons[1]])
        );
        assert!(c.stderr().contains("through omxd"), "{}", c.report());
    }
    // Both hosts relayed the traffic and refused nothing from honest clients.
    for i in 0..2 {
        assert!(s.wait_stat(i, "opens", 2) >= 2, "{:?}", s.stats(i));
        assert!(s.stat(i, "frames_to_wire") > 0, "{:?}", s.stats(i));
        for r in [
            "refused_source_endpoint",
            "refused_source_mac",
            "refused_type",
        ] {
            assert_eq!(s.stat(i, r), 0, "{r}: {:?}", s.stats(i));
        }
    }
    // A client killed with SIGKILL gives its endpoint back: another user reopens it.
    let mut victim = servers.remove(0);
    victim.kill();
    let until = Instant::now() + MIN;
    loop {
        let mut p = s.spawn_as(0, USER_B, "reopen", &perf, &["-e", "0", "-w"]);
        if attached(&mut p) {
            break;
        }
        p.kill();
        assert!(
            Instant::now() < until,
            "endpoint 0 never freed:\n{}",
            p.report()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn hostile_user_cannot_take_sniff_read_or_impersonate_an_endpoint() {
    if skip_without_users() {
        return;
    }
    let bins = Bins::new("attack", &[OMX_PERF, OMX_ATTACK]);
    let (perf, attack) = (bins.path(OMX_PERF), bins.path(OMX_ATTACK));
    let s = Setup::new(2);
    let mut server = s.spawn_as(0, USER_A, "victim server", &perf, &["-e", "0", "-w"]);
    assert!(attached(&mut server), "{}", server.report());
    let blocked = |p: &Proc| {
        // omx_attack exits 0 and says BLOCKED only when the system refused.
        assert!(
            p.succeeded() && p.stdout().contains("BLOCKED"),
            "attack not blocked:\n{}",
            p.report()
        );
    };
    // No packet socket of one's own.
    blocked(&s.run_as(0, USER_B, "raw socket", &attack, &["raw-socket"]));
    // The victim's endpoint index cannot be opened.
    blocked(&s.run_as(0, USER_B, "steal", &attack, &["steal", "--endpoint", "0"]));
    // Nor can every endpoint of the node be hoarded (omxd --max-per-user 3).
    let hoard = s.run_as(0, USER_B, "hoard", &attack, &["hoard", "--count", "10"]);
    blocked(&hoard);
    assert!(
        hoard.stdout().contains("HELD 3 endpoints"),
        "{}",
        hoard.report()
    );
    // Its shared-memory inbox and its memory (one-copy path) are out of reach.
    let board = std::fs::read_dir(&s.h.state)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.join(format!("shm-{}", uid_of(USER_A)))
                .join("ep0")
                .exists()
        })
        .expect("victim's inbox");
    let inbox = board.join(format!("shm-{}", uid_of(USER_A))).join("ep0");
    blocked(&s.run_as(
        0,
        USER_B,
        "read inbox",
        &attack,
        &["read-file", inbox.to_str().unwrap()],
    ));
    let pid = server.pid().to_string();
    blocked(&s.run_as(
        0,
        USER_B,
        "peek memory",
        &attack,
        &["peek-memory", "--pid", &pid],
    ));
    // While the victim's ping-pong runs, the attacker sniffs and forges frames.
    let mut sniff = s.spawn_as(0, USER_B, "sniff", &attack, &["sniff", "--seconds", "3"]);
    let mut client = s.spawn_as(
        1,
        USER_A,
        "victim client",
        &perf,
        &[
            "-d", "h0:0", "-N", "200", "-P", "0", "-E", "262145", "-M", "4", "-c",
        ],
    );
    let mac1 = fmt_mac(s.h.mac(1));
    const COUNT: u64 = 50;
    let count = COUNT.to_string();
    let spoof = s.run_as(
        0,
        USER_B,
        "spoof",
        &attack,
        &[
            "spoof",
            "--as-endpoint",
            "0",
            "--dst-mac",
            &mac1,
            "--dst-endpoint",
            "0",
            "--count",
            &count,
        ],
    );
    assert!(spoof.succeeded(), "{}", spoof.report());
    sniff.finish(MIN);
    blocked(&sniff);
    client.finish(3 * MIN);
    assert!(
        client.succeeded(),
        "{}",
        reports(&[&client, &server, &s.daemons[0]])
    );
    // Every forged frame was refused and counted by omxd, by reason.
    assert_eq!(
        s.wait_stat(0, "refused_source_endpoint", COUNT),
        COUNT,
        "{:?}",
        s.stats(0)
    );
    assert_eq!(
        s.wait_stat(0, "refused_source_mac", COUNT),
        COUNT,
        "{:?}",
        s.stats(0)
    );
    assert_eq!(
        s.wait_stat(0, "refused_type", 3 * COUNT),
        3 * COUNT,
        "{:?}",
        s.stats(0)
    );
    assert!(s.stat(0, "open_refusals") >= 1, "{:?}", s.stats(0));
}
