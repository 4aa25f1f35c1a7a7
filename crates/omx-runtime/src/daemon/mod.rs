//! `omxd`: the privileged per-host service for processes without CAP_NET_RAW.
//!
//! It attaches the boards, runs their board service (discovery, name queries,
//! nacks for closed endpoints) on a reserved endpoint, and opens endpoints for
//! unprivileged processes: each gets a relay connection (see
//! `omx_transport::relay`) behind which the daemon keeps a packet socket whose
//! kernel filter passes only frames addressed to that endpoint. Every frame a
//! client sends is checked before it reaches the wire: our EtherType, our
//! board's MAC as source, an endpoint packet type (never RAW, host queries or
//! bundles), and the client's own endpoint as source endpoint. So a client
//! receives only its endpoint's frames and cannot speak as another endpoint.
//! Endpoint indexes are owned through the daemon's locks, released when the
//! client's connection closes (including when it is killed).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use omx_transport::relay::{self, OpenReply, OpenRequest, Refusal};
use omx_transport::{EndpointFilter, PacketSocket, SocketOptions, ETH_HEADER_LEN};
use omx_wire::peek;

use crate::config::Transport;
use crate::runtime::{Board, Runtime, MAX_ENDPOINTS};
use crate::Endpoint;

mod xdp;
use xdp::XdpHub;

/// Endpoint index the daemon's board service holds on every board; clients
/// get the others.
pub const SERVICE_ENDPOINT: u8 = MAX_ENDPOINTS - 1;
/// Default name of the daemon's socket: an abstract unix socket (`@`), so each
/// network namespace (each host) has its own and none is left behind on exit.
pub const DEFAULT_SOCKET: &str = "@omxd";
/// Key of the service endpoints (they never receive application messages).
const SERVICE_KEY: u32 = 0x6f6d_7864;
/// Frames moved per direction per relay pass.
const RELAY_BATCH: usize = 64;

/// Where the daemon listens, or where clients find it (`OMX_DAEMON_SOCKET`: a
/// file path, or `@name` for an abstract socket).
pub fn socket_path() -> PathBuf {
    PathBuf::from(crate::config::settings::text("OMX_DAEMON_SOCKET").unwrap_or_default())
}

/// Daemon settings (`omxd` command line).
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub socket: PathBuf,
    /// Keep polling a relay this long after it moved a frame before sleeping
    /// (lower latency, one CPU per busy client); zero sleeps at once.
    pub spin: Duration,
    pub verbose: bool,
    /// Most endpoints one user may hold at once on this host (0: no limit), so that
    /// one user cannot take every endpoint of a shared node.
    pub max_per_user: usize,
}

/// Why a client frame was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameRefusal {
    Short,
    EtherType,
    /// Source MAC other than the board's.
    SourceMac,
    /// RAW, host query/reply, bundle or undefined type.
    Type,
    /// Source endpoint other than the client's.
    SourceEndpoint,
}

/// Checks a frame an unprivileged client asks to send as endpoint `endpoint`
/// of the board whose MAC is `mac`: an endpoint packet type whose source endpoint
/// field ([`peek::src_endpoint`]) is the client's; a PULL_REPLY names no source
/// (the puller checks its handle and magic, which only the pull's real target was told).
pub fn check_client_frame(
    frame: &[u8],
    mac: [u8; 6],
    ethertype: u16,
    endpoint: u8,
) -> Result<(), FrameRefusal> {
    if frame.len() <= peek::SRC_ENDPOINT_OFFSET {
        return Err(FrameRefusal::Short);
    }
    if peek::ethertype(frame) != Some(ethertype) {
        return Err(FrameRefusal::EtherType);
    }
    if frame[6..12] != mac {
        return Err(FrameRefusal::SourceMac);
    }
    if !peek::packet_type(frame).is_some_and(peek::is_endpoint_type) {
        return Err(FrameRefusal::Type);
    }
    match peek::src_endpoint(frame) {
        Some(src) if src != endpoint => Err(FrameRefusal::SourceEndpoint),
        _ => Ok(()),
    }
}

/// What the daemon did, for `omxd.stats` and the tests.
#[derive(Default, Debug)]
pub struct DaemonStats {
    /// Endpoints held per uid.
    held: std::sync::Mutex<std::collections::HashMap<u32, usize>>,
    pub opens: AtomicU64,
    pub open_refusals: AtomicU64,
    pub frames_to_wire: AtomicU64,
    pub frames_to_clients: AtomicU64,
    pub refused_short: AtomicU64,
    pub refused_ethertype: AtomicU64,
    pub refused_source_mac: AtomicU64,
    pub refused_type: AtomicU64,
    pub refused_source_endpoint: AtomicU64,
    /// Frames the XSK received for an endpoint whose client had just left.
    pub xdp_unclaimed: AtomicU64,
}

impl DaemonStats {
    /// Counts one more endpoint for `uid` unless it already holds `max` (0: no limit).
    fn take_slot(&self, uid: u32, max: usize) -> bool {
        let mut held = self.held.lock().expect("held lock");
        let n = held.entry(uid).or_insert(0);
        if max > 0 && *n >= max {
            return false;
        }
        *n += 1;
        true
    }

    fn release_slot(&self, uid: u32) {
        let mut held = self.held.lock().expect("held lock");
        if let Some(n) = held.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                held.remove(&uid);
            }
        }
    }

    fn refuse(&self, r: FrameRefusal) {
        let c = match r {
            FrameRefusal::Short => &self.refused_short,
            FrameRefusal::EtherType => &self.refused_ethertype,
            FrameRefusal::SourceMac => &self.refused_source_mac,
            FrameRefusal::Type => &self.refused_type,
            FrameRefusal::SourceEndpoint => &self.refused_source_endpoint,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// `name value` lines.
    pub fn render(&self) -> String {
        let rows = [
            ("opens", &self.opens),
            ("open_refusals", &self.open_refusals),
            ("frames_to_wire", &self.frames_to_wire),
            ("frames_to_clients", &self.frames_to_clients),
            ("refused_short", &self.refused_short),
            ("refused_ethertype", &self.refused_ethertype),
            ("refused_source_mac", &self.refused_source_mac),
            ("refused_type", &self.refused_type),
            ("refused_source_endpoint", &self.refused_source_endpoint),
            ("xdp_unclaimed", &self.xdp_unclaimed),
        ];
        rows.iter()
            .map(|(n, v)| format!("{n} {}\n", v.load(Ordering::Relaxed)))
            .collect()
    }
}

/// Makes the board's state directory root-owned and not writable by others,
/// with every lock file created owner-only in advance: an unprivileged user
/// can neither take an endpoint lock nor squat a lock file to block one.
fn secure_board_dir(board: &Board) -> io::Result<()> {
    let dir = board.dir.path();
    std::os::unix::fs::chown(dir, Some(0), Some(0))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let locks = (0..MAX_ENDPOINTS)
        .map(|i| format!("ep{i}.lock"))
        .chain(["board.lock".to_string(), "raw.lock".to_string()]);
    for name in locks {
        let p = dir.join(name);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)?;
        std::os::unix::fs::fchown(&f, Some(0), Some(0))?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

/// The per-user shared-memory directory of `uid` under the board directory,
/// created for the user (0700) since users cannot create files in the
/// daemon's board directory.
fn user_shm_dir(board: &Board, uid: u32, gid: u32) -> io::Result<()> {
    let d = board.dir.path().join(format!("shm-{uid}"));
    match std::fs::create_dir(&d) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    std::os::unix::fs::chown(&d, Some(uid), Some(gid))?;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))
}

/// Runs the daemon: prepares the boards, opens their service endpoints and
/// serves clients until the process is killed. Needs root.
pub fn run(rt: Arc<Runtime>, cfg: DaemonConfig) -> io::Result<()> {
    if !relay::can_open_packet_socket() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "omxd needs CAP_NET_RAW (run it as root)",
        ));
    }
    if rt.cfg.daemon == crate::DaemonUse::Always {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "OMX_DAEMON=always would make omxd its own client",
        ));
    }
    if rt.boards.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "no board attached"));
    }
    // The socket first: a second daemon on this host stops here, saying who runs.
    block_stop_signals();
    let (listener, files) = take_socket(&cfg.socket, &rt)?;
    let stats = Arc::new(DaemonStats::default());
    let hubs = Arc::new(start_xdp_hubs(&rt, &cfg, &stats));
    let mut services = Vec::new();
    for b in &rt.boards {
        secure_board_dir(b)?;
        let ep = Endpoint::open(&rt, b.index, Some(SERVICE_ENDPOINT), SERVICE_KEY)
            .map_err(|e| io::Error::other(format!("board {}: service endpoint: {e}", b.name)))?;
        if cfg.verbose {
            eprintln!(
                "omxd: board {} ({}) on {}, service endpoint {SERVICE_ENDPOINT}",
                b.index, b.name, b.iface.name
            );
        }
        services.push(ep);
    }
    spawn_stop_waiter(files.0.clone(), cfg.verbose)?;
    spawn_stats_writer(files.0.stats.clone(), stats.clone())?;
    if cfg.verbose {
        eprintln!("omxd: listening on {}", cfg.socket.display());
    }
    loop {
        let conn = relay::seqpacket_accept(listener.as_raw_fd())?;
        let rt = rt.clone();
        let stats = stats.clone();
        let cfg = cfg.clone();
        let hubs = hubs.clone();
        std::thread::Builder::new()
            .name("omxd-client".into())
            .spawn(move || serve(conn, &rt, &cfg, &stats, &hubs))?;
    }
}

/// With `OMX_TRANSPORT=xdp` or `auto`, one AF_XDP hub per board where XDP can serve
/// (`None`: that board relays over packet sockets, said with `-v`). The daemon's own
/// service endpoints then stay on packet sockets: the XSK of a receive queue is the
/// hub's.
fn start_xdp_hubs(
    rt: &Runtime,
    cfg: &DaemonConfig,
    stats: &Arc<DaemonStats>,
) -> Vec<Option<XdpHub>> {
    if rt.cfg.transport == Transport::Packet {
        return rt.boards.iter().map(|_| None).collect();
    }
    rt.xdp_held_by_daemon.store(true, Ordering::Relaxed);
    rt.boards
        .iter()
        .map(|b| match XdpHub::start(rt, b, cfg.spin, stats.clone()) {
            Ok(h) => {
                if cfg.verbose {
                    let mode = if h.native { "native" } else { "generic" };
                    eprintln!(
                        "omxd: board {} relays over AF_XDP on {} ({mode} mode)",
                        b.name, b.iface.name
                    );
                }
                Some(h)
            }
            Err(e) => {
                if cfg.verbose {
                    eprintln!(
                        "omxd: AF_XDP not available on {} ({e}): relaying over packet sockets",
                        b.iface.name
                    );
                }
                None
            }
        })
        .collect()
}

/// Writes the counters to each board's `omxd.stats` once a second (atomically,
/// by rename).
fn spawn_stats_writer(paths: Vec<PathBuf>, stats: Arc<DaemonStats>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("omxd-stats".into())
        .spawn(move || loop {
            let text = stats.render();
            for path in &paths {
                let tmp = path.with_extension("stats.tmp");
                if std::fs::write(&tmp, &text).is_ok() {
                    let _ = std::fs::rename(&tmp, path);
                }
            }
            std::thread::sleep(Duration::from_secs(1));
        })?;
    Ok(())
}

/// Name of the daemon's counters file in each board directory.
pub const STATS_FILE: &str = "omxd.stats";

/// The files a running daemon owns, removed when it stops.
#[derive(Clone, Debug)]
pub struct DaemonFiles {
    /// The socket file and its identity (device, inode), or `None` for an
    /// abstract socket (which goes away with the process).
    socket: Option<(PathBuf, u64, u64)>,
    stats: Vec<PathBuf>,
}

impl DaemonFiles {
    /// Removes the socket file (only if it is still the one bound here) and the
    /// counters files.
    fn remove(&self) {
        use std::os::unix::fs::MetadataExt;
        if let Some((path, dev, ino)) = &self.socket {
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == *dev && m.ino() == *ino) {
                let _ = std::fs::remove_file(path);
            }
        }
        for p in &self.stats {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Removes the daemon's files when `run` returns with an error.
struct FilesGuard(DaemonFiles);

impl Drop for FilesGuard {
    fn drop(&mut self) {
        self.0.remove();
    }
}

/// Who is at the other end of a daemon socket, for error messages.
fn holder_of(socket: &Path) -> Option<String> {
    let fd = relay::seqpacket_connect(socket).ok()?;
    let (pid, uid, _) = relay::peer_cred(fd.as_raw_fd()).ok()?;
    Some(format!("pid {pid}, uid {uid}"))
}

/// Binds the daemon's socket without ever taking one that is in use: an abstract
/// name is refused by the kernel while bound (it is per network namespace, so each
/// namespace host has its own); an existing socket file is replaced only when
/// nothing answers on it (left by a daemon that was killed).
fn take_socket(socket: &Path, rt: &Runtime) -> io::Result<(OwnedFd, FilesGuard)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let in_use = |holder: Option<String>| {
        let who = holder.map(|h| format!(" ({h})")).unwrap_or_default();
        io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "{} is in use by another omxd{who}: stop it first, or give this one \
                 another socket (-s, OMX_DAEMON_SOCKET)",
                socket.display()
            ),
        )
    };
    let is_abstract = relay::is_abstract_socket(socket);
    if !is_abstract {
        if let Ok(m) = std::fs::symlink_metadata(socket) {
            if !m.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", socket.display()),
                ));
            }
            if let Some(h) = holder_of(socket) {
                return Err(in_use(Some(h)));
            }
            // Nothing listens: a stale file from a daemon that did not clean up.
            std::fs::remove_file(socket)?;
        }
    }
    let listener = match relay::seqpacket_listen(socket, 64) {
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(in_use(holder_of(socket))),
        r => r?,
    };
    let socket_file = if is_abstract {
        None
    } else {
        // Any local user may ask; credentials are checked per connection.
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))?;
        let m = std::fs::symlink_metadata(socket)?;
        Some((socket.to_path_buf(), m.dev(), m.ino()))
    };
    let stats = rt
        .boards
        .iter()
        .map(|b| b.dir.path().join(STATS_FILE))
        .collect();
    let files = DaemonFiles {
        socket: socket_file,
        stats,
    };
    Ok((listener, FilesGuard(files)))
}

/// Blocks the stop signals (SIGTERM, SIGINT, SIGHUP) in the calling thread and in
/// every thread it starts afterwards, so that only `run`'s waiter takes them and
/// can clean up. Call first thing in `main`, before any thread exists.
pub fn block_stop_signals() {
    let set = stop_signals();
    // SAFETY: `set` is an initialised signal set; the old mask is not wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before sigaddset uses it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Waits for a stop signal, removes the daemon's files and exits at once: client
/// connections close with the process, and clients see their relay end.
fn spawn_stop_waiter(files: DaemonFiles, verbose: bool) -> io::Result<()> {
    std::thread::Builder::new()
        .name("omxd-signals".into())
        .spawn(move || {
            let set = stop_signals();
            let mut sig = 0;
            // SAFETY: `set` is initialised and `sig` writable; the signals are
            // blocked in every thread (block_stop_signals), so sigwait takes them.
            while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
            if verbose {
                eprintln!("omxd: signal {sig}, stopping");
            }
            files.remove();
            std::process::exit(0);
        })?;
    Ok(())
}

/// One client connection: the open exchange, then the relay until either side closes.
fn serve(
    conn: OwnedFd,
    rt: &Runtime,
    cfg: &DaemonConfig,
    stats: &DaemonStats,
    hubs: &[Option<XdpHub>],
) {
    let fd = conn.as_raw_fd();
    let refuse = |r: Refusal| {
        stats.open_refusals.fetch_add(1, Ordering::Relaxed);
        let _ = relay::send_open_reply(fd, OpenReply::Refused(r));
    };
    let Ok((pid, uid, gid)) = relay::peer_cred(fd) else {
        return refuse(Refusal::Internal);
    };
    let req = match relay::read_open_request(fd) {
        Ok(Some(r)) => r,
        _ => return refuse(Refusal::BadRequest),
    };
    let Some(at) = rt.boards.iter().position(|b| b.nic_id == req.nic_id) else {
        return refuse(Refusal::NoSuchBoard);
    };
    let (board, hub) = (&rt.boards[at], hubs[at].as_ref());
    if !stats.take_slot(uid, cfg.max_per_user) {
        if cfg.verbose {
            eprintln!(
                "omxd: uid {uid} pid {pid}: at its limit of {} endpoints",
                cfg.max_per_user
            );
        }
        return refuse(Refusal::Busy);
    }
    // Given back however this function returns.
    struct Slot<'a>(&'a DaemonStats, u32);
    impl Drop for Slot<'_> {
        fn drop(&mut self) {
            self.0.release_slot(self.1);
        }
    }
    let _slot = Slot(stats, uid);
    let opened = match open_for_client(rt, board, req, uid, gid, hub.is_none()) {
        Ok(o) => o,
        Err(r) => {
            if cfg.verbose {
                eprintln!("omxd: uid {uid} pid {pid}: {r}");
            }
            return refuse(r);
        }
    };
    let (index, _lock, wire) = opened;
    if relay::send_open_reply(fd, OpenReply::Opened { endpoint: index }).is_err() {
        return;
    }
    stats.opens.fetch_add(1, Ordering::Relaxed);
    board.dir.set_endpoint_owner(index, Some(uid));
    if cfg.verbose {
        eprintln!(
            "omxd: uid {uid} pid {pid} opened {} endpoint {index}",
            board.name
        );
    }
    // The daemon's end may hold a deep queue of frames for a slow client.
    relay::set_send_buffer(fd, 4 << 20, true);
    let mut iface = board.iface.clone();
    iface.mtu = iface.mtu.min(board.wire.mtu);
    let opts = SocketOptions {
        rx_ring_bytes: 0,
        ..SocketOptions::default()
    };
    let Ok(client) = PacketSocket::from_relay(conn, &iface, rt.cfg.wire.ethertype, &opts) else {
        return;
    };
    match (wire, hub) {
        (Some(wire), _) => relay_frames(wire, client, board, index, cfg.spin, stats),
        // Returns once the hub has let go of the client.
        (None, Some(hub)) => {
            let _ = hub.attach(index, client).recv();
        }
        (None, None) => {}
    }
    board.dir.set_endpoint_owner(index, None);
    let _ = std::fs::remove_file(board.dir.user_dir(uid).join(format!("ep{index}.info")));
    if cfg.verbose {
        eprintln!("omxd: uid {uid} pid {pid} closed endpoint {index}");
    }
}

/// The endpoint index, its lock, and the packet socket of its frames (`None` when a
/// hub's XSK carries them).
type Opened = (u8, crate::registry::LockFile, Option<PacketSocket>);

fn open_for_client(
    rt: &Runtime,
    board: &Board,
    req: OpenRequest,
    uid: u32,
    gid: u32,
    packet_socket: bool,
) -> Result<Opened, Refusal> {
    let (index, lock) = match req.endpoint {
        Some(i) if i >= SERVICE_ENDPOINT => return Err(Refusal::BadEndpoint),
        want => board
            .dir
            .lock_endpoint(want, SERVICE_ENDPOINT)
            .map_err(|_| Refusal::Internal)?
            .ok_or(Refusal::Busy)?,
    };
    user_shm_dir(board, uid, gid).map_err(|_| Refusal::Internal)?;
    if !packet_socket {
        return Ok((index, lock, None));
    }
    let filter = EndpointFilter {
        endpoints: vec![index],
        board_frames: false,
        marked_only: false,
        direct: None,
    };
    let mut iface = board.iface.clone();
    iface.mtu = iface.mtu.min(board.wire.mtu);
    let opts = SocketOptions {
        rx_ring_bytes: rt.cfg.rx_ring_bytes,
        ..SocketOptions::default()
    };
    let wire = PacketSocket::open_filtered(&iface, rt.cfg.wire.ethertype, &opts, Some(&filter))
        .map_err(|_| Refusal::Internal)?;
    Ok((index, lock, Some(wire)))
}

/// Moves frames both ways until the client goes away.
fn relay_frames(
    mut wire: PacketSocket,
    mut client: PacketSocket,
    board: &Board,
    index: u8,
    spin: Duration,
    stats: &DaemonStats,
) {
    let mac = board.iface.mac;
    let ethertype = wire.ethertype();
    let mut idle_since: Option<Instant> = None;
    loop {
        let mut moved = 0usize;
        let got = wire
            .recv_batch(RELAY_BATCH, |f| {
                let _ = client.queue_send(f.len(), |b| b.copy_from_slice(f));
            })
            .unwrap_or(0);
        moved += got;
        stats
            .frames_to_clients
            .fetch_add(got as u64, Ordering::Relaxed);
        if client.flush().is_err() {
            return;
        }
        let mut sent = 0u64;
        let got = client.recv_batch(RELAY_BATCH, |f| {
            if f.len() < ETH_HEADER_LEN {
                stats.refuse(FrameRefusal::Short);
                return;
            }
            match check_client_frame(f, mac, ethertype, index) {
                Ok(()) => {
                    if wire.queue_send(f.len(), |b| b.copy_from_slice(f)).is_ok() {
                        sent += 1;
                    }
                }
                Err(r) => stats.refuse(r),
            }
        });
        let Ok(got) = got else { return };
        moved += got;
        let _ = wire.flush();
        stats.frames_to_wire.fetch_add(sent, Ordering::Relaxed);
        if moved > 0 {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < spin {
            std::hint::spin_loop();
            continue;
        }
        let ev = relay::poll_many(
            &[(wire.fd(), libc::POLLIN), (client.fd(), libc::POLLIN)],
            Some(Duration::from_secs(1)),
        );
        match ev {
            Ok(ev) if ev[1] & (libc::POLLHUP | libc::POLLERR) != 0 && ev[1] & libc::POLLIN == 0 => {
                return
            }
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use omx_wire::{encode, Header, Msg, Packet, PacketType, WireConfig};
    use peek::TYPE_OFFSET;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn frame(p: Packet, src_mac: [u8; 6]) -> Vec<u8> {
        let cfg = WireConfig::native_9000();
        let h = Header {
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_mac,
            ethertype: cfg.ethertype,
            dst_src_peer_index: 0,
        };
        let mut out = Vec::new();
        encode(&h, &p, &[], &cfg, &mut out).unwrap();
        out
    }

    #[test]
    fn client_frames_must_come_from_the_clients_endpoint() {
        let et = WireConfig::native_9000().ethertype;
        let msg = |src| Msg {
            dst_endpoint: 3,
            src_endpoint: src,
            ..Msg::default()
        };
        let ok = frame(Packet::Tiny(msg(7)), MAC);
        assert_eq!(check_client_frame(&ok, MAC, et, 7), Ok(()));
        assert_eq!(
            check_client_frame(&ok, MAC, et, 8),
            Err(FrameRefusal::SourceEndpoint)
        );
        let other_mac = frame(Packet::Tiny(msg(7)), [2, 0, 0, 0, 0, 9]);
        assert_eq!(
            check_client_frame(&other_mac, MAC, et, 7),
            Err(FrameRefusal::SourceMac)
        );
        let mut marked = ok.clone();
        marked[TYPE_OFFSET] |= omx_wire::LATENCY_FLAG;
        assert_eq!(check_client_frame(&marked, MAC, et, 7), Ok(()));
        let mut raw = ok.clone();
        raw[TYPE_OFFSET] = PacketType::Raw as u8;
        assert_eq!(
            check_client_frame(&raw, MAC, et, 7),
            Err(FrameRefusal::Type)
        );
        let mut bundle = ok.clone();
        bundle[TYPE_OFFSET] = omx_wire::BUNDLE_TYPE;
        assert_eq!(
            check_client_frame(&bundle, MAC, et, 7),
            Err(FrameRefusal::Type)
        );
        let mut host_query = ok.clone();
        host_query[TYPE_OFFSET] = PacketType::HostQuery as u8;
        assert_eq!(
            check_client_frame(&host_query, MAC, et, 7),
            Err(FrameRefusal::Type)
        );
        let mut other_type = ok.clone();
        other_type[12] = 0x08;
        assert_eq!(
            check_client_frame(&other_type, MAC, et, 7),
            Err(FrameRefusal::EtherType)
        );
        assert_eq!(
            check_client_frame(&ok[..18], MAC, et, 7),
            Err(FrameRefusal::Short)
        );
    }

    #[test]
    fn source_endpoint_offsets_match_the_codec() {
        use omx_wire::{Connect, NackLib, NackMcp, Notify, Pull, Rndv, Truc};
        let et = WireConfig::native_9000().ethertype;
        let packets = [
            Packet::Small(Msg {
                src_endpoint: 7,
                ..Msg::default()
            }),
            Packet::Rndv(Rndv {
                msg: Msg {
                    src_endpoint: 7,
                    length: 8,
                    ..Msg::default()
                },
                ..Rndv::default()
            }),
            Packet::Notify(Notify {
                src_endpoint: 7,
                ..Notify::default()
            }),
            Packet::Pull(Pull {
                src_endpoint: 7,
                ..Pull::default()
            }),
            Packet::Connect(Connect {
                src_endpoint: 7,
                ..Connect::default()
            }),
            Packet::Truc(Truc {
                src_endpoint: 7,
                ..Truc::default()
            }),
            Packet::NackLib(NackLib {
                src_endpoint: 7,
                ..NackLib::default()
            }),
            Packet::NackMcp(NackMcp {
                src_endpoint: 7,
                ..NackMcp::default()
            }),
        ];
        for p in packets {
            let f = frame(p, MAC);
            assert_eq!(check_client_frame(&f, MAC, et, 7), Ok(()), "{p:?}");
            assert_eq!(
                check_client_frame(&f, MAC, et, 6),
                Err(FrameRefusal::SourceEndpoint),
                "{p:?}"
            );
        }
    }
}
