//! Real-network tests of the frame size that follows the link: two namespace hosts whose
//! interfaces have different MTUs (the two ends of a veth may differ; a frame longer
//! than the receiving end's MTU is dropped by the kernel). Each board uses its own MTU,
//! the connect handshake agrees on the smaller one, and checked data of every message
//! class (tiny, small, medium, large) moves both ways. Correctness only, never timings.

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// Tiny, small, medium of one and of many fragments, large (rendezvous + pull).
const SIZES: &str = "0,17,100,1400,5000,40000,300000,2000000";
const SIZE_COUNT: u64 = 8;

/// Two hosts joined by veth, host `i`'s end at `mtus[i]`.
fn hosts(mtus: [u32; 2]) -> Hosts {
    let h = Hosts::up(2, mtus[0].max(mtus[1]));
    for (i, mtu) in mtus.iter().enumerate() {
        let ok = Command::new("ip")
            .args([
                "netns",
                "exec",
                &h.ns(i),
                "ip",
                "link",
                "set",
                "omx0",
                "mtu",
            ])
            .arg(mtu.to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot set h{i}'s omx0 MTU to {mtu}");
    }
    h
}

/// `omx_info` on host `i` lists omx0 as used with frames of `mtu`.
fn assert_board_mtu(h: &Hosts, i: usize, mtu: u32, env: &[(&str, &str)]) {
    let p = h.run(i, "omx_info", OMX_INFO, &[], env, MIN);
    assert!(p.succeeded(), "{}", p.report());
    let out = p.stdout();
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("omx0"))
        .unwrap_or_else(|| panic!("omx_info lists no omx0:\n{out}"));
    assert!(
        line.contains("used as board #0") && line.contains(&format!("frames up to MTU {mtu} ")),
        "h{i}: {line}"
    );
}

/// Both hosts run omx_testpeer, two endpoints each: every endpoint sends `count`
/// checked messages of each size to both endpoints of the other host and checks all it
/// receives.
fn every_class_both_ways(mtus: [u32; 2], env: &[(&str, &str)]) {
    if skip() {
        return;
    }
    let h = hosts(mtus);
    for (i, &mtu) in mtus.iter().enumerate() {
        assert_board_mtu(&h, i, mtu.min(9000), env);
    }
    let args = [
        "--peers",
        "h0:0,h1:0",
        "--endpoints",
        "2",
        "--sizes",
        SIZES,
        "--count",
        "3",
        "--timeout",
        "150",
    ];
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| h.spawn(i, &format!("omx_testpeer h{i}"), OMX_TESTPEER, &args, env))
        .collect();
    for p in procs.iter_mut() {
        p.finish(3 * MIN);
    }
    let why = reports(&procs.iter().collect::<Vec<_>>());
    let expect = 2 * 2 * SIZE_COUNT * 3;
    let ok = format!("OK sent={expect} received={expect}");
    for p in &procs {
        assert!(
            p.succeeded() && p.stdout().lines().any(|l| l == ok),
            "{mtus:?}: {} did not report `{ok}`:{why}",
            p.label
        );
    }
}

#[test]
fn mtu_1500_and_9000_every_class_both_ways() {
    every_class_both_ways([1500, 9000], &[]);
}

#[test]
fn mtu_9000_and_1400_every_class_both_ways() {
    every_class_both_ways([9000, 1400], &[]);
}

/// With checksum trailers the sizes shrink by 4 bytes on both sides alike.
#[test]
fn mtu_1400_and_9000_with_checksums() {
    every_class_both_ways([1400, 9000], &[("OMX_CHECKSUM", "1")]);
}

/// An interface below the native floor is skipped, and omx_info says why.
#[test]
fn interface_below_1280_is_skipped_with_a_reason() {
    if skip() {
        return;
    }
    let h = hosts([1200, 9000]);
    let p = h.run(0, "omx_info", OMX_INFO, &[], &[], MIN);
    let out = p.stdout();
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("omx0")
            && l.contains("skipped: MTU 1200 below the 1280 omx needs")),
        "{}",
        p.report()
    );
    assert!(out.contains("Found 0 boards"), "{}", p.report());
    // MX-wire mode needs its fixed frame size and says so.
    let p = h.run(1, "omx_info", OMX_INFO, &[], &[("OMX_WIRE", "mx")], MIN);
    assert!(
        p.stdout().contains("interfaces need MTU 4144"),
        "{}",
        p.report()
    );
    let p = h.run(0, "omx_info", OMX_INFO, &[], &[("OMX_WIRE", "mx")], MIN);
    assert!(
        p.stdout()
            .contains("skipped: MTU 1200 below the 4144 omx needs"),
        "{}",
        p.report()
    );
}
