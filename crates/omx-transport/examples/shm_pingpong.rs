//! Intra-node floor of the shared-memory transport: two processes (fork), one
//! inbox each, both polling.
//!
//! ```text
//! cargo run --release -p omx-transport --example shm_pingpong [ITERATIONS] [--dir DIR] [--no-pin]
//! ```
//!
//! 1. ping-pong of 8-byte records (ITERATIONS round trips, 100,000 by
//!    default): prints the one-way latency (round trip / 2), mean and median;
//! 2. 4 MiB streamed through the ring in 64 KiB records (the child copies
//!    them out): GB/s;
//! 3. 4 MiB read from the child with `process_vm_readv` (cma::read_from),
//!    and the same-process `memmove` path: GB/s.
//!
//! The two processes are pinned to CPUs 0 and 1 unless `--no-pin`. Inboxes
//! live in a fresh directory under the temp dir (or DIR), removed at the end.

use std::path::{Path, PathBuf};
use std::process::exit;
use std::time::{Duration, Instant};

use omx_transport::cma::{self, RemoteIov};
use omx_transport::shm::{Inbox, InboxParams, Outbox, OutboxError, SenderId};

const STREAM_BYTES: usize = 4 << 20;
const STREAM_RECORD: usize = 64 << 10;
const STREAM_REPS: usize = 100;
const CMA_REPS: usize = 200;

// First byte of the control records.
const HELLO: u8 = b'H';
const PING: u8 = b'P';
const STREAM: u8 = b'S';
const STREAM_DONE: u8 = b'D';
const BUFFER: u8 = b'B';
const STOP: u8 = b'Q';

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the call only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("note: cannot pin to CPU {cpu}");
        }
    }
}

fn id() -> SenderId {
    SenderId {
        nic_id: 1,
        endpoint: 0,
        session: 1,
        pid: std::process::id(),
    }
}

fn open_retry(dir: &Path, name: &str) -> Outbox {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Outbox::open(dir, name, id()) {
            Ok(o) => return o,
            Err(OutboxError::NotFound) if Instant::now() < deadline => std::thread::yield_now(),
            Err(e) => {
                eprintln!("open {name}: {e}");
                exit(1)
            }
        }
    }
}

/// Pushes one record and rings the doorbell (a fence and a load while the
/// other side polls, as the runtime would do).
fn push(out: &mut Outbox, bytes: &[u8]) {
    while !out.try_push(bytes.len(), |b| b.copy_from_slice(bytes)) {
        std::hint::spin_loop();
    }
    out.doorbell();
}

/// Spins until one record arrives; returns a copy.
fn recv(inbox: &mut Inbox) -> Vec<u8> {
    let mut got = None;
    while got.is_none() {
        inbox.poll(1, |_, _, b| {
            got = Some(b.to_vec());
            true
        });
    }
    got.unwrap_or_default()
}

fn child(dir: &Path, pin_cpu: bool) -> i32 {
    if pin_cpu {
        pin(1);
    }
    let mut inbox = Inbox::create(dir, "pong", &InboxParams::default()).expect("child inbox");
    let mut out = open_retry(dir, "ping");
    push(&mut out, &[HELLO]);
    let mut sink = vec![0u8; STREAM_BYTES];
    let mut at = 0usize;
    let mut buffer: Vec<u8> = Vec::new();
    let mut stop = false;
    while !stop {
        let mut reply: Option<[u8; 17]> = None;
        let mut echo = [0u8; 8];
        let mut echo_now = false;
        inbox.poll(1, |_, _, b| {
            match b.first() {
                Some(&PING) => {
                    echo.copy_from_slice(&b[..8]);
                    echo_now = true;
                }
                Some(&STREAM) => {
                    let d = &b[1..];
                    let n = d.len().min(STREAM_BYTES - at);
                    sink[at..at + n].copy_from_slice(&d[..n]);
                    at = (at + n) % STREAM_BYTES;
                }
                Some(&STREAM_DONE) => {
                    let mut r = [0u8; 17];
                    r[0] = STREAM_DONE;
                    reply = Some(r);
                }
                Some(&BUFFER) => {
                    buffer = (0..STREAM_BYTES)
                        .map(|i| (i * 7 + i / 4096) as u8)
                        .collect();
                    let mut r = [0u8; 17];
                    r[0] = BUFFER;
                    r[1..9].copy_from_slice(&(buffer.as_ptr() as u64).to_le_bytes());
                    r[9..17].copy_from_slice(&(buffer.len() as u64).to_le_bytes());
                    reply = Some(r);
                }
                _ => stop = true,
            }
            true
        });
        if echo_now {
            push(&mut out, &echo);
        }
        if let Some(r) = reply {
            push(&mut out, &r);
        }
    }
    std::hint::black_box(&sink);
    drop(buffer);
    inbox.close();
    0
}

fn gbps(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn main() {
    let mut iters = 100_000usize;
    let mut dir: Option<PathBuf> = None;
    let mut pin_cpu = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dir" => dir = args.next().map(PathBuf::from),
            "--no-pin" => pin_cpu = false,
            n => {
                iters = n.parse().unwrap_or_else(|_| {
                    eprintln!("usage: shm_pingpong [ITERATIONS] [--dir DIR] [--no-pin]");
                    exit(2)
                })
            }
        }
    }
    let dir = dir
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("omxshm-pingpong-{}", std::process::id()));
    let mut inbox = Inbox::create(&dir, "ping", &InboxParams::default()).expect("inbox");

    // SAFETY: single-threaded here; the child runs `child` and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        eprintln!("fork failed");
        exit(1);
    }
    if pid == 0 {
        let code = child(&dir, pin_cpu);
        // SAFETY: ends the child without the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    if pin_cpu {
        pin(0);
    }
    assert_eq!(recv(&mut inbox), [HELLO]);
    let mut out = open_retry(&dir, "pong");

    // 1. Ping-pong.
    let mut ping = [0u8; 8];
    ping[0] = PING;
    let mut round = |ping: &mut [u8; 8], i: usize| {
        ping[1..8].copy_from_slice(&(i as u64).to_le_bytes()[..7]);
        push(&mut out, &ping[..]);
        let mut ok = false;
        while !ok {
            inbox.poll(1, |_, _, b| {
                ok = b == &ping[..];
                true
            });
        }
    };
    for i in 0..iters.min(20_000) {
        round(&mut ping, i);
    }
    let t = Instant::now();
    for i in 0..iters {
        round(&mut ping, i);
    }
    let mean = t.elapsed().as_secs_f64() * 1e6 / iters as f64 / 2.0;
    let mut samples: Vec<f64> = (0..iters.min(50_000))
        .map(|i| {
            let t = Instant::now();
            round(&mut ping, i);
            t.elapsed().as_secs_f64() * 1e6 / 2.0
        })
        .collect();
    samples.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| samples[((samples.len() - 1) as f64 * p) as usize];
    println!(
        "ping-pong 8 B x {iters}: one-way mean {mean:.3} us, median {:.3} us, p99 {:.3} us",
        pct(0.5),
        pct(0.99)
    );

    // 2. Streaming through the ring (the receiver copies every record out).
    let data: Vec<u8> = (0..STREAM_RECORD).map(|i| i as u8).collect();
    let stream = |out: &mut Outbox, inbox: &mut Inbox| {
        for _ in 0..STREAM_BYTES / STREAM_RECORD {
            let len = STREAM_RECORD.min(out.max_record() - 1) + 1;
            while !out.try_push(len, |b| {
                b[0] = STREAM;
                b[1..].copy_from_slice(&data[..len - 1]);
            }) {
                std::hint::spin_loop();
            }
        }
        push(out, &[STREAM_DONE]);
        assert_eq!(recv(inbox).first(), Some(&STREAM_DONE));
    };
    stream(&mut out, &mut inbox);
    let t = Instant::now();
    for _ in 0..STREAM_REPS {
        stream(&mut out, &mut inbox);
    }
    let per_rep = (STREAM_BYTES / STREAM_RECORD) * (STREAM_RECORD.min(out.max_record() - 1));
    println!(
        "ring stream 4 MiB in {} B records (copied out by the receiver): {:.2} GB/s",
        STREAM_RECORD.min(out.max_record() - 1),
        gbps(per_rep * STREAM_REPS, t.elapsed())
    );

    // 3. One copy with process_vm_readv from the child's buffer.
    push(&mut out, &[BUFFER]);
    let r = recv(&mut inbox);
    let addr = u64::from_le_bytes(r[1..9].try_into().unwrap_or_default());
    let len = u64::from_le_bytes(r[9..17].try_into().unwrap_or_default());
    let remote = [RemoteIov { addr, len }];
    let mut dst = vec![1u8; len as usize];
    let local = [(dst.as_mut_ptr(), dst.len())];
    println!("cma allowed: {}", cma::probe(pid as u32));
    // SAFETY: `dst` is live and exclusively ours for every call below.
    let read = |p: u32, remote: &[RemoteIov]| unsafe {
        cma::read_from(p, remote, 0, &local, 0, len as usize).expect("process_vm_readv")
    };
    read(pid as u32, &remote);
    assert!(dst
        .iter()
        .enumerate()
        .all(|(i, &b)| b == (i * 7 + i / 4096) as u8));
    let t = Instant::now();
    for _ in 0..CMA_REPS {
        read(pid as u32, &remote);
    }
    println!(
        "cma read 4 MiB from another process: {:.2} GB/s",
        gbps(len as usize * CMA_REPS, t.elapsed())
    );
    let own: Vec<u8> = vec![3u8; len as usize];
    let own_remote = [RemoteIov {
        addr: own.as_ptr() as u64,
        len,
    }];
    let me = std::process::id();
    read(me, &own_remote);
    let t = Instant::now();
    for _ in 0..CMA_REPS {
        read(me, &own_remote);
    }
    println!(
        "cma read 4 MiB from the same process (memmove): {:.2} GB/s",
        gbps(len as usize * CMA_REPS, t.elapsed())
    );

    push(&mut out, &[STOP]);
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    drop(out);
    inbox.close();
    let _ = std::fs::remove_dir_all(&dir);
}
