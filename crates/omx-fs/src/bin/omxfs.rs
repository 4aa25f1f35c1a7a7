//! omxfs: mounts an omxfsd export (docs/FILES.md).

use omx_fs::client::conn::Conn;
use omx_fs::client::{OmxFs, Options};
use omx_fs::proto::{MAX_IO, SERVER_ENDPOINT};
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::time::Duration;

const USAGE: &str = "usage: omxfs HOST:NAME MOUNTPOINT [-f] [-o OPTION[,OPTION...]]\n\
HOST as omx_perf -d takes it without the board (h0, or h0:1 for board 1); NAME an export.\n\
Options: attr_timeout=SECS (1), entry_timeout=SECS (1), timeout=SECS (10, a dead server's\n\
requests fail with EIO after it), endpoint=N (server endpoint, 7), board=N (local, 0), ro.";

struct Args {
    host: String,
    export: String,
    mountpoint: String,
    foreground: bool,
    opts: Options,
    timeout: Duration,
    endpoint: u8,
    board: u32,
    read_only: bool,
}

fn parse() -> Args {
    let (mut pos, mut foreground, mut o) = (Vec::new(), false, Vec::new());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-f" => foreground = true,
            "-o" => o.extend(
                args.next()
                    .unwrap_or_else(|| die(USAGE))
                    .split(',')
                    .map(String::from),
            ),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            s if s.starts_with('-') => die(&format!("unknown option {s}\n{USAGE}")),
            _ => pos.push(a),
        }
    }
    let [spec, mountpoint] = <[String; 2]>::try_from(pos).unwrap_or_else(|_| die(USAGE));
    let (host, export) = spec
        .rsplit_once(':')
        .filter(|(h, e)| !h.is_empty() && !e.is_empty())
        .unwrap_or_else(|| die(&format!("{spec}: expected HOST:NAME\n{USAGE}")));
    let mut a = Args {
        host: host.into(),
        export: export.into(),
        mountpoint,
        foreground,
        opts: Options {
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
        },
        timeout: Duration::from_secs(10),
        endpoint: SERVER_ENDPOINT,
        board: 0,
        read_only: false,
    };
    for opt in o.iter().filter(|s| !s.is_empty()) {
        let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
        let secs = || {
            v.parse::<f64>()
                .ok()
                .filter(|s| *s >= 0.0)
                .map(Duration::from_secs_f64)
                .unwrap_or_else(|| die(&format!("{k} needs seconds")))
        };
        match k {
            "attr_timeout" => a.opts.attr_timeout = secs(),
            "entry_timeout" => a.opts.entry_timeout = secs(),
            "timeout" => a.timeout = secs().max(Duration::from_secs(1)),
            "endpoint" => a.endpoint = v.parse().unwrap_or_else(|_| die("endpoint=N")),
            "board" => a.board = v.parse().unwrap_or_else(|_| die("board=N")),
            "ro" => a.read_only = true,
            _ => die(&format!("unknown mount option {k}\n{USAGE}")),
        }
    }
    a
}

fn main() {
    let a = parse();
    // Fork before any thread exists: the child mounts and serves; the parent returns
    // once the child says the mount is up (or exits with its error).
    let notify = if a.foreground {
        None
    } else {
        let mut fds = [0; 2];
        // SAFETY: pipe fills two descriptors.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            die("pipe failed");
        }
        // SAFETY: single-threaded here.
        match unsafe { libc::fork() } {
            -1 => die("fork failed"),
            0 => {
                // SAFETY: descriptors from pipe above; setsid detaches from the terminal.
                unsafe {
                    libc::close(fds[0]);
                    libc::setsid();
                }
                // SAFETY: the write end, owned by the child from here.
                Some(unsafe { std::fs::File::from_raw_fd(fds[1]) })
            }
            _ => {
                // SAFETY: as above.
                unsafe { libc::close(fds[1]) };
                // SAFETY: the read end, owned here.
                let mut r = unsafe { std::fs::File::from_raw_fd(fds[0]) };
                let mut b = [0u8; 1];
                let ok = r.read(&mut b).map(|n| n == 1).unwrap_or(false);
                std::process::exit(if ok { 0 } else { 1 });
            }
        }
    };
    let ep = omx_fs::open_endpoint(a.board, None).unwrap_or_else(|e| die(&e));
    let nic = omx_runtime::ipmap::resolve_node(ep.runtime(), &a.host, Duration::from_secs(10))
        .unwrap_or_else(|e| die(&format!("{}: {e}", a.host)));
    let conn = Conn::new(ep, nic, a.endpoint, &a.export, a.timeout);
    let c = conn.clone();
    std::thread::spawn(move || c.run_completions());
    conn.hello()
        .unwrap_or_else(|e| die(&format!("{}:{}: {e}", a.host, a.export)));
    use fuser::MountOption as M;
    let mut mo = vec![
        M::FSName(format!("{}:{}", a.host, a.export)),
        M::Subtype("omxfs".into()),
        M::DefaultPermissions,
    ];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        mo.push(M::AllowOther);
    }
    if a.read_only || *conn.read_only.lock() {
        mo.push(M::RO);
    }
    let fs = OmxFs::new(conn, a.opts);
    let notifier = fs.notifier_slot();
    let mut session = fuser::Session::new(fs, &a.mountpoint, &mo)
        .unwrap_or_else(|e| die(&format!("mount {}: {e}", a.mountpoint)));
    let _ = notifier.set(session.notifier());
    if let Some(mut n) = notify {
        let _ = n.write_all(b"1");
    }
    // The stat it takes is answered by the session: from a thread of its own.
    let mountpoint = a.mountpoint.clone();
    std::thread::spawn(move || set_read_ahead(&mountpoint));
    if let Err(e) = session.run() {
        die(&format!("{e}"));
    }
}

/// Read-ahead of one request (`MAX_IO`) on the mount: the kernel's default of 128 KiB
/// cuts a sequential read into eight requests per MiB, each a round trip. Best effort
/// (the mount's `/sys/class/bdi` entry is root's to write).
fn set_read_ahead(mountpoint: &str) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(mountpoint) else {
        return;
    };
    let (major, minor) = (libc::major(m.dev()), libc::minor(m.dev()));
    let path = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    let _ = std::fs::write(path, format!("{}", MAX_IO / 1024));
}

fn die(msg: &str) -> ! {
    eprintln!("omxfs: {msg}");
    std::process::exit(1)
}
