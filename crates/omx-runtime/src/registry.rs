//! Host-wide state shared by the omx processes of one board, kept as small files under
//! `/dev/shm/omx-<mac>/` (network namespaces share the file system, boards differ by
//! MAC): endpoint index ownership (flock, released by the kernel when a process dies),
//! the board-service owner, per-endpoint info and counters for the tools, and the
//! board's peer table.
//!
//! The peer table outlives the processes that learned it (as the original's driver
//! table does), but not for ever: when no process of this host uses the board and the
//! table has not changed for `STALE_PEERS_AFTER`, it is a leftover of a run long gone
//! (its peers may no longer exist, or their names may now belong to others) and the
//! next process to open the board starts afresh (discovery refills it in milliseconds).

use omx_proto::NicId;
use omx_wire::Extensions;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Age from which an unused board's shared peer table is discarded.
pub const STALE_PEERS_AFTER: Duration = Duration::from_secs(600);

/// An exclusive `flock` held for as long as this value lives.
#[derive(Debug)]
pub struct LockFile(#[allow(dead_code)] File);

fn try_flock(path: &PathBuf) -> io::Result<Option<LockFile>> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)?;
    // SAFETY: flock on a valid descriptor we own.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(Some(LockFile(f)))
    } else {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(e)
        }
    }
}

/// What the tools show about an open endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointInfo {
    pub index: u8,
    pub pid: u32,
    pub command: String,
    pub counters: Vec<(String, u64)>,
    /// Round-trip estimates toward the partners measured so far.
    pub paths: Vec<omx_proto::PathStats>,
}

/// One `path` line of an endpoint's info file (times in ns; extension bits, 1 when
/// the link carries checksum trailers, and the open striping links besides its own).
fn format_path(p: &omx_proto::PathStats) -> String {
    format!(
        "path {:x} {} {} {} {} {} {} {} {} {} {}\n",
        p.nic_id,
        p.endpoint,
        p.srtt,
        p.rttvar,
        p.rto,
        p.pull_srtt,
        p.pull_rto,
        p.pull_blocks,
        p.extensions.bits(),
        u8::from(p.checksum),
        p.stripe_links
    )
}

fn parse_path(rest: &str) -> Option<omx_proto::PathStats> {
    let f: Vec<&str> = rest.split_whitespace().collect();
    // (10 fields: written before striping.)
    if !(10..=11).contains(&f.len()) {
        return None;
    }
    let n = |i: usize| f[i].parse::<u64>().ok();
    Some(omx_proto::PathStats {
        nic_id: u64::from_str_radix(f[0], 16).ok()?,
        endpoint: f[1].parse().ok()?,
        srtt: n(2)?,
        rttvar: n(3)?,
        rto: n(4)?,
        pull_srtt: n(5)?,
        pull_rto: n(6)?,
        pull_blocks: f[7].parse().ok()?,
        extensions: omx_wire::Extensions::from_bits(f[8].parse().ok()?),
        checksum: f[9] == "1",
        stripe_links: f.get(10).map_or(Some(0), |s| s.parse().ok())?,
    })
}

#[derive(Clone, Debug)]
pub struct BoardDir {
    path: PathBuf,
}

pub fn mac_hex(nic: NicId) -> String {
    format!("{:012x}", nic)
}

/// How local peers reach an open endpoint (see `BoardDir::reach`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalReach {
    Opening,
    Inbox { uid: u32 },
    Network,
}

/// Attempts, 1 ms apart, to take a named endpoint's lock held by a probe.
const PROBE_RETRIES: u32 = 20;

impl BoardDir {
    /// The board's directory under `OMX_STATE_DIR` (default `/dev/shm`); a stale peer
    /// table found there is discarded (see the module comment).
    pub fn open(nic: NicId) -> io::Result<Self> {
        Self::open_in(&crate::config::state_dir(), nic)
    }

    pub fn open_in(base: &Path, nic: NicId) -> io::Result<Self> {
        let path = base.join(format!("omx-{}", mac_hex(nic)));
        fs::create_dir_all(&path)?;
        let dir = BoardDir { path };
        dir.discard_stale_peers(STALE_PEERS_AFTER);
        dir.remove_dead_temps();
        Ok(dir)
    }

    /// Removes the temporary files of [`BoardDir::write_atomic`] and
    /// [`BoardDir::publish_endpoint`] (`.NAME.PID`, written then renamed) whose writer
    /// is gone: a process killed between the two steps (a `SIGKILL` during its
    /// once-a-second publish) would leave them for ever. Here and in the per-user
    /// directories; a live writer's file is left alone.
    pub fn remove_dead_temps(&self) {
        let mut dirs = vec![self.path.clone()];
        if let Ok(entries) = fs::read_dir(&self.path) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("shm-"))
                    .map(|e| e.path()),
            );
        }
        for dir in dirs {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                let pid = name
                    .to_str()
                    .filter(|n| n.starts_with('.'))
                    .and_then(|n| n.rsplit_once('.'))
                    .and_then(|(_, pid)| pid.parse::<libc::pid_t>().ok())
                    .filter(|&pid| pid > 0);
                if pid.is_some_and(|pid| !process_alive(pid)) {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
    }

    /// Time since the shared peer table last changed (None: there is none).
    pub fn peers_age(&self) -> Option<Duration> {
        let modified = fs::metadata(self.path.join("peers"))
            .ok()?
            .modified()
            .ok()?;
        Some(
            SystemTime::now()
                .duration_since(modified)
                .unwrap_or_default(),
        )
    }

    /// Whether a live process holds one of the board's locks (an endpoint, the raw
    /// endpoint or the board service). Read from `/proc/locks`, so that asking never
    /// takes a lock an opening endpoint may want at that instant; true when it cannot
    /// be told.
    pub fn in_use(&self) -> bool {
        let Ok(locks) = fs::read_to_string("/proc/locks") else {
            return true;
        };
        let Ok(entries) = fs::read_dir(&self.path) else {
            return true;
        };
        let held: Vec<(u32, u32, u64)> = locks.lines().filter_map(parse_lock_line).collect();
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.ends_with(".lock")
                && name != "totals.lock"
                && e.metadata().is_ok_and(|m| {
                    let key = (libc::major(m.dev()), libc::minor(m.dev()), m.ino());
                    held.contains(&key)
                })
        })
    }

    /// Removes the shared peer table when it is older than `max_age` and no process of
    /// this host uses the board; true if it did.
    pub fn discard_stale_peers(&self, max_age: Duration) -> bool {
        let stale = self.peers_age().is_some_and(|age| age > max_age) && !self.in_use();
        stale && fs::remove_file(self.path.join("peers")).is_ok()
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Takes endpoint `want` (or the first free one when `None`).
    pub fn lock_endpoint(&self, want: Option<u8>, max: u8) -> io::Result<Option<(u8, LockFile)>> {
        let Some(i) = want else {
            for i in 0..max {
                if let Some(l) = try_flock(&self.path.join(format!("ep{i}.lock")))? {
                    return Ok(Some((i, l)));
                }
            }
            return Ok(None);
        };
        // `endpoint_open` probes by taking the lock for an instant (a board answering
        // frames for a closed endpoint does, once per frame), so a named endpoint that
        // looks busy is tried again for a few milliseconds before it is called busy.
        let path = self.path.join(format!("ep{i}.lock"));
        for _ in 0..PROBE_RETRIES {
            if let Some(l) = try_flock(&path)? {
                return Ok(Some((i, l)));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(try_flock(&path)?.map(|l| (i, l)))
    }

    /// The lowest endpoint index below `max` that no process holds, probed by taking
    /// each lock for an instant (as the board service's probe does; a named open
    /// retries past it). A hint for spreading opens over boards, not a reservation.
    pub fn lowest_free_endpoint(&self, max: u8) -> Option<u8> {
        (0..max).find(|i| {
            matches!(
                try_flock(&self.path.join(format!("ep{i}.lock"))),
                Ok(Some(_))
            )
        })
    }

    /// Records, once an endpoint's open is complete, whether local peers reach it
    /// through a shared-memory inbox of user `inbox_uid` or only through the network.
    /// Until then a held lock without an inbox means "still opening" (see `reach`).
    pub fn mark_reach(&self, i: u8, inbox_uid: Option<u32>) {
        let text = match inbox_uid {
            Some(uid) => format!("inbox {uid}\n"),
            None => "network\n".to_string(),
        };
        let _ = self.write_atomic(&format!("ep{i}.reach"), &text);
    }

    /// Forgets endpoint `i`'s reach record (on close, and by the next opener before
    /// anything else: a dead process's record must not describe the new endpoint).
    pub fn clear_reach(&self, i: u8) {
        let _ = fs::remove_file(self.path.join(format!("ep{i}.reach")));
    }

    /// How an open endpoint `i` is reached by local peers; `Opening` until its open is
    /// complete (or when it could not say: an endpoint opened through `omxd`).
    pub fn reach(&self, i: u8) -> LocalReach {
        match fs::read_to_string(self.path.join(format!("ep{i}.reach"))) {
            Ok(t) => match t.trim().strip_prefix("inbox ") {
                Some(uid) => uid
                    .parse()
                    .map_or(LocalReach::Network, |uid| LocalReach::Inbox { uid }),
                None => LocalReach::Network,
            },
            Err(_) => LocalReach::Opening,
        }
    }

    /// Whether some process holds endpoint `i` (its lock is taken). Takes the lock for
    /// an instant when it is free (see `lock_endpoint`).
    pub fn endpoint_open(&self, i: u8) -> bool {
        matches!(try_flock(&self.path.join(format!("ep{i}.lock"))), Ok(None))
    }

    /// Indexes below `max` currently open by any process on this host.
    pub fn open_endpoints(&self, max: u8) -> Vec<u8> {
        (0..max).filter(|&i| self.endpoint_open(i)).collect()
    }

    /// The board's single raw endpoint.
    pub fn try_lock_raw(&self) -> io::Result<Option<LockFile>> {
        try_flock(&self.path.join("raw.lock"))
    }

    pub fn try_lock_board(&self) -> io::Result<Option<LockFile>> {
        try_flock(&self.path.join("board.lock"))
    }

    fn write_atomic(&self, name: &str, text: &str) -> io::Result<()> {
        let tmp = self.path.join(format!(".{name}.{}", std::process::id()));
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        fs::rename(tmp, self.path.join(name))
    }

    /// Publishes an endpoint's info for the tools. An endpoint opened through
    /// `omxd` (`in_user_dir`) cannot write the board directory: it writes into its
    /// user's shared-memory directory, which the tools read when the daemon's
    /// owner record names that user.
    pub fn publish_endpoint(&self, info: &EndpointInfo, in_user_dir: bool) -> io::Result<()> {
        let mut text = format!("{}\n{}\n", info.pid, info.command);
        for (n, v) in &info.counters {
            text.push_str(&format!("{n} {v}\n"));
        }
        for p in &info.paths {
            text.push_str(&format_path(p));
        }
        let name = format!("ep{}.info", info.index);
        if in_user_dir {
            // SAFETY: getuid cannot fail.
            let dir = self.user_dir(unsafe { libc::getuid() });
            let tmp = dir.join(format!(".{name}.{}", std::process::id()));
            fs::write(&tmp, text)?;
            return fs::rename(tmp, dir.join(name));
        }
        self.write_atomic(&name, &text)
    }

    pub fn unpublish_endpoint(&self, index: u8, in_user_dir: bool) {
        let dir = if in_user_dir {
            // SAFETY: getuid cannot fail.
            self.user_dir(unsafe { libc::getuid() })
        } else {
            self.path.clone()
        };
        let _ = fs::remove_file(dir.join(format!("ep{index}.info")));
    }

    /// The per-user directory (shared-memory inboxes, relayed endpoints' info).
    pub fn user_dir(&self, uid: u32) -> PathBuf {
        self.path.join(format!("shm-{uid}"))
    }

    /// `omxd` records which user holds a relayed endpoint (root-owned file).
    pub fn set_endpoint_owner(&self, index: u8, uid: Option<u32>) {
        let p = self.path.join(format!("ep{index}.owner"));
        match uid {
            Some(u) => {
                let _ = self.write_atomic(&format!("ep{index}.owner"), &format!("{u}\n"));
            }
            None => {
                let _ = fs::remove_file(p);
            }
        }
    }

    fn endpoint_info_text(&self, i: u8) -> Option<String> {
        if let Ok(t) = fs::read_to_string(self.path.join(format!("ep{i}.info"))) {
            return Some(t);
        }
        let owner = fs::read_to_string(self.path.join(format!("ep{i}.owner"))).ok()?;
        let uid: u32 = owner.trim().parse().ok()?;
        fs::read_to_string(self.user_dir(uid).join(format!("ep{i}.info"))).ok()
    }

    /// Endpoints whose owner is alive (its lock is held).
    pub fn endpoints(&self) -> Vec<EndpointInfo> {
        let mut out = Vec::new();
        for i in 0..=255u8 {
            let Some(text) = self.endpoint_info_text(i) else {
                continue;
            };
            // If we can take its lock, the owner is gone: a stale file.
            if let Ok(Some(_l)) = try_flock(&self.path.join(format!("ep{i}.lock"))) {
                let _ = fs::remove_file(self.path.join(format!("ep{i}.info")));
                continue;
            }
            let mut lines = text.lines();
            let pid = lines.next().and_then(|l| l.parse().ok()).unwrap_or(0);
            let command = lines.next().unwrap_or("").to_string();
            let mut counters = Vec::new();
            let mut paths = Vec::new();
            for l in lines {
                if let Some(rest) = l.strip_prefix("path ") {
                    paths.extend(parse_path(rest));
                } else if let Some((n, v)) = l.split_once(' ') {
                    counters.extend(v.parse().ok().map(|v| (n.to_string(), v)));
                }
            }
            out.push(EndpointInfo {
                index: i,
                pid,
                command,
                counters,
                paths,
            });
        }
        out
    }

    pub fn save_peers(&self, peers: &[(NicId, Option<String>)]) -> io::Result<()> {
        let mut text = String::new();
        for (nic, name) in peers {
            let name = name.as_deref().unwrap_or("-");
            text.push_str(&format!("{} {name}\n", fmt_nic(*nic)));
        }
        self.write_atomic("peers", &text)
    }

    /// What the boards heard by discovery offer (`peer_offers`: one line per board,
    /// `MAC EXTENSIONS`, `-` for a board that advertises nothing), for `omx_info`.
    pub fn save_peer_offers(&self, offers: &[(NicId, Option<Extensions>)]) -> io::Result<()> {
        let mut text = String::new();
        for (nic, ext) in offers {
            let ext = ext.map_or("-".to_string(), |e| e.to_string());
            text.push_str(&format!("{} {ext}\n", fmt_nic(*nic)));
        }
        self.write_atomic("peer_offers", &text)
    }

    pub fn load_peer_offers(&self) -> HashMap<NicId, Option<Extensions>> {
        let text = fs::read_to_string(self.path.join("peer_offers")).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let (mac, ext) = l.split_once(' ')?;
                let ext = match ext {
                    "-" => None,
                    e => Some(Extensions::parse(e)?),
                };
                Some((parse_mac(mac)?, ext))
            })
            .collect()
    }

    pub fn load_peers(&self) -> Vec<(NicId, Option<String>)> {
        let text = fs::read_to_string(self.path.join("peers")).unwrap_or_default();
        parse_peers(&text).unwrap_or_default()
    }
}

/// Whether process `pid` exists (one that exists but is not ours counts).
fn process_alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The file a `/proc/locks` line is about, as (major, minor, inode): the lock holder's
/// line reads `1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF` (device numbers in hex);
/// waiters' lines (`1: -> FLOCK ...`) are skipped.
fn parse_lock_line(line: &str) -> Option<(u32, u32, u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(1) == Some(&"->") {
        return None;
    }
    let mut id = fields.get(5)?.split(':');
    let major = u32::from_str_radix(id.next()?, 16).ok()?;
    let minor = u32::from_str_radix(id.next()?, 16).ok()?;
    let inode = id.next()?.parse().ok()?;
    Some((major, minor, inode))
}

/// A nic id as the peer files write it: its MAC, `xx:xx:xx:xx:xx:xx`.
fn fmt_nic(nic: NicId) -> String {
    let m = omx_proto::mac_from_nic_id(nic);
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

pub fn parse_mac(s: &str) -> Option<NicId> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    let mut v = 0u64;
    for p in parts {
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        v = (v << 8) | u64::from_str_radix(p, 16).ok()?;
    }
    Some(v)
}

/// The original's peers file: `MAC name` per line, `#` comments and blank lines ignored.
/// A name of `-` means unnamed. An unparsable line is an error naming the line.
pub fn parse_peers(text: &str) -> Result<Vec<(NicId, Option<String>)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let mut it = l.split_whitespace();
        let mac = it
            .next()
            .and_then(parse_mac)
            .ok_or(format!("line {}: bad MAC address", i + 1))?;
        let name = it.next().filter(|n| *n != "-").map(str::to_string);
        if it.next().is_some() {
            return Err(format!("line {}: trailing text", i + 1));
        }
        out.push((mac, name));
    }
    Ok(out)
}

/// Counters of a board: live endpoints plus those of endpoints already closed, minus
/// the baseline recorded by the last clear.
impl BoardDir {
    fn read_counter_file(&self, name: &str) -> Vec<(String, u64)> {
        fs::read_to_string(self.path.join(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (n, v) = l.split_once(' ')?;
                Some((n.to_string(), v.parse().ok()?))
            })
            .collect()
    }

    fn write_counter_file(&self, name: &str, c: &[(String, u64)]) -> io::Result<()> {
        let text: String = c.iter().map(|(n, v)| format!("{n} {v}\n")).collect();
        self.write_atomic(name, &text)
    }

    fn with_totals_lock<T>(&self, f: impl FnOnce() -> T) -> io::Result<T> {
        let l = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.path.join("totals.lock"))?;
        // SAFETY: blocking flock on a descriptor we own; released when `l` drops.
        unsafe { libc::flock(l.as_raw_fd(), libc::LOCK_EX) };
        Ok(f())
    }

    /// Adds a closing endpoint's counters to the board's totals.
    pub fn accumulate_closed(&self, counters: &[(String, u64)]) -> io::Result<()> {
        self.with_totals_lock(|| {
            let mut t = self.read_counter_file("totals");
            add_into(&mut t, counters);
            self.write_counter_file("totals", &t)
        })?
    }

    /// Current board counters (live + closed - baseline), in `names` order.
    pub fn board_counters(&self, names: &[&str]) -> Vec<(String, u64)> {
        let mut sum: Vec<(String, u64)> = names.iter().map(|n| (n.to_string(), 0)).collect();
        add_into(&mut sum, &self.read_counter_file("totals"));
        for e in self.endpoints() {
            add_into(&mut sum, &e.counters);
        }
        let base = self.read_counter_file("baseline");
        for (n, v) in sum.iter_mut() {
            if let Some((_, b)) = base.iter().find(|(bn, _)| bn == n) {
                *v = v.saturating_sub(*b);
            }
        }
        sum
    }

    /// Makes the current values the new zero.
    pub fn clear_counters(&self, names: &[&str]) -> io::Result<()> {
        let mut now: Vec<(String, u64)> = names.iter().map(|n| (n.to_string(), 0)).collect();
        add_into(&mut now, &self.read_counter_file("totals"));
        for e in self.endpoints() {
            add_into(&mut now, &e.counters);
        }
        self.write_counter_file("baseline", &now)
    }

    /// A board name set with `omx_hostname -n`, overriding `OMX_HOSTNAME`.
    pub fn saved_name(&self) -> Option<String> {
        fs::read_to_string(self.path.join("name"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    pub fn save_name(&self, name: &str) -> io::Result<()> {
        self.write_atomic("name", &format!("{name}\n"))
    }
}

fn add_into(sum: &mut Vec<(String, u64)>, add: &[(String, u64)]) {
    for (n, v) in add {
        match sum.iter_mut().find(|(s, _)| s == n) {
            Some((_, x)) => *x += v,
            None => sum.push((n.clone(), *v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_file_round_trip_and_errors() {
        let p = parse_peers("# c\n\n02:00:00:00:00:01 h0:0\n0a:0b:0c:0d:0e:0f -\n").unwrap();
        assert_eq!(
            p,
            vec![
                (0x020000000001, Some("h0:0".into())),
                (0x0a0b0c0d0e0f, None)
            ]
        );
        assert!(parse_peers("zz:00 x\n").is_err());
        assert!(parse_peers("02:00:00:00:00:01 a b\n").is_err());
    }

    const NIC: NicId = 0x0200_0000_0001;

    fn board_with_peers(base: &Path) -> BoardDir {
        let dir = BoardDir::open_in(base, NIC).unwrap();
        dir.save_peers(&[
            (NIC, Some("me:0".into())),
            (0x0200_0000_0002, Some("gone:0".into())),
        ])
        .unwrap();
        dir
    }

    fn age_peers_file(dir: &BoardDir, by: Duration) {
        let f = File::options()
            .write(true)
            .open(dir.path().join("peers"))
            .unwrap();
        f.set_modified(SystemTime::now() - by).unwrap();
    }

    fn temp_base(tag: &str) -> PathBuf {
        let base = std::env::temp_dir().join(format!("omx-registry-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        base
    }

    #[test]
    fn temporary_files_of_dead_writers_are_removed_at_open() {
        let base = temp_base("temps");
        let dir = BoardDir::open_in(&base, 0x0200_0000_0001).unwrap();
        // A process that surely is gone: a child, waited for.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let user = dir.user_dir(0);
        fs::create_dir_all(&user).unwrap();
        let names = [
            (dir.path().join(format!(".ep6.info.{dead}")), false),
            (user.join(format!(".ep2.info.{dead}")), false),
            (dir.path().join(format!(".peers.{dead}")), false),
            (dir.path().join(format!(".ep6.info.{me}")), true),
            (dir.path().join("ep6.info"), true),
            (dir.path().join(".hidden"), true),
        ];
        for (p, _) in &names {
            fs::write(p, "x").unwrap();
        }
        let _again = BoardDir::open_in(&base, 0x0200_0000_0001).unwrap();
        for (p, kept) in &names {
            assert_eq!(p.exists(), *kept, "{}", p.display());
        }
        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn an_unused_boards_old_peer_table_is_discarded_at_open() {
        let base = temp_base("stale");
        let dir = board_with_peers(&base);
        age_peers_file(&dir, STALE_PEERS_AFTER + Duration::from_secs(60));
        assert!(!dir.in_use(), "no process holds a lock of this board");
        let reopened = BoardDir::open_in(&base, NIC).unwrap();
        assert_eq!(reopened.load_peers(), vec![]);
        assert_eq!(reopened.peers_age(), None);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_recent_peer_table_is_kept_at_open() {
        let base = temp_base("recent");
        let dir = board_with_peers(&base);
        age_peers_file(&dir, STALE_PEERS_AFTER / 2);
        let reopened = BoardDir::open_in(&base, NIC).unwrap();
        assert_eq!(reopened.load_peers().len(), 2);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn an_old_peer_table_of_a_board_in_use_is_kept() {
        let base = temp_base("inuse");
        let dir = board_with_peers(&base);
        age_peers_file(&dir, STALE_PEERS_AFTER * 2);
        let (_, lock) = dir
            .lock_endpoint(Some(3), 32)
            .unwrap()
            .expect("endpoint 3 free");
        assert!(dir.in_use(), "endpoint 3's lock is held");
        let reopened = BoardDir::open_in(&base, NIC).unwrap();
        assert_eq!(reopened.load_peers().len(), 2);
        drop(lock);
        assert!(!dir.in_use(), "the lock was released");
        assert!(dir.discard_stale_peers(STALE_PEERS_AFTER));
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn proc_locks_lines() {
        assert_eq!(
            parse_lock_line("1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"),
            Some((0, 0x1a, 5678))
        );
        assert_eq!(
            parse_lock_line("1: -> FLOCK  ADVISORY  WRITE 99 00:1a:5678 0 EOF"),
            None
        );
        assert_eq!(parse_lock_line("garbage"), None);
    }
}
