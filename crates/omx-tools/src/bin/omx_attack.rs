//! omx_attack: what a hostile unprivileged user on a shared host tries against
//! another user's omx endpoints, for the security tests. Every check prints
//! `BLOCKED <what>` and exits 0 when the system refused, or `ALLOWED <what>`
//! and exits 3 when the attack worked; 1 means the check could not run.

use std::io::Read;
use std::path::PathBuf;
use std::process::exit;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use omx_runtime::daemon;
use omx_runtime::{Endpoint, Error};
use omx_tools::runtime_or_exit;
use omx_transport::relay::{self, OpenRequest};
use omx_transport::{PacketSocket, SocketOptions};
use omx_wire::{encode, Header, Msg, Packet, PacketType, WireConfig, COMMON_HEADER_LEN};

#[derive(Parser)]
#[command(name = "omx_attack", about = "Hostile-user checks against omx (tests)")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Open a raw packet socket (needs CAP_NET_RAW).
    RawSocket,
    /// Open endpoint N of board 0, which someone else holds.
    Steal {
        #[arg(long)]
        endpoint: u8,
    },
    /// Through omxd, send frames claiming to come from endpoint `as_endpoint`
    /// (plus RAW, host-query, bundle and foreign-MAC frames) to `dst_mac`/`dst_endpoint`.
    Spoof {
        #[arg(long)]
        as_endpoint: u8,
        #[arg(long, value_parser = parse_mac)]
        dst_mac: [u8; 6],
        #[arg(long)]
        dst_endpoint: u8,
        #[arg(long, default_value_t = 100)]
        count: u32,
    },
    /// Through omxd, open an endpoint and count received frames addressed elsewhere.
    Sniff {
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
    },
    /// Through omxd, try to hold `count` endpoints at once (all of a shared node's).
    Hoard {
        #[arg(long, default_value_t = 31)]
        count: usize,
    },
    /// Read a file (another user's shared-memory inbox).
    ReadFile { path: PathBuf },
    /// Read another process's memory (`process_vm_readv`, as the one-copy path does).
    PeekMemory {
        #[arg(long)]
        pid: u32,
    },
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let v: Vec<u8> = s
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    v.try_into().map_err(|_| format!("{s}: not a MAC"))
}

fn verdict(blocked: bool, what: &str) -> ! {
    if blocked {
        println!("BLOCKED {what}");
        exit(0);
    }
    println!("ALLOWED {what}");
    exit(3)
}

fn fail(msg: String) -> ! {
    eprintln!("omx_attack: {msg}");
    exit(1)
}

/// A relay connection of our own to omxd, as any user may get.
fn relay_socket(rt: &omx_runtime::Runtime) -> (PacketSocket, u8, [u8; 6]) {
    let b = rt.board(0).unwrap_or_else(|| fail("no board".into()));
    let req = OpenRequest {
        nic_id: b.nic_id,
        endpoint: None,
    };
    // This user's endpoints of an earlier attack (the hoard) are given back by omxd as
    // it sees their connections close: a refusal at the per-user limit is waited out
    // for a while, then reported.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (fd, ep) = loop {
        match relay::open_endpoint(&daemon::socket_path(), req) {
            Err(relay::RelayError::Refused(relay::Refusal::Busy))
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            r => break r.unwrap_or_else(|e| fail(format!("cannot reach omxd: {e}"))),
        }
    };
    let sock = PacketSocket::from_relay(
        fd,
        &b.iface,
        rt.cfg.wire.ethertype,
        &SocketOptions::default(),
    )
    .unwrap_or_else(|e| fail(e.to_string()));
    (sock, ep, b.iface.mac)
}

fn tiny(src_mac: [u8; 6], dst_mac: [u8; 6], src_ep: u8, dst_ep: u8, cfg: &WireConfig) -> Vec<u8> {
    let h = Header {
        dst_mac,
        src_mac,
        ethertype: cfg.ethertype,
        dst_src_peer_index: 0,
    };
    let p = Packet::Tiny(Msg {
        dst_endpoint: dst_ep,
        src_endpoint: src_ep,
        length: 4,
        match_info: 0x0bad,
        ..Msg::default()
    });
    let mut out = Vec::new();
    encode(&h, &p, b"evil", cfg, &mut out).unwrap_or_else(|e| fail(format!("{e:?}")));
    out
}

fn main() {
    let a: Args = omx_tools::parse_args();
    match a.cmd {
        Cmd::RawSocket => verdict(
            !relay::can_open_packet_socket(),
            "raw packet socket (sniffing or sending any frame)",
        ),
        Cmd::Steal { endpoint } => {
            let rt = runtime_or_exit("omx_attack");
            match Endpoint::open(&rt, 0, Some(endpoint), 0) {
                Ok(_) => verdict(
                    false,
                    &format!("opening endpoint {endpoint} held by another process"),
                ),
                Err(Error::Busy) => verdict(true, &format!("opening endpoint {endpoint}: busy")),
                Err(e) => fail(format!("open failed otherwise: {e}")),
            }
        }
        Cmd::Spoof {
            as_endpoint,
            dst_mac,
            dst_endpoint,
            count,
        } => {
            let rt = runtime_or_exit("omx_attack");
            let cfg = rt.cfg.wire;
            let (mut sock, mine, mac) = relay_socket(&rt);
            if mine == as_endpoint {
                fail("omxd gave us the victim's endpoint index".into());
            }
            let spoofed = tiny(mac, dst_mac, as_endpoint, dst_endpoint, &cfg);
            let foreign_mac = tiny(
                [2, 0x66, 0x66, 0x66, 0x66, 0x66],
                dst_mac,
                mine,
                dst_endpoint,
                &cfg,
            );
            let mut raw = tiny(mac, dst_mac, mine, dst_endpoint, &cfg);
            raw[COMMON_HEADER_LEN] = PacketType::Raw as u8;
            let mut query = raw.clone();
            query[COMMON_HEADER_LEN] = PacketType::HostQuery as u8;
            let mut bundle = raw.clone();
            bundle[COMMON_HEADER_LEN] = omx_wire::BUNDLE_TYPE;
            for _ in 0..count {
                for f in [&spoofed, &foreign_mac, &raw, &query, &bundle] {
                    if let Err(e) = sock.queue_send(f.len(), |b| b.copy_from_slice(f)) {
                        fail(e.to_string());
                    }
                }
            }
            sock.flush().unwrap_or_else(|e| fail(e.to_string()));
            // The daemon counts refusals in its stats file; the test compares them.
            std::thread::sleep(Duration::from_millis(200));
            println!("SENT {} forged frames as endpoint {mine}", count * 5);
        }
        Cmd::Sniff { seconds } => {
            let rt = runtime_or_exit("omx_attack");
            let (mut sock, mine, mac) = relay_socket(&rt);
            let end = Instant::now() + Duration::from_secs_f64(seconds);
            let (mut total, mut foreign) = (0u64, 0u64);
            while Instant::now() < end {
                let _ = sock.wait_readable(Some(Duration::from_millis(50)));
                let r = sock.recv_batch(64, |f| {
                    total += 1;
                    let ours = f.len() > 17 && f[0..6] == mac && f[17] == mine
                        || f.get(COMMON_HEADER_LEN).map(|&t| omx_wire::type_of(t))
                            == Some(PacketType::PullReply as u8);
                    if !ours {
                        foreign += 1;
                    }
                });
                if let Err(e) = r {
                    fail(e.to_string());
                }
            }
            println!("RECEIVED {total} frames, {foreign} for other endpoints");
            verdict(foreign == 0, "receiving other endpoints' frames")
        }
        Cmd::Hoard { count } => {
            let rt = runtime_or_exit("omx_attack");
            let b = rt.board(0).unwrap_or_else(|| fail("no board".into()));
            let mut held = Vec::new();
            for _ in 0..count {
                let req = OpenRequest {
                    nic_id: b.nic_id,
                    endpoint: None,
                };
                match relay::open_endpoint(&daemon::socket_path(), req) {
                    Ok(c) => held.push(c),
                    Err(_) => break,
                }
            }
            println!("HELD {} endpoints", held.len());
            verdict(held.len() < count, &format!("holding {count} endpoints"))
        }
        Cmd::ReadFile { path } => match std::fs::File::open(&path) {
            Ok(mut f) => {
                let mut b = [0u8; 1];
                verdict(
                    f.read(&mut b).is_err(),
                    &format!("reading {}", path.display()),
                )
            }
            Err(e) => verdict(true, &format!("reading {}: {e}", path.display())),
        },
        Cmd::PeekMemory { pid } => verdict(
            !omx_transport::cma::probe(pid),
            &format!("reading memory of pid {pid} (process_vm_readv)"),
        ),
    }
}
