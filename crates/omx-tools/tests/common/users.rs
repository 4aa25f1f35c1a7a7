//! Ordinary users for the `omxd` tests: test accounts, binaries they can run, and
//! the daemon's binaries.

use super::*;
use std::path::Path;

pub const OMXD: &str = env!("CARGO_BIN_EXE_omxd");
pub const OMX_ATTACK: &str = env!("CARGO_BIN_EXE_omx_attack");
/// Test users (system accounts without home or shell), created when missing.
pub const USER_A: &str = "omxtest-a";
pub const USER_B: &str = "omxtest-b";

pub fn ensure_user(name: &str) -> bool {
    let exists = |n: &str| {
        Command::new("id")
            .arg(n)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if exists(name) {
        return true;
    }
    let made = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ])
        .status()
        .is_ok_and(|s| s.success());
    made && exists(name)
}

pub fn uid_of(name: &str) -> u32 {
    let out = Command::new("id")
        .args(["-u", name])
        .output()
        .expect("id -u");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("uid")
}

/// Users can neither read the build tree of every checkout nor be sure to; the
/// binaries they run are copied to a world-readable directory.
pub struct Bins {
    pub dir: PathBuf,
}

impl Bins {
    pub fn new(tag: &str, bins: &[&str]) -> Bins {
        let dir = std::env::temp_dir().join(format!("omxd-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for b in bins {
            let name = Path::new(b).file_name().unwrap();
            std::fs::copy(b, dir.join(name)).unwrap();
        }
        set_mode(&dir, 0o755);
        Bins { dir }
    }
    pub fn path(&self, full: &str) -> String {
        let name = Path::new(full).file_name().unwrap();
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Bins {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub fn skip_without_users() -> bool {
    if skip() {
        return true;
    }
    let has_setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_setpriv || !ensure_user(USER_A) || !ensure_user(USER_B) {
        return skip_test("needs setpriv and useradd to run as unprivileged users");
    }
    false
}

/// Host `i`'s board directory (`omx-<mac>` in the hosts' state directory).
pub fn board_dir(h: &Hosts, i: usize) -> PathBuf {
    let mac = h.mac(i).iter().fold(0u64, |a, b| (a << 8) | u64::from(*b));
    h.state.join(format!("omx-{mac:012x}"))
}

/// omxd's counters on host `i` (`omxd.stats` in the board directory, rewritten
/// once a second); empty when there is none.
pub fn daemon_stats(h: &Hosts, i: usize) -> Vec<(String, u64)> {
    std::fs::read_to_string(board_dir(h, i).join("omxd.stats"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (n, v) = l.split_once(' ')?;
            Some((n.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}
