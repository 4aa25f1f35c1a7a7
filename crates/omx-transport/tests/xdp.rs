//! The AF_XDP data path over real veth links between namespaces, in native and
//! generic XDP modes: steering by endpoint, frames passed to the kernel untouched,
//! frames both ways byte-identical, umem frames all accounted for, the program
//! detached when the last socket closes, and the refusals a caller falls back from.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{assert_quiet, frame, recv_frames, seq_of, skip, Hosts};
use omx_transport::xdp::{XdpMode, XdpOptions};
use omx_transport::{netns, EndpointFilter, PacketSocket, SocketOptions, OMX_ETHERTYPE};

const T: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(100);
const TINY: u8 = 37;

fn open_xdp(
    h: &Hosts,
    i: usize,
    mode: XdpMode,
    f: EndpointFilter,
) -> std::io::Result<PacketSocket> {
    let opts = XdpOptions {
        mode,
        ..XdpOptions::default()
    };
    netns::run_in(&h.ns(i), move || {
        let iface = omx_transport::interface_by_name("omx0")?;
        PacketSocket::open_xdp(&iface, OMX_ETHERTYPE, &opts, &f)
    })
    .expect("enter namespace")
}

/// Whether `ip link` shows an XDP program on omx0 of host `i`.
fn xdp_attached(h: &Hosts, i: usize) -> bool {
    let out = Command::new("ip")
        .args(["-n", &h.ns(i), "-d", "link", "show", "dev", "omx0"])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

/// Frame of type `t` for endpoint byte `ep` at 17 (the common header's destination).
fn to_ep(d: [u8; 6], s: [u8; 6], t: u8, ep: u8, seq: u32, len: usize) -> Vec<u8> {
    let mut f = frame(d, s, OMX_ETHERTYPE, t, len, seq);
    f[17] = ep;
    f
}

/// Waits (up to 5 s) for the program to leave omx0 of host `i`: the link's release
/// may finish after the close returns.
fn detached(h: &Hosts, i: usize) -> bool {
    let deadline = std::time::Instant::now() + T;
    while xdp_attached(h, i) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

fn no_leak(s: &mut PacketSocket, what: &str) {
    let c = s.xdp_counts().expect("an XDP socket");
    assert_eq!(
        c.rx_with_kernel, c.rx_frames,
        "{what}: receive frames lost: {c:?}"
    );
    assert_eq!(
        c.tx_in_flight, 0,
        "{what}: send frames not completed: {c:?}"
    );
    assert_eq!(c.tx_free, c.tx_frames, "{what}: {c:?}");
}

fn check_mode(mode: XdpMode) {
    let h = Hosts::up(2, 1500);
    let what = format!("{mode:?}");
    let mut x = open_xdp(&h, 1, mode, EndpointFilter::new([3], true)).expect("open xdp");
    assert_eq!(x.xdp_native(), Some(mode == XdpMode::Native), "{what}");
    assert!(xdp_attached(&h, 1), "{what}: program attached");
    // Endpoint 9 has a packet socket: its frames must pass the program untouched,
    // as must another EtherType.
    let mut ep9 = h.open(
        1,
        "omx0",
        &SocketOptions::default(),
        Some(EndpointFilter::new([9], false)),
    );
    let mut other = h.open_type(1, "omx0", 0x88b5, &SocketOptions::default(), None);
    let mut tx = h.open(0, "omx0", &SocketOptions::default(), None);
    let (d, s) = (x.interface().mac, tx.interface().mac);
    let frames = [
        to_ep(d, s, TINY, 3, 1, 60),
        to_ep(d, s, TINY, 9, 2, 60),
        to_ep(d, s, 1, 0, 3, 64), // RAW board frame
        to_ep(d, s, TINY, 3, 4, 1514),
        to_ep(d, s, 42, 0, 5, 64), // PULL_REPLY: endpoint at byte 31 ^ 0x80
    ];
    let mut pull = frames[4].clone();
    pull[31] = 3 ^ 0x80;
    for f in frames[..4].iter().chain([&pull]) {
        tx.send(f).unwrap();
    }
    tx.send(&frame(d, s, 0x88b5, TINY, 80, 6)).unwrap();
    let seqs = |s: &mut PacketSocket, n| -> Vec<u32> {
        recv_frames(s, n, T).iter().map(|f| seq_of(f)).collect()
    };
    let got = recv_frames(&mut x, 4, T);
    assert_eq!(
        got.iter().map(|f| seq_of(f)).collect::<Vec<_>>(),
        [1, 3, 4, 5],
        "{what}"
    );
    assert_eq!(got[2], frames[3], "{what}: 1514-byte frame intact");
    assert_eq!(
        seqs(&mut ep9, 1),
        [2],
        "{what}: passed to the packet socket"
    );
    assert_eq!(seqs(&mut other, 1), [6], "{what}: other EtherType passed");
    assert_quiet(&mut x, QUIET, &what);

    // Sending through the XSK, single and batched, all sizes up to the MTU.
    let mut rx = h.open(0, "omx0", &SocketOptions::default(), None);
    let sizes: Vec<usize> = (0..3000).map(|i| 60 + (i * 97) % 1455).collect();
    let sent: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| frame(s, d, OMX_ETHERTYPE, TINY, n, i as u32))
        .collect();
    for chunk in sent.chunks(200) {
        for f in chunk {
            x.queue_send(f.len(), |b| b.copy_from_slice(f)).unwrap();
        }
        x.flush().unwrap();
        let got = recv_frames(&mut rx, chunk.len(), T);
        assert!(
            got == chunk,
            "{what}: frames sent through the XSK differ or were lost"
        );
    }
    // Receiving a stream larger than the umem, in windows the receiver keeps up with.
    let n = 3 * x.rx_capacity().unwrap();
    for w in 0..n / 500 {
        for i in 0..500 {
            tx.queue_send(200, |b| {
                b.copy_from_slice(&to_ep(d, s, TINY, 3, (w * 500 + i) as u32, 200))
            })
            .unwrap();
        }
        tx.flush().unwrap();
        let got = recv_frames(&mut x, 500, T);
        let want: Vec<u32> = (w * 500..w * 500 + 500).map(|i| i as u32).collect();
        assert_eq!(
            got.iter().map(|f| seq_of(f)).collect::<Vec<_>>(),
            want,
            "{what}: window {w}"
        );
    }
    no_leak(&mut x, &what);
    let st = x.stats().unwrap();
    assert_eq!(st.frames_sent, 3000, "{what}: {st:?}");
    assert_eq!(st.drops, 0, "{what}: {st:?}");

    // Moving the endpoint: frames for 3 now pass, frames for 9 come here.
    x.set_filter(Some(&EndpointFilter::new([9], false)))
        .unwrap();
    tx.send(&frames[0]).unwrap();
    tx.send(&frames[1]).unwrap();
    assert_eq!(seqs(&mut x, 1), [2], "{what}: after set_filter");
    drop(x);
    assert!(detached(&h, 1), "{what}: program left attached");
    // Without the program, endpoint 9's packet socket gets its frames again.
    tx.send(&frames[1]).unwrap();
    assert_eq!(seqs(&mut ep9, 1), [2], "{what}: after detach");
}

#[test]
fn xdp_native_mode_on_veth() {
    if skip() {
        return;
    }
    check_mode(XdpMode::Native);
}

#[test]
fn xdp_generic_mode_on_veth() {
    if skip() {
        return;
    }
    check_mode(XdpMode::Generic);
}

#[test]
fn xdp_refusals_leave_nothing_behind() {
    if skip() {
        return;
    }
    // Frames longer than a page: refused before anything is attached.
    let big = Hosts::up(2, 9000);
    let e = open_xdp(&big, 0, XdpMode::Auto, EndpointFilter::new([0], true)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
    assert!(!xdp_attached(&big, 0));
    // Native mode on veth stops at MTU 3498; generic mode takes 3826.
    let h = Hosts::up(2, 3826);
    assert!(open_xdp(&h, 0, XdpMode::Native, EndpointFilter::new([0], true)).is_err());
    assert!(!xdp_attached(&h, 0));
    let g = open_xdp(&h, 0, XdpMode::Auto, EndpointFilter::new([0], true)).expect("generic");
    assert_eq!(g.xdp_native(), Some(false));
    // One XSK per queue: a second endpoint on the interface is refused...
    assert!(open_xdp(&h, 0, XdpMode::Auto, EndpointFilter::new([1], false)).is_err());
    drop(g);
    assert!(detached(&h, 0));
    // ...and takes the interface once the first has gone.
    let again = open_xdp(&h, 0, XdpMode::Auto, EndpointFilter::new([1], false)).expect("reopen");
    assert!(xdp_attached(&h, 0));
    drop(again);
    assert!(detached(&h, 0));
}
