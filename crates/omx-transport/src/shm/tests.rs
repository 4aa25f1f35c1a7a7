//! Unit tests of the shared-memory transport (integration tests: tests/shm.rs).

use super::layout::*;
use super::*;
use std::fs;
use std::io::{self, Read};
use std::os::fd::RawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

/// A unique directory under the system temp dir, removed on drop (never
/// under /dev/shm/omx-*). Not created here: `Inbox::create` makes it.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub(crate) fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        TempDir(std::env::temp_dir().join(format!(
            "omxshm-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn params(slots: usize, ring_bytes: usize) -> InboxParams {
    InboxParams {
        slots,
        ring_bytes,
        session: 0xabcd,
        key: 0x5eed,
        nic_id: 0x0200_0000_4b01,
        endpoint: 3,
    }
}

fn me(endpoint: u8) -> SenderId {
    SenderId {
        nic_id: 0x0200_0000_4b02,
        endpoint,
        session: 99,
        pid: std::process::id(),
    }
}

fn fill(seq: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
}

fn check(seq: u64, buf: &[u8]) -> bool {
    buf.iter()
        .enumerate()
        .all(|(i, &b)| b == (seq as u8).wrapping_mul(31).wrapping_add(i as u8))
}

fn fork_child(f: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child only runs `f` (our own code: file and mmap calls,
    // allocations, which glibc makes fork-safe) and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(99);
        // SAFETY: terminates the child without running the parent's
        // destructors or atexit handlers.
        unsafe { libc::_exit(code) };
    }
    pid
}

fn wait_child(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    libc::WEXITSTATUS(status)
}

fn readable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    r == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn create_modes_header_and_receiver_info() {
    let d = TempDir::new();
    let dir = d.0.join("sub");
    let p = params(4, 8192);
    let inbox = Inbox::create(&dir, "ep3", &p).unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(inbox.path()), 0o600);
    let wake = dir.join("ep3.wake");
    assert!(fs::metadata(&wake).unwrap().file_type().is_fifo());
    assert_eq!(mode(&wake), 0o600);
    let layout = Layout::new(4, 8192).unwrap();
    assert_eq!(
        fs::metadata(inbox.path()).unwrap().len(),
        layout.size as u64
    );
    assert_eq!(layout.data, 8192);

    let out = Outbox::open(&dir, "ep3", me(1)).unwrap();
    assert_eq!(
        out.receiver(),
        ReceiverInfo {
            pid: std::process::id(),
            session: p.session,
            key: p.key,
            nic_id: p.nic_id,
            endpoint: p.endpoint,
        }
    );
    assert_eq!(out.max_record(), 2048);
    assert_eq!(out.free_bytes(), 8192);
    assert!(out.receiver_alive());

    // A stale file of the same name is replaced.
    drop(out);
    let path = inbox.path().to_path_buf();
    std::mem::forget(inbox); // like a crash: nothing unlinked
    let inbox = Inbox::create(&dir, "ep3", &p).unwrap();
    assert!(path.exists());
    inbox.close();
    assert!(!path.exists());
    assert!(!wake.exists());
}

#[test]
fn invalid_parameters() {
    let d = TempDir::new();
    for (slots, ring) in [(0, 4096), (65, 4096), (4, 3000), (4, 2048), (4, 1 << 31)] {
        let e = Inbox::create(&d.0, "x", &params(slots, ring)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{slots} x {ring}");
    }
    for name in ["", ".", "..", "a/b", "x.wake"] {
        let e = Inbox::create(&d.0, name, &params(1, 4096)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{name:?}");
    }
    assert!(matches!(
        Outbox::open(&d.0, "none", me(0)),
        Err(OutboxError::NotFound)
    ));
    assert!(matches!(
        Outbox::open(&d.0.join("nodir"), "none", me(0)),
        Err(OutboxError::NotFound)
    ));
}

#[test]
fn round_trip_random_sizes_with_wraparound() {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "rt", &params(2, 4096)).unwrap();
    let mut out = Outbox::open(&d.0, "rt", me(7)).unwrap();
    let max = out.max_record();
    assert_eq!(max, 1024);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut sent, mut got) = (0u64, 0u64);
    let mut lens = std::collections::VecDeque::new();
    let mut bytes = 0usize;
    while got < 20_000 {
        // Push a random number of records (until full), then poll a random number.
        for _ in 0..rng.below(12) {
            let len = if rng.below(8) == 0 {
                max
            } else {
                rng.below(max + 1)
            };
            let seq = sent;
            if !out.try_push(len, |b| {
                assert_eq!(b.len(), len);
                fill(seq, b)
            }) {
                break;
            }
            lens.push_back(len);
            bytes += record_size(len);
            sent += 1;
        }
        let want = rng.below(10);
        let n = inbox.poll(want, |slot, id, b| {
            assert_eq!(slot, out.slot());
            assert_eq!(*id, me(7));
            assert_eq!(Some(b.len()), lens.pop_front());
            assert!(check(got, b), "record {got} corrupted");
            got += 1;
            true
        });
        assert!(n <= want);
    }
    assert!(bytes > 100 * 4096, "wrapped many times");
    assert_eq!(inbox.corrupt(), 0);
    // Oversized records never fit.
    assert!(!out.try_push(max + 1, |_| unreachable!()));
}

#[test]
fn back_pressure_keeps_the_record() {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "bp", &params(2, 4096)).unwrap();
    let mut a = Outbox::open(&d.0, "bp", me(1)).unwrap();
    let mut b = Outbox::open(&d.0, "bp", me(2)).unwrap();
    for i in 0..3u8 {
        assert!(a.try_push(1, |d| d[0] = i));
        assert!(b.try_push(1, |d| d[0] = 10 + i));
    }
    assert!(inbox.has_pending());
    // Refuse a's second record: a is skipped for the rest of the call, b is not.
    let mut seen = Vec::new();
    let n = inbox.poll(100, |slot, _, d| {
        if slot == a.slot() && d[0] == 1 {
            return false;
        }
        seen.push(d[0]);
        true
    });
    assert_eq!(n, 4);
    assert_eq!(seen, [0, 10, 11, 12]);
    let mut seen = Vec::new();
    inbox.poll(100, |_, _, d| {
        seen.push(d[0]);
        true
    });
    assert_eq!(seen, [1, 2]);
    assert!(!inbox.has_pending());
    assert_eq!(inbox.poll(100, |_, _, _| true), 0);
}

#[test]
fn full_ring_refuses_then_accepts_after_drain() {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "full", &params(1, 4096)).unwrap();
    let mut out = Outbox::open(&d.0, "full", me(1)).unwrap();
    let mut n = 0u64;
    while out.try_push(100, |b| fill(n, b)) {
        n += 1;
    }
    assert_eq!(n, 4096 / record_size(100) as u64);
    assert!(out.free_bytes() < record_size(100) + RECORD_HEADER);
    // 39 records of 104 bytes leave 40 bytes at the end of the ring: after
    // consuming two, the next record needs those 40 (padding) + 104 + 8
    // (the end mark after it); after consuming one, it does not fit.
    let mut got = 0u64;
    for expect_fit in [false, true] {
        assert_eq!(
            inbox.poll(1, |_, _, b| {
                assert!(check(got, b));
                got += 1;
                true
            }),
            1
        );
        assert_eq!(out.try_push(100, |b| fill(n, b)), expect_fit);
    }
    n += 1;
    while got < n {
        inbox.poll(usize::MAX, |_, _, b| {
            assert!(check(got, b));
            got += 1;
            true
        });
    }
    assert!(out.is_drained());
    assert!(out.try_push(out.max_record(), |_| {}));
    assert_eq!(inbox.poll(10, |_, _, b| b.len() == 1024), 1);
    assert_eq!(inbox.corrupt(), 0);
}

/// Producer and consumer on two threads, the producer's payloads made of
/// the headers (and end marks) that later laps would have at their
/// offsets: a record read before its header is published, or a stale
/// word taken for a header, shows as a wrong sequence number or length.
#[test]
fn threads_with_poisoned_payloads() {
    const N: u64 = 1_000_000;
    const RING: u64 = 16 * 1024;
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "poison", &params(1, RING as usize)).unwrap();
    let mut out = Outbox::open(&d.0, "poison", me(1)).unwrap();
    let producer = std::thread::spawn(move || {
        let mut seq = 0u64;
        while seq < N {
            let len = 8 * (1 + (seq % 37) as usize);
            let at = out.tail;
            let pushed = out.try_push(len, |b| {
                b[..8].copy_from_slice(&seq.to_le_bytes());
                for (w, chunk) in b[8..].chunks_exact_mut(8).enumerate() {
                    // This word's position, one to three laps later.
                    let p = at + 16 + 8 * w as u64 + RING * (1 + seq % 3);
                    let v = if w % 4 == 3 {
                        end_mark(p)
                    } else {
                        header(p, 8 * (w % 5) as u32)
                    };
                    chunk.copy_from_slice(&v.to_ne_bytes());
                }
            });
            if pushed {
                seq += 1;
            } else {
                std::thread::yield_now();
            }
        }
        out
    });
    let mut next = 0u64;
    while next < N {
        let n = inbox.poll(64, |_, _, b| {
            let seq = u64::from_le_bytes(b[..8].try_into().unwrap());
            assert_eq!(seq, next);
            assert_eq!(b.len(), 8 * (1 + (seq % 37) as usize));
            next += 1;
            true
        });
        assert_eq!(inbox.corrupt(), 0);
        if n == 0 {
            std::thread::yield_now();
        }
    }
    let out = producer.join().unwrap();
    assert!(out.is_drained());
    assert!(!inbox.has_pending());
}

#[test]
fn producer_and_consumer_threads_million_records() {
    const N: u64 = 1_000_000;
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "mt", &params(4, 64 * 1024)).unwrap();
    let mut out = Outbox::open(&d.0, "mt", me(1)).unwrap();
    let producer = std::thread::spawn(move || {
        let mut seq = 0u64;
        let mut spins = 0u32;
        while seq < N {
            let len = 8 + (seq % 57) as usize;
            if out.try_push(len, |b| {
                b[..8].copy_from_slice(&seq.to_le_bytes());
                fill(seq, &mut b[8..]);
            }) {
                seq += 1;
                spins = 0;
            } else {
                spins += 1;
                if spins % 64 == 0 {
                    std::thread::yield_now();
                }
                std::hint::spin_loop();
            }
        }
        out
    });
    let mut next = 0u64;
    let mut idle = 0u32;
    while next < N {
        let n = inbox.poll(64, |_, _, b| {
            let seq = u64::from_le_bytes(b[..8].try_into().unwrap());
            assert_eq!(seq, next);
            assert_eq!(b.len(), 8 + (seq % 57) as usize);
            assert!(check(seq, &b[8..]));
            next += 1;
            true
        });
        if n == 0 {
            idle += 1;
            if idle % 64 == 0 {
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    }
    let out = producer.join().unwrap();
    assert!(out.is_drained());
    assert_eq!(inbox.corrupt(), 0);
}

#[test]
fn slots_are_served_fairly() {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "fair", &params(8, 4096)).unwrap();
    let mut outs: Vec<Outbox> = (0..4)
        .map(|i| Outbox::open(&d.0, "fair", me(i)).unwrap())
        .collect();
    for o in &mut outs {
        for _ in 0..20 {
            assert!(o.try_push(8, |_| {}));
        }
    }
    // One record per call: every sender gets a turn in round-robin order.
    let mut order = Vec::new();
    for _ in 0..8 {
        inbox.poll(1, |slot, id, _| {
            assert_eq!(id.endpoint as usize, slot);
            order.push(slot);
            true
        });
    }
    assert_eq!(order, [0, 1, 2, 3, 0, 1, 2, 3]);
    // With a budget of 10 per call, no sender is starved over 4 calls.
    let mut count = [0usize; 4];
    for _ in 0..4 {
        inbox.poll(10, |slot, _, _| {
            count[slot] += 1;
            true
        });
    }
    assert!(count.iter().all(|&c| c >= 5), "{count:?}");
    assert_eq!(
        inbox.sender(2),
        Some(me(2)),
        "identity visible to the owner"
    );
}

#[test]
fn dropped_outbox_is_reaped_after_draining_and_slot_reused() {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "reap", &params(2, 4096)).unwrap();
    let mut a = Outbox::open(&d.0, "reap", me(1)).unwrap();
    let b = Outbox::open(&d.0, "reap", me(2)).unwrap();
    assert!(matches!(
        Outbox::open(&d.0, "reap", me(3)),
        Err(OutboxError::Full)
    ));
    let slot_a = a.slot();
    for i in 0..5u8 {
        assert!(a.try_push(1, |d| d[0] = i));
    }
    drop(a);
    assert!(inbox.reap().is_empty(), "not drained yet");
    let mut seen = Vec::new();
    inbox.poll(100, |_, _, d| {
        seen.push(d[0]);
        true
    });
    assert_eq!(
        seen,
        [0, 1, 2, 3, 4],
        "records of a closed sender still arrive"
    );
    assert_eq!(inbox.reap(), [(slot_a, me(1))]);
    assert!(inbox.reap().is_empty(), "reported once");
    assert_eq!(inbox.sender(slot_a), None);

    let mut c = Outbox::open(&d.0, "reap", me(4)).unwrap();
    assert_eq!(c.slot(), slot_a);
    assert!(c.is_drained());
    assert!(c.try_push(3, |d| d.copy_from_slice(b"new")));
    let mut got = Vec::new();
    inbox.poll(10, |slot, id, d| {
        got.push((slot, *id, d.to_vec()));
        true
    });
    assert_eq!(got, [(slot_a, me(4), b"new".to_vec())]);
    drop(b);
    drop(c);
    let mut reaped = inbox.reap();
    reaped.sort_by_key(|r| r.0);
    assert_eq!(reaped.len(), 2);
    assert_eq!(inbox.map.u64(H_ACTIVE).load(Ordering::Relaxed), 0);
}

#[test]
fn dead_sender_process_is_reaped_after_draining() {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "dead", &params(4, 4096)).unwrap();
    let dir = d.0.clone();
    let child = fork_child(|| {
        let Ok(mut out) = Outbox::open(&dir, "dead", me(9)) else {
            return 1;
        };
        for i in 0..3u8 {
            if !out.try_push(2, |d| d.copy_from_slice(&[i, 0xee])) {
                return 2;
            }
        }
        out.doorbell();
        std::mem::forget(out); // die without closing
        0
    });
    assert_eq!(wait_child(child), 0);
    let id = SenderId {
        pid: child as u32,
        ..me(9)
    };
    assert!(inbox.reap().is_empty(), "records pending");
    let mut seen = Vec::new();
    inbox.poll(10, |_, sid, d| {
        assert_eq!(*sid, id);
        seen.push(d.to_vec());
        true
    });
    assert_eq!(seen, [[0, 0xee], [1, 0xee], [2, 0xee]]);
    let reaped = inbox.reap();
    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].1, id);
    // The slot is free again.
    let o = Outbox::open(&d.0, "dead", me(1)).unwrap();
    assert_eq!(o.slot(), reaped[0].0);
}

#[test]
fn malformed_files_are_rejected() {
    let d = TempDir::new();
    let inbox = Inbox::create(&d.0, "good", &params(2, 4096)).unwrap();
    let good = fs::read(inbox.path()).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        fs::write(d.0.join(name), bytes).unwrap();
    };
    let corrupt = |name: &str| {
        let r = Outbox::open(&d.0, name, me(0));
        assert!(matches!(r, Err(OutboxError::Corrupt(_))), "{name}: {r:?}");
    };
    let mut rng = Rng(42);
    let garbage: Vec<u8> = (0..20_000).map(|_| rng.next() as u8).collect();
    write("garbage", &garbage);
    corrupt("garbage");
    write("short", &good[..100]);
    corrupt("short");
    write("truncated", &good[..good.len() / 2]);
    corrupt("truncated");
    let mut longer = good.clone();
    longer.extend_from_slice(&[0; 4096]);
    write("longer", &longer);
    corrupt("longer");
    let patch = |name: &str, off: usize, val: &[u8]| {
        let mut g = good.clone();
        g[off..off + val.len()].copy_from_slice(val);
        write(name, &g);
    };
    patch("version", H_VERSION, &7u32.to_ne_bytes());
    corrupt("version");
    patch("slots", H_SLOTS, &65u32.to_ne_bytes());
    corrupt("slots");
    patch("ring", H_RING, &4097u64.to_ne_bytes());
    corrupt("ring");
    patch("pid", H_PID, &0u32.to_ne_bytes());
    corrupt("pid");
    patch("state", H_STATE, &9u32.to_ne_bytes());
    corrupt("state");
    patch("closed", H_STATE, &HDR_CLOSED.to_ne_bytes());
    assert!(matches!(
        Outbox::open(&d.0, "closed", me(0)),
        Err(OutboxError::Closed)
    ));
    write("empty", &[]);
    assert!(matches!(
        Outbox::open(&d.0, "empty", me(0)),
        Err(OutboxError::NotFound)
    ));
    fs::create_dir(d.0.join("adir")).unwrap();
    assert!(Outbox::open(&d.0, "adir", me(0)).is_err());
}

#[test]
fn corrupt_ring_marks_the_slot_broken() {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "bad", &params(2, 4096)).unwrap();
    let mut a = Outbox::open(&d.0, "bad", me(1)).unwrap();
    let mut b = Outbox::open(&d.0, "bad", me(2)).unwrap();
    assert!(a.try_push(8, |_| {}));
    assert!(b.try_push(8, |_| {}));
    // An impossible length, with the right tag, in a's record header.
    let off = inbox.layout.ring_off(a.slot());
    inbox
        .map
        .u64(off)
        .store(header(0, 1 << 20), Ordering::Relaxed);
    let mut from = Vec::new();
    inbox.poll(10, |slot, _, _| {
        from.push(slot);
        true
    });
    assert_eq!(from, [b.slot()]);
    assert_eq!(inbox.corrupt(), 1);
    assert!(!a.receiver_alive());
    assert!(b.receiver_alive());
    assert_eq!(inbox.reap(), [(a.slot(), me(1))]);
    assert!(inbox.reap().is_empty());
    // Not polled any more, not freed while its sender lives.
    assert!(a.try_push(8, |_| {}));
    assert_eq!(inbox.poll(10, |_, _, _| true), 0);
    let slot_a = a.slot();
    drop(a);
    assert!(inbox.reap().is_empty(), "freed silently");
    let mut c = Outbox::open(&d.0, "bad", me(3)).unwrap();
    assert_eq!(c.slot(), slot_a);
    assert!(c.try_push(4, |d| d.copy_from_slice(b"good")));
    assert_eq!(inbox.poll(10, |_, id, d| *id == me(3) && d == b"good"), 1);

    // Garbage at b's head (neither a header of that position nor the end
    // mark): polled rather than slept on, and broken.
    let head_b = inbox.heads[b.slot()];
    inbox
        .map
        .u64(inbox.layout.ring_off(b.slot()) + (head_b & 4095) as usize)
        .store(0x1234, Ordering::Relaxed);
    assert!(inbox.has_pending());
    assert_eq!(inbox.poll(10, |_, _, _| true), 0);
    assert_eq!(inbox.corrupt(), 2);
    assert!(!inbox.has_pending(), "broken slots are not checked");
    assert!(!b.receiver_alive());
    assert!(c.receiver_alive());
}

/// Pushes one record of `len` bytes from a fresh sender, forges its header
/// with `forge(position of the record)` and polls: the slot must be found
/// broken, nothing delivered. `skip` records are pushed and consumed first.
fn forged(skip: usize, len: usize, forge: impl Fn(u64) -> (u64, u64)) {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "forge", &params(1, 4096)).unwrap();
    let mut out = Outbox::open(&d.0, "forge", me(1)).unwrap();
    for _ in 0..skip {
        assert!(out.try_push(8, |_| {}));
        assert_eq!(inbox.poll(1, |_, _, _| true), 1);
    }
    let at = out.tail;
    assert!(out.try_push(len, |_| {}));
    let (where_, word) = forge(at);
    inbox
        .map
        .u64(inbox.layout.ring_off(0) + (where_ & 4095) as usize)
        .store(word, Ordering::Relaxed);
    assert!(inbox.has_pending());
    assert_eq!(inbox.poll(10, |_, _, _| true), 0, "at {at}");
    assert_eq!(inbox.corrupt(), 1, "at {at}");
    assert!(!out.receiver_alive());
    assert_eq!(inbox.reap(), [(0, me(1))]);
}

#[test]
fn forged_headers_mark_the_slot_broken() {
    // Right tag, absurd lengths.
    forged(0, 8, |at| (at, header(at, 1025)));
    forged(3, 8, |at| (at, header(at, PAD_LEN - 1)));
    // Padding at offset 0 (it would skip a whole ring).
    forged(512, 8, |at| (at, header(at, PAD_LEN)));
    // A length running past the end of the ring: the record at offset 4064.
    forged(510, 8, |at| (at, header(at, 1024)));
    // The header of the same offset one lap later, or earlier: a stale
    // word, never what a sender leaves at its tail.
    forged(5, 8, |at| (at, header(at + 4096, 8)));
    forged(600, 8, |at| (at, header(at - 4096, 8)));
    // The end mark of another lap.
    forged(7, 8, |at| (at, end_mark(at + 4096)));
    // A garbage end mark after a good record: the record arrives, then
    // the slot is broken.
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "mark", &params(1, 4096)).unwrap();
    let mut out = Outbox::open(&d.0, "mark", me(1)).unwrap();
    assert!(out.try_push(8, |b| b.copy_from_slice(b"12345678")));
    inbox
        .map
        .u64(inbox.layout.ring_off(0) + 16)
        .store(0, Ordering::Relaxed);
    assert_eq!(inbox.poll(10, |_, _, b| b == b"12345678"), 1);
    assert_eq!(inbox.corrupt(), 1);
    // A closed sender whose head holds garbage: reported, counted, freed.
    let mut inbox = Inbox::create(&d.0, "closed", &params(1, 4096)).unwrap();
    let mut out = Outbox::open(&d.0, "closed", me(2)).unwrap();
    assert!(out.try_push(8, |_| {}));
    assert_eq!(inbox.poll(10, |_, _, _| true), 1);
    drop(out);
    inbox
        .map
        .u64(inbox.layout.ring_off(0) + 16)
        .store(header(16 + 4096, 8), Ordering::Relaxed);
    assert_eq!(inbox.reap(), [(0, me(2))]);
    assert_eq!(inbox.corrupt(), 1);
    assert!(Outbox::open(&d.0, "closed", me(3)).is_ok(), "slot freed");
}

/// Fills the ring with payload words that are exactly the headers a later
/// lap would have at their offsets (and the end mark of a later lap), then
/// checks at every step of the next laps, including while a record is
/// half written (from inside the `write` callback), that the owner sees
/// only published records.
#[test]
fn stale_lap_bytes_are_never_read_as_records() {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "stale", &params(1, 4096)).unwrap();
    let mut out = Outbox::open(&d.0, "stale", me(1)).unwrap();
    // Poison: every payload word at position p holds header(p + k * 4096, 8)
    // for some later lap k, or an end mark of a later lap.
    let poison = |at: u64, b: &mut [u8], k: u64| {
        for (w, chunk) in b.chunks_exact_mut(8).enumerate() {
            let p = at + 8 + 8 * w as u64 + k * 4096;
            let v = if w % 5 == 4 {
                end_mark(p)
            } else {
                header(p, (w % 3) as u32 * 8)
            };
            chunk.copy_from_slice(&v.to_ne_bytes());
        }
    };
    let mut rng = Rng(7);
    let (mut sent, mut got) = (0u64, 0u64);
    while got < 4000 {
        // A poisoned record (big, so that it covers many later headers).
        let at = out.tail;
        let k = 1 + rng.below(3) as u64;
        if out.try_push(8 * (1 + rng.below(100)), |b| poison(at, b, k)) {
            assert_eq!(inbox.poll(1, |_, _, _| true), 1);
        }
        // A data record of another alignment, checked half written.
        let len = 8 + rng.below(200);
        let seq = sent;
        let pushed = out.try_push(len, |b| {
            fill(seq, b);
            assert!(!inbox.has_pending(), "half-written record pending");
            assert_eq!(
                inbox.poll(10, |_, _, _| true),
                0,
                "half-written record read"
            );
            inbox.set_sleeping(true);
            assert!(!inbox.has_pending());
            inbox.set_sleeping(false);
        });
        if pushed {
            sent += 1;
            assert!(inbox.has_pending());
            let n = inbox.poll(10, |_, _, b| {
                assert_eq!(b.len(), len);
                assert!(check(got, b));
                got += 1;
                true
            });
            assert_eq!(n, 1);
        }
        assert!(!inbox.has_pending());
        assert_eq!(inbox.poll(10, |_, _, _| true), 0);
    }
    assert!(out.tail > 100 * 4096, "many laps");
    assert_eq!(inbox.corrupt(), 0);
}

#[test]
fn owner_close_is_seen_by_senders() {
    let d = TempDir::new();
    let inbox = Inbox::create(&d.0, "cl", &params(1, 4096)).unwrap();
    let out = Outbox::open(&d.0, "cl", me(1)).unwrap();
    assert!(out.receiver_alive());
    inbox.close();
    assert!(!out.receiver_alive());
    assert!(matches!(
        Outbox::open(&d.0, "cl", me(1)),
        Err(OutboxError::NotFound)
    ));
    assert_eq!(fs::read_dir(&d.0).unwrap().count(), 0);
}

#[test]
fn reclaim_stale_removes_dead_owners_only() {
    let d = TempDir::new();
    let live = Inbox::create(&d.0, "live", &params(1, 4096)).unwrap();
    let dir = d.0.clone();
    let child = fork_child(|| {
        let Ok(inbox) = Inbox::create(&dir, "orphan", &params(1, 4096)) else {
            return 1;
        };
        std::mem::forget(inbox);
        0
    });
    assert_eq!(wait_child(child), 0);
    assert!(d.0.join("orphan").exists());
    assert!(d.0.join("orphan.wake").exists());
    // Files that are not (complete) inboxes are left alone.
    fs::write(d.0.join("zeros"), vec![0u8; 8192]).unwrap();
    fs::write(d.0.join("tiny"), b"OMXSHMIB").unwrap();
    let mut nopid = fs::read(live.path()).unwrap();
    nopid[H_PID..H_PID + 4].copy_from_slice(&0u32.to_ne_bytes());
    fs::write(d.0.join("nopid"), &nopid).unwrap();
    fs::write(d.0.join("lock"), b"").unwrap();
    // A sender of the dead inbox sees it as closed.
    assert!(matches!(
        Outbox::open(&d.0, "orphan", me(0)),
        Err(OutboxError::Closed)
    ));

    assert_eq!(Inbox::reclaim_stale(&d.0).unwrap(), 1);
    assert!(!d.0.join("orphan").exists());
    assert!(!d.0.join("orphan.wake").exists());
    for kept in ["live", "live.wake", "zeros", "tiny", "nopid", "lock"] {
        assert!(d.0.join(kept).exists(), "{kept} kept");
    }
    assert_eq!(Inbox::reclaim_stale(&d.0).unwrap(), 0);
    assert_eq!(Inbox::reclaim_stale(&d.0.join("missing")).unwrap(), 0);
    drop(live);
}

#[test]
fn doorbell_wakes_a_sleeping_owner_only() {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "wake", &params(2, 4096)).unwrap();
    let mut out = Outbox::open(&d.0, "wake", me(1)).unwrap();
    let fd = inbox.wake_fd();
    // Polling owner: no byte written.
    assert!(out.try_push(1, |_| {}));
    out.doorbell();
    assert!(!readable(fd, 0));
    assert!(out.wake.is_none(), "FIFO not even opened");
    assert_eq!(inbox.poll(10, |_, _, _| true), 1);

    inbox.set_sleeping(true);
    assert!(!inbox.has_pending());
    assert!(out.try_push(1, |_| {}));
    assert!(inbox.has_pending());
    out.doorbell();
    out.doorbell(); // a burst rings once
    assert!(readable(fd, 1000));
    let mut buf = [0u8; 8];
    assert_eq!((&inbox.wake).read(&mut buf).unwrap(), 1);
    inbox.set_sleeping(false);
    inbox.drain_wake();
    assert!(!readable(fd, 0));
    assert_eq!(inbox.poll(10, |_, _, _| true), 1);

    // Sleeping again: the next doorbell rings again; drain empties it.
    inbox.set_sleeping(true);
    assert!(out.try_push(1, |_| {}));
    out.doorbell();
    assert!(readable(fd, 1000));
    inbox.set_sleeping(false);
    inbox.drain_wake();
    assert!(!readable(fd, 0));
    // A doorbell after the owner closed neither fails nor blocks.
    inbox.set_sleeping(true);
    inbox.close();
    out.doorbell();
    assert!(!out.receiver_alive());
}

/// Two threads of the owner asleep (application and progress thread): the one
/// that takes a ring must leave the doorbell armed for the other, and a thread
/// that sleeps again must re-arm it, or the next record wakes nobody.
#[test]
fn doorbell_stays_armed_for_a_second_sleeper() {
    let d = TempDir::new();
    let mut inbox = Inbox::create(&d.0, "two", &params(2, 4096)).unwrap();
    let mut out = Outbox::open(&d.0, "two", me(1)).unwrap();
    let fd = inbox.wake_fd();
    assert!(inbox.begin_sleep(), "nothing pending: first sleeper sleeps");
    assert!(inbox.begin_sleep(), "second sleeper sleeps");
    assert!(out.try_push(1, |_| {}));
    out.doorbell();
    assert!(readable(fd, 1000));
    // The first to wake drains the FIFO and reads the record; the other sleeps on.
    inbox.end_sleep(true);
    assert!(!readable(fd, 0));
    assert_eq!(inbox.poll(10, |_, _, _| true), 1);
    // The next record must ring for the sleeper left behind.
    assert!(out.try_push(1, |_| {}));
    out.doorbell();
    assert!(readable(fd, 1000), "the remaining sleeper is woken");
    // It wakes; the first comes back to sleep, then another record arrives.
    inbox.end_sleep(true);
    assert_eq!(inbox.poll(10, |_, _, _| true), 1);
    assert!(inbox.begin_sleep());
    assert!(out.try_push(1, |_| {}));
    out.doorbell();
    assert!(
        readable(fd, 1000),
        "a thread sleeping again re-armed the doorbell"
    );
    inbox.end_sleep(true);
    assert_eq!(inbox.poll(10, |_, _, _| true), 1);
    // Nobody asleep: no ring (the polling fast path).
    assert!(out.try_push(1, |_| {}));
    out.doorbell();
    assert!(!readable(fd, 0));
    // A record pending when a thread wants to sleep: it does not.
    assert!(!inbox.begin_sleep());
    assert_eq!(inbox.poll(10, |_, _, _| true), 1);
}
