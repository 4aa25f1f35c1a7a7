//! Traffic the real-network tests share: omx_perf ping-pongs over every length with
//! data checked, and the short omx_soak run under injected faults.

use super::*;
use std::time::Duration;

pub const MIN: Duration = Duration::from_secs(60);

/// `omx_perf -S 0 -E 8388609 -M 2`: 0, 1, 2, 4, ... 8 MiB.
pub fn perf_lengths() -> Vec<u64> {
    std::iter::once(0)
        .chain((0..=23).map(|k| 1u64 << k))
        .collect()
}

/// The lengths of an omx_perf client table (lines starting with a number).
pub fn table_lengths(out: &str) -> Vec<u64> {
    out.lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            (t.len() == 4).then(|| t[0].parse().ok()).flatten()
        })
        .collect()
}

/// Ping-pong of every length from 0 to 8 MiB with data checking between h1 (client)
/// and h0 (server), interfaces at `mtu`, omx configured by `env`.
pub fn pingpong_all_sizes(mtu: u32, env: &[(&str, &str)]) {
    pingpong_sizes_with(mtu, env, &[])
}

/// As `pingpong_all_sizes`, with extra options for both omx_perf sides (e.g. `-w`).
pub fn pingpong_sizes_with(mtu: u32, env: &[(&str, &str)], extra: &[&str]) {
    pingpong_sizes_upto(mtu, env, extra, 8 << 20)
}

/// Every power of two from 0 to `max` bytes, data checked.
pub fn pingpong_sizes_upto(mtu: u32, env: &[(&str, &str)], extra: &[&str], max: u64) {
    pingpong_counted(mtu, env, extra, max);
}

/// As `pingpong_sizes_upto`; returns the server's non-zero counters, protocol and
/// runtime (`omx_perf -v` prints them at exit), or `None` when skipped.
pub fn pingpong_counted(
    mtu: u32,
    env: &[(&str, &str)],
    extra: &[&str],
    max: u64,
) -> Option<Vec<(String, u64)>> {
    pingpong_logged(mtu, env, extra, max).map(|(c, _)| c)
}

/// As `pingpong_counted`, also returning what both sides printed on stderr.
pub fn pingpong_logged(
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

/// Runs omx_soak on two hosts under `faults` (plus `env`), asserts every message arrived
/// once, intact and in order, and returns the frames corrupted by the fault injector and
/// those dropped on a checksum mismatch, summed over both hosts (`None`: skipped).
pub fn soak_short(faults: &str, env: &[(&str, &str)]) -> Option<(u64, u64)> {
    soak_short_at(9000, faults, env).map(|(injected, caught, _)| (injected, caught))
}

/// As `soak_short` with interfaces at `mtu`; also returns both hosts' stderr.
pub fn soak_short_at(mtu: u32, faults: &str, env: &[(&str, &str)]) -> Option<(u64, u64, String)> {
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
