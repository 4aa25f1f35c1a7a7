//! CPU accounting of omx_stream: thread CPU clocks by role, time inside library calls,
//! and machine-wide busy and softirq time (see the module comment of main.rs).

use std::collections::HashMap;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clk: i32, ts: *mut Timespec) -> i32;
}

const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
/// `sysconf(_SC_CLK_TCK)` is 100 on every Linux ABI that matters here.
const CLK_TCK: f64 = 100.0;

fn read_clock(clk: i32) -> Option<u64> {
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec (x86_64/aarch64 layout: two 64-bit fields).
    let r = unsafe { clock_gettime(clk, &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// CPU time of the calling thread, ns.
pub fn self_ns() -> u64 {
    read_clock(CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

/// CPU time of thread `tid` of this process, ns: the clock id glibc's
/// `pthread_getcpuclockid` builds (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)).
fn tid_ns(tid: i32) -> Option<u64> {
    read_clock(((!tid) << 3) | 6)
}

#[derive(Clone, Debug)]
pub struct Thread {
    pub name: String,
    pub cpu_ns: u64,
    /// utime, stime (clock ticks).
    pub user: u64,
    pub sys: u64,
    /// Context switches, voluntary plus involuntary (/proc/.../status).
    pub csw: u64,
}

/// Every thread of this process, by tid.
pub fn threads() -> HashMap<i32, Thread> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let base = e.path();
        let name = std::fs::read_to_string(base.join("comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let stat = std::fs::read_to_string(base.join("stat")).unwrap_or_default();
        // Fields after the command (which may hold spaces): state is field 3,
        // utime 14, stime 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let (user, sys) = (get(11), get(12));
        let status = std::fs::read_to_string(base.join("status")).unwrap_or_default();
        let csw = status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        let cpu_ns = tid_ns(tid).unwrap_or_else(|| ((user + sys) as f64 * 1e9 / CLK_TCK) as u64);
        out.insert(
            tid,
            Thread {
                name,
                cpu_ns,
                user,
                sys,
                csw,
            },
        );
    }
    out
}

/// The `cpu` line of /proc/stat (ticks: user nice system idle iowait irq softirq
/// steal ...).
pub fn machine() -> Vec<u64> {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines().next().map(|l| {
                l.split_whitespace()
                    .skip(1)
                    .filter_map(|v| v.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

pub fn ncpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    App,
    Progress,
    Copy,
    Other,
}

pub fn role(tid: i32, name: &str) -> Role {
    if tid as u32 == std::process::id() {
        Role::App
    } else if name.starts_with("omx-progress") {
        Role::Progress
    } else if name == "omx-copy" {
        Role::Copy
    } else {
        Role::Other
    }
}

pub struct Snapshot {
    pub at: std::time::Instant,
    pub threads: HashMap<i32, Thread>,
    pub machine: Vec<u64>,
}

pub fn snapshot() -> Snapshot {
    Snapshot {
        machine: machine(),
        threads: threads(),
        at: std::time::Instant::now(),
    }
}

/// CPU used between two snapshots, per role.
#[derive(Clone, Debug, Default)]
pub struct Usage {
    pub elapsed: f64,
    /// Seconds of CPU and the system share of it, per role.
    pub cpu: HashMap<Role, (f64, f64)>,
    /// Context switches per role.
    pub csw: HashMap<Role, u64>,
    pub copy_thread: bool,
    /// Machine-wide, in CPUs (busy, softirq) averaged over the interval.
    pub machine_busy: f64,
    pub machine_softirq: f64,
}

impl Usage {
    pub fn secs(&self, r: Role) -> f64 {
        self.cpu.get(&r).map_or(0.0, |x| x.0)
    }
    pub fn sys_secs(&self, r: Role) -> f64 {
        self.cpu.get(&r).map_or(0.0, |x| x.1)
    }
    pub fn csw(&self, r: Role) -> u64 {
        self.csw.get(&r).copied().unwrap_or(0)
    }
    pub fn pct(&self, r: Role) -> f64 {
        if self.elapsed > 0.0 {
            self.secs(r) / self.elapsed * 100.0
        } else {
            0.0
        }
    }
    pub fn sys_pct(&self, r: Role) -> f64 {
        if self.elapsed > 0.0 {
            self.sys_secs(r) / self.elapsed * 100.0
        } else {
            0.0
        }
    }
}

pub fn usage(a: &Snapshot, b: &Snapshot) -> Usage {
    let mut u = Usage {
        elapsed: b.at.duration_since(a.at).as_secs_f64(),
        ..Default::default()
    };
    for (tid, t) in &b.threads {
        let r = role(*tid, &t.name);
        u.copy_thread |= r == Role::Copy;
        let (c0, u0, s0, w0) = a
            .threads
            .get(tid)
            .map_or((0, 0, 0, 0), |o| (o.cpu_ns, o.user, o.sys, o.csw));
        *u.csw.entry(r).or_default() += t.csw.saturating_sub(w0);
        let cpu = t.cpu_ns.saturating_sub(c0) as f64 / 1e9;
        let (du, ds) = (t.user.saturating_sub(u0), t.sys.saturating_sub(s0));
        let sys = if du + ds > 0 {
            cpu * ds as f64 / (du + ds) as f64
        } else {
            0.0
        };
        let e = u.cpu.entry(r).or_default();
        e.0 += cpu;
        e.1 += sys;
    }
    if a.machine.len() >= 7 && b.machine.len() >= 7 {
        let d: Vec<f64> = a
            .machine
            .iter()
            .zip(&b.machine)
            .map(|(x, y)| y.saturating_sub(*x) as f64)
            .collect();
        // Guest time is included in user already.
        let total: f64 = d.iter().take(8).sum();
        if total > 0.0 {
            let n = ncpus() as f64;
            u.machine_busy = (total - d[3] - d[4]) / total * n;
            u.machine_softirq = d[6] / total * n;
        }
    }
    u
}
