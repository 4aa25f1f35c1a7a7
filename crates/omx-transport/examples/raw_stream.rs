//! One-way raw-frame streaming over the transport: the bandwidth floor.
//!
//! ```text
//! scripts/hosts.sh up 2 9000
//! B=target/release/examples/raw_stream
//! scripts/hosts.sh exec 1 $B recv omx0 9014 200000 &
//! scripts/hosts.sh exec 0 $B send omx0 9014 200000
//! ```
//!
//! Arguments: `ROLE IFACE FRAME_BYTES FRAMES [--mmsg] [--bypass]`. The sender
//! pushes frames as fast as `queue_send` batches go out (no flow control:
//! frames the receiver cannot keep up with are dropped by the kernel and
//! reported); the receiver prints the rate it saw between its first and last
//! frame. The sender ends with a few "stop" frames (packet type 0).

use std::process::exit;
use std::time::{Duration, Instant};

use omx_transport::{interface_by_name, SocketOptions, OMX_ETHERTYPE};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 4 {
        eprintln!("usage: raw_stream send|recv IFACE FRAME_BYTES FRAMES [--mmsg] [--bypass]");
        exit(2);
    }
    let mut opts = SocketOptions::default();
    for f in &a[4..] {
        match f.as_str() {
            "--mmsg" => opts.rx_ring_bytes = 0,
            "--bypass" => opts.qdisc_bypass = true,
            _ => {
                eprintln!("raw_stream: unknown flag {f}");
                exit(2)
            }
        }
    }
    let iface = interface_by_name(&a[1]).expect("interface");
    let len: usize = a[2].parse().expect("FRAME_BYTES");
    let n: u64 = a[3].parse().expect("FRAMES");
    let mut s = omx_transport::PacketSocket::open(&iface, OMX_ETHERTYPE, &opts).expect("open");
    let src = iface.mac;
    if a[0] == "send" {
        let t0 = Instant::now();
        let frame = |ptype: u8| {
            move |f: &mut [u8]| {
                f[0..6].fill(0xff);
                f[6..12].copy_from_slice(&src);
                f[12..14].copy_from_slice(&OMX_ETHERTYPE.to_be_bytes());
                f[16] = ptype;
            }
        };
        for _ in 0..n {
            s.queue_send(len, frame(1)).expect("send");
        }
        s.flush().expect("flush");
        let dt = t0.elapsed().as_secs_f64();
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(20));
            s.send(&{
                let mut f = vec![0u8; 60];
                frame(0)(&mut f);
                f
            })
            .expect("stop");
        }
        let st = s.stats().expect("stats");
        println!(
            "raw_stream send: {n} x {len} B in {dt:.3} s = {:.2} GB/s offered (send retries {})",
            (n as f64 * len as f64) / dt / 1e9,
            st.send_retries
        );
    } else {
        let (mut got, mut bytes, mut first, mut last) = (0u64, 0u64, None, Instant::now());
        let mut stop = false;
        while !stop {
            if !s
                .wait_readable(Some(Duration::from_secs(30)))
                .expect("wait")
            {
                eprintln!("raw_stream recv: idle 30 s");
                break;
            }
            s.recv_batch(256, |f| {
                if f[16] == 0 {
                    stop = true;
                    return;
                }
                first.get_or_insert_with(Instant::now);
                last = Instant::now();
                got += 1;
                bytes += f.len() as u64;
            })
            .expect("recv");
        }
        let dt = first.map_or(0.0, |t| last.duration_since(t).as_secs_f64());
        let st = s.stats().expect("stats");
        let path = if s.uses_ring() { "ring" } else { "recvmmsg" };
        println!(
            "raw_stream recv ({path}): {got}/{n} frames, {:.2} GB/s, {:.2} Mframes/s, drops {} (kernel packets {})",
            bytes as f64 / dt.max(1e-9) / 1e9,
            got as f64 / dt.max(1e-9) / 1e6,
            st.drops,
            st.packets
        );
    }
}
