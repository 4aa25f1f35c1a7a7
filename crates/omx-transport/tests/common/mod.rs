//! Shared helpers of the integration tests: root check, namespace hosts
//! (scripts/hosts.sh) torn down by a guard, frame builders, receive loops.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use omx_transport::{netns, EndpointFilter, Interface, PacketSocket, SocketOptions, OMX_ETHERTYPE};

#[path = "../../../../tests/rust/skip.rs"]
mod skip_rule;
pub use skip_rule::skip_test;

/// True (after reporting the skip, see tests/rust/skip.rs) when the test cannot run here.
pub fn skip() -> bool {
    if !omx_transport::is_root() {
        return skip_test(
            "needs root (CAP_NET_ADMIN for namespaces, CAP_NET_RAW for packet sockets)",
        );
    }
    let ip = Command::new("ip").arg("-V").output();
    if !ip.is_ok_and(|o| o.status.success()) {
        return skip_test("needs iproute2 (`ip`)");
    }
    false
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/hosts.sh")
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// N namespace hosts with a unique prefix; removed on drop, even on panic.
pub struct Hosts {
    pub prefix: String,
    pub n: usize,
}

impl Hosts {
    pub fn up(n: usize, mtu: u32) -> Hosts {
        let prefix = format!(
            "omxt-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let h = Hosts { prefix, n };
        h.script(&["up", &n.to_string(), &mtu.to_string()]);
        h
    }

    fn script(&self, args: &[&str]) {
        let out = Command::new("bash")
            .arg(script())
            .args(args)
            .env("OMX_NS_PREFIX", &self.prefix)
            .output()
            .expect("run hosts.sh");
        assert!(
            out.status.success(),
            "hosts.sh {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Namespace name of host `i`.
    pub fn ns(&self, i: usize) -> String {
        format!("{}-h{i}", self.prefix)
    }

    /// Runs `ip ARGS` inside host `i`.
    pub fn ip(&self, i: usize, args: &str) {
        let ns = self.ns(i);
        let out = Command::new("ip")
            .args(["-n", &ns])
            .args(args.split_whitespace())
            .output()
            .expect("run ip");
        assert!(
            out.status.success(),
            "ip -n {ns} {args}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `omx0` of host `i`, as seen from inside its namespace.
    pub fn iface(&self, i: usize, name: &str) -> Interface {
        let name = name.to_owned();
        netns::run_in(&self.ns(i), move || omx_transport::interface_by_name(&name))
            .expect("enter namespace")
            .expect("interface present")
    }

    /// Opens a socket on interface `name` of host `i` (in its namespace).
    pub fn open(
        &self,
        i: usize,
        name: &str,
        opts: &SocketOptions,
        filter: Option<EndpointFilter>,
    ) -> PacketSocket {
        self.open_type(i, name, OMX_ETHERTYPE, opts, filter)
    }

    pub fn open_type(
        &self,
        i: usize,
        name: &str,
        ethertype: u16,
        opts: &SocketOptions,
        filter: Option<EndpointFilter>,
    ) -> PacketSocket {
        let (name, opts) = (name.to_owned(), opts.clone());
        netns::run_in(&self.ns(i), move || {
            let iface = omx_transport::interface_by_name(&name)?;
            PacketSocket::open_filtered(&iface, ethertype, &opts, filter.as_ref())
        })
        .expect("enter namespace")
        .expect("open packet socket")
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("down")
            .env("OMX_NS_PREFIX", &self.prefix)
            .status();
    }
}

/// Socket options for the two receive paths.
pub fn ring_opts() -> SocketOptions {
    SocketOptions::default()
}
pub fn mmsg_opts() -> SocketOptions {
    SocketOptions {
        rx_ring_bytes: 0,
        ..SocketOptions::default()
    }
}
pub fn both_paths() -> [(&'static str, SocketOptions); 2] {
    [("ring", ring_opts()), ("recvmmsg", mmsg_opts())]
}

pub const BROADCAST: [u8; 6] = [0xff; 6];

/// An Open-MX-looking frame: Ethernet header, peer index 0, packet type
/// `ptype`, then a payload pattern derived from `seq` (stored at 32..36).
pub fn frame(
    dst: [u8; 6],
    src: [u8; 6],
    ethertype: u16,
    ptype: u8,
    len: usize,
    seq: u32,
) -> Vec<u8> {
    assert!(len >= 36);
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    f[16] = ptype;
    f[32..36].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[36..].iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(31).wrapping_add(seq) as u8;
    }
    f
}

/// Sequence number stored by [`frame`].
pub fn seq_of(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[32..36].try_into().unwrap())
}

/// Receives frames until `n` arrived or `timeout` passed; returns copies.
pub fn recv_frames(s: &mut PacketSocket, n: usize, timeout: Duration) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    while out.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if !s.wait_readable(Some(left)).expect("wait") {
            continue;
        }
        s.recv_batch(n - out.len(), |f| out.push(f.to_vec()))
            .expect("recv");
    }
    out
}

/// Asserts nothing more arrives within `quiet`.
pub fn assert_quiet(s: &mut PacketSocket, quiet: Duration, what: &str) {
    let extra = recv_frames(s, usize::MAX, quiet);
    assert!(
        extra.is_empty(),
        "{what}: unexpected {} frame(s), first {:?}",
        extra.len(),
        &extra[0][..20]
    );
}
