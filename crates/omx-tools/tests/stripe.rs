//! Striping over real links (`OMX_STRIPE=1`): two namespace hosts joined by three veth
//! links, one process on each (this test binary itself, run as `side`), large messages
//! (1 to 16 MiB) sent through the MX C API and checked byte by byte. The kernel's
//! counters of every link must show its share of the data; then one link is brought
//! down between two groups of messages (the receiver waits for the test to do it
//! before posting the next receives, while the sender's sends are already posted), and
//! the rest must complete over the two links left, the dead one closed by the puller.
//! Every step waits for an event (a line of output, a published path table), bounded
//! by generous timeouts; nothing sleeps to synchronise. Needs root.

mod common;

use common::*;
use myriexpress::*;
use std::path::{Path, PathBuf};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

const KEY: u32 = 0x57e1;
const MX_API: i32 = 0x301;
const CONNECT_MS: u32 = 30_000;
const WAIT_MS: u32 = 120_000;
const MIB: u32 = 1 << 20;
/// Messages before the link goes down, then after (odd lengths included).
const BEFORE: [u32; 4] = [MIB, 4 * MIB, 16 * MIB, 3 * MIB + 4321];
const AFTER: [u32; 4] = [16 * MIB, 5 * MIB + 17, MIB, 16 * MIB];
/// Set in the processes this test starts: `send` or `recv`, the other side's nic id,
/// and the directory where the test drops its go-ahead files.
const ROLE_ENV: &str = "OMX_TEST_STRIPE_ROLE";
const PEER_NIC_ENV: &str = "OMX_TEST_STRIPE_NIC";
const DIR_ENV: &str = "OMX_TEST_STRIPE_DIR";
/// Generous bounds for a loaded machine: a failure shows as a message, never a hang.
const STEP: Duration = Duration::from_secs(180);

/// The byte at `offset` of message `i`: differs between messages and along each one.
fn pattern(i: usize, offset: usize) -> u8 {
    ((offset as u64).wrapping_mul(2_654_435_761) >> 11) as u8 ^ (i as u8).wrapping_mul(37)
}

/// Bytes received so far on interface `dev` of host `i` (the kernel's counter).
fn rx_bytes(h: &Hosts, i: usize, dev: &str) -> u64 {
    let p = h.run(
        i,
        "rx_bytes",
        "cat",
        &[&format!("/sys/class/net/{dev}/statistics/rx_bytes")],
        &[],
        Duration::from_secs(60),
    );
    assert!(p.succeeded(), "{}", p.report());
    p.stdout().trim().parse().expect("a byte count")
}

/// Waits until host 1's published path table shows its partner striped over `links`
/// links (the table is published about once a second).
fn wait_for_links(h: &Hosts, links: usize, receiver: &Proc) {
    let want = format!("(striped over {links} links)");
    let start = Instant::now();
    loop {
        let out = h.tool(1, OMX_ENDPOINT_INFO, &["-r"]);
        if out.contains(&want) {
            return;
        }
        assert!(
            start.elapsed() < STEP,
            "no {want} in the path table:\n{out}\n{}",
            receiver.report()
        );
    }
}

fn touch(dir: &Path, name: &str) {
    std::fs::write(dir.join(name), b"").expect("go-ahead file");
}

#[test]
fn large_messages_striped_over_three_links_survive_one_going_down() {
    if skip() {
        return;
    }
    let h = Hosts::up_links(2, 9000, 3);
    let me = std::env::current_exe().expect("test binary");
    let me = me.to_str().unwrap();
    let dir = h.state.join("stripe-go");
    std::fs::create_dir_all(&dir).unwrap();
    let nic_of = |i: usize| {
        let nic = h.mac(i).iter().fold(0u64, |a, b| (a << 8) | u64::from(*b));
        nic.to_string()
    };
    let links = ["omx0", "omx1", "omx2"];
    let before: Vec<u64> = links.iter().map(|d| rx_bytes(&h, 1, d)).collect();
    let args = ["--exact", "side", "--nocapture", "--test-threads=1"];
    let spawn = |i: usize, role: &str| {
        let nic = nic_of(1 - i);
        let env = [
            (ROLE_ENV, role),
            (PEER_NIC_ENV, nic.as_str()),
            (DIR_ENV, dir.to_str().unwrap()),
            ("OMX_STRIPE", "1"),
        ];
        h.spawn(i, role, me, &args, &env)
    };
    let mut receiver = spawn(1, "recv");
    let mut sender = spawn(0, "send");
    let last_before = format!("GOT {}", BEFORE.len() - 1);
    assert!(
        receiver.wait_stdout(STEP, |o| o.contains(&last_before)),
        "first messages not received:{}",
        reports(&[&receiver, &sender])
    );
    // Every link carried its share of the replies to the receiver's pulls.
    let total: u64 = BEFORE.iter().map(|&n| u64::from(n)).sum();
    for (k, dev) in links.iter().enumerate() {
        let got = rx_bytes(&h, 1, dev) - before[k];
        assert!(
            got >= total / 8,
            "{dev} of the receiver carried {got} of {total} bytes:{}",
            reports(&[&receiver, &sender])
        );
    }
    wait_for_links(&h, 3, &receiver);
    // Down in the receiver's host (the peer end loses its carrier), then the rest.
    let down = h.run(
        1,
        "link down",
        "ip",
        &["link", "set", "omx2", "down"],
        &[],
        Duration::from_secs(60),
    );
    assert!(down.succeeded(), "{}", down.report());
    let omx1_before = rx_bytes(&h, 1, "omx1");
    touch(&dir, "go");
    assert!(
        receiver.wait_stdout(STEP, |o| o.contains("RECV DONE")),
        "messages after the link went down not received:{}",
        reports(&[&receiver, &sender])
    );
    // The puller closed the dead link; the two others carried the rest.
    wait_for_links(&h, 2, &receiver);
    let after: u64 = AFTER.iter().map(|&n| u64::from(n)).sum();
    let omx1 = rx_bytes(&h, 1, "omx1") - omx1_before;
    assert!(omx1 >= after / 8, "omx1 carried {omx1} of {after} bytes");
    touch(&dir, "end");
    for p in [&mut receiver, &mut sender] {
        p.finish(STEP);
    }
    for p in [&receiver, &sender] {
        assert!(
            p.succeeded() && p.stdout().contains("SIDE OK"),
            "{}",
            reports(&[&receiver, &sender])
        );
    }
}

/// Waits for the test's go-ahead file `name` in `dir`.
fn wait_file(dir: &Path, name: &str) {
    let f = dir.join(name);
    let start = Instant::now();
    while !f.exists() {
        assert!(start.elapsed() < STEP, "no {} from the test", f.display());
        // Not synchronisation by time: the file is the event, polled.
        std::thread::yield_now();
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for `req` of `ep`, which must succeed.
///
/// # Safety
/// `ep` is an open endpoint and `req` one of its requests.
unsafe fn wait(ep: *mut CEndpoint, req: &mut usize, what: &str) {
    let mut st: MxStatus = std::mem::zeroed();
    let mut done = 0u32;
    let r = mx_wait(ep, req, WAIT_MS, &mut st, &mut done);
    assert!(
        r == MX_SUCCESS && done == 1 && st.code == 0,
        "{what}: return {r}, done {done}, status {}",
        st.code
    );
}

/// One side (only when started by the test above): the sender posts every message and
/// waits for each; the receiver checks each, pausing between the two groups.
#[test]
fn side() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
    let nic: u64 = std::env::var(PEER_NIC_ENV).unwrap().parse().unwrap();
    let sizes: Vec<u32> = BEFORE.iter().chain(&AFTER).copied().collect();
    // SAFETY: the MX calls get valid pointers to locals and buffers that outlive each
    // request (every request is waited for before its buffer is touched or dropped).
    unsafe {
        assert_eq!(mx__init_api(MX_API), MX_SUCCESS, "mx_init");
        let mut ep = null_mut();
        let r = mx_open_endpoint(0, 0, KEY, null_mut(), 0, &mut ep);
        assert_eq!(r, MX_SUCCESS, "mx_open_endpoint");
        let mut addr = MxEndpointAddr { stuff: [0; 2] };
        let r = mx_connect(ep, nic, 0, KEY, CONNECT_MS, &mut addr);
        assert_eq!(r, MX_SUCCESS, "mx_connect(nic {nic:#x})");
        for (i, &len) in sizes.iter().enumerate() {
            let mut buf: Vec<u8> = if role == "send" {
                (0..len as usize).map(|o| pattern(i, o)).collect()
            } else {
                vec![0; len as usize]
            };
            let mut seg = MxSegment {
                ptr: buf.as_mut_ptr().cast(),
                len,
            };
            let mut req = 0usize;
            if role == "send" {
                let r = mx_isend(ep, &mut seg, 1, addr, i as u64, null_mut(), &mut req);
                assert_eq!(r, MX_SUCCESS, "isend {i}");
                wait(ep, &mut req, &format!("send {i}"));
                continue;
            }
            if i == BEFORE.len() {
                wait_file(&dir, "go");
            }
            let r = mx_irecv(ep, &mut seg, 1, i as u64, u64::MAX, null_mut(), &mut req);
            assert_eq!(r, MX_SUCCESS, "irecv {i}");
            wait(ep, &mut req, &format!("receive {i} ({len} bytes)"));
            if let Some(o) = (0..len as usize).find(|&o| buf[o] != pattern(i, o)) {
                panic!("message {i} ({len} bytes) differs at byte {o}");
            }
            println!("GOT {i}");
        }
        if role == "recv" {
            println!("RECV DONE");
            // Open until the test has read the published path table.
            wait_file(&dir, "end");
        }
        assert_eq!(mx_close_endpoint(ep), MX_SUCCESS);
        mx_finalize();
    }
    println!("SIDE OK");
}
