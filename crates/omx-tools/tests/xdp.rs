//! The AF_XDP data path between namespace hosts (`OMX_TRANSPORT=xdp|auto`): native and
//! generic modes, the automatic choice, and the fall back to packet sockets. Without
//! root they print why and pass.

mod common;

use common::traffic::*;

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
