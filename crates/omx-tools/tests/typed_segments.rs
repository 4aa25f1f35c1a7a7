//! Typed segments (file ranges, another process's memory, memory) between real
//! endpoints: over veth between two namespace hosts (also under `OMX_FAULTS`) and
//! between two processes of one host (shared-memory path). Every message class, single
//! kinds and mixed vectors up to 256 segments, offsets that are not page-aligned, the
//! sender's and the receiver's segments cut differently; bad segments (a file shorter
//! than the range, a descriptor open the wrong way, a process that does not exist)
//! fail the post with nothing sent.
//!
//! The peers are this test binary run again inside a host (`peer_entry`); the memory
//! that process segments name belongs to a third process, the peer's child
//! (`holder_entry`), which fills and hashes it on request.

mod common;

use common::Hosts;
use omx_runtime::{Endpoint, Error, Runtime, Segment, SegmentError};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

const ROLE: &str = "OMX_TYPED_TEST_ROLE";
const KEY: u32 = 0x7e57;
const RECV_EP: u8 = 1;
const SEND_EP: u8 = 2;
/// The match of the sends that must fail at post time (nothing may arrive for it).
const BAD_MATCH: u64 = 0xbad;

/// Tiny, small, medium (fragmented at any MTU) and large (rendezvous and pull).
const SIZES: [usize; 6] = [20, 100, 5_000, 30_001, 200_000, 3_000_001];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Memory,
    File,
    Process,
}

/// One message: its length and each side's cut into segments.
struct Msg {
    len: usize,
    seed: u64,
    pieces: Vec<(Kind, usize)>,
}

/// How one side cuts a message of `len` bytes: one file range, one process range, or
/// `n` pieces of every kind in turn (an empty one first), cut differently on each side
/// so that segment boundaries do not line up.
fn cut(len: usize, case: usize, side: usize) -> Vec<(Kind, usize)> {
    let kinds = [Kind::Memory, Kind::File, Kind::Process];
    match case {
        0 => vec![(Kind::File, len)],
        1 => vec![(Kind::Process, len)],
        _ => {
            let n = if case == 2 { 7 + side } else { 255 - side };
            let n = n.min(len);
            let mut v = vec![(kinds[side + 1], 0)];
            let mut at = 0;
            for k in 0..n {
                let end = len * (k + 1) / n;
                v.push((kinds[(k + side) % 3], end - at));
                at = end;
            }
            v
        }
    }
}

/// Every message, as `side` (0 sender, 1 receiver) cuts it.
fn messages(side: usize) -> Vec<Msg> {
    let mut v = Vec::new();
    for (i, &len) in SIZES.iter().enumerate() {
        for case in 0..4 {
            if case == 3 && len < 1000 {
                continue;
            }
            v.push(Msg {
                len,
                seed: (i * 4 + case) as u64 + 1,
                pieces: cut(len, case, side),
            });
        }
    }
    v
}

/// Byte `j` of message `seed`.
fn pat(seed: u64, j: usize) -> u8 {
    let mut x = (seed << 40) ^ j as u64;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
    (x ^ (x >> 31)) as u8
}

fn fill(seed: u64, from: usize, out: &mut [u8]) {
    for (k, b) in out.iter_mut().enumerate() {
        *b = pat(seed, from + k);
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// The process whose memory the process segments name (this binary as
/// `holder_entry`), driven over its stdin/stdout.
struct Holder {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
    base: u64,
}

impl Holder {
    fn start(len: usize) -> Holder {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "holder_entry", "--nocapture", "--test-threads=1"])
            .env(ROLE, format!("holder {len}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let to = child.stdin.take().unwrap();
        let from = BufReader::new(child.stdout.take().unwrap());
        let mut h = Holder {
            child,
            to,
            from,
            base: 0,
        };
        h.base = h.ask("base").parse().unwrap();
        h
    }

    fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.to, "{cmd}").unwrap();
        loop {
            let mut line = String::new();
            assert!(self.from.read_line(&mut line).unwrap() > 0, "holder died");
            // The first reply shares its line with the harness's "test holder_entry ...".
            if let Some((_, r)) = line.split_once("HOLDER ") {
                return r.trim().to_string();
            }
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn holder_entry() {
    let Some(len) = std::env::var(ROLE)
        .ok()
        .and_then(|r| r.strip_prefix("holder ")?.parse::<usize>().ok())
    else {
        return;
    };
    let mut buf = vec![0u8; len];
    let mut out = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| w[i].parse::<usize>().unwrap();
        let reply = match w[0] {
            "base" => (buf.as_ptr() as usize).to_string(),
            // fill OFFSET LEN SEED FROM: message bytes FROM.. of SEED at OFFSET.
            "fill" => {
                let (off, n) = (num(1), num(2));
                fill(num(3) as u64, num(4), &mut buf[off..off + n]);
                "ok".into()
            }
            "hash" => {
                let (off, n) = (num(1), num(2));
                fnv(&buf[off..off + n]).to_string()
            }
            _ => "?".into(),
        };
        writeln!(out, "HOLDER {reply}").unwrap();
        out.flush().unwrap();
    }
}

/// Where each piece of every message lives on one side: memory buffers, a file and
/// the holder's memory, at offsets that are not page-aligned.
struct Places {
    file: File,
    holder: Holder,
    /// Per message, per piece: memory buffer, or offset in the file or the holder.
    at: Vec<Vec<(Vec<u8>, usize)>>,
}

impl Places {
    fn new(msgs: &[Msg], dir: &std::path::Path, name: &str) -> Places {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join(name))
            .unwrap();
        let (mut file_at, mut proc_at) = (4097usize, 13usize);
        let mut at = Vec::new();
        for m in msgs {
            let mut v = Vec::new();
            for &(k, n) in &m.pieces {
                match k {
                    Kind::Memory => v.push((vec![0u8; n], 0)),
                    Kind::File => {
                        v.push((Vec::new(), file_at));
                        file_at += n + 4099;
                    }
                    Kind::Process => {
                        v.push((Vec::new(), proc_at));
                        proc_at += n + 77;
                    }
                }
            }
            at.push(v);
        }
        Places {
            file,
            holder: Holder::start(proc_at),
            at,
        }
    }

    fn segments(&mut self, i: usize, m: &Msg) -> Vec<Segment> {
        let (fd, pid, base) = (
            self.file.as_raw_fd(),
            self.holder.child.id(),
            self.holder.base,
        );
        m.pieces
            .iter()
            .zip(&mut self.at[i])
            .map(|(&(k, n), (buf, off))| match k {
                Kind::Memory => Segment::memory(buf.as_mut_ptr(), n),
                Kind::File => Segment::file(fd, *off as u64, n),
                Kind::Process => Segment::process(pid, base + *off as u64, n),
            })
            .collect()
    }

    /// Puts message `i`'s bytes into its pieces (the sender).
    fn put(&mut self, i: usize, m: &Msg) {
        let mut from = 0;
        for (&(k, n), (buf, off)) in m.pieces.iter().zip(&mut self.at[i]) {
            match k {
                Kind::Memory => fill(m.seed, from, buf),
                Kind::File => {
                    let mut b = vec![0u8; n];
                    fill(m.seed, from, &mut b);
                    self.file.write_all_at(&b, *off as u64).unwrap();
                }
                Kind::Process => {
                    self.holder
                        .ask(&format!("fill {off} {n} {} {from}", m.seed));
                }
            }
            from += n;
        }
    }

    /// Checks that message `i`'s pieces hold its bytes (the receiver).
    fn check(&mut self, i: usize, m: &Msg) {
        let mut from = 0;
        for (p, (&(k, n), (buf, off))) in m.pieces.iter().zip(&self.at[i]).enumerate() {
            let mut want = vec![0u8; n];
            fill(m.seed, from, &mut want);
            let ok = match k {
                Kind::Memory => *buf == want,
                Kind::File => {
                    let mut got = vec![0u8; n];
                    self.file.read_exact_at(&mut got, *off as u64).unwrap();
                    got == want
                }
                Kind::Process => {
                    self.holder.ask(&format!("hash {off} {n}")) == fnv(&want).to_string()
                }
            };
            assert!(
                ok,
                "message {i} ({} bytes): piece {p} ({k:?}, {n} bytes) differs",
                m.len
            );
            from += n;
        }
    }
}

fn open_endpoint(index: u8) -> Endpoint {
    let rt = Runtime::global().expect("runtime");
    Endpoint::open(&rt, 0, Some(index), KEY).expect("open endpoint")
}

const WAIT: Option<Duration> = Some(Duration::from_secs(120));

/// Whether an error is the one a case expects.
type ExpectedError = fn(&Error) -> bool;

/// Sends whose segments cannot be read fail at post time with a clear error.
fn bad_sends(ep: &Endpoint, to: omx_proto::PartnerId, dir: &std::path::Path) {
    let short = dir.join("short");
    std::fs::write(&short, vec![7u8; 100]).unwrap();
    let f = File::open(&short).unwrap();
    let wronly = OpenOptions::new().write(true).open(&short).unwrap();
    let mut mem = vec![1u8; 100_000];
    let cases: Vec<(Vec<Segment>, ExpectedError)> = vec![
        (vec![Segment::file(f.as_raw_fd(), 50, 100)], |e| {
            matches!(
                e,
                Error::Segment(SegmentError::ShortFile {
                    size: 100,
                    end: 150
                })
            )
        }),
        // A large message: memory, then a file range one byte too long.
        (
            vec![
                Segment::memory(mem.as_mut_ptr(), mem.len()),
                Segment::file(f.as_raw_fd(), 0, 101),
            ],
            |e| matches!(e, Error::Segment(SegmentError::ShortFile { .. })),
        ),
        (vec![Segment::file(wronly.as_raw_fd(), 0, 10)], |e| {
            // EBADF: not open for reading.
            matches!(e, Error::Segment(SegmentError::File { errno: 9 }))
        }),
        (vec![Segment::process(i32::MAX as u32, 4096, 10)], |e| {
            matches!(e, Error::Segment(SegmentError::ProcessGone))
        }),
    ];
    for (segs, want) in cases {
        // SAFETY: the segments are valid for the call (it fails before lending them).
        let r = unsafe { ep.isend(&segs, to, BAD_MATCH, 0, false) };
        match r {
            Err(e) if want(&e) => println!("refused as expected: {e}"),
            other => panic!("bad send {segs:?}: {other:?}"),
        }
    }
}

fn sender(peer: &str) {
    let dir = tempdir("send");
    let msgs = messages(0);
    let mut places = Places::new(&msgs, &dir, "source");
    for (i, m) in msgs.iter().enumerate() {
        places.put(i, m);
    }
    let ep = open_endpoint(SEND_EP);
    let rt = Runtime::global().unwrap();
    let nic = rt
        .hostname_to_nic_id(peer, Duration::from_secs(60))
        .expect("peer's nic");
    let to = ep
        .connect(nic, RECV_EP, KEY, Some(Duration::from_secs(60)))
        .expect("connect")
        .expect("connected");
    bad_sends(&ep, to, &dir);
    let mut reqs = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let segs = places.segments(i, m);
        // SAFETY: the places live until every send completed (below).
        let r = unsafe { ep.isend(&segs, to, 0x1000 + i as u64, 0, false) }.expect("send");
        reqs.push(r);
    }
    for (i, r) in reqs.into_iter().enumerate() {
        let c = ep.wait(r, WAIT).expect("send completes");
        assert_eq!(c.status.code, omx_proto::StatusCode::Success, "send {i}");
    }
    // The receiver says when it has everything (our endpoint must stay until then).
    let mut done = [0u8; 1];
    let seg = Segment::memory(done.as_mut_ptr(), 1);
    // SAFETY: `done` outlives the wait.
    let r = unsafe { ep.irecv(&[seg], 0xd0e, !0, 0) }.unwrap();
    ep.wait(r, WAIT).expect("receiver's end");
    println!("typed sender ok: {} messages", msgs.len());
}

fn receiver() {
    let dir = tempdir("recv");
    let msgs = messages(1);
    let mut places = Places::new(&msgs, &dir, "sink");
    let ep = open_endpoint(RECV_EP);
    // Receives whose segments cannot be written fail at post time.
    let ro = File::open(dir.join("sink")).unwrap();
    let bad = [
        (Segment::file(ro.as_raw_fd(), 0, 10), "read-only file"),
        (Segment::file(-1, 0, 10), "no descriptor"),
        (Segment::process(i32::MAX as u32, 4096, 10), "no process"),
    ];
    for (seg, what) in bad {
        // SAFETY: refused before anything is lent.
        let r = unsafe { ep.irecv(&[seg], BAD_MATCH, !0, 0) };
        assert!(matches!(r, Err(Error::Segment(_))), "{what}: {r:?}");
    }
    let mut sink = [0u8; 64];
    // SAFETY: `sink` outlives the request (cancelled below).
    let bad_req =
        unsafe { ep.irecv(&[Segment::memory(sink.as_mut_ptr(), 64)], BAD_MATCH, !0, 0) }.unwrap();
    let mut reqs = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let segs = places.segments(i, m);
        // SAFETY: the places live until every receive completed (below).
        let r = unsafe { ep.irecv(&segs, 0x1000 + i as u64, !0, 0) }.expect("receive");
        reqs.push(r);
    }
    let mut from = None;
    for (i, r) in reqs.into_iter().enumerate() {
        let c = ep.wait(r, WAIT).expect("receive completes");
        assert_eq!(c.status.code, omx_proto::StatusCode::Success, "receive {i}");
        assert_eq!(c.status.xfer_length as usize, msgs[i].len, "receive {i}");
        from = c.status.source;
        places.check(i, &msgs[i]);
    }
    // Messages from one sender match in order: had a refused send gone out, it
    // would have matched before the first good one.
    assert!(ep.test(bad_req).is_none(), "a refused send arrived");
    assert!(ep.cancel(bad_req).unwrap());
    let mut b = [0u8; 1];
    let seg = Segment::memory(b.as_mut_ptr(), 1);
    // SAFETY: `b` outlives the wait.
    let r = unsafe { ep.isend(&[seg], from.expect("sender"), 0xd0e, 0, false) }.unwrap();
    let c = ep.wait(r, WAIT).expect("end sent");
    assert_eq!(c.status.code, omx_proto::StatusCode::Success, "end sent");
    let c = ep.counters();
    println!(
        "paths: recv_local_eager={} recv_local_pushed={} local_copy_refused={} recv_pull_reply={}",
        c.recv_local_eager, c.recv_local_pushed, c.local_copy_refused, c.recv_pull_reply
    );
    println!("typed receiver ok: {} messages", msgs.len());
}

/// A private directory, removed on drop (also when the peer panics).
struct TempDir(std::path::PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir(what: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("omx-typed-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

#[test]
fn peer_entry() {
    match std::env::var(ROLE).ok().as_deref() {
        Some("recv") => receiver(),
        Some(r) if r.starts_with("send ") => sender(&r[5..]),
        _ => {}
    }
}

/// The receiver's counter `name` (its "paths:" line).
fn path_count(out: &str, name: &str) -> u64 {
    let line = out
        .lines()
        .find_map(|l| l.split_once("paths: "))
        .expect("paths line")
        .1;
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .expect("counter")
        .parse()
        .unwrap()
}

/// Runs the receiver in host `recv_host` and the sender in `send_host`; returns the
/// receiver's output.
fn exchange(hosts: &Hosts, recv_host: usize, send_host: usize, env: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    let args = ["--exact", "peer_entry", "--nocapture", "--test-threads=1"];
    let peer = format!("send h{recv_host}:0");
    let (mut renv, mut senv) = (env.to_vec(), env.to_vec());
    renv.push((ROLE, "recv"));
    senv.push((ROLE, &peer));
    let mut r = hosts.spawn(recv_host, "receiver", exe, &args, &renv);
    let mut s = hosts.spawn(send_host, "sender", exe, &args, &senv);
    s.finish(Duration::from_secs(300));
    r.finish(Duration::from_secs(300));
    let report = common::reports(&[&r, &s]);
    assert!(r.succeeded() && s.succeeded(), "{report}");
    assert!(r.stdout().contains("typed receiver ok"), "{report}");
    assert!(s.stdout().contains("typed sender ok"), "{report}");
    assert_eq!(
        s.stdout().matches("refused as expected").count(),
        4,
        "{report}"
    );
    r.stdout()
}

#[test]
fn typed_segments_between_two_hosts() {
    if common::skip() {
        return;
    }
    let hosts = Hosts::up(2, 1500);
    let out = exchange(&hosts, 0, 1, &[]);
    // Large messages were pulled over the wire into the typed segments.
    assert!(path_count(&out, "recv_pull_reply") > 0, "{out}");
}

#[test]
fn typed_segments_under_injected_faults() {
    if common::skip() {
        return;
    }
    let hosts = Hosts::up(2, 9000);
    let _ = exchange(
        &hosts,
        0,
        1,
        &[
            ("OMX_FAULTS", "loss:0.02,dup:0.02,reorder:0.05,seed:7"),
            ("OMX_RESEND_DELAY_MS", "20"),
            ("OMX_PULL_RESEND_DELAY_MS", "40"),
        ],
    );
}

/// Two processes of one host: eager messages through the shared-memory rings, large
/// ones pushed through them (typed segments have no address to copy across).
#[test]
fn typed_segments_between_processes_of_one_host() {
    if common::skip() {
        return;
    }
    let hosts = Hosts::up(2, 1500);
    let out = exchange(&hosts, 0, 0, &[]);
    assert!(path_count(&out, "recv_local_eager") > 0, "{out}");
    // Large ones pushed, without giving up cross-process copies for the partner.
    assert!(path_count(&out, "recv_local_pushed") > 0, "{out}");
    assert_eq!(path_count(&out, "local_copy_refused"), 0, "{out}");
    assert_eq!(path_count(&out, "recv_pull_reply"), 0, "{out}");
}
