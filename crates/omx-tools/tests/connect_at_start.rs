//! Connects and name lookups issued the moment the endpoints open, through the MX C
//! API: a job started right after its hosts must not fail because a peer's
//! announcement has not arrived yet. A hundred times in a row, both hosts start a fresh
//! process at once (with a fresh host state, so nothing is known in advance); each
//! opens its endpoint, connects (`mx_connect`) to the other's nic id, given out of band
//! as an MPI launcher's address exchange would, looks the other up by name
//! (`mx_hostname_to_nic_id`) and exchanges a message with it. Every one must succeed.
//! The processes are this test binary itself, run as `side` in each host. Needs root.

mod common;

use common::*;
use myriexpress::*;
use std::ffi::CString;
use std::ptr::null_mut;
use std::time::Duration;

const RUNS: usize = 100;
const KEY: u32 = 0x5eed;
const MX_API: i32 = 0x301;
/// Generous bounds: a failure shows as an error code, never as a hang.
const CONNECT_MS: u32 = 20_000;
const WAIT_MS: u32 = 20_000;
/// Set in the processes this test starts: the name and nic id of the other side.
const PEER_ENV: &str = "OMX_TEST_CONNECT_PEER";
const PEER_NIC_ENV: &str = "OMX_TEST_CONNECT_NIC";

#[test]
fn connect_and_lookup_right_after_open_a_hundred_times() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let me = std::env::current_exe().expect("test binary");
    let me = me.to_str().unwrap();
    let nic_of = |i: usize| {
        let nic = h.mac(i).iter().fold(0u64, |a, b| (a << 8) | u64::from(*b));
        nic.to_string()
    };
    let nics = [nic_of(1), nic_of(0)];
    let args = ["--exact", "side", "--nocapture", "--test-threads=1"];
    for run in 0..RUNS {
        // A fresh state directory: no peers file from the run before.
        let state = h.state.join(format!("run{run}"));
        std::fs::create_dir_all(&state).unwrap();
        let s = state.to_str().unwrap();
        let mut sides: Vec<Proc> = (0..2)
            .map(|i| {
                let env = [
                    (PEER_ENV, if i == 0 { "h1:0" } else { "h0:0" }),
                    (PEER_NIC_ENV, &nics[i]),
                    ("OMX_STATE_DIR", s),
                    ("OMX_FATAL_ERRORS", "0"),
                ];
                h.spawn(i, &format!("run {run} side"), me, &args, &env)
            })
            .collect();
        for p in &mut sides {
            p.finish(Duration::from_secs(120));
        }
        for p in &sides {
            assert!(
                p.succeeded() && p.stdout().contains("SIDE OK"),
                "run {run}:{}",
                reports(&[&sides[0], &sides[1]])
            );
        }
        let _ = std::fs::remove_dir_all(&state);
    }
}

/// One side of a run (only when started by the test above): open, connect to the
/// other, look it up by name, send it a message and take its message.
#[test]
fn side() {
    let Ok(peer) = std::env::var(PEER_ENV) else {
        return;
    };
    // SAFETY: the MX calls get valid pointers to locals that outlive each call.
    unsafe {
        assert_eq!(mx__init_api(MX_API), MX_SUCCESS, "mx_init");
        let mut ep = null_mut();
        let r = mx_open_endpoint(0, 0, KEY, null_mut(), 0, &mut ep);
        assert_eq!(r, MX_SUCCESS, "mx_open_endpoint");
        let nic: u64 = std::env::var(PEER_NIC_ENV).unwrap().parse().unwrap();
        let mut addr = MxEndpointAddr { stuff: [0; 2] };
        let r = mx_connect(ep, nic, 0, KEY, CONNECT_MS, &mut addr);
        assert_eq!(r, MX_SUCCESS, "mx_connect({peer}, nic {nic:#x})");
        let name = CString::new(peer.clone()).unwrap();
        let mut found = 0u64;
        let r = mx_hostname_to_nic_id(name.as_ptr() as *mut _, &mut found);
        assert_eq!(r, MX_SUCCESS, "mx_hostname_to_nic_id({peer})");
        assert_eq!(found, nic, "{peer}");
        // The other side's message proves its connect succeeded too, and the acked
        // send that ours was taken: neither closes under the other.
        let mut inbox = [0u8; 8];
        let mut outbox = *b"hello!!!";
        let mut rseg = MxSegment {
            ptr: inbox.as_mut_ptr().cast(),
            len: 8,
        };
        let mut sseg = MxSegment {
            ptr: outbox.as_mut_ptr().cast(),
            len: 8,
        };
        let (mut rreq, mut sreq) = (0usize, 0usize);
        assert_eq!(
            mx_irecv(ep, &mut rseg, 1, 7, u64::MAX, null_mut(), &mut rreq),
            MX_SUCCESS
        );
        assert_eq!(
            mx_isend(ep, &mut sseg, 1, addr, 7, null_mut(), &mut sreq),
            MX_SUCCESS
        );
        for (what, req) in [("send", &mut sreq), ("receive", &mut rreq)] {
            let mut st: MxStatus = std::mem::zeroed();
            let mut done = 0u32;
            let r = mx_wait(ep, req, WAIT_MS, &mut st, &mut done);
            assert!(
                r == MX_SUCCESS && done == 1 && st.code == 0,
                "{what}: return {r}, done {done}, status {}",
                st.code
            );
        }
        assert_eq!(&inbox, b"hello!!!");
        assert_eq!(mx_close_endpoint(ep), MX_SUCCESS);
        mx_finalize();
    }
    println!("SIDE OK");
}
