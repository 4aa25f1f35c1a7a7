//! The shared-memory transport through its public API: the sleep / doorbell
//! protocol under stress (no lost wake-up), and a cross-process exchange.

use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use omx_transport::{Inbox, InboxParams, Outbox, OutboxError, SenderId};

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        TempDir(std::env::temp_dir().join(format!(
            "omxshm-itest-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn wait_readable(fd: RawFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
    r == 1
}

fn params() -> InboxParams {
    InboxParams {
        slots: 4,
        ring_bytes: 16 * 1024,
        session: 1,
        key: 2,
        nic_id: 3,
        endpoint: 4,
    }
}

fn sender(endpoint: u8) -> SenderId {
    SenderId {
        nic_id: 3,
        endpoint,
        session: 5,
        pid: std::process::id(),
    }
}

/// The owner sleeps whenever it finds nothing; two senders push bursts with
/// pauses. A lost wake-up shows as a sleep that times out while a record was
/// already pending.
#[test]
fn sleeping_owner_never_misses_a_doorbell() {
    const PER_SENDER: u64 = 20_000;
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "sleepy", &params()).unwrap();
    let senders: Vec<_> = (0..2u8)
        .map(|s| {
            let mut out = Outbox::open(&d.0, "sleepy", sender(s)).unwrap();
            std::thread::spawn(move || {
                let mut seq = 0u64;
                let mut x = 0x1234_5678u64 + u64::from(s);
                while seq < PER_SENDER {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let burst = (1 + x % 8).min(PER_SENDER - seq);
                    for _ in 0..burst {
                        while !out.try_push(8, |b| b.copy_from_slice(&seq.to_le_bytes())) {
                            out.doorbell();
                            std::thread::yield_now();
                        }
                        seq += 1;
                    }
                    out.doorbell();
                    match x % 16 {
                        0 => std::thread::sleep(Duration::from_micros(50)),
                        1..=4 => std::thread::yield_now(),
                        _ => {}
                    }
                }
                out
            })
        })
        .collect();
    let mut next = [0u64; 4];
    let mut sleeps = 0u64;
    let start = Instant::now();
    while next.iter().sum::<u64>() < 2 * PER_SENDER {
        let n = inbox.poll(32, |_, id, b| {
            let seq = u64::from_le_bytes(b.try_into().unwrap());
            assert_eq!(seq, next[id.endpoint as usize]);
            next[id.endpoint as usize] += 1;
            true
        });
        if n > 0 {
            continue;
        }
        inbox.set_sleeping(true);
        if !inbox.has_pending() {
            sleeps += 1;
            if !wait_readable(inbox.wake_fd(), Duration::from_secs(5)) {
                assert!(
                    !inbox.has_pending(),
                    "lost wake-up: records pending after 5 s"
                );
                assert!(start.elapsed() < Duration::from_secs(120), "stuck");
            }
        }
        inbox.set_sleeping(false);
        inbox.drain_wake();
    }
    for s in senders {
        let out = s.join().unwrap();
        assert!(out.is_drained());
    }
    assert_eq!(next, [PER_SENDER, PER_SENDER, 0, 0]);
    assert!(sleeps > 0, "the owner did sleep");
    assert_eq!(inbox.corrupt(), 0);
    assert_eq!(inbox.reap().len(), 2);
}

/// Two processes: the child opens an outbox into the parent's inbox and its
/// own inbox, then echoes every record back until told to stop.
#[test]
fn echo_between_processes() {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "parent", &params()).unwrap();
    let dir = d.0.clone();
    // SAFETY: the child runs only this crate's code and leaves with `_exit`.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        let code = std::panic::catch_unwind(move || {
            let mut own = Inbox::create(&dir, "child", &params()).unwrap();
            let mut out = Outbox::open(&dir, "parent", sender(1)).unwrap();
            assert!(out.try_push(0, |_| {}));
            let mut stop = false;
            let mut echo = Vec::new();
            while !stop {
                own.poll(16, |_, _, b| {
                    if b.is_empty() {
                        stop = true;
                    } else {
                        echo.push(b.iter().map(|x| x ^ 0xff).collect::<Vec<u8>>());
                    }
                    true
                });
                for e in echo.drain(..) {
                    while !out.try_push(e.len(), |b| b.copy_from_slice(&e)) {}
                }
            }
            own.close();
            0
        })
        .unwrap_or(1);
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(code) };
    }
    let mut hello = false;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !hello {
        inbox.poll(1, |_, id, b| {
            assert!(b.is_empty());
            assert_eq!(id.pid, child as u32);
            hello = true;
            true
        });
        assert!(Instant::now() < deadline);
    }
    let mut out = loop {
        match Outbox::open(&d.0, "child", sender(0)) {
            Ok(o) => break o,
            Err(OutboxError::NotFound) => std::thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(out.receiver().pid, child as u32);
    for i in 1..2000usize {
        let len = i % 700 + 1;
        let msg: Vec<u8> = (0..len).map(|j| (i + j) as u8).collect();
        while !out.try_push(len, |b| b.copy_from_slice(&msg)) {}
        let mut got = false;
        while !got {
            inbox.poll(1, |_, _, b| {
                assert_eq!(b.len(), len);
                assert!(b.iter().zip(&msg).all(|(x, y)| *x == y ^ 0xff));
                got = true;
                true
            });
            assert!(Instant::now() < deadline, "no echo");
        }
    }
    assert!(out.try_push(0, |_| {}));
    let mut status = 0;
    // SAFETY: our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    assert!(!out.receiver_alive());
    // The child closed its outbox when it ended.
    assert_eq!(inbox.reap().len(), 1);
}
