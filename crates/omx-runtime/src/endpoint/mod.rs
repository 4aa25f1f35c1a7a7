//! An open endpoint: its engine, packet socket and memory, driven by whichever thread
//! needs progress (a waiting application thread first, else the background progress
//! thread), so retransmissions, acks and pulls move while the application computes.

use crate::bundler::Bundler;
use crate::config::{Coalescing, DaemonUse, DirectRecv, DIRECT_RECV_BATCH};
use crate::copy::{run_job, Copier, CopyJob};
use crate::discovery::Discovery;
use crate::local::{run_local_pull, LocalChannel, LocalConnect};
use crate::memory::{MemRegistry, Segment, MAX_SEGMENTS};
use crate::registry::{EndpointInfo, LockFile};
use crate::runtime::{Board, Runtime, MAX_ENDPOINTS};
use bytes::{Bytes, BytesMut};
use omx_proto::demux::{closed_endpoint_nack, route, Route};
use omx_proto::*;
use omx_transport::{
    DirectRx, EndpointFilter, FaultInjector, PacketSocket, ReplyPlace, SocketOptions,
    DIRECT_MAX_PIECES,
};
use omx_wire::NackType;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
// The endpoint lock: taken several times per message, and poisoning (which std's
// lock checks on every acquire and release) is ignored here anyway.
type CoreLock = parking_lot::Mutex<Core>;
type CoreGuard<'a> = parking_lot::MutexGuard<'a, Core>;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub enum Error {
    NoSuchBoard,
    /// The requested endpoint index is taken (or all are, for "any").
    Busy,
    BadArgument(&'static str),
    Engine(EngineError),
    Io(std::io::Error),
    Timeout,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoSuchBoard => write!(f, "no such board"),
            Error::Busy => write!(f, "endpoint busy"),
            Error::BadArgument(w) => write!(f, "bad argument: {w}"),
            Error::Engine(e) => write!(f, "{e}"),
            Error::Io(e) => write!(f, "{e}"),
            Error::Timeout => write!(f, "timed out"),
        }
    }
}

impl std::error::Error for Error {}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Self {
        Error::Engine(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

const SEC: Time = 1_000_000_000;
const RX_BATCH: usize = 64;
/// Packet type byte of pull replies (flags masked), taken in place from the ring.
const PULL_REPLY_TYPE: u8 = omx_wire::PacketType::PullReply as u8;
/// Received frames are copied into chunks of this size (a retained frame keeps at most
/// one chunk alive).
const RX_POOL_CHUNK: usize = 256 * 1024;
/// Retired chunks kept for reuse.
const RX_POOL_KEEP: usize = 16;

struct Core {
    engine: Engine,
    sock: PacketSocket,
    /// This endpoint's pull replies, received straight into place (`OMX_DIRECT_RECV`).
    direct_rx: Option<DirectRx>,
    mem: MemRegistry,
    done: DoneTable,
    forgotten: HashSet<ReqId>,
    /// The request a `test` or `wait` is looking for during its progress pass: its
    /// completion goes straight to `wanted` for that call, not through `done`.
    /// Set and cleared within one hold of the lock.
    want: Option<ReqId>,
    wanted: Option<Completion>,
    peers_version: u64,
    board_lock: Option<LockFile>,
    discovery: Option<Discovery>,
    next_board_try: Time,
    next_publish: Time,
    rx: Vec<Bytes>,
    board_rx: Vec<Vec<u8>>,
    bundler: Bundler,
    rx_pool: FramePool,
    /// Frames this endpoint sent to itself, delivered at the next pass.
    self_rx: Vec<Bytes>,
    /// Eager send data is captured into chunks of this pool (no allocation per message).
    tx_pool: BytesMut,
    /// When the application last posted a send: back-to-back sends are not flushed one
    /// by one, so they can share frames (bundles) and system calls.
    last_post: Time,
    /// Earliest engine, discovery or housekeeping deadline (runtime ns).
    timer_at: Time,
    unexp_handler: Option<UnexpectedHandler>,
    /// Shared-memory channel to the other endpoints of this host (none when
    /// `OMX_DISABLE_SHARED=1` or when it could not be set up).
    local: Option<LocalChannel>,
    /// Receive copies handed to the copy engine.
    copier: Copier,
    /// `OMX_FAULTS`: faults injected on this endpoint's packet path.
    faults: Option<FaultInjector>,
    /// An unexpected handler is running: progression is paused (MX semantics).
    in_handler: bool,
    /// The endpoint index lock (`None` when `omxd` holds it for us).
    _index_lock: Option<LockFile>,
}

/// Which wake-up descriptors fired during a sleep.
#[derive(Clone, Copy, Debug, Default)]
struct Fired {
    /// The eventfd (another thread's completion or `wakeup`).
    event: bool,
    /// The shared-memory inbox's doorbell FIFO.
    doorbell: bool,
}

/// Without frames for this long an endpoint counts as idle (wake-up policies).
const TRAFFIC_IDLE: Time = 1_000_000;

/// Sends posted closer together than this are treated as a stream.
const STREAM_GAP: Time = 5_000;

struct EndpointInner {
    rt: Arc<Runtime>,
    board: Arc<Board>,
    index: u8,
    session: u32,
    core: CoreLock,
    sleepers: AtomicUsize,
    app_active: AtomicUsize,
    wake_fd: OwnedFd,
    sock_fd: RawFd,
    /// The direct pull-reply socket, watched with the data socket.
    direct_fd: Option<RawFd>,
    /// Doorbell of the shared-memory inbox, when there is one.
    shm_fd: Option<RawFd>,
    /// Wake-up policy and its timer.
    coalescing: Coalescing,
    coalescing_ns: u64,
    /// Socket that only receives this endpoint's latency-sensitive frames: what
    /// sleeping threads watch under the `marked` and `stream` policies.
    wake_sock: Option<Mutex<PacketSocket>>,
    /// Sleeps, and how they ended: by a frame or doorbell, or by the timer.
    sleeps: AtomicU64,
    woken_by_io: AtomicU64,
    woken_by_timer: AtomicU64,
    /// `stream` policy: after a wake-up by a frame, keep polling until then (runtime ns).
    linger_until: AtomicU64,
    /// When frames last arrived (runtime ns): coalescing applies while traffic flows;
    /// an idle endpoint sleeps on its data socket, so it is never woken by the timer.
    last_rx: AtomicU64,
    closing: AtomicBool,
    idle: (Mutex<()>, Condvar),
    wakeups: AtomicU64,
    /// Counts application entries into the library: the progress thread stays out of
    /// the way while this moves (the application is driving progress itself).
    app_calls: AtomicU64,
}

/// Busy-poll without yielding for this long at the start of a wait.
const TIGHT_SPIN: Duration = Duration::from_micros(5);
/// Then yield the CPU this often while spinning (runtime ns).
const YIELD_EVERY: Time = 3_000;

/// Longest nap of the progress thread while the application drives progress itself.
const APP_NAP_MAX: Duration = Duration::from_millis(1);

/// How long after the application's last call the progress thread takes over.
const APP_QUIET: Duration = Duration::from_micros(500);

/// The application's unexpected-message handler; returns true to discard.
pub type UnexpectedHandler = Box<dyn FnMut(&UnexpectedInfo) -> bool + Send>;

pub struct Endpoint {
    inner: Arc<EndpointInner>,
    progress: Option<JoinHandle<()>>,
}

/// Whether `nic` can be a board's MAC: 48 bits, not zero, not multicast/broadcast.
fn is_unicast_nic(nic: NicId) -> bool {
    nic != 0 && nic >> 48 == 0 && (nic >> 40) & 1 == 0
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most 4 bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr() as *mut libc::c_void, 4, 0) };
    if n == 4 {
        u32::from_ne_bytes(b)
    } else {
        (std::process::id() ^ Instant::now().elapsed().subsec_nanos()).rotate_left(13)
    }
}

fn command_name() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Endpoint {
    /// Opens endpoint `index` (or any free one) on `board` with application key `key`.
    pub fn open(
        rt: &Arc<Runtime>,
        board: u32,
        index: Option<u8>,
        key: u32,
    ) -> Result<Endpoint, Error> {
        let b = rt.board(board).ok_or(Error::NoSuchBoard)?.clone();
        if index.is_some_and(|i| i >= MAX_ENDPOINTS) {
            return Err(Error::BadArgument("endpoint index out of range"));
        }
        let relayed = match rt.cfg.daemon {
            DaemonUse::Always => true,
            DaemonUse::Never => false,
            DaemonUse::Auto => !omx_transport::relay::can_open_packet_socket(),
        };
        let opts = SocketOptions {
            rx_ring_bytes: rt.cfg.rx_ring_bytes,
            ..SocketOptions::default()
        };
        // Size the receive ring for our frames, not for a larger interface MTU (lo's
        // 64 KiB would leave few slots and drop frames of a deep pull pipeline).
        let mut iface = b.iface.clone();
        iface.mtu = iface.mtu.min(b.wire.mtu);
        if relayed {
            return Self::open_relayed(rt, &b, index, key, iface);
        }
        let (index, lock) = b
            .dir
            .lock_endpoint(index, MAX_ENDPOINTS)?
            .ok_or(Error::Busy)?;
        b.dir.clear_reach(index);
        let board_lock = b.dir.try_lock_board()?;
        // Direct receive needs the payload placed by the kernel as it arrives: not with
        // a copy engine (it copies from frames), injected faults (they act on frames)
        // or checksums (verified before anything is placed).
        let direct_recv = rt.cfg.direct_recv_for(&b.wire);
        let use_direct_rx = direct_recv != DirectRecv::Off
            && rt.cfg.faults.is_none()
            && crate::copy::engine(&rt.cfg.copy).is_none()
            && !rt.cfg.wire.checksum;
        let filter = EndpointFilter {
            endpoints: vec![index],
            board_frames: board_lock.is_some(),
            marked_only: false,
            direct: use_direct_rx.then_some(index),
        };
        // Without latency flags on the wire (MX-compat mode), marked frames cannot be
        // told apart: every frame wakes.
        let coalescing = match rt.cfg.coalescing {
            Coalescing::Marked | Coalescing::Stream
                if rt.cfg.wire.mode != omx_wire::WireMode::Native =>
            {
                Coalescing::Off
            }
            c => c,
        };
        // Bound before the data socket: the kernel hands a frame to the most recently
        // bound packet socket first, so the data ring holds the frame by the time the
        // wake socket wakes a sleeper.
        let wake_sock = if matches!(coalescing, Coalescing::Marked | Coalescing::Stream) {
            let wf = EndpointFilter {
                endpoints: vec![index],
                board_frames: false,
                marked_only: true,
                direct: None,
            };
            let wopts = SocketOptions {
                rx_ring_bytes: 0,
                socket_buf_bytes: 64 * 1024,
                ..SocketOptions::default()
            };
            let s = PacketSocket::open_filtered(&iface, rt.cfg.wire.ethertype, &wopts, Some(&wf))?;
            Some(Mutex::new(s))
        } else {
            None
        };
        let sock =
            PacketSocket::open_filtered(&iface, rt.cfg.wire.ethertype, &opts, Some(&filter))?;
        // Bound last, like the data socket, for the same reason. Its buffer holds the
        // replies of every pull in flight, which the ring's size bounds (see assemble).
        let direct_rx = if use_direct_rx {
            let buf = opts.rx_ring_bytes.max(4 << 20) * 2;
            let batch = match direct_recv {
                DirectRecv::Batched => DIRECT_RECV_BATCH,
                _ => 0,
            };
            let d = DirectRx::open(
                &iface,
                rt.cfg.wire.ethertype,
                index,
                buf,
                batch,
                omx_wire::PULL_REPLY_HEAD_LEN,
            )?;
            Some(d)
        } else {
            None
        };
        Self::assemble(
            rt,
            b,
            index,
            key,
            iface,
            sock,
            direct_rx,
            wake_sock,
            coalescing,
            board_lock,
            Some(lock),
        )
    }

    /// Opens an endpoint through `omxd` (no CAP_NET_RAW here): the daemon owns the
    /// endpoint index and the packet socket, and relays our frames; no board service,
    /// no wake socket (every relayed frame wakes) and no bundles (the daemon checks
    /// frames one by one).
    fn open_relayed(
        rt: &Arc<Runtime>,
        b: &Arc<Board>,
        index: Option<u8>,
        key: u32,
        iface: omx_transport::Interface,
    ) -> Result<Endpoint, Error> {
        use omx_transport::relay::{self, OpenRequest, Refusal, RelayError};
        let path = crate::daemon::socket_path();
        let req = OpenRequest {
            nic_id: b.nic_id,
            endpoint: index,
        };
        let (fd, index) = relay::open_endpoint(&path, req).map_err(|e| match e {
            RelayError::Refused(Refusal::Busy) => Error::Busy,
            RelayError::Refused(Refusal::NoSuchBoard) => Error::NoSuchBoard,
            RelayError::Refused(Refusal::BadEndpoint) => {
                Error::BadArgument("endpoint index out of range or reserved by omxd")
            }
            e @ RelayError::Unreachable(_) => Error::Io(std::io::Error::other(format!(
                "no packet-socket privilege (CAP_NET_RAW), and {e} (socket {}): \
                 is omxd running on this host (root: omxd -f -v)?",
                path.display()
            ))),
            e => Error::Io(std::io::Error::other(format!(
                "no packet-socket privilege (CAP_NET_RAW), and {e} (socket {})",
                path.display()
            ))),
        })?;
        relay::set_send_buffer(fd.as_raw_fd(), 4 << 20, false);
        let opts = SocketOptions::default();
        let sock = PacketSocket::from_relay(fd, &iface, rt.cfg.wire.ethertype, &opts)?;
        if rt.cfg.verbose {
            eprintln!(
                "omx: endpoint {index} opened through omxd ({})",
                path.display()
            );
        }
        Self::assemble(
            rt,
            b.clone(),
            index,
            key,
            iface,
            sock,
            None,
            None,
            Coalescing::Off,
            None,
            None,
        )
    }

    /// Builds the endpoint around its socket(s) once the index is ours.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        rt: &Arc<Runtime>,
        b: Arc<Board>,
        index: u8,
        key: u32,
        iface: omx_transport::Interface,
        sock: PacketSocket,
        direct_rx: Option<DirectRx>,
        wake_sock: Option<Mutex<PacketSocket>>,
        coalescing: Coalescing,
        board_lock: Option<LockFile>,
        lock: Option<LockFile>,
    ) -> Result<Endpoint, Error> {
        let session = random_u32();
        let params = EndpointParams {
            nic_id: b.nic_id,
            endpoint: index,
            session,
            key,
        };
        let peers = b.peers.lock().expect("peer lock").table.clone();
        let mut ecfg = rt.cfg.engine_config_for(b.wire);
        if let Some(l) = sock.ring_layout() {
            // Replies to every outstanding pull request must fit in the receive ring
            // (with room for other traffic): the kernel drops what does not.
            let per_block = ecfg.wire.pull_block_replies.max(1) as usize;
            ecfg.pull_blocks_max = ((l.frame_nr() * 3 / 4) / per_block).max(1) as u32;
        }
        let engine = Engine::new(ecfg, params, peers);
        let discovery = board_lock
            .as_ref()
            .map(|_| Discovery::new(b.nic_id, b.name.clone(), random_u32()));
        // SAFETY: eventfd returns a new descriptor or -1.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let sock_fd = sock.fd();
        let direct_fd = direct_rx.as_ref().map(DirectRx::fd);
        let local = if rt.cfg.disable_shared {
            None
        } else {
            match LocalChannel::open(
                &b,
                rt.boards.clone(),
                index,
                session,
                key,
                rt.cfg.shared_ring_bytes,
                rt.cfg.shared_cma,
                rt.cfg.verbose,
            ) {
                Ok(s) => Some(s),
                Err(e) => {
                    if rt.cfg.verbose {
                        eprintln!(
                            "omx: no shared-memory channel ({e}); local peers use the network"
                        );
                    }
                    None
                }
            }
        };
        let shm_fd = local.as_ref().map(|s| s.wake_fd());
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        b.dir.mark_reach(index, local.as_ref().map(|_| uid));
        // Bundles never exceed our frame size: peers' rings are sized for it.
        let bundler = Bundler::new(iface.max_frame_len(), rt.cfg.wire.ethertype);
        let core = Core {
            engine,
            sock,
            direct_rx,
            mem: MemRegistry::default(),
            done: DoneTable::default(),
            forgotten: HashSet::default(),
            want: None,
            wanted: None,
            peers_version: 0,
            board_lock,
            discovery,
            next_board_try: 0,
            next_publish: 0,
            rx: Vec::with_capacity(RX_BATCH),
            board_rx: Vec::new(),
            bundler,
            rx_pool: FramePool::default(),
            self_rx: Vec::new(),
            tx_pool: BytesMut::new(),
            last_post: 0,
            timer_at: 0,
            unexp_handler: None,
            local,
            copier: Copier::new(rt.cfg.copy.clone()),
            faults: rt.cfg.faults.clone().map(|mut c| {
                // A distinct stream per endpoint and process.
                c.seed = c.seed ^ ((index as u64) << 32) ^ std::process::id() as u64;
                FaultInjector::new(c)
            }),
            in_handler: false,
            _index_lock: lock,
        };
        let inner = Arc::new(EndpointInner {
            rt: rt.clone(),
            board: b,
            index,
            session,
            core: CoreLock::new(core),
            sleepers: AtomicUsize::new(0),
            app_active: AtomicUsize::new(0),
            // SAFETY: efd is a fresh descriptor we own.
            wake_fd: unsafe { OwnedFd::from_raw_fd(efd) },
            sock_fd,
            direct_fd,
            shm_fd,
            coalescing,
            coalescing_ns: rt.cfg.coalescing_delay.as_nanos() as u64,
            wake_sock,
            sleeps: AtomicU64::new(0),
            woken_by_io: AtomicU64::new(0),
            woken_by_timer: AtomicU64::new(0),
            linger_until: AtomicU64::new(0),
            last_rx: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            idle: (Mutex::new(()), Condvar::new()),
            wakeups: AtomicU64::new(0),
            app_calls: AtomicU64::new(0),
        });
        {
            let mut core = inner.lock();
            inner.progress(&mut core);
        }
        let progress = if rt.cfg.progress_thread {
            let s = inner.clone();
            Some(
                std::thread::Builder::new()
                    .name(format!("omx-progress-{index}"))
                    .spawn(move || s.progress_loop())?,
            )
        } else {
            None
        };
        Ok(Endpoint { inner, progress })
    }

    pub fn index(&self) -> u8 {
        self.inner.index
    }

    pub fn board(&self) -> &Arc<Board> {
        &self.inner.board
    }

    pub fn session(&self) -> u32 {
        self.inner.session
    }

    /// Bounds this endpoint's unexpected-message bytes (see the engine's doc).
    pub fn set_unexpected_max(&self, bytes: usize) {
        self.inner.app_lock().engine.set_unexpected_max(bytes);
    }

    /// The application key this endpoint was opened with.
    pub fn key(&self) -> u32 {
        self.inner.lock().engine.params().key
    }

    /// Forgets a partner locally (MX `mx_disconnect`): its pending operations fail.
    pub fn disconnect(&self, p: PartnerId) {
        let mut core = self.inner.app_lock();
        let now = self.inner.rt.now();
        core.engine.disconnect(now, p);
        self.inner.post_drain(&mut core, now, true);
    }

    /// Whether `req` completed (its completion is left for test/wait).
    pub fn peek_done(&self, req: ReqId) -> bool {
        let core = self.inner.app_lock();
        let core = self.inner.progress_guard(core);
        core.done.contains(req)
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.inner.rt
    }

    // Read-only accessors make no progress, so they do not count as application calls
    // (which hold the progress thread back): an application that only polls its
    // counters still has its frames processed.

    pub fn counters(&self) -> Counters {
        self.inner.lock().engine.counters.clone()
    }

    pub fn stats(&self) -> QueueStats {
        self.inner.lock().engine.stats()
    }

    /// Faults injected so far on this endpoint's packet path (`OMX_FAULTS`), if any.
    pub fn fault_stats(&self) -> Option<omx_transport::FaultStats> {
        self.inner.lock().faults.as_ref().map(|f| f.stats)
    }

    /// Remote nic id, endpoint index and session of a partner.
    pub fn partner_addr(&self, p: PartnerId) -> Option<(NicId, u8, Option<u32>)> {
        self.inner.app_lock().engine.partner_addr(p)
    }

    pub fn iconnect(
        &self,
        nic: NicId,
        endpoint: u8,
        key: u32,
        context: u64,
    ) -> Result<ReqId, Error> {
        let (mut core, now) = self.inner.app_lock_now();
        let me = (self.inner.board.nic_id, self.inner.index);
        let Core { engine, local, .. } = &mut *core;
        if let Some(sh) = local
            .as_mut()
            .filter(|s| s.is_local(nic) && (nic, endpoint) != me)
        {
            if let LocalConnect::Done(r) = sh.connect(engine, nic, endpoint, key, context)? {
                self.inner.post_drain(&mut core, now, true);
                return Ok(r);
            }
        }
        let r = match core.engine.connect(now, nic, endpoint, key, context) {
            Err(EngineError::UnknownPeer) => {
                // The host may know the board already (another process's discovery wrote
                // the shared peer file) while this process has not reloaded it yet; an
                // application that only retries connects would otherwise never reload it.
                let board = &self.inner.board;
                board.merge_peers(&board.dir.load_peers());
                self.inner.sync_peers(&mut core);
                let mut r = core.engine.connect(now, nic, endpoint, key, context);
                if r.is_err() && is_unicast_nic(nic) {
                    // Not heard of yet (its announcement may still be on the way), but
                    // a nic id is the board's MAC: frames can go to it now. Connect,
                    // resending until the timeout, and have discovery announce this
                    // board so the peer learns it and takes the connect.
                    core.engine.add_peer(nic, None);
                    board.solicit.fetch_add(1, Ordering::Relaxed);
                    r = core.engine.connect(now, nic, endpoint, key, context);
                }
                if r.is_err() {
                    // Still unknown (MX's NIC_NOT_FOUND): let discovery move meanwhile.
                    self.inner.progress_at(&mut core, Some(now), true);
                }
                r?
            }
            r => r?,
        };
        self.inner.progress_at(&mut core, Some(now), true);
        Ok(r)
    }

    /// Blocking connect; the partner on success, the failure status otherwise.
    pub fn connect(
        &self,
        nic: NicId,
        endpoint: u8,
        key: u32,
        timeout: Option<Duration>,
    ) -> Result<Result<PartnerId, Status>, Error> {
        let r = self.iconnect(nic, endpoint, key, 0)?;
        match self.wait(r, timeout) {
            Some(c) if c.status.code == StatusCode::Success => {
                Ok(Ok(c.status.source.expect("partner")))
            }
            Some(c) => Ok(Err(c.status)),
            None => {
                self.forget(r);
                Err(Error::Timeout)
            }
        }
    }

    fn check_segments(segs: &[Segment]) -> Result<u32, Error> {
        if segs.len() > MAX_SEGMENTS {
            return Err(Error::BadArgument("more than 256 segments"));
        }
        // One pass over the segments (this runs on every send and receive).
        let mut total: u64 = 0;
        for s in segs {
            if s.len > 0 && s.ptr.is_null() {
                return Err(Error::BadArgument("null segment pointer"));
            }
            total += s.len as u64;
        }
        if total > u32::MAX as u64 {
            return Err(Error::BadArgument("message longer than 4 GiB"));
        }
        Ok(total as u32)
    }

    /// Posts a send of the bytes in `segs` to `dest`.
    ///
    /// # Safety
    /// Every segment must stay valid and unmodified until the request completes (eager
    /// messages are copied at once, but the MX contract covers both).
    pub unsafe fn isend(
        &self,
        segs: &[Segment],
        dest: PartnerId,
        match_info: u64,
        context: u64,
        sync: bool,
    ) -> Result<ReqId, Error> {
        let len = Self::check_segments(segs)?;
        let mut core = self.inner.app_lock();
        if core.engine.local_direct_ok(dest, len, sync) {
            let Core { engine, local, .. } = &mut *core;
            if let Some(sh) = local.as_mut() {
                if sh.write_eager_to_inbox(dest, match_info, segs, len as usize) {
                    let c = engine.local_direct_sent(dest, match_info, len, context);
                    if core.engine.has_output() {
                        // Completions already queued go first (completion order); other
                        // output waits for the next pass, as between streamed sends.
                        core.collect_completions(self.inner.rt.coarse_now());
                    }
                    let r = c.req;
                    core.done.insert(c);
                    if self.inner.sleepers.load(Ordering::SeqCst) > 0 {
                        self.inner.signal();
                    }
                    return Ok(r);
                }
            }
        }
        let now = self.inner.rt.now();
        let (data, handle) = if core.engine.is_eager_to(dest, match_info, len, sync) {
            (
                SendData::Eager(capture(&mut core.tx_pool, segs, len as usize)),
                None,
            )
        } else {
            let h = core.mem.register(segs);
            (SendData::Region { handle: h, len }, Some(h))
        };
        let r = if sync {
            core.engine.issend(now, dest, match_info, data, context)
        } else {
            core.engine.isend(now, dest, match_info, data, context)
        };
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                if let Some(h) = handle {
                    core.mem.release(h);
                }
                return Err(e.into());
            }
        };
        let streaming = now.saturating_sub(core.last_post) < STREAM_GAP;
        core.last_post = now;
        self.inner.post_drain(&mut core, now, !streaming);
        Ok(r)
    }

    /// Posts a receive into `segs` for messages with `(match & mask) == match_info`.
    ///
    /// # Safety
    /// Every segment must stay valid, and untouched by the application, until the
    /// request completes or is cancelled.
    pub unsafe fn irecv(
        &self,
        segs: &[Segment],
        match_info: u64,
        mask: u64,
        context: u64,
    ) -> Result<ReqId, Error> {
        let len = Self::check_segments(segs)?;
        self.post_lent(segs, |e, now, h| {
            e.irecv(now, match_info, mask, h, len, context)
        })
    }

    /// Posts a request that lends `segs` to the engine: the memory is registered for it
    /// and released again if the engine refuses the request.
    fn post_lent(
        &self,
        segs: &[Segment],
        post: impl FnOnce(&mut Engine, Time, MemHandle) -> Result<ReqId, EngineError>,
    ) -> Result<ReqId, Error> {
        // The coarse clock is enough here: posting arms no timer finer than its tick
        // (resend and pull delays are hundreds of ms), and it costs no clock read.
        let mut core = self.inner.app_lock();
        let now = self.inner.rt.coarse_now();
        let h = core.mem.register(segs);
        match post(&mut core.engine, now, h) {
            Ok(r) => {
                if core.engine.has_output() {
                    self.inner.post_drain(&mut core, now, true);
                } else {
                    // A receive that matched nothing yet: no output, no timer armed;
                    // only frames earlier streamed sends left queued go out.
                    let Core { bundler, sock, .. } = &mut *core;
                    bundler.emit(sock);
                    let _ = sock.flush();
                }
                Ok(r)
            }
            Err(e) => {
                core.mem.release(h);
                Err(e.into())
            }
        }
    }

    /// Exposes `seg` to one-sided access by remote endpoints under `id` (flags:
    /// `omx_proto::onesided::EXPOSE_READ | EXPOSE_WRITE`).
    ///
    /// # Safety
    /// The segment must stay valid until [`Endpoint::unexpose`] (or the endpoint's
    /// close); remote puts write into it at any time in between.
    pub unsafe fn expose(&self, seg: Segment, id: u64, flags: u32) -> Result<(), Error> {
        Self::check_segments(&[seg])?;
        let mut core = self.inner.app_lock();
        let h = core.mem.register(&[seg]);
        match core
            .engine
            .expose(id, seg.ptr as u64, seg.len as u64, h, flags)
        {
            Ok(()) => Ok(()),
            Err(e) => {
                core.mem.release(h);
                Err(e.into())
            }
        }
    }

    /// Withdraws an exposed region: no new remote access is accepted.
    pub fn unexpose(&self, id: u64) -> Result<(), Error> {
        let mut core = self.inner.app_lock();
        let h = core.engine.unexpose(id)?;
        // Pulls already granted may still read it: keep the handle until the endpoint
        // closes if any rendezvous region is in use, else release it now.
        if core.engine.stats().regions == 0 && core.engine.stats().pulls == 0 {
            core.mem.release(h);
        }
        Ok(())
    }

    /// One-sided read of `remote_addr` on `dest` into `seg`.
    ///
    /// # Safety
    /// As for [`Endpoint::irecv`].
    pub unsafe fn iget(
        &self,
        seg: Segment,
        dest: PartnerId,
        remote_addr: u64,
        context: u64,
    ) -> Result<ReqId, Error> {
        let len = Self::check_segments(&[seg])?;
        self.post_lent(&[seg], |e, now, h| {
            e.iget(now, dest, remote_addr, h, len, context)
        })
    }

    /// One-sided write of `seg` at `remote_addr` on `dest`.
    ///
    /// # Safety
    /// As for [`Endpoint::isend`] of a large message.
    pub unsafe fn iput(
        &self,
        seg: Segment,
        dest: PartnerId,
        remote_addr: u64,
        context: u64,
    ) -> Result<ReqId, Error> {
        let len = Self::check_segments(&[seg])?;
        self.post_lent(&[seg], |e, now, h| {
            e.iput(now, dest, remote_addr, h, len, context)
        })
    }

    /// The completion of `req`, if done (removes it).
    pub fn test(&self, req: ReqId) -> Option<Completion> {
        let mut core = self.inner.app_lock();
        if let Some(c) = take_done(&mut core, req) {
            return Some(c);
        }
        let got = self.inner.progress_for(&mut core, None, req);
        // The pass hands `req`'s completion to `got`; only the unexpected handler (it
        // runs with the lock released, and what it posts completes into the done
        // table) can have filed it since the first look.
        let handler = !core.in_handler && core.unexp_handler.is_some();
        let mut core = self.inner.run_handlers(core);
        let c = match got {
            None if handler => take_done(&mut core, req),
            got => got,
        };
        if c.is_none() && (core.copier.pending() > 0 || core.sock.is_relay()) {
            // Let the copy thread, or omxd relaying our frames, run if it shares our CPU.
            drop(core);
            std::thread::yield_now();
        }
        c
    }

    /// Waits for `req` (None = forever). `None` on timeout or `wakeup()`.
    pub fn wait(&self, req: ReqId, timeout: Option<Duration>) -> Option<Completion> {
        self.inner.wait_for(timeout, Some(req), |core, got| {
            got.or_else(|| take_done(core, req))
        })
    }

    /// Oldest completed request whose match info satisfies the mask (removes it).
    pub fn test_any(&self, match_info: u64, mask: u64) -> Option<Completion> {
        let core = self.inner.app_lock();
        let mut core = self.inner.progress_guard(core);
        take_any(&mut core, match_info, mask)
    }

    /// `test_any` without a progress pass: only requests already completed.
    pub fn take_any_completed(&self, match_info: u64, mask: u64) -> Option<Completion> {
        take_any(&mut self.inner.app_lock(), match_info, mask)
    }

    pub fn wait_any(
        &self,
        match_info: u64,
        mask: u64,
        timeout: Option<Duration>,
    ) -> Option<Completion> {
        self.inner
            .wait_for(timeout, None, |core, _| take_any(core, match_info, mask))
    }

    /// The oldest completed request, left in place.
    pub fn peek(&self) -> Option<ReqId> {
        let core = self.inner.app_lock();
        let mut core = self.inner.progress_guard(core);
        oldest_done(&mut core)
    }

    pub fn wait_peek(&self, timeout: Option<Duration>) -> Option<ReqId> {
        self.inner
            .wait_for(timeout, None, |core, _| oldest_done(core))
    }

    pub fn iprobe(&self, match_info: u64, mask: u64) -> Option<Status> {
        let core = self.inner.app_lock();
        let core = self.inner.progress_guard(core);
        core.engine.iprobe(match_info, mask)
    }

    pub fn probe(&self, match_info: u64, mask: u64, timeout: Option<Duration>) -> Option<Status> {
        self.inner.wait_for(timeout, None, |core, _| {
            core.engine.iprobe(match_info, mask)
        })
    }

    /// Cancels an unmatched receive; true if it was cancelled (and freed).
    pub fn cancel(&self, req: ReqId) -> Result<bool, Error> {
        let mut core = self.inner.app_lock();
        let handle = core.engine.recv_handle(req);
        let cancelled = match core.engine.cancel(req) {
            Ok(c) => c,
            // Already completed (its completion waits for test/wait): too late.
            Err(_) if core.done.contains(req) => false,
            Err(e) => return Err(e.into()),
        };
        if let Some(h) = handle.filter(|_| cancelled) {
            core.mem.release(h);
        }
        Ok(cancelled)
    }

    /// The application no longer wants the completion of `req`.
    pub fn forget(&self, req: ReqId) {
        let mut core = self.inner.app_lock();
        if take_done(&mut core, req).is_none() {
            core.forgotten.insert(req);
        }
    }

    /// What a request is, while it is pending or completed and not yet taken.
    pub fn request_info(&self, req: ReqId) -> Option<RequestInfo> {
        let core = self.inner.app_lock();
        if let Some((kind, context, buffered)) = core.engine.request_info(req) {
            return Some(RequestInfo {
                kind,
                context,
                buffered,
            });
        }
        core.done.get(req).map(|c| RequestInfo {
            kind: c.kind,
            context: c.status.context,
            buffered: true,
        })
    }

    /// Wakes every thread blocked in a wait on this endpoint (they return `None`).
    /// Sleeps of the threads waiting on this endpoint and how they ended: (sleeps,
    /// woken by a frame or doorbell, woken by the timer).
    pub fn wake_stats(&self) -> (u64, u64, u64) {
        let s = &self.inner;
        (
            s.sleeps.load(Ordering::Relaxed),
            s.woken_by_io.load(Ordering::Relaxed),
            s.woken_by_timer.load(Ordering::Relaxed),
        )
    }

    pub fn wakeup(&self) {
        self.inner.wakeups.fetch_add(1, Ordering::SeqCst);
        self.inner.signal();
    }

    /// Per-request resend budget. Completed requests and receives (which resend
    /// nothing) accept it and ignore it.
    pub fn set_request_resends(&self, req: ReqId, resends: u32) -> Result<(), Error> {
        let mut core = self.inner.app_lock();
        match core.engine.set_send_resends(req, resends) {
            Ok(()) => Ok(()),
            Err(_) if core.done.contains(req) || core.engine.recv_handle(req).is_some() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Makes progress once (for callers that poll).
    pub fn progress(&self) {
        let core = self.inner.app_lock();
        drop(self.inner.progress_guard(core));
    }

    /// Installs (or removes) the unexpected-message handler: it sees every message
    /// that matches no posted receive, before it is stored, and may post receives; it
    /// returns true to discard the message. It runs with the endpoint unlocked and
    /// progression paused.
    pub fn set_unexpected_handler(&self, handler: Option<UnexpectedHandler>) {
        let mut core = self.inner.app_lock();
        let now = self.inner.rt.now();
        core.engine.set_unexpected_hook(handler.is_some());
        if handler.is_none() {
            while let Some(ev) = core.engine.poll_unexpected() {
                core.engine.resolve_unexpected(now, ev.id, false);
            }
        }
        core.unexp_handler = handler;
        self.inner.post_drain(&mut core, now, true);
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        {
            let mut core = self.inner.lock();
            core.engine.flush_acks();
            self.inner.progress(&mut core);
            // No copy may land in user memory after close returns.
            let Core { engine, copier, .. } = &mut *core;
            copier.wait_all(|id| engine.copy_done(0, id));
        }
        self.inner.closing.store(true, Ordering::SeqCst);
        self.inner.signal();
        self.inner.idle.1.notify_all();
        if let Some(t) = self.progress.take() {
            let _ = t.join();
        }
        let (counters, relayed) = {
            let core = self.inner.lock();
            let c: Vec<(String, u64)> = core
                .engine
                .counters
                .iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect();
            (c, core.sock.is_relay())
        };
        let _ = self.inner.board.dir.accumulate_closed(&counters);
        if !relayed {
            self.inner.board.dir.clear_reach(self.inner.index);
        }
        self.inner
            .board
            .dir
            .unpublish_endpoint(self.inner.index, relayed);
    }
}

/// Moves the engine's completions to the done table (releasing lent memory), or the
/// one of `want` to `wanted`; true if any is for the application.
#[allow(clippy::too_many_arguments)]
fn collect_completions(
    engine: &mut Engine,
    mem: &mut MemRegistry,
    done: &mut DoneTable,
    forgotten: &mut HashSet<ReqId>,
    want: Option<ReqId>,
    wanted: &mut Option<Completion>,
    copier: &mut Copier,
    now: Time,
) -> bool {
    let mut completed = false;
    while let Some(c) = engine.poll_completion() {
        if c.kind == RequestKind::Recv
            && copier.pending() > 0
            && !matches!(c.status.code, StatusCode::Success | StatusCode::Truncated)
        {
            // A failed receive may still have copies in flight into its buffer: the
            // application gets it back only after they land.
            copier.wait_all(|id| engine.copy_done(now, id));
        }
        completed |= file_completion(c, mem, done, forgotten, want, wanted);
    }
    completed
}

/// Files one completion: releases its lent memory, then drops it if the application
/// forgot the request, hands it to the `test`/`wait` looking for it (`want`), or puts
/// it in the done table. True if it is for the application.
#[inline(always)]
fn file_completion(
    c: Completion,
    mem: &mut MemRegistry,
    done: &mut DoneTable,
    forgotten: &mut HashSet<ReqId>,
    want: Option<ReqId>,
    wanted: &mut Option<Completion>,
) -> bool {
    if let Some(h) = c.mem {
        mem.release(h);
    }
    if !forgotten.is_empty() && forgotten.remove(&c.req) {
        return false;
    }
    if want == Some(c.req) && wanted.is_none() {
        *wanted = Some(c);
    } else {
        done.insert(c);
    }
    true
}

impl Core {
    /// [`collect_completions`] on this endpoint's own tables.
    fn collect_completions(&mut self, now: Time) -> bool {
        let Core {
            engine,
            mem,
            done,
            forgotten,
            copier,
            want,
            wanted,
            ..
        } = self;
        collect_completions(engine, mem, done, forgotten, *want, wanted, copier, now)
    }

    /// Work that finishes or becomes possible without any descriptor waking a sleeper:
    /// copies on the copy thread (microseconds), messages waiting for ring space (the
    /// peer frees it silently), frames held back by the fault injector. Sleeps stay
    /// short while there is some.
    fn work_without_wakeup(&self) -> bool {
        self.copier.pending() > 0
            || self.local.as_ref().is_some_and(|s| s.has_backlog())
            || self.faults.as_ref().is_some_and(|f| f.has_held())
    }
}

fn take_done(core: &mut Core, req: ReqId) -> Option<Completion> {
    core.done.take(req)
}

fn oldest_done(core: &mut Core) -> Option<ReqId> {
    core.done.oldest()
}

fn take_any(core: &mut Core, match_info: u64, mask: u64) -> Option<Completion> {
    core.done.take_any(match_info, mask)
}

/// A request as [`Endpoint::request_info`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestInfo {
    pub kind: RequestKind,
    /// The context value given when it was posted.
    pub context: u64,
    /// A send whose buffer may be reused: its data was captured at post time, or it
    /// completed.
    pub buffered: bool,
}

/// Completed requests waiting for test/wait, in completion order. The latest one is
/// kept out of the map and out of the order queue: a request tested right after it
/// completed (a send written straight into a ring) comes and goes without hashing or
/// queueing.
#[derive(Default)]
struct DoneTable {
    map: HashMap<ReqId, Completion>,
    /// Completion order of the entries of `map` (all older than `latest`). Cleaned
    /// lazily: ids taken by id are skipped, and popped once they reach the front.
    order: VecDeque<ReqId>,
    latest: Option<Completion>,
}

impl DoneTable {
    #[inline]
    fn insert(&mut self, c: Completion) {
        if let Some(old) = self.latest.replace(c) {
            self.order.push_back(old.req);
            self.map.insert(old.req, old);
        }
    }

    fn contains(&self, req: ReqId) -> bool {
        self.latest.as_ref().is_some_and(|c| c.req == req) || self.map.contains_key(&req)
    }

    fn get(&self, req: ReqId) -> Option<&Completion> {
        match &self.latest {
            Some(c) if c.req == req => Some(c),
            _ => self.map.get(&req),
        }
    }

    #[inline]
    fn take(&mut self, req: ReqId) -> Option<Completion> {
        if self.latest.as_ref().is_some_and(|c| c.req == req) {
            return self.latest.take();
        }
        if self.map.is_empty() {
            return None;
        }
        self.take_older(req)
    }

    #[cold]
    fn take_older(&mut self, req: ReqId) -> Option<Completion> {
        let c = self.map.remove(&req)?;
        self.prune();
        Some(c)
    }

    /// Pops ids already taken off the front.
    fn prune(&mut self) {
        while let Some(r) = self.order.front() {
            if self.map.contains_key(r) {
                break;
            }
            self.order.pop_front();
        }
    }

    fn oldest(&mut self) -> Option<ReqId> {
        self.prune();
        self.order
            .front()
            .copied()
            .or_else(|| self.latest.as_ref().map(|c| c.req))
    }

    /// The oldest completion whose match info satisfies the mask.
    fn take_any(&mut self, match_info: u64, mask: u64) -> Option<Completion> {
        let hit = |c: &Completion| c.status.match_info & mask == match_info & mask;
        if let Some(pos) = self
            .order
            .iter()
            .position(|r| self.map.get(r).is_some_and(hit))
        {
            let r = self.order.remove(pos)?;
            let c = self.map.remove(&r);
            self.prune();
            return c;
        }
        if self.latest.as_ref().is_some_and(hit) {
            return self.latest.take();
        }
        None
    }
}

/// Received frames are copied into a few large chunks used in turn: a chunk is reused
/// in place once every frame carved from it has been dropped, so the data path neither
/// allocates nor touches fresh pages (which cost page faults at every message).
#[derive(Default)]
struct FramePool {
    current: BytesMut,
    retired: VecDeque<BytesMut>,
}

impl FramePool {
    fn capacity(&self) -> usize {
        self.current.capacity()
    }

    fn refill(&mut self, need: usize) {
        let want = RX_POOL_CHUNK.max(need);
        let old = std::mem::take(&mut self.current);
        if old.capacity() > 0 || !self.retired.is_empty() {
            self.retired.push_back(old);
        }
        // Oldest first: its frames are the most likely to be gone.
        for _ in 0..self.retired.len() {
            let mut c = self.retired.pop_front().expect("non-empty");
            c.clear();
            if c.try_reclaim(want) {
                self.current = c;
                return;
            }
            self.retired.push_back(c);
        }
        // Every chunk still has live frames: a new one (older ones are freed by the
        // allocator when their last frame drops, beyond a few kept for reuse).
        while self.retired.len() > RX_POOL_KEEP {
            self.retired.pop_front();
        }
        self.current = BytesMut::with_capacity(want);
    }

    fn carve(&mut self, f: &[u8]) -> Bytes {
        self.current.extend_from_slice(f);
        self.current.split().freeze()
    }
}

/// Whether a received frame waits on the data socket, or, during a pull, on the
/// direct socket.
fn frames_waiting(core: &Core) -> bool {
    core.sock.readable().unwrap_or(false)
        || (core.engine.pulling() && core.direct_rx.as_ref().is_some_and(DirectRx::readable))
}

/// Pull replies that arrive after their pull ended wait on the direct socket (progress
/// passes drain it only while pulling). Before a sleep they are handed to the engine,
/// which counts them as dropped: left there, they would wake the sleeper at once.
fn take_late_replies(core: &mut Core, now: Time) {
    let Core {
        direct_rx: Some(d),
        engine,
        ..
    } = core
    else {
        return;
    };
    if engine.pulling() {
        return;
    }
    while let Ok(true) = d.recv_owned(|f| engine.handle_frame(now, Bytes::copy_from_slice(f))) {}
}

/// Takes the pull replies waiting on the direct socket (at most a batch): each goes
/// straight into its receive buffer, or, when it is not one to place, whole into `rx`
/// for the ordinary path (which counts its drop). Returns whether any was placed.
fn drain_direct(
    d: &mut DirectRx,
    engine: &mut Engine,
    mem: &MemRegistry,
    now: Time,
    mut keep: impl FnMut(&[u8]),
) -> bool {
    if d.batched() {
        return drain_direct_batch(d, engine, mem, now, keep);
    }
    let mut placed = false;
    let mut head = [0u8; omx_wire::PULL_REPLY_HEAD_LEN];
    for _ in 0..RX_BATCH {
        let Ok(Some(len)) = d.peek(&mut head) else {
            break;
        };
        let mut place = |h: MemHandle, off: u64, n: usize| {
            let mut parts = [(std::ptr::null_mut(), 0); DIRECT_MAX_PIECES];
            let mut scratch = [0u8; omx_wire::PULL_REPLY_HEAD_LEN];
            let Some(k) = mem.scatter(h, off as usize, n, &mut parts) else {
                // More pieces than one receive takes: through a bounce buffer.
                let mut ok = false;
                let _ = d.recv_owned(|f| {
                    let start = omx_wire::PULL_REPLY_HEAD_LEN;
                    if let Some(p) = f.get(start..start + n) {
                        mem.write(h, off as usize, p);
                        ok = f.len() == len;
                    }
                });
                return ok;
            };
            // SAFETY: the pieces lie in a receive buffer lent to the engine for the
            // pull under way (the handle resolves), which nothing else touches until
            // the receive completes, after this pass.
            let got = unsafe { d.recv_into(&mut scratch, &parts[..k]) };
            match got {
                Ok(Some(l)) if l == len => true,
                // Shorter than peeked: not recorded, so the pull asks for it again.
                Ok(Some(_)) => {
                    d.truncated += 1;
                    false
                }
                _ => false,
            }
        };
        match engine.handle_pull_reply_direct(now, &head, len, &mut place) {
            Some(ok) => placed |= ok,
            None => {
                let _ = d.recv_owned(&mut keep);
            }
        }
    }
    placed
}

/// The batched direct receive: one `recvmmsg` whose frames' payloads go straight to
/// the places of the next missing frames the engine expects. Frames up to the first
/// that is not where it was expected are recorded as they are; from there on every
/// frame is rebuilt whole first, then handled as a ring frame (copied to its place).
fn drain_direct_batch(
    d: &mut DirectRx,
    engine: &mut Engine,
    mem: &MemRegistry,
    now: Time,
    mut keep: impl FnMut(&[u8]),
) -> bool {
    // Where each expected reply's payload goes, and which destination it names.
    let mut places = [ReplyPlace::NONE; DIRECT_RECV_BATCH];
    let mut dests = [(MemHandle(0), 0u64); DIRECT_RECV_BATCH];
    let mut m = 0;
    engine.expected_pull_replies(&mut |h, off, len| {
        let Some(place) = places.get_mut(m) else {
            return false;
        };
        let Some(k) = mem.scatter(h, off as usize, len, &mut place.pieces) else {
            return false;
        };
        place.count = k;
        place.len = len;
        dests[m] = (h, off);
        m += 1;
        true
    });
    // SAFETY: the places lie in receive buffers lent to the engine for the pulls under
    // way (their handles resolved), which nothing else touches until those receives
    // complete, after this pass; frames written there by mistake land only in frames
    // still missing, which their own reply overwrites.
    let n = unsafe { d.recv_batch_into(DIRECT_RECV_BATCH, &places[..m]) }.unwrap_or(0);
    let mut placed = false;
    let mut first_miss = n;
    for (i, (p, &(h, off))) in places.iter().zip(&dests).enumerate().take(n) {
        let Some((head, len)) = d.head(i) else {
            continue;
        };
        let mut check = |dh: MemHandle, doff: u64, dlen: usize| {
            dh == h && doff == off && dlen == p.len && len == omx_wire::PULL_REPLY_HEAD_LEN + dlen
        };
        if i >= m || engine.handle_pull_reply_direct(now, head, len, &mut check) != Some(true) {
            first_miss = i;
            break;
        }
        placed = true;
    }
    // Every frame from the first miss on is made whole before any is placed: placing
    // one may overwrite another's place.
    for i in first_miss..n {
        // SAFETY: nothing was written to the places since the receive.
        unsafe { d.rebuild(i) };
    }
    for i in first_miss..n {
        if let Some(frame) = d.rebuilt(i) {
            if engine.handle_frame_in_place(now, frame, &mut |h, off, data| {
                mem.write(h, off as usize, data)
            }) {
                placed = true;
            } else {
                keep(frame);
            }
        }
    }
    placed
}

/// Smallest payload read by the kernel straight from user memory (a pull reply),
/// rather than copied into the send batch: below it the copy costs less than the extra
/// iovecs.
const GATHER_MIN: usize = 1024;

/// Queues one engine frame. A large pull reply is gathered: its payload goes from the
/// sender's memory to the kernel without a copy into the batch.
fn queue_transmit(sock: &mut PacketSocket, mem: &MemRegistry, t: &Transmit) {
    if let Payload::User {
        handle,
        offset,
        len,
    } = t.payload
    {
        let mut parts: [&[u8]; omx_transport::MAX_GATHER] = [&[]; omx_transport::MAX_GATHER];
        let gathered = (len as usize >= GATHER_MIN && t.frame_len() == t.content_len())
            .then(|| mem.gather(handle, offset as usize, len as usize, &mut parts))
            .flatten();
        if let Some(n) = gathered {
            let parts = &parts[..n];
            let pieces: [(*const u8, usize); omx_transport::MAX_GATHER] =
                std::array::from_fn(|i| {
                    parts
                        .get(i)
                        .map_or((std::ptr::null(), 0), |p| (p.as_ptr(), p.len()))
                });
            let tail = if t.checksummed() {
                omx_wire::CHECKSUM_LEN
            } else {
                0
            };
            // SAFETY: the pieces lie in memory a send request lent to the engine, which
            // it holds until that request completes; completions reach the application
            // only after `drain` returns, and `drain` flushes every frame that reads
            // lent memory before returning (a flush sends or drops them all).
            let _ = unsafe {
                sock.queue_send_gathered(t.header().len(), &pieces[..n], tail, |head, trailer| {
                    head.copy_from_slice(t.header());
                    if !trailer.is_empty() {
                        let mut covered = [&[][..]; omx_transport::MAX_GATHER + 1];
                        covered[0] = t.header();
                        covered[1..=n].copy_from_slice(parts);
                        trailer.copy_from_slice(&omx_wire::checksum_of_parts(&covered[..=n]));
                    }
                })
            };
            return;
        }
    }
    let _ = sock.queue_send(t.frame_len(), |buf| {
        t.write_to(buf, |h, off, out| mem.read(h, off as usize, out))
    });
}

/// Copies a send's segments into the pool and returns them as shared bytes.
fn capture(pool: &mut BytesMut, segs: &[Segment], len: usize) -> Bytes {
    if pool.capacity() < len {
        pool.reserve(RX_POOL_CHUNK.max(len));
    }
    for s in segs.iter().filter(|s| s.len > 0) {
        // SAFETY: the caller lent these segments for the duration of the call.
        pool.extend_from_slice(unsafe { std::slice::from_raw_parts(s.ptr, s.len) });
    }
    pool.split().freeze()
}

/// Feeds the inner frames of a bundle to the engine (zero-copy slices of the bundle).
fn is_board_frame(f: &[u8]) -> bool {
    matches!(
        f.get(16).map(|&t| omx_wire::type_of(t)),
        Some(1) | Some(3) | Some(4)
    )
}

impl EndpointInner {
    fn lock(&self) -> CoreGuard<'_> {
        self.core.lock()
    }

    /// Lock taken on behalf of the application: records that it is active.
    fn app_lock(&self) -> CoreGuard<'_> {
        // A plain load and store, not a locked increment (tens of cycles per call):
        // the progress thread only looks for a change, and an increment lost to a
        // race between two threads at worst lets it run one pass early (harmless).
        let calls = self.app_calls.load(Ordering::Relaxed);
        self.app_calls
            .store(calls.wrapping_add(1), Ordering::Relaxed);
        self.lock()
    }

    /// Application lock plus the current time (one clock read for the whole call).
    fn app_lock_now(&self) -> (CoreGuard<'_>, Time) {
        let core = self.app_lock();
        (core, self.rt.now())
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes to our eventfd.
        unsafe {
            libc::write(
                self.wake_fd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }

    fn drain_signal(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes from our non-blocking eventfd.
        unsafe {
            libc::read(
                self.wake_fd.as_raw_fd(),
                &mut v as *mut u64 as *mut libc::c_void,
                8,
            )
        };
    }

    /// One progress pass: frames in, timers, then every output of the engine, flushed.
    fn progress(&self, core: &mut Core) {
        self.progress_at(core, None, true)
    }

    /// A progress pass that leaves frames queued (for a later pass) unless `flush`.
    fn progress_at(&self, core: &mut Core, now: Option<Time>, flush: bool) {
        if core.in_handler {
            return;
        }
        self.sync_peers(core);
        let Core {
            engine,
            sock,
            direct_rx,
            rx,
            board_rx,
            bundler,
            timer_at,
            rx_pool,
            self_rx,
            local,
            mem,
            copier,
            faults,
            done,
            forgotten,
            want,
            wanted,
            ..
        } = core;
        if !self_rx.is_empty() {
            rx.append(self_rx);
        }
        let mut local_work = false;
        // Local eager receives completed straight from the ring (see below).
        let mut filed = false;
        // Only shared-memory records were taken (no copy, no backlog): see below.
        let mut records_only = true;
        let mut now = now;
        // The coarse clock read for the ring records, reused by the quiet check below.
        let mut coarse = None;
        if copier.pending() > 0 {
            let t = *now.get_or_insert_with(|| self.rt.now());
            copier.reap(|id| engine.copy_done(t, id));
            local_work = true;
            records_only = false;
        }
        if let Some(sh) = local.as_mut() {
            if sh.has_pending() {
                let t = now.unwrap_or_else(|| *coarse.insert(self.rt.coarse_now()));
                let want = *want;
                sh.receive(
                    engine,
                    mem,
                    t,
                    &mut |d| {
                        if rx_pool.capacity() < d.len() {
                            rx_pool.refill(d.len());
                        }
                        rx_pool.carve(d)
                    },
                    // Filed as `collect_completions` would, without the engine's queue
                    // (which was empty: nothing queued can be overtaken).
                    &mut |mem, c| filed |= file_completion(c, mem, done, forgotten, want, wanted),
                );
                local_work = true;
            }
            if sh.has_backlog() {
                local_work = true;
                records_only = false;
            }
        }
        // Pull replies go from the ring slot straight into the receive buffer (one copy
        // fewer); with copy offload they take the owned path, as the copy thread needs
        // a frame that outlives the slot.
        let in_place = copier.backend().is_none();
        let me = self.index;
        let mut placed = false;
        // An empty ring (the common poll) is seen with one load, before the frame
        // handler is even built.
        if faults.is_some() || sock.may_have_rx() {
            let mut take = |f: &[u8]| {
                // (Pull replies for another endpoint, which only the board-service owner
                // sees, take the owned path to be counted as for a closed endpoint.)
                if in_place
                    && f.get(16).map(|&t| omx_wire::type_of(t)) == Some(PULL_REPLY_TYPE)
                    && route(f) == Route::Endpoint(me)
                {
                    let t = *now.get_or_insert_with(|| self.rt.now());
                    let m = &*mem;
                    if engine.handle_frame_in_place(t, f, &mut |h, off, data| {
                        m.write(h, off as usize, data)
                    }) {
                        placed = true;
                        return;
                    }
                }
                if is_board_frame(f) {
                    board_rx.push(f.to_vec());
                } else {
                    // Frames are carved out of shared chunks: no allocation per frame.
                    if rx_pool.capacity() < f.len() {
                        rx_pool.refill(f.len());
                    }
                    rx.push(rx_pool.carve(f));
                }
            };
            match faults.as_mut() {
                None => {
                    let _ = sock.recv_batch(RX_BATCH, take);
                }
                Some(inj) => {
                    let _ = sock.recv_batch(RX_BATCH, |f| inj.on_receive(f, &mut take));
                    inj.release(&mut take);
                }
            }
        }
        // (Only while pulling: an idle poll stays free of system calls. Replies that
        // come late are taken, and dropped, during the next pull.)
        if let Some(d) = direct_rx.as_mut().filter(|_| engine.pulling()) {
            let t = *now.get_or_insert_with(|| self.rt.now());
            placed |= drain_direct(d, engine, mem, t, |f| {
                if rx_pool.capacity() < f.len() {
                    rx_pool.refill(f.len());
                }
                rx.push(rx_pool.carve(f));
            });
        }
        // Nothing arrived, nothing to send, no timer due: the common case of a polling
        // loop, kept free of clock reads and deadline scans. Also when shared-memory
        // records arrived that only completed requests (a local ping-pong): local
        // messages arm no timer, so the deadlines cannot have moved, and only the
        // completions need collecting.
        if rx.is_empty()
            && !placed
            && board_rx.is_empty()
            && (!local_work || records_only)
            && !engine.has_output_besides_completions()
            // The caller's precise clock when it has one: the coarse clock lags up to a
            // tick, and a sleeper whose deadline passed would otherwise spin until then.
            && *now.get_or_insert_with(|| coarse.unwrap_or_else(|| self.rt.coarse_now())) < *timer_at
        {
            if filed || engine.has_output() {
                let completed =
                    core.engine.has_output() && core.collect_completions(now.expect("read above"));
                if (filed || completed) && self.sleepers.load(Ordering::SeqCst) > 0 {
                    self.signal();
                }
                if !flush {
                    return;
                }
                let Core { bundler, sock, .. } = core;
                bundler.emit(sock);
                let _ = sock.flush();
                return;
            }
            if flush {
                bundler.emit(sock);
                let _ = sock.flush();
            }
            return;
        }
        // Frames from the wire start timers that need the precise clock; a pass that
        // only took shared-memory records or copies does with the coarse one.
        let now = now.unwrap_or_else(|| {
            if rx.is_empty() && board_rx.is_empty() {
                self.rt.coarse_now()
            } else {
                self.rt.now()
            }
        });
        if !rx.is_empty() || placed {
            self.last_rx.store(now, Ordering::Relaxed);
        }
        for f in rx.drain(..) {
            if f.get(16).map(|&t| omx_wire::type_of(t)) == Some(omx_wire::BUNDLE_TYPE)
                && self.rt.cfg.bundle
            {
                // Each inner frame is routed by its own (checksummed) header: the
                // bundle's header has no checksum, and a corrupted endpoint byte there
                // must not make us nack frames that are ours.
                let Ok(items) = omx_wire::bundle_items(&f) else {
                    engine.counters.drop_bad_bundle += 1;
                    continue;
                };
                engine.counters.recv_bundle += 1;
                for r in items {
                    let inner = f.slice(r);
                    // The inner frame must come from the bundle's sender.
                    if inner.get(6..12) != f.get(6..12) {
                        engine.counters.drop_bad_bundle += 1;
                        continue;
                    }
                    match route(&inner) {
                        Route::Endpoint(e) if e != me => self.nack_closed(engine, sock, e, &inner),
                        _ => engine.handle_frame(now, inner),
                    }
                }
                continue;
            }
            if let Route::Endpoint(e) = route(&f) {
                if e != me {
                    // Only the board-service owner sees these: frames for endpoints
                    // that are not open, answered with a nack as the original driver.
                    self.nack_closed(engine, sock, e, &f);
                    continue;
                }
            }
            engine.handle_frame(now, f);
        }
        let solicit = self.board.solicit.load(Ordering::Relaxed);
        if !core.board_rx.is_empty()
            || core
                .discovery
                .as_ref()
                .is_some_and(|d| d.deadline() <= now || d.solicited != solicit)
        {
            self.run_discovery(core, now);
        }
        if core.engine.poll_timeout().is_some_and(|t| t <= now) {
            core.engine.handle_timeout(now);
        }
        let completed = self.drain(core, now, flush) | filed;
        if completed && self.sleepers.load(Ordering::SeqCst) > 0 {
            self.signal();
        }
        if now >= core.next_publish {
            self.housekeeping(core, now);
        }
        // Every deadline can only have changed during this pass.
        let mut next = core
            .engine
            .poll_timeout()
            .unwrap_or(u64::MAX)
            .min(core.next_publish);
        if let Some(d) = &core.discovery {
            next = next.min(d.deadline());
        }
        core.timer_at = next;
    }

    fn nack_closed(&self, engine: &mut Engine, sock: &mut PacketSocket, e: u8, f: &Bytes) {
        engine.counters.drop_bad_endpoint += 1;
        // It may have opened since the filter was last refreshed: then it has its own copy.
        if e < MAX_ENDPOINTS && self.board.dir.endpoint_open(e) {
            return;
        }
        let kind = if e < MAX_ENDPOINTS {
            NackType::EndpointClosed
        } else {
            NackType::BadEndpoint
        };
        let frames: Vec<Bytes> =
            if f.get(16).map(|&t| omx_wire::type_of(t)) == Some(omx_wire::BUNDLE_TYPE) {
                omx_wire::bundle_items(f)
                    .map(|items| items.into_iter().map(|r| f.slice(r)).collect())
                    .unwrap_or_default()
            } else {
                vec![f.clone()]
            };
        for inner in frames {
            if let Some(n) =
                closed_endpoint_nack(&inner, &self.rt.cfg.wire, self.board.iface.mac, kind)
            {
                engine.counters.send_nack_lib += 1;
                let _ = sock.queue_send(n.len(), |b| b.copy_from_slice(&n));
            }
        }
    }

    /// The board-service owner also receives frames for every endpoint no process has
    /// open, so that it can nack them.
    fn owner_filter(&self) -> EndpointFilter {
        let open = self.board.dir.open_endpoints(MAX_ENDPOINTS);
        let endpoints = (0..=255u8)
            .filter(|i| *i == self.index || !open.contains(i))
            .collect();
        EndpointFilter {
            endpoints,
            board_frames: true,
            marked_only: false,
            direct: self.direct_fd.map(|_| self.index),
        }
    }

    /// A progress pass that hands the completion of `req`, if it produces it, straight
    /// to the caller (never seen by other threads: as if taken at once).
    fn progress_for(&self, core: &mut Core, now: Option<Time>, req: ReqId) -> Option<Completion> {
        core.want = Some(req);
        self.progress_at(core, now, true);
        core.want = None;
        core.wanted.take()
    }

    /// A progress pass, then the unexpected handler for whatever it left pending.
    fn progress_guard<'a>(&'a self, mut core: CoreGuard<'a>) -> CoreGuard<'a> {
        self.progress(&mut core);
        self.run_handlers(core)
    }

    /// Calls the unexpected handler for each pending message with the endpoint
    /// unlocked (it may post receives), then applies its verdict.
    #[inline]
    fn run_handlers<'a>(&'a self, core: CoreGuard<'a>) -> CoreGuard<'a> {
        if core.in_handler || core.unexp_handler.is_none() {
            return core;
        }
        self.run_installed_handler(core)
    }

    fn run_installed_handler<'a>(&'a self, mut core: CoreGuard<'a>) -> CoreGuard<'a> {
        while let Some(ev) = core.engine.poll_unexpected() {
            let Some(mut h) = core.unexp_handler.take() else {
                break;
            };
            core.in_handler = true;
            drop(core);
            let discard = h(&ev);
            core = self.lock();
            core.in_handler = false;
            if core.unexp_handler.is_none() && core.engine.unexpected_hook() {
                core.unexp_handler = Some(h);
            }
            let now = self.rt.now();
            core.engine.resolve_unexpected(now, ev.id, discard);
            self.post_drain(&mut core, now, true);
        }
        core
    }

    /// After posting a request: only the engine's outputs (frames, copies, completions),
    /// without polling the socket, which the next wait or test does.
    fn post_drain(&self, core: &mut Core, now: Time, flush: bool) {
        let completed = self.drain(core, now, flush);
        if completed && self.sleepers.load(Ordering::SeqCst) > 0 {
            self.signal();
        }
        core.timer_at = core
            .timer_at
            .min(core.engine.poll_timeout().unwrap_or(u64::MAX));
    }

    /// Executes copies, sends frames and collects completions until the engine is idle.
    fn drain(&self, core: &mut Core, now: Time, flush: bool) -> bool {
        let mut completed = false;
        // omxd checks relayed frames one by one and refuses bundles.
        let bundle = self.rt.cfg.bundle && !core.sock.is_relay();
        let Core {
            engine,
            sock,
            mem,
            done,
            forgotten,
            want,
            wanted,
            bundler,
            self_rx,
            local,
            copier,
            faults,
            ..
        } = core;
        if let Some(sh) = local.as_mut().filter(|s| s.has_backlog()) {
            sh.send(engine, mem, now);
        }
        while engine.has_output() {
            while let Some(p) = engine.poll_local_pull() {
                match local.as_mut() {
                    Some(sh) => sh.pull(engine, mem, now, p, copier),
                    None => {
                        let o = run_local_pull(mem, &p, std::process::id(), false, None);
                        engine.local_pull_done(now, p.id, o);
                    }
                }
            }
            match local.as_mut() {
                Some(sh) => sh.send(engine, mem, now),
                // Without a channel no partner is reached through shared memory.
                None => while engine.poll_local().is_some() {},
            }
            while let Some(op) = engine.poll_copy() {
                if copier.offloads(op.src.len(), op.msg_length) {
                    let dst = mem
                        .ranges(op.dst, op.dst_offset as usize, op.src.len())
                        .into_iter()
                        .map(|(p, n)| (p as usize, n))
                        .collect();
                    let job = CopyJob::Frame { src: op.src, dst };
                    if let Err(job) = copier.submit(op.id, job) {
                        // The engine is full: copy here (bounds the frames it holds).
                        run_job(job);
                        engine.copy_done(now, op.id);
                    }
                    continue;
                }
                mem.write(op.dst, op.dst_offset as usize, &op.src);
                engine.copy_done(now, op.id);
            }
            while let Some(t) = engine.poll_transmit() {
                if t.dst_mac() == self.board.iface.mac && !self.board.iface.loopback {
                    // A frame to ourselves never comes back from a real interface:
                    // loop it back in software for the next pass.
                    let mut f = Vec::with_capacity(t.frame_len());
                    let m = &*mem;
                    t.assemble(&mut f, |h, off, out| m.read(h, off as usize, out));
                    self_rx.push(Bytes::from(f));
                    continue;
                }
                if faults.as_mut().is_some_and(|f| f.drop_send()) {
                    continue;
                }
                if bundle && Bundler::eligible(&t) {
                    bundler.push(&t, sock, |mac, ep| engine.frame_limit(mac, ep));
                    continue;
                }
                bundler.emit(sock);
                queue_transmit(sock, mem, &t);
            }
            completed |=
                collect_completions(engine, mem, done, forgotten, *want, wanted, copier, now);
        }
        if flush {
            bundler.emit(sock);
            let _ = sock.flush();
        } else if sock.holds_lent() {
            // Frames that read user memory leave before the lock is released, so the
            // memory cannot be handed back to the application (a completion, a
            // cancel, a failed send) while the kernel may still read it.
            let _ = sock.flush();
        }
        let sent = std::mem::take(&mut bundler.bundles_sent);
        engine.counters.send_bundle += sent;
        completed
    }

    #[inline]
    fn sync_peers(&self, core: &mut Core) {
        if self.board.peers_version.load(Ordering::Acquire) != core.peers_version {
            self.load_peers(core);
        }
    }

    fn load_peers(&self, core: &mut Core) {
        let st = self.board.peers.lock().expect("peer lock");
        if st.version == core.peers_version {
            return;
        }
        for (_, p) in st.table.iter() {
            core.engine.add_peer(p.nic_id, p.name.clone());
        }
        core.peers_version = st.version;
    }

    fn run_discovery(&self, core: &mut Core, now: Time) {
        let frames = std::mem::take(&mut core.board_rx);
        let Some(d) = core.discovery.as_mut() else {
            return;
        };
        let wire = self.rt.cfg.wire;
        let mut out = Vec::new();
        let mut changed = false;
        {
            let mut st = self.board.peers.lock().expect("peer lock");
            for f in &frames {
                let o = d.on_frame(now, f, &mut st.table, &wire);
                changed |= o.changed;
                out.extend(o.frames);
            }
            let solicit = self.board.solicit.load(Ordering::Relaxed);
            if d.solicited != solicit {
                d.solicited = solicit;
                out.extend(d.solicit(now, &st.table, &wire));
            }
            let o = d.tick(now, &st.table, &wire);
            out.extend(o.frames);
            if changed {
                st.version += 1;
                self.board
                    .peers_version
                    .store(st.version, Ordering::Release);
            }
        }
        for f in out {
            let _ = core.sock.send(&f);
        }
        if changed {
            let _ = self.board.dir.save_peers(&self.board.peer_snapshot());
            self.sync_peers(core);
        }
    }

    /// Once a second: publish counters for the tools, pick up peers other processes
    /// learned, and take over the board service if its owner went away.
    fn housekeeping(&self, core: &mut Core, now: Time) {
        core.next_publish = now + SEC;
        if let Some(sh) = core.local.as_mut() {
            sh.check_liveness(&mut core.engine, now);
        }
        let info = EndpointInfo {
            index: self.index,
            pid: std::process::id(),
            command: command_name(),
            counters: core
                .engine
                .counters
                .iter()
                .map(|(n, v)| (n.to_string(), v))
                .chain(self.runtime_counters(core))
                .collect(),
        };
        let _ = self.board.dir.publish_endpoint(&info, core.sock.is_relay());
        if core.discovery.is_some() {
            let filter = self.owner_filter();
            let _ = core.sock.set_filter(Some(&filter));
        }
        if core.discovery.is_none() {
            self.board.merge_peers(&self.board.dir.load_peers());
            // A relayed endpoint never sees board frames: omxd serves the board.
            if now >= core.next_board_try && !core.sock.is_relay() {
                core.next_board_try = now + SEC;
                if let Ok(Some(l)) = self.board.dir.try_lock_board() {
                    let filter = self.owner_filter();
                    if core.sock.set_filter(Some(&filter)).is_ok() {
                        core.board_lock = Some(l);
                        core.discovery = Some(Discovery::new(
                            self.board.nic_id,
                            self.board.name.clone(),
                            random_u32(),
                        ));
                    }
                }
            }
        }
    }

    /// Counters kept by the runtime itself (sleeps and wake-ups, copy offload).
    fn runtime_counters(&self, core: &Core) -> Vec<(String, u64)> {
        let mut v = Vec::new();
        if let Some(f) = &core.faults {
            let s = f.stats;
            v.extend([
                ("faults_dropped_rx".to_string(), s.dropped_rx),
                ("faults_dropped_tx".to_string(), s.dropped_tx),
                ("faults_duplicated".to_string(), s.duplicated),
                ("faults_reordered".to_string(), s.reordered),
                ("faults_corrupted".to_string(), s.corrupted),
            ]);
        }
        v.extend(vec![
            ("sleeps".into(), self.sleeps.load(Ordering::Relaxed)),
            (
                "wakeups_io".into(),
                self.woken_by_io.load(Ordering::Relaxed),
            ),
            (
                "wakeups_timer".into(),
                self.woken_by_timer.load(Ordering::Relaxed),
            ),
            ("copy_offloaded".into(), core.copier.offloaded),
            ("copy_inline_full".into(), core.copier.inline_full),
        ]);
        if let Some(d) = &core.direct_rx {
            v.extend([
                ("direct_received".to_string(), d.received),
                ("direct_other_host".to_string(), d.skipped),
                ("direct_truncated".to_string(), d.truncated),
                ("direct_rebuilt".to_string(), d.rebuilt_frames),
            ]);
        }
        v
    }

    /// Earliest deadline of the engine or discovery, as a poll timeout from now.
    fn sleep_budget(&self, core: &Core, cap: Duration) -> Duration {
        let cap = if core.work_without_wakeup() {
            cap.min(Duration::from_micros(50))
        } else {
            cap
        };
        let now = self.rt.now();
        let mut next = core
            .engine
            .poll_timeout()
            .unwrap_or(u64::MAX)
            .min(core.next_publish);
        if let Some(d) = &core.discovery {
            next = next.min(d.deadline());
        }
        Duration::from_nanos(next.saturating_sub(now)).min(cap)
    }

    /// Sleeps until a watched descriptor is ready or `timeout`; returns which of the
    /// eventfd and the shared-memory doorbell fired (they need draining).
    fn poll_fds(&self, timeout: Duration) -> Fired {
        let active = self.coalescing != Coalescing::Off
            && self
                .rt
                .now()
                .saturating_sub(self.last_rx.load(Ordering::Relaxed))
                < TRAFFIC_IDLE;
        let coalesce = timeout.min(Duration::from_nanos(self.coalescing_ns));
        let wake_fd = self
            .wake_sock
            .as_ref()
            .map_or(-1, |s| s.lock().unwrap_or_else(|p| p.into_inner()).fd());
        // (socket that wakes at once, data socket, timeout)
        let (net_fd, data_fd, timeout) = match (self.coalescing, active) {
            (Coalescing::Off, _) | (_, false) => (wake_fd, self.sock_fd, timeout),
            (Coalescing::Timer, true) => (-1, -1, coalesce),
            (Coalescing::Marked | Coalescing::Stream, true) => (wake_fd, -1, coalesce),
        };
        let mut fds = [
            libc::pollfd {
                fd: net_fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: data_fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake_fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.shm_fd.unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
            // Pull replies wake like the data socket they bypass.
            libc::pollfd {
                fd: if data_fd >= 0 {
                    self.direct_fd.unwrap_or(-1)
                } else {
                    -1
                },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        self.sleeps.fetch_add(1, Ordering::Relaxed);
        // SAFETY: five valid pollfds (a negative fd is ignored) and a valid timespec.
        let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 5, &ts, std::ptr::null()) };
        if n > 0 {
            self.woken_by_io.fetch_add(1, Ordering::Relaxed);
            if fds[0].revents != 0 || fds[1].revents != 0 || fds[4].revents != 0 {
                // (The wake socket only rings: frames come from the data ring, and its
                // marks are drained before the next sleep.)
                if self.coalescing == Coalescing::Stream {
                    let until = self.rt.now() + self.coalescing_ns / 2;
                    self.linger_until.store(until, Ordering::Relaxed);
                }
            }
        } else {
            self.woken_by_timer.fetch_add(1, Ordering::Relaxed);
        }
        Fired {
            event: fds[2].revents != 0,
            doorbell: fds[3].revents != 0,
        }
    }

    /// Sleeps in `poll_fds` with the shared-memory doorbell armed (unless a record
    /// arrived meanwhile). Called with the core lock held; releases it.
    fn sleep_unlocked(&self, mut core: CoreGuard<'_>, timeout: Duration) -> Fired {
        if core.direct_rx.is_some() {
            take_late_replies(&mut core, self.rt.now());
        }
        if let Some(w) = &self.wake_sock {
            // A frame already waits: no sleep, and no system call.
            if frames_waiting(&core) {
                return Fired::default();
            }
            // Forget the marks of frames already taken, then make sure none arrived
            // since the last pass (its mark would have been drained with them).
            let _ = w
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .recv_batch(RX_BATCH, |_| {});
            if frames_waiting(&core) {
                return Fired::default();
            }
        }
        let armed = match core.local.as_mut() {
            Some(sh) => {
                if !sh.prepare_sleep() {
                    return Fired::default();
                }
                true
            }
            None => false,
        };
        drop(core);
        let fired = self.poll_fds(timeout);
        if armed {
            if let Some(sh) = self.lock().local.as_mut() {
                sh.after_sleep(fired.doorbell);
            }
        }
        fired
    }

    /// Adaptive wait: make progress and spin for the configured budget (a reply that
    /// arrives then costs no wake-up), then sleep in the kernel on the socket, a signal
    /// from another thread, or the next timer.
    /// `check(core, completion of want if this pass produced it)`.
    fn wait_for<T>(
        &self,
        timeout: Option<Duration>,
        want: Option<ReqId>,
        mut check: impl FnMut(&mut Core, Option<Completion>) -> Option<T>,
    ) -> Option<T> {
        // Already there: return without a progress pass, so that streams of
        // early-completed sends keep accumulating into shared frames.
        let mut core = self.app_lock();
        if let Some(x) = check(&mut core, None) {
            return Some(x);
        }
        drop(core);
        let start = self.rt.now();
        self.app_active.fetch_add(1, Ordering::SeqCst);
        let deadline = timeout.map(|t| start.saturating_add(t.as_nanos() as u64));
        let spin_until = start + self.rt.cfg.wait_spin_for.as_nanos() as u64;
        let mut next_yield = start + TIGHT_SPIN.as_nanos() as u64;
        let wakeups = self.wakeups.load(Ordering::SeqCst);
        let result = loop {
            let (mut core, now) = self.app_lock_now();
            let got = match want {
                Some(req) => self.progress_for(&mut core, Some(now), req),
                None => {
                    self.progress_at(&mut core, Some(now), true);
                    None
                }
            };
            let mut core = self.run_handlers(core);
            if let Some(x) = check(&mut core, got) {
                break Some(x);
            }
            if self.wakeups.load(Ordering::SeqCst) != wakeups
                || self.closing.load(Ordering::SeqCst)
                || deadline.is_some_and(|d| now >= d)
            {
                break None;
            }
            // Work another thread does for us on this CPU: the copy thread, or omxd.
            let core_copies = core.copier.pending() > 0 || core.sock.is_relay();
            let lingering = now < self.linger_until.load(Ordering::Relaxed);
            if self.rt.cfg.wait_spin || now < spin_until || core_copies || lingering {
                drop(core);
                // Past a short tight spin, yield now and then: a waker placed on this
                // CPU (wake-affine scheduling) then runs soon instead of after the whole
                // spin budget, which otherwise locks both sides into slow waits.
                if now > next_yield || core_copies {
                    std::thread::yield_now();
                    next_yield = now + YIELD_EVERY;
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let left = Duration::from_nanos(deadline.map_or(1_000_000_000, |d| d - now));
            let budget = self.sleep_budget(&core, left);
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            let fired = self.sleep_unlocked(core, budget);
            if self.sleepers.fetch_sub(1, Ordering::SeqCst) == 1 && fired.event {
                self.drain_signal();
            }
        };
        self.app_active.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Background progress while no application thread is driving it: sleeps while an
    /// application thread waits or has called in recently, else sleeps on the socket
    /// and the next timer.
    fn progress_loop(self: Arc<Self>) {
        let mut seen = self.app_calls.load(Ordering::Relaxed);
        let mut nap = APP_QUIET;
        while !self.closing.load(Ordering::SeqCst) {
            let calls = self.app_calls.load(Ordering::Relaxed);
            let active = self.app_active.load(Ordering::SeqCst) > 0;
            if active || calls != seen {
                // Not woken when the application leaves (that would cost every wait a
                // futex wake): nap until a whole interval passed without a call, backing
                // off while the application keeps driving (each wake-up steals a CPU
                // from a polling thread).
                seen = calls;
                let g = self.idle.0.lock().unwrap_or_else(|p| p.into_inner());
                let _ = self.idle.1.wait_timeout(g, nap);
                nap = (nap * 2).min(APP_NAP_MAX);
                continue;
            }
            nap = APP_QUIET;
            let core = self.lock();
            let budget = self.sleep_budget(&core, Duration::from_millis(100));
            let fired = self.sleep_unlocked(core, budget);
            if self.sleepers.load(Ordering::SeqCst) == 0 && fired.event {
                self.drain_signal();
            }
            if self.closing.load(Ordering::SeqCst) {
                break;
            }
            if self.app_active.load(Ordering::SeqCst) > 0
                || self.app_calls.load(Ordering::Relaxed) != seen
            {
                continue;
            }
            let core = self.lock();
            let mut core = core;
            let now = self.rt.now();
            self.progress_at(&mut core, Some(now), true);
            drop(self.run_handlers(core));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(req: u64, match_info: u64) -> Completion {
        Completion {
            req: ReqId(req),
            kind: RequestKind::Send,
            status: Status {
                code: StatusCode::Success,
                source: None,
                match_info,
                msg_length: 0,
                xfer_length: 0,
                context: 0,
            },
            mem: None,
        }
    }

    #[test]
    fn done_table_keeps_completion_order_whatever_is_taken_first() {
        let mut d = DoneTable::default();
        assert!(d.take(ReqId(1)).is_none());
        assert_eq!(d.oldest(), None);
        for r in 1..=4 {
            d.insert(completion(r, r * 10));
        }
        assert!(d.contains(ReqId(4)) && d.contains(ReqId(1)));
        // The latest, then one in the middle, by id.
        assert_eq!(d.take(ReqId(4)).map(|c| c.req), Some(ReqId(4)));
        assert_eq!(d.take(ReqId(2)).map(|c| c.req), Some(ReqId(2)));
        assert!(d.take(ReqId(2)).is_none() && !d.contains(ReqId(4)));
        assert_eq!(d.oldest(), Some(ReqId(1)));
        d.insert(completion(5, 50));
        // By match: the oldest that matches.
        assert_eq!(d.take_any(0, 0).map(|c| c.req), Some(ReqId(1)));
        assert_eq!(d.take_any(50, u64::MAX).map(|c| c.req), Some(ReqId(5)));
        assert_eq!(d.oldest(), Some(ReqId(3)));
        assert_eq!(d.take(ReqId(3)).map(|c| c.req), Some(ReqId(3)));
        assert_eq!(d.oldest(), None);
        // Taken right after completing, with older ones left.
        d.insert(completion(6, 0));
        d.insert(completion(7, 0));
        assert_eq!(d.take(ReqId(7)).map(|c| c.req), Some(ReqId(7)));
        d.insert(completion(8, 0));
        assert_eq!(d.oldest(), Some(ReqId(6)));
        assert_eq!(d.take_any(0, 0).map(|c| c.req), Some(ReqId(6)));
        assert_eq!(d.oldest(), Some(ReqId(8)));
    }
}
