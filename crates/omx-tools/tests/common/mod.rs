//! Harness of the real-network tests: namespace hosts (scripts/hosts.sh) with a private
//! prefix and state directory, torn down by a guard; child processes run inside a host
//! with their output captured, killed by a guard.
#![allow(dead_code)]

pub mod traffic;
pub mod users;

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const OMX_PERF: &str = env!("CARGO_BIN_EXE_omx_perf");
pub const OMX_INFO: &str = env!("CARGO_BIN_EXE_omx_info");
pub const OMX_COUNTERS: &str = env!("CARGO_BIN_EXE_omx_counters");
pub const OMX_ENDPOINT_INFO: &str = env!("CARGO_BIN_EXE_omx_endpoint_info");
pub const OMX_TESTPEER: &str = env!("CARGO_BIN_EXE_omx_testpeer");
pub const OMX_INIT_PEERS: &str = env!("CARGO_BIN_EXE_omx_init_peers");
pub const OMX_PREPARE_BINDING: &str = env!("CARGO_BIN_EXE_omx_prepare_binding");

#[path = "../../../../tests/rust/skip.rs"]
mod skip_rule;
pub use skip_rule::skip_test;

/// True (after reporting the skip, see tests/rust/skip.rs) when these tests cannot run
/// here: they need root for network namespaces and raw packet sockets, and iproute2.
pub fn skip() -> bool {
    if !omx_transport::is_root() {
        return skip_test("needs root (network namespaces, raw packet sockets)");
    }
    let has_ip = Command::new("ip")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_ip {
        return skip_test("needs iproute2 (`ip`)");
    }
    false
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/hosts.sh")
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// N namespace hosts `h0..` joined by veth (N=2) or a bridge, with their own omx state
/// directory (`OMX_STATE_DIR`): removed on drop, even when the test panics.
pub struct Hosts {
    pub prefix: String,
    pub n: usize,
    pub state: PathBuf,
}

impl Hosts {
    pub fn up(n: usize, mtu: u32) -> Hosts {
        Self::up_links(n, mtu, 1)
    }

    /// [`Hosts::up`] with `links` interfaces per host, `omx0..`, one network each.
    pub fn up_links(n: usize, mtu: u32, links: usize) -> Hosts {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("oit{}x{k}", std::process::id());
        let state = std::env::temp_dir().join(format!("{prefix}-state"));
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(&state).expect("create state directory");
        let h = Hosts { prefix, n, state };
        let out = Command::new("bash")
            .arg(script())
            .args(["up", &n.to_string(), &mtu.to_string(), &links.to_string()])
            .env("OMX_NS_PREFIX", &h.prefix)
            .output()
            .expect("run hosts.sh");
        assert!(
            out.status.success(),
            "hosts.sh up {n} {mtu} {links} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        h
    }

    /// Namespace of host `i`.
    pub fn ns(&self, i: usize) -> String {
        format!("{}-h{i}", self.prefix)
    }

    /// MAC address of host `i`'s omx0.
    pub fn mac(&self, i: usize) -> [u8; 6] {
        omx_transport::netns::run_in(&self.ns(i), || omx_transport::interface_by_name("omx0"))
            .expect("enter namespace")
            .expect("omx0 present")
            .mac
    }

    /// `bin args` inside host `i`, as `hosts.sh exec` runs it (`ip netns exec`, so
    /// /sys is the namespace's too, and `OMX_HOSTNAME=hI`), with a clean omx
    /// environment plus `env`.
    pub fn command(&self, i: usize, bin: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(i), bin]).args(args);
        for (k, _) in std::env::vars() {
            if k.starts_with("OMX_") || k.starts_with("MX_") {
                c.env_remove(k);
            }
        }
        c.env("OMX_HOSTNAME", format!("h{i}"))
            .env("OMX_STATE_DIR", &self.state);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Starts `bin args` in host `i`; `label` names it in failure reports.
    pub fn spawn(
        &self,
        i: usize,
        label: &str,
        bin: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Proc {
        let mut c = self.command(i, bin, args, env);
        let cmdline = format!("h{i}: {} {}", short(bin), args.join(" "));
        Proc::spawn(&mut c, &format!("{label} [{cmdline}]"))
    }

    /// Runs `bin args` in host `i` to completion (killed after `timeout`).
    pub fn run(
        &self,
        i: usize,
        label: &str,
        bin: &str,
        args: &[&str],
        env: &[(&str, &str)],
        timeout: Duration,
    ) -> Proc {
        let mut p = self.spawn(i, label, bin, args, env);
        p.finish(timeout);
        p
    }

    /// Runs a tool in host `i` and returns its stdout; panics (with its output) if it
    /// fails.
    pub fn tool(&self, i: usize, bin: &str, args: &[&str]) -> String {
        let p = self.run(i, short(bin), bin, args, &[], Duration::from_secs(60));
        assert!(p.succeeded(), "{}", p.report());
        p.stdout()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("down")
            .env("OMX_NS_PREFIX", &self.prefix)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

fn short(bin: &str) -> &str {
    bin.rsplit('/').next().unwrap_or(bin)
}

/// A child process with its stdout and stderr collected as they come; killed (SIGKILL)
/// on drop if still running.
pub struct Proc {
    pub label: String,
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
    started: Instant,
    ended: Option<Duration>,
}

fn collect<R: Read + Send + 'static>(r: R, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => into
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_str(&String::from_utf8_lossy(&line)),
            }
        }
    })
}

impl Proc {
    pub fn spawn(c: &mut Command, label: &str) -> Proc {
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {label}: {e}"));
        let out = Arc::new(Mutex::new(String::new()));
        let err = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().expect("stdout"), out.clone()),
            collect(child.stderr.take().expect("stderr"), err.clone()),
        ];
        Proc {
            label: label.to_string(),
            child,
            out,
            err,
            readers,
            status: None,
            started: Instant::now(),
            ended: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout(&self) -> String {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn stderr(&self) -> String {
        self.err.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn reap(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.status = Some(s);
                self.ended = Some(self.started.elapsed());
                // The pipes close with the process: take the rest of its output.
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
            }
        }
        self.status
    }

    /// Exit status if it has ended.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.reap()
    }

    /// Waits up to `timeout` for the process to end.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(s) = self.reap() {
                return Some(s);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the end, killing the process after `timeout` (then the status shows
    /// the kill and `report` says so).
    pub fn finish(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(s) = self.wait_timeout(timeout) {
            return s;
        }
        self.label
            .push_str(&format!(" (KILLED: still running after {timeout:?})"));
        self.kill();
        self.status.expect("killed")
    }

    /// Waits until stdout satisfies `pred` (true), the process ends, or `timeout`.
    pub fn wait_stdout(&mut self, timeout: Duration, pred: impl Fn(&str) -> bool) -> bool {
        self.wait_output(timeout, Proc::stdout, pred)
    }

    /// Waits until stderr satisfies `pred` (true), the process ends, or `timeout`.
    pub fn wait_stderr(&mut self, timeout: Duration, pred: impl Fn(&str) -> bool) -> bool {
        self.wait_output(timeout, Proc::stderr, pred)
    }

    /// Sends SIGTERM and waits up to `timeout` for the end.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if self.reap().is_none() {
            // Our own child, not reaped yet: the pid is still its.
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
        }
        self.wait_timeout(timeout)
    }

    fn wait_output(
        &mut self,
        timeout: Duration,
        stream: fn(&Proc) -> String,
        pred: impl Fn(&str) -> bool,
    ) -> bool {
        let until = Instant::now() + timeout;
        loop {
            if pred(&stream(self)) {
                return true;
            }
            if self.reap().is_some() {
                return pred(&stream(self));
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if self.reap().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait().map(|s| self.status = Some(s));
            self.ended = Some(self.started.elapsed());
            for r in self.readers.drain(..) {
                let _ = r.join();
            }
        }
    }

    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Label, exit status and the tail of both output streams, for assertion messages.
    pub fn report(&self) -> String {
        fn tail(s: &str, n: usize) -> String {
            let lines: Vec<&str> = s.lines().collect();
            let skip = lines.len().saturating_sub(n);
            let mut t = String::new();
            if skip > 0 {
                t.push_str(&format!("    ... ({skip} lines before)\n"));
            }
            for l in &lines[skip..] {
                t.push_str("    ");
                t.push_str(l);
                t.push('\n');
            }
            t
        }
        let status = match (self.status, self.ended) {
            (Some(s), Some(t)) => format!("{s} after {:.1} s", t.as_secs_f64()),
            (Some(s), None) => s.to_string(),
            _ => format!(
                "still running after {:.1} s",
                self.started.elapsed().as_secs_f64()
            ),
        };
        format!(
            "\n--- {} (pid {}): {status}\n  stdout:\n{}  stderr:\n{}",
            self.label,
            self.child.id(),
            tail(&self.stdout(), 40),
            tail(&self.stderr(), 20)
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reports of several processes, for one assertion message.
pub fn reports(ps: &[&Proc]) -> String {
    ps.iter().map(|p| p.report()).collect()
}

/// `NNN value name` lines of `omx_counters` output, as (name, value).
pub fn parse_counters(out: &str) -> Vec<(String, u64)> {
    out.lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            match t.as_slice() {
                [idx, v, name] if idx.len() == 3 && idx.bytes().all(|b| b.is_ascii_digit()) => {
                    Some((name.to_string(), v.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect()
}

pub fn fmt_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}
