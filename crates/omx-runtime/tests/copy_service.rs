//! The host-wide copy service with real processes: copies within and between
//! processes, the access rule, malformed entries, the bound of outstanding bytes and
//! a client dying mid-copy. The service runs on a thread of the test process; other
//! clients are this test binary run again in a child mode (`child_entry`).

use omx_runtime::copy_service::client::ServiceClient;
use omx_runtime::copy_service::{Service, ServiceConfig, Stats};
use omx_runtime::memcpy::MemcpyError;
use omx_transport::copyring::{self, status, CopyRing, Request};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHILD_MODE: &str = "OMX_COPY_TEST_CHILD";

struct Running {
    path: PathBuf,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    _dir: TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start(max_bytes: u64) -> Running {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "omx-copyd-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    // Reachable by the child that becomes another user.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("copyd.sock");
    let svc = Service::bind(ServiceConfig {
        socket: path.clone(),
        cpu: Some(0),
        max_bytes,
        verbose: false,
    })
    .unwrap();
    let (stats, stop) = (svc.stats.clone(), svc.stopper());
    std::thread::spawn(move || svc.run());
    Running {
        path,
        stats,
        stop,
        _dir: TempDir(dir),
    }
}

/// Waits (bounded) for `cond`, which an event of the service makes true.
fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn wait_cookie(c: &ServiceClient, cookie: u64) -> Result<(), MemcpyError> {
    let end = Instant::now() + Duration::from_secs(60);
    while !c.test(cookie)? {
        assert!(Instant::now() < end, "copy {cookie} never completed");
        std::thread::yield_now();
    }
    Ok(())
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// This binary in a child mode; its first stdout line is returned.
fn child(mode: &str, extra: &[(&str, String)]) -> (Child, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD_MODE, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut ch = cmd.spawn().unwrap();
    // The test harness prints its own lines too: the child's are marked.
    let mut out = BufReader::new(ch.stdout.take().unwrap());
    let mut line = String::new();
    let said = loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            let _ = ch.wait();
            panic!("child said nothing");
        }
        // ("test child_entry ... " precedes the first one on its line.)
        if let Some((_, said)) = line.trim().split_once("OUT ") {
            break said.to_string();
        }
    };
    // Keep the pipe open (and drained) for the child's later lines.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (ch, said)
}

/// The child side: `hold` keeps a patterned buffer until stdin closes and prints its
/// address; `die` posts a long copy to the service and aborts mid-copy; `stranger`
/// becomes another user and names pid 1.
#[test]
fn child_entry() {
    let Ok(mode) = std::env::var(CHILD_MODE) else {
        return;
    };
    let say = |s: String| {
        let mut o = std::io::stdout();
        writeln!(o, "OUT {s}").unwrap();
        o.flush().unwrap();
    };
    match mode.as_str() {
        "hold" => {
            let buf = pattern(3 << 20, 77);
            say(format!("{}", buf.as_ptr() as usize));
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
            drop(buf);
        }
        "die" => {
            let c = ServiceClient::connect(Path::new(&std::env::var("SOCK").unwrap())).unwrap();
            let src = vec![1u8; 64 << 20];
            let mut dst = vec![0u8; 64 << 20];
            for _ in 0..4 {
                c.post(dst.as_mut_ptr() as usize, src.as_ptr() as usize, src.len())
                    .unwrap();
            }
            say("posted".into());
            std::process::abort();
        }
        "stranger" => {
            // SAFETY: plain syscalls; this process only exists for this check.
            unsafe {
                assert_eq!(libc::setgid(65534), 0);
                assert_eq!(libc::setuid(65534), 0);
            }
            let c = ServiceClient::connect(Path::new(&std::env::var("SOCK").unwrap())).unwrap();
            let mut dst = vec![0u8; 4096];
            let k = c
                .post_between(0, dst.as_mut_ptr() as u64, 1, 4096, 4096)
                .unwrap();
            let r = wait_cookie(&c, k);
            say(format!("{r:?}"));
        }
        m => panic!("unknown child mode {m}"),
    }
}

#[test]
fn copies_within_and_between_processes() {
    let s = start(256 << 20);
    let c = ServiceClient::connect(&s.path).unwrap();
    // Within this process, several sizes, in order.
    let mut cookies = vec![];
    let srcs: Vec<Vec<u8>> = [0usize, 1, 4095, 300_000, 5 << 20]
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u8))
        .collect();
    let mut dsts: Vec<Vec<u8>> = srcs.iter().map(|v| vec![0u8; v.len()]).collect();
    for (s, d) in srcs.iter().zip(dsts.iter_mut()) {
        cookies.push(
            c.post(d.as_mut_ptr() as usize, s.as_ptr() as usize, s.len())
                .unwrap(),
        );
    }
    assert!(cookies.windows(2).all(|w| w[1] == w[0] + 1));
    wait_cookie(&c, *cookies.last().unwrap()).unwrap();
    for k in &cookies {
        assert_eq!(c.test(*k), Ok(true), "earlier cookies complete first");
    }
    assert_eq!(srcs, dsts);
    assert_eq!(
        c.test(cookies.last().unwrap() + 1),
        Err(MemcpyError::UnknownCookie)
    );

    // From another process's memory into ours, and from ours into it and back.
    let (mut holder, addr) = child("hold", &[]);
    let pid = holder.id();
    let addr: u64 = addr.parse().unwrap();
    let mut got = vec![0u8; 3 << 20];
    let k = c
        .post_between(0, got.as_mut_ptr() as u64, pid, addr, got.len() as u64)
        .unwrap();
    wait_cookie(&c, k).unwrap();
    assert_eq!(got, pattern(3 << 20, 77));
    let mine = pattern(1 << 20, 5);
    let k = c
        .post_between(pid, addr + 4096, 0, mine.as_ptr() as u64, mine.len() as u64)
        .unwrap();
    wait_cookie(&c, k).unwrap();
    let mut back = vec![0u8; 1 << 20];
    let k = c
        .post_between(0, back.as_mut_ptr() as u64, pid, addr + 4096, 1 << 20)
        .unwrap();
    wait_cookie(&c, k).unwrap();
    assert_eq!(back, mine);
    // Unmapped memory: the copy fails, later ones still run.
    let k = c
        .post_between(0, got.as_mut_ptr() as u64, pid, 8, 4096)
        .unwrap();
    assert_eq!(wait_cookie(&c, k), Err(MemcpyError::Fault));
    drop(holder.stdin.take());
    holder.wait().unwrap();
    let k = c
        .post_between(0, got.as_mut_ptr() as u64, pid, addr, 16)
        .unwrap();
    assert_eq!(
        wait_cookie(&c, k),
        Err(MemcpyError::Fault),
        "the process is gone"
    );
    assert!(s.stats.failed.load(Ordering::Relaxed) >= 2);
}

#[test]
fn a_process_of_another_user_is_refused() {
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("skipped: needs root to become another user");
        return;
    }
    let s = start(256 << 20);
    let (mut ch, verdict) = child("stranger", &[("SOCK", s.path.display().to_string())]);
    assert_eq!(verdict, "Err(Fault)", "pid 1 is root's: refused");
    ch.wait().unwrap();
    assert_eq!(s.stats.refused.load(Ordering::Relaxed), 1);
}

#[test]
fn malformed_entries_and_too_many_bytes_are_refused_and_counted() {
    let s = start(1 << 20);
    let sock = copyring::seqpacket_connect(&s.path).unwrap();
    let (ring, fd) = CopyRing::create(8).unwrap();
    copyring::send_fd(sock.as_raw_fd(), b"OMXCOPY1", fd.as_raw_fd()).unwrap();
    let mut reply = [0u8; 16];
    let (n, _) = copyring::recv_fd(sock.as_raw_fd(), &mut reply).unwrap();
    assert_eq!((n, reply[0]), (9, 0));
    assert_eq!(u64::from_le_bytes(reply[1..9].try_into().unwrap()), 1 << 20);
    let src = vec![9u8; 700 << 10];
    let mut dst = vec![0u8; 1400 << 10];
    let (s0, d0) = (src.as_ptr() as u64, dst.as_mut_ptr() as u64);
    let reqs = [
        (7, d0, s0, 16),                      // cookie out of sequence
        (2, 0, s0, 16),                       // null destination
        (3, d0, d0 + 8, 64),                  // overlap
        (4, d0, s0, 2 << 20),                 // longer than the bound
        (5, d0, s0, 700 << 10),               // fine
        (6, d0 + (700 << 10), s0, 700 << 10), // fine alone, over the bound with 5
    ];
    for (cookie, dst, src, len) in reqs {
        assert!(ring.try_post(&Request {
            cookie,
            dst_pid: 0,
            src_pid: 0,
            dst,
            src,
            len,
        }));
    }
    copyring::send_message(sock.as_raw_fd(), &[1]).unwrap();
    let mut got = vec![];
    let end = Instant::now() + Duration::from_secs(60);
    while got.len() < reqs.len() {
        assert!(Instant::now() < end, "completions missing: {got:?}");
        match ring.reap() {
            Some(c) => got.push(c),
            None => std::thread::yield_now(),
        }
    }
    use status::*;
    assert_eq!(
        got,
        vec![
            (7, MALFORMED),
            (2, MALFORMED),
            (3, MALFORMED),
            (4, MALFORMED),
            (5, DONE),
            (6, OVER_LIMIT)
        ]
    );
    assert_eq!(s.stats.malformed.load(Ordering::Relaxed), 4);
    assert_eq!(s.stats.over_limit.load(Ordering::Relaxed), 1);
    assert!(dst[..700 << 10].iter().all(|&b| b == 9));
    // Nonsense counters: the client is dropped, the service goes on.
    for _ in 0..20 {
        ring.try_post(&Request::default());
    }
    drop(sock);
    wait_for("the client to be dropped", || {
        s.stats.clients.load(Ordering::Relaxed) == 0
    });
    // A well-behaved client of the same bound: long copies go in pieces.
    let c = ServiceClient::connect(&s.path).unwrap();
    let big = pattern(5 << 20, 3);
    let mut out = vec![0u8; 5 << 20];
    let k = c
        .post(out.as_mut_ptr() as usize, big.as_ptr() as usize, big.len())
        .unwrap();
    wait_cookie(&c, k).unwrap();
    assert_eq!(out, big);
}

#[test]
fn a_client_dying_mid_copy_leaves_nothing_behind() {
    let s = start(256 << 20);
    let (mut ch, line) = child("die", &[("SOCK", s.path.display().to_string())]);
    assert_eq!(line, "posted");
    let _ = ch.wait();
    wait_for("the dead client to be dropped", || {
        s.stats.dropped.load(Ordering::Relaxed) == 1 && s.stats.clients.load(Ordering::Relaxed) == 0
    });
    // The service still serves others.
    let c = ServiceClient::connect(&s.path).unwrap();
    let src = pattern(100_000, 1);
    let mut dst = vec![0u8; 100_000];
    let k = c
        .post(dst.as_mut_ptr() as usize, src.as_ptr() as usize, src.len())
        .unwrap();
    wait_cookie(&c, k).unwrap();
    assert_eq!(dst, src);
}

#[test]
fn a_dead_service_fails_pending_copies_and_later_ones_run_inline() {
    let s = start(256 << 20);
    let c = ServiceClient::connect(&s.path).unwrap();
    s.stop.store(true, Ordering::Relaxed);
    wait_for("the service to stop", || !s.path.exists());
    // Its socket closes when the service value is dropped with its thread.
    let src = pattern(10_000, 2);
    let mut dst = vec![0u8; 10_000];
    let k = c
        .post(dst.as_mut_ptr() as usize, src.as_ptr() as usize, src.len())
        .unwrap();
    let r = wait_cookie(&c, k);
    assert!(r.is_ok() || r == Err(MemcpyError::Fault), "{r:?}");
    let k2 = c
        .post(dst.as_mut_ptr() as usize, src.as_ptr() as usize, src.len())
        .unwrap();
    wait_cookie(&c, k2).unwrap();
    assert_eq!(dst, src);
}
