//! Frames over real veth links and `lo` inside namespaces, on both receive
//! paths (mmap ring and recvmmsg).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_quiet, both_paths, frame, recv_frames, seq_of, skip, Hosts, BROADCAST};
use omx_transport::{EndpointFilter, PacketSocket, SocketOptions, OMX_ETHERTYPE};

const T: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(100);
const TINY: u8 = 37;

fn mac(s: &PacketSocket) -> [u8; 6] {
    s.interface().mac
}

/// Sends `sizes` frames a -> b and b -> a; checks they arrive byte-identical.
fn exchange(a: &mut PacketSocket, b: &mut PacketSocket, sizes: &[usize], what: &str) {
    one_way(a, b, sizes, &format!("{what} a->b"));
    one_way(b, a, sizes, &format!("{what} b->a"));
}

fn one_way(tx: &mut PacketSocket, rx: &mut PacketSocket, sizes: &[usize], what: &str) {
    let sent: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| frame(mac(rx), mac(tx), OMX_ETHERTYPE, TINY, len, i as u32))
        .collect();
    for f in &sent {
        tx.send(f).unwrap();
    }
    let got = recv_frames(rx, sent.len(), T);
    assert_eq!(got.len(), sent.len(), "{what}: frames lost");
    for (g, s) in got.iter().zip(&sent) {
        assert!(
            g == s,
            "{what}: {}-byte frame differs (got {} bytes)",
            s.len(),
            g.len()
        );
    }
    // The sender does not see its own frames.
    assert_quiet(tx, QUIET, &format!("{what}: sender"));
}

#[test]
fn frames_cross_veth_byte_identical_mtu9000() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    for (path, opts) in both_paths() {
        let mut a = h.open(0, "omx0", &opts, None);
        let mut b = h.open(1, "omx0", &opts, None);
        assert_eq!(a.uses_ring(), path == "ring");
        exchange(&mut a, &mut b, &[60, 1500, 9000, 9014], path);
        let st = b.stats().unwrap();
        assert_eq!(
            (st.frames_received, st.frames_sent, st.drops),
            (4, 4, 0),
            "{path}: {st:?}"
        );
        // One byte over MTU + header cannot be queued.
        let err = a.queue_send(9015, |_| {}).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    }
}

#[test]
fn max_frames_cross_veth_mtu65535() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 65535);
    for (path, opts) in both_paths() {
        let mut a = h.open(0, "omx0", &opts, None);
        let mut b = h.open(1, "omx0", &opts, None);
        exchange(&mut a, &mut b, &[65535 + 14, 60, 32768, 65535 + 14], path);
        assert_eq!(b.stats().unwrap().drops, 0);
    }
}

#[test]
fn other_ethertypes_and_ip_are_not_received() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    for (path, opts) in both_paths() {
        let mut rx = h.open(1, "omx0", &opts, None);
        let dst = mac(&rx);
        // A sender per foreign EtherType (the socket's type only selects what it receives).
        for et in [0x0800u16, 0x86DD, 0x0806, 0x88B5] {
            let mut tx = h.open_type(0, "omx0", et, &opts, None);
            tx.send(&frame(dst, mac(&tx), et, TINY, 100, 7)).unwrap();
        }
        let mut tx = h.open(0, "omx0", &opts, None);
        tx.send(&frame(dst, mac(&tx), OMX_ETHERTYPE, TINY, 100, 42))
            .unwrap();
        let got = recv_frames(&mut rx, 1, T);
        assert_eq!(got.len(), 1, "{path}");
        assert_eq!(seq_of(&got[0]), 42, "{path}");
        assert_quiet(&mut rx, QUIET, path);
    }
    // Real IP traffic on the link does not reach the socket either.
    let mut rx = h.open(1, "omx0", &SocketOptions::default(), None);
    h.ip(0, "addr add 192.0.2.1/24 dev omx0");
    h.ip(1, "addr add 192.0.2.2/24 dev omx0");
    // ARP + IPv4/UDP between the hosts, checked to arrive.
    let server =
        omx_transport::netns::run_in(&h.ns(1), || std::net::UdpSocket::bind("192.0.2.2:7000"))
            .unwrap()
            .unwrap();
    server.set_read_timeout(Some(T)).unwrap();
    omx_transport::netns::run_in(&h.ns(0), || {
        let c = std::net::UdpSocket::bind("192.0.2.1:0").unwrap();
        for _ in 0..3 {
            c.send_to(b"not omx", "192.0.2.2:7000").unwrap();
        }
    })
    .unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(server.recv(&mut buf).unwrap(), 7, "UDP over the test link");
    assert_quiet(&mut rx, QUIET, "IP traffic");
    assert_eq!(rx.stats().unwrap().packets, 0);
}

/// Frame with type `t` and the given bytes at 17, 25, 31.
fn typed(dst: [u8; 6], src: [u8; 6], t: u8, b17: u8, b25: u8, b31: u8, seq: u32) -> Vec<u8> {
    let mut f = frame(dst, src, OMX_ETHERTYPE, t, 64, seq);
    f[17] = b17;
    f[25] = b25;
    f[31] = b31;
    f
}

#[test]
fn endpoint_filter_routes_frames() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    for (path, opts) in both_paths() {
        let mut ep3 = h.open(1, "omx0", &opts, Some(EndpointFilter::new([3], false)));
        let mut ep5b = h.open(1, "omx0", &opts, Some(EndpointFilter::new([5, 6, 7], true)));
        let mut all = h.open(1, "omx0", &opts, None);
        let mut none = h.open(1, "omx0", &opts, Some(EndpointFilter::new([], false)));
        let mut tx = h.open(0, "omx0", &opts, None);
        let (d, s) = (mac(&all), mac(&tx));
        let frames = [
            typed(d, s, TINY, 3, 0, 0, 1),      // -> ep 3
            typed(d, s, TINY, 5, 3, 3, 2),      // -> ep 5
            typed(d, s, 1, 3, 3, 3, 3),         // RAW board frame
            typed(d, s, 42, 5, 5, 3 ^ 0x80, 4), // PULL_REPLY -> ep 3 (byte 31)
            typed(d, s, 44, 3, 6, 3, 5),        // NACK_LIB -> ep 6 (byte 25)
            typed(d, s, 45, 3, 3, 7 ^ 0x80, 6), // NACK_MCP -> ep 7 (byte 31)
            typed(d, s, 3, 0, 0, 0, 7),         // HOST_QUERY board frame
            typed(d, s, 40, 9, 9, 9, 8),        // RNDV -> ep 9: nobody filtering
        ];
        for f in &frames {
            tx.queue_send(f.len(), |b| b.copy_from_slice(f)).unwrap();
        }
        tx.flush().unwrap();
        let seqs = |s: &mut PacketSocket, n| -> Vec<u32> {
            recv_frames(s, n, T).iter().map(|f| seq_of(f)).collect()
        };
        assert_eq!(seqs(&mut ep3, 2), [1, 4], "{path}: ep 3");
        assert_eq!(
            seqs(&mut ep5b, 5),
            [2, 3, 5, 6, 7],
            "{path}: ep 5-7 + board"
        );
        assert_eq!(
            seqs(&mut all, 8),
            [1, 2, 3, 4, 5, 6, 7, 8],
            "{path}: unfiltered"
        );
        for (s, what) in [
            (&mut ep3, "ep3"),
            (&mut ep5b, "ep5b"),
            (&mut all, "all"),
            (&mut none, "none"),
        ] {
            assert_quiet(s, QUIET, &format!("{path}: {what}"));
        }

        // Filters can be swapped and removed on an open socket.
        ep3.set_filter(Some(&EndpointFilter::new([9], false)))
            .unwrap();
        tx.send(&frames[0]).unwrap();
        tx.send(&frames[7]).unwrap();
        assert_eq!(seqs(&mut ep3, 1), [8], "{path}: after set_filter");
        ep3.set_filter(None).unwrap();
        tx.send(&frames[2]).unwrap();
        assert_eq!(seqs(&mut ep3, 1), [3], "{path}: no filter");
        // Frames the kernel filtered out were never counted for the socket.
        assert_eq!(none.stats().unwrap().packets, 0, "{path}");
    }
}

/// 10,000 frames of mixed sizes, sent in `queue_send` batches with a window
/// of 256 frames in flight (the receiver publishes its progress), all received
/// in order and intact.
fn stream(h: &Hosts, opts: &SocketOptions, what: &str) {
    const N: u32 = 10_000;
    const WINDOW: u64 = 256;
    let mut tx = h.open(0, "omx0", opts, None);
    let mut rx = h.open(1, "omx0", opts, None);
    let (dst, src) = (mac(&rx), mac(&tx));
    let progress = Arc::new(AtomicU64::new(0));
    let p = progress.clone();
    let receiver = std::thread::spawn(move || {
        let mut next = 0u32;
        let deadline = Instant::now() + Duration::from_secs(60);
        while next < N && Instant::now() < deadline {
            rx.wait_readable(Some(Duration::from_millis(100))).unwrap();
            rx.recv_batch(64, |f| {
                let seq = seq_of(f);
                assert_eq!(seq, next, "out of order or lost");
                assert_eq!(f.len(), len_of(seq));
                assert!(
                    *f == frame(dst, src, OMX_ETHERTYPE, TINY, f.len(), seq)[..],
                    "frame {seq} corrupted"
                );
                next += 1;
            })
            .unwrap();
            p.store(next as u64, Ordering::Release);
        }
        (next, rx.stats().unwrap())
    });
    fn len_of(seq: u32) -> usize {
        [60, 1514, 9014, 4000, 128][seq as usize % 5]
    }
    let mut f = vec![0u8; 9014];
    for seq in 0..N {
        while seq as u64 >= progress.load(Ordering::Acquire) + WINDOW {
            if receiver.is_finished() {
                break;
            }
            std::thread::yield_now();
        }
        let len = len_of(seq);
        f[..len].copy_from_slice(&frame(dst, src, OMX_ETHERTYPE, TINY, len, seq));
        tx.queue_send(len, |b| b.copy_from_slice(&f[..len]))
            .unwrap();
        if seq % 32 == 31 {
            tx.flush().unwrap();
        }
    }
    tx.flush().unwrap();
    let (got, rst) = receiver.join().unwrap();
    assert_eq!(got, N, "{what}: received {got} of {N}; rx {rst:?}");
    let tst = tx.stats().unwrap();
    assert_eq!(tst.frames_sent, N as u64, "{what}: {tst:?}");
    assert_eq!(
        (rst.frames_received, rst.drops),
        (N as u64, 0),
        "{what}: {rst:?}"
    );
}

#[test]
fn batch_of_10000_frames_ring() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    stream(&h, &common::ring_opts(), "ring");
    let bypass = SocketOptions {
        qdisc_bypass: true,
        busy_poll_us: 50,
        ..common::ring_opts()
    };
    stream(&h, &bypass, "ring+bypass");
}

#[test]
fn batch_of_10000_frames_recvmmsg() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    stream(&h, &common::mmsg_opts(), "recvmmsg");
}

#[test]
fn loopback_delivers_each_frame_once() {
    if skip() {
        return;
    }
    let h = Hosts::up(1, 9000);
    for (path, opts) in both_paths() {
        let mut a = h.open(0, "lo", &opts, None);
        let mut b = h.open(0, "lo", &opts, None);
        assert!(a.interface().loopback);
        let mut sent = Vec::new();
        for seq in 0..100 {
            // Sent on lo, a frame comes back once as incoming traffic (to
            // every socket on lo, the sender included); the PACKET_OUTGOING
            // copy must not show up as a second one.
            let f = frame(
                [0; 6],
                [0; 6],
                OMX_ETHERTYPE,
                TINY,
                60 + seq * 500,
                seq as u32,
            );
            a.send(&f).unwrap();
            sent.push(f);
        }
        for (s, who) in [(&mut b, "peer"), (&mut a, "sender")] {
            let got = recv_frames(s, 200, Duration::from_millis(500));
            assert_eq!(got.len(), 100, "{path} {who}");
            assert!(got == sent, "{path} {who}: frames differ");
        }
        let st = a.stats().unwrap();
        assert_eq!(
            (st.frames_sent, st.frames_received, st.drops),
            (100, 100, 0),
            "{path} {st:?}"
        );
    }
}

#[test]
fn bridge_unicast_reaches_only_its_host() {
    if skip() {
        return;
    }
    let h = Hosts::up(3, 1500);
    let opts = SocketOptions::default();
    let mut tx = h.open(0, "omx0", &opts, None);
    let mut h1 = h.open(1, "omx0", &opts, None);
    let mut h2 = h.open(2, "omx0", &opts, None);
    // Before the bridge learns h2's MAC it floods: h1 must skip those frames.
    for seq in 0..20 {
        tx.send(&frame(mac(&h2), mac(&tx), OMX_ETHERTYPE, TINY, 100, seq))
            .unwrap();
    }
    assert_eq!(recv_frames(&mut h2, 20, T).len(), 20);
    assert_quiet(&mut h1, QUIET, "bystander");
    assert!(
        h1.stats().unwrap().skipped > 0,
        "flooded frames were seen and skipped"
    );
    tx.send(&frame(BROADCAST, mac(&tx), OMX_ETHERTYPE, 3, 60, 99))
        .unwrap();
    assert_eq!(seq_of(&recv_frames(&mut h1, 1, T)[0]), 99);
    assert_eq!(seq_of(&recv_frames(&mut h2, 1, T)[0]), 99);
}

#[test]
fn oversized_frames_count_as_drops() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 1500);
    for (path, opts) in both_paths() {
        // Receive slots sized for MTU 1500, then the link grows to 9000.
        let mut rx = h.open(1, "omx0", &opts, None);
        h.ip(0, "link set omx0 mtu 9000");
        h.ip(1, "link set omx0 mtu 9000");
        let mut tx = h.open(0, "omx0", &opts, None);
        let dst = mac(&rx);
        tx.send(&frame(dst, mac(&tx), OMX_ETHERTYPE, TINY, 9014, 1))
            .unwrap();
        tx.send(&frame(dst, mac(&tx), OMX_ETHERTYPE, TINY, 1514, 2))
            .unwrap();
        let got = recv_frames(&mut rx, 2, Duration::from_millis(500));
        assert_eq!(
            got.iter().map(|f| seq_of(f)).collect::<Vec<_>>(),
            [2],
            "{path}: big frame not cut"
        );
        let st = rx.stats().unwrap();
        assert_eq!((st.truncated, st.drops), (1, 1), "{path}: {st:?}");
        h.ip(0, "link set omx0 mtu 1500");
        h.ip(1, "link set omx0 mtu 1500");
    }
}

#[test]
fn wait_readable_times_out_and_wakes() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    for (path, opts) in both_paths() {
        let mut rx = h.open(1, "omx0", &opts, None);
        let mut tx = h.open(0, "omx0", &opts, None);
        let t0 = Instant::now();
        assert!(
            !rx.wait_readable(Some(Duration::from_millis(50))).unwrap(),
            "{path}"
        );
        assert!(
            t0.elapsed() >= Duration::from_millis(45),
            "{path}: returned early"
        );
        assert!(!rx.readable().unwrap());
        let f = frame(mac(&rx), mac(&tx), OMX_ETHERTYPE, TINY, 60, 5);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            tx.send(&f).unwrap();
        });
        assert!(rx.wait_readable(None).unwrap(), "{path}");
        assert!(rx.readable().unwrap());
        assert_eq!(rx.recv_batch(16, |f| assert_eq!(seq_of(f), 5)).unwrap(), 1);
        assert_eq!(rx.recv_batch(16, |_| panic!("no more")).unwrap(), 0);
        sender.join().unwrap();
    }
}

#[test]
fn ring_setup_failure_falls_back_to_recvmmsg() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    // A ring the kernel refuses (more than 4 GiB of blocks).
    let opts = SocketOptions {
        rx_ring_bytes: 1 << 40,
        ..SocketOptions::default()
    };
    let mut a = h.open(0, "omx0", &opts, None);
    let mut b = h.open(1, "omx0", &opts, Some(EndpointFilter::new([0], false)));
    assert!(!a.uses_ring() && !b.uses_ring());
    assert!(a.ring_layout().is_none());
    exchange(&mut a, &mut b, &[60, 9014], "fallback");
    let ring = h.open(0, "omx0", &SocketOptions::default(), None);
    let l = ring.ring_layout().expect("default options use the ring");
    assert!(l.max_frame() >= 9014 && l.frame_nr() >= 64, "{l:?}");
}

/// Frames whose payload the kernel reads from lent memory (header and trailer from the
/// batch) arrive as the concatenation of their parts, on both receive paths, and none
/// stays queued after a flush.
#[test]
fn gathered_frames_cross_veth_byte_identical() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    for (path, opts) in both_paths() {
        let mut a = h.open(0, "omx0", &opts, None);
        let mut b = h.open(1, "omx0", &opts, None);
        let mut sent = Vec::new();
        for (i, &len) in [64usize, 1500, 9014].iter().enumerate() {
            let whole = frame(mac(&b), mac(&a), OMX_ETHERTYPE, TINY, len, i as u32);
            let (head, rest) = whole.split_at(20);
            let (payload, tail) = rest.split_at(rest.len() - 4);
            // Three pieces of uneven lengths, one of them empty.
            let (p1, p2) = payload.split_at(payload.len() / 3);
            let pieces = [
                (p1.as_ptr(), p1.len()),
                (p2.as_ptr(), 0),
                (p2.as_ptr(), p2.len()),
            ];
            // SAFETY: `whole` outlives the flush below.
            unsafe {
                a.queue_send_gathered(head.len(), &pieces, tail.len(), |h, t| {
                    h.copy_from_slice(head);
                    t.copy_from_slice(tail);
                })
            }
            .unwrap();
            assert!(a.holds_lent());
            sent.push(whole);
        }
        a.flush().unwrap();
        assert!(!a.holds_lent() && a.pending_sends() == 0, "{path}");
        let got = recv_frames(&mut b, sent.len(), T);
        assert_eq!(got, sent, "{path}: gathered frames differ");
    }
}

/// PULL_REPLY type byte, and where it names its endpoint (xor 0x80), as the direct
/// socket's filter reads them.
const PULL_REPLY: u8 = 42;
const PULL_ENDPOINT_OFFSET: usize = 31;

/// A pull reply of `len` bytes for direct-socket endpoint `ep`, numbered `seq` in its
/// head (bytes 20..24) and its payload.
fn pull_reply(dst: [u8; 6], src: [u8; 6], ep: u8, len: usize, seq: u32) -> Vec<u8> {
    let mut f = frame(dst, src, OMX_ETHERTYPE, PULL_REPLY, len, seq);
    f[PULL_ENDPOINT_OFFSET] = ep ^ 0x80;
    f[20..24].copy_from_slice(&seq.to_be_bytes());
    f
}

/// Batched direct receive into expected places: frames up to the first out-of-order
/// one land in their places; from there on each frame, rebuilt, is byte-identical to
/// what was sent, whatever place the kernel put its payload in. A frame for another
/// host is dropped and counted, and the places stay where they were.
#[test]
fn direct_batch_lands_in_places_and_rebuilds_mispredicted_frames() {
    if skip() {
        return;
    }
    const HEAD: usize = 32;
    const LEN: usize = 4000;
    const EP: u8 = 3;
    let h = Hosts::up(2, 9000);
    let mut tx = h.open(0, "omx0", &SocketOptions::default(), None);
    let rx_mac = h
        .open(1, "omx0", &SocketOptions::default(), None)
        .interface()
        .mac;
    let mut d = omx_transport::netns::run_in(&h.ns(1), move || {
        let iface = omx_transport::interface_by_name("omx0")?;
        omx_transport::DirectRx::open(&iface, OMX_ETHERTYPE, EP, 1 << 20, 8, HEAD)
    })
    .expect("enter namespace")
    .expect("open direct socket");
    // Expected: frames 0..6 in order. Sent: 0, 1, 2, one for another host, 4, 3, 5,
    // and a last one of a different length (6, shorter).
    let sent: Vec<Vec<u8>> = vec![
        pull_reply(rx_mac, mac(&tx), EP, LEN, 0),
        pull_reply(rx_mac, mac(&tx), EP, LEN, 1),
        pull_reply(rx_mac, mac(&tx), EP, LEN, 2),
        pull_reply([0x02, 9, 9, 9, 9, 9], mac(&tx), EP, LEN, 99),
        pull_reply(rx_mac, mac(&tx), EP, LEN, 4),
        pull_reply(rx_mac, mac(&tx), EP, LEN, 3),
        pull_reply(rx_mac, mac(&tx), EP, LEN, 5),
        pull_reply(rx_mac, mac(&tx), EP, 1000, 6),
    ];
    for f in &sent {
        tx.send(f).unwrap();
    }
    let mut bufs = vec![vec![0u8; LEN - HEAD]; 8];
    let places: Vec<omx_transport::ReplyPlace> = bufs
        .iter_mut()
        .map(|b| {
            let len = b.len();
            let (lo, hi) = b.split_at_mut(len / 2);
            let mut p = omx_transport::ReplyPlace::NONE;
            p.pieces[0] = (lo.as_mut_ptr(), lo.len());
            p.pieces[1] = (hi.as_mut_ptr(), hi.len());
            p.count = 2;
            p.len = len;
            p
        })
        .collect();
    let deadline = Instant::now() + T;
    let n = loop {
        // SAFETY: `bufs` outlives every use of the places, and nothing else touches it.
        let n = unsafe { d.recv_batch_into(8, &places) }.unwrap();
        if n > 0 || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(n, sent.len(), "one recvmmsg takes the whole batch");
    assert_eq!((d.received, d.skipped), (7, 1));
    let seq_in_head = |h: &[u8]| u32::from_be_bytes(h[20..24].try_into().unwrap());
    // In order up to index 2: head and payload where expected.
    for (i, (buf, want)) in bufs.iter().zip(&sent).take(3).enumerate() {
        let (head, len) = d.head(i).expect("wanted frame");
        assert_eq!((seq_in_head(head), len), (i as u32, LEN));
        assert!(buf[..] == want[HEAD..], "frame {i} landed in its place");
    }
    assert!(d.head(3).is_none(), "the frame for another host is dropped");
    // From index 4 on, each frame rebuilt whole before anything is placed.
    for i in 4..n {
        // SAFETY: the places are untouched since the receive.
        unsafe { d.rebuild(i) };
    }
    for (i, want) in sent.iter().enumerate().skip(4) {
        let f = d.rebuilt(i).expect("wanted frame");
        assert!(
            f == &want[..],
            "frame {i} rebuilt byte-identical ({} bytes)",
            f.len()
        );
    }
    assert_eq!(d.rebuilt_frames, 4);
    assert!(d.rebuilt(3).is_none());
}

/// Receives `n` frames through [`PacketSocket::recv_frames`], handing each to `f`;
/// returns how many came before `timeout` passed.
fn recv_each(
    s: &mut PacketSocket,
    n: usize,
    timeout: Duration,
    mut f: impl FnMut(omx_transport::RxFrame<'_>),
) -> usize {
    let deadline = Instant::now() + timeout;
    let mut got = 0;
    while got < n && Instant::now() < deadline {
        if s.wait_readable(Some(Duration::from_millis(50))).unwrap() {
            got += s
                .recv_frames(n - got, |fr| {
                    f(fr);
                })
                .unwrap();
        }
    }
    got
}

/// Frames held past the receive call keep their ring slots: their bytes stay intact
/// while later frames arrive; the ring holds at most half its slots (more could stall
/// it); a slot still held when the ring comes round again is neither shown again nor
/// written by the kernel; dropping the holds gives the slots back.
#[test]
fn held_frames_keep_their_slots_until_dropped() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    // The smallest ring the layout builds (a few dozen slots).
    let opts = SocketOptions {
        rx_ring_bytes: 1,
        ..common::ring_opts()
    };
    let mut tx = h.open(0, "omx0", &opts, None);
    let mut rx = h.open(1, "omx0", &opts, None);
    assert!(rx.uses_ring());
    let slots = rx.ring_layout().unwrap().frame_nr();
    let (dst, src) = (mac(&rx), mac(&tx));
    let send = |tx: &mut PacketSocket, seqs: std::ops::Range<u32>| {
        for seq in seqs {
            tx.send(&frame(dst, src, OMX_ETHERTYPE, TINY, 9014, seq))
                .unwrap();
        }
    };
    // One lap of the ring, in windows that never fill it, holding every frame it lets.
    let window = 8u32;
    let mut held = Vec::new();
    let mut refused = 0;
    let mut next = 0u32;
    while (next as usize) < slots {
        let end = (next + window).min(slots as u32);
        send(&mut tx, next..end);
        recv_each(&mut rx, (end - next) as usize, T, |mut fr| {
            assert_eq!(seq_of(fr.data()), next, "out of order or lost");
            match fr.hold() {
                Some(b) => held.push((next, b)),
                None => refused += 1,
            }
            next += 1;
        });
        assert_eq!(next, end, "frames lost");
    }
    assert_eq!(held.len(), slots / 2, "holds granted of {slots} slots");
    assert_eq!(refused, slots - slots / 2);
    assert_eq!(rx.rx_held(), slots / 2);
    for (seq, b) in &held {
        assert!(
            b[..] == frame(dst, src, OMX_ETHERTYPE, TINY, 9014, *seq)[..],
            "held frame {seq} overwritten"
        );
    }
    // The ring came round to the first held slot: the next frame has nowhere to go
    // (the kernel drops it) and the held slot is not shown again.
    send(&mut tx, next..next + 1);
    let shown = recv_each(&mut rx, 1, QUIET, |_| {});
    assert_eq!(shown, 0, "a held slot was shown again");
    assert!(rx.stats().unwrap().drops >= 1);
    assert!(held[0].1[..] == frame(dst, src, OMX_ETHERTYPE, TINY, 9014, 0)[..]);
    drop(held);
    assert_eq!(rx.rx_held(), 0);
    // Given back: frames flow again, in order.
    let base = next + 1;
    send(&mut tx, base..base + window);
    let mut seen = Vec::new();
    recv_each(&mut rx, window as usize, T, |fr| {
        seen.push(seq_of(fr.data()))
    });
    assert_eq!(seen, (base..base + window).collect::<Vec<_>>());
}
