//! Opening an endpoint (its sockets, engine, shared-memory channel and progress
//! thread), directly or through `omxd`, and closing it.

use super::completions::Completions;
use super::housekeeping::Upkeep;
use super::progress::{Activity, UnexpectedSlot};
use super::rx::Inbound;
use super::sleep::{NetFds, Wake};
use super::tx::Outbound;
use super::{random_u32, Core, CoreLock, Endpoint, EndpointInner, Error};
use crate::config::{Coalescing, DaemonUse, DirectRecv, DIRECT_RECV_BATCH};
use crate::copy::Copier;
use crate::discovery::Discovery;
use crate::local::LocalChannel;
use crate::memory::MemRegistry;
use crate::registry::LockFile;
use crate::runtime::{Board, Runtime, MAX_ENDPOINTS};
use omx_proto::*;
use omx_transport::{DirectRx, EndpointFilter, FaultInjector, PacketSocket, SocketOptions};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

impl Endpoint {
    /// Opens endpoint `index` (or any free one) on `board` with application key `key`.
    pub fn open(
        rt: &Arc<Runtime>,
        board: u32,
        index: Option<u8>,
        key: u32,
    ) -> Result<Endpoint, Error> {
        let b = rt.board(board).ok_or(Error::NoSuchBoard)?.clone();
        crate::debug_signal::install(rt.cfg.debug_signal, rt.cfg.debug_signal_num);
        if index.is_some_and(|i| i >= MAX_ENDPOINTS) {
            return Err(Error::BadEndpointIndex);
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
        // An AF_XDP socket first when asked for: it takes every frame of the endpoint
        // (no wake socket, no direct socket beside it).
        let xdp_sock = Self::open_xdp(rt, &iface, index, board_lock.is_some());
        let direct_recv = rt.cfg.direct_recv_for(&b.wire);
        let use_direct_rx = xdp_sock.is_none()
            && direct_recv != DirectRecv::Off
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
                if rt.cfg.wire.mode != omx_wire::WireMode::Native || xdp_sock.is_some() =>
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
            // Every sleep drains its marks: a small batch keeps that a short
            // `recvmmsg` set-up (it loops while batches come back full).
            let wopts = SocketOptions {
                rx_ring_bytes: 0,
                socket_buf_bytes: 64 * 1024,
                recv_batch: 8,
                ..SocketOptions::default()
            };
            let s = PacketSocket::open_filtered(&iface, rt.cfg.wire.ethertype, &wopts, Some(&wf))?;
            Some(Mutex::new(s))
        } else {
            None
        };
        let sock = match xdp_sock {
            Some(s) => s,
            None => {
                PacketSocket::open_filtered(&iface, rt.cfg.wire.ethertype, &opts, Some(&filter))?
            }
        };
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
            sock,
            direct_rx,
            wake_sock,
            coalescing,
            board_lock,
            Some(lock),
        )
    }

    /// The endpoint's AF_XDP socket when `OMX_TRANSPORT` asks for one and the interface,
    /// driver and privileges allow it; `None` (said once with `OMX_VERBOSE`) means
    /// packet sockets.
    fn open_xdp(
        rt: &Arc<Runtime>,
        iface: &omx_transport::Interface,
        index: u8,
        board_frames: bool,
    ) -> Option<PacketSocket> {
        static FALLBACK_SAID: std::sync::atomic::AtomicBool =
            std::sync::atomic::AtomicBool::new(false);
        if rt.xdp_held_by_daemon.load(Ordering::Relaxed)
            || rt.cfg.transport == crate::config::Transport::Packet
        {
            return None;
        }
        let filter = EndpointFilter::new([index], board_frames);
        match rt.cfg.open_xdp(iface, &filter) {
            Ok((s, zero_copy)) => {
                if rt.cfg.verbose {
                    let mode = if s.xdp_native() == Some(true) {
                        "native"
                    } else {
                        "generic"
                    };
                    eprintln!(
                        "omx: endpoint {index} on {} uses AF_XDP ({mode} mode, {})",
                        iface.name,
                        if zero_copy { "zero-copy" } else { "copy" }
                    );
                }
                Some(s)
            }
            Err(e) => {
                if rt.cfg.verbose && !FALLBACK_SAID.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "omx: AF_XDP not available on {} ({e}): using packet sockets",
                        iface.name
                    );
                }
                None
            }
        }
    }

    /// Opens an endpoint through `omxd` (no CAP_NET_RAW here): the daemon owns the
    /// endpoint index and the packet socket, and relays our frames; no board service,
    /// no wake socket (every relayed frame wakes) and no bundles (the daemon checks
    /// frames one by one).
    pub(super) fn open_relayed(
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
            RelayError::Refused(Refusal::BadEndpoint) => Error::BadEndpointIndex,
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
            crate::say!(
                crate::config::messages::At { board: b.index, endpoint: index, board_name: &b.name };
                "endpoint {index} opened through omxd ({})",
                path.display()
            );
        }
        Self::assemble(
            rt,
            b.clone(),
            index,
            key,
            sock,
            None,
            None,
            Coalescing::Off,
            None,
            None,
        )
    }

    /// `OMX_STRIPE`: a socket on each of the host's other boards for the endpoint's
    /// striped pulls and replies, in board order (the partner pairs its `i`-th other
    /// board with ours). The list stops at the first board that cannot serve (a smaller
    /// MTU than the endpoint's frames, a socket refused), which keeps that pairing;
    /// loopback boards are no link.
    fn open_stripes(
        rt: &Arc<Runtime>,
        b: &Arc<Board>,
        index: u8,
        session: u32,
    ) -> Vec<(NicId, PacketSocket)> {
        let filter = omx_transport::StripeFilter {
            endpoint: index,
            session,
        };
        let opts = SocketOptions {
            rx_ring_bytes: rt.cfg.rx_ring_bytes,
            ..SocketOptions::default()
        };
        let mut out = Vec::new();
        let others = rt
            .boards
            .iter()
            .filter(|o| o.nic_id != b.nic_id && !o.iface.loopback);
        for o in others.take(omx_wire::STRIPE_BOARDS_MAX) {
            let mut iface = o.iface.clone();
            if iface.mtu < b.wire.mtu {
                break;
            }
            iface.mtu = b.wire.mtu;
            match PacketSocket::open_stripe(&iface, rt.cfg.wire.ethertype, &opts, &filter) {
                Ok(s) => out.push((o.nic_id, s)),
                Err(e) => {
                    if rt.cfg.verbose {
                        crate::say!(
                            crate::config::messages::At { board: b.index, endpoint: index, board_name: &b.name };
                            "no striping over {} ({e})", o.iface.name
                        );
                    }
                    break;
                }
            }
        }
        out
    }

    /// Builds the endpoint around its socket(s) once the index is ours.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn assemble(
        rt: &Arc<Runtime>,
        b: Arc<Board>,
        index: u8,
        key: u32,
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
        if let Some(frames) = sock.rx_capacity() {
            // Replies to every outstanding pull request must fit in the receive ring
            // (with room for other traffic): the kernel drops what does not.
            let per_block = ecfg.wire.pull_block_replies.max(1) as usize;
            ecfg.pull_blocks_max = ((frames * 3 / 4) / per_block).max(1) as u32;
        }
        // omxd checks relayed frames one by one and refuses bundles.
        ecfg.send_bundles = !sock.is_relay();
        let stripes = if rt.cfg.stripe && !sock.is_relay() {
            Self::open_stripes(rt, &b, index, session)
        } else {
            Vec::new()
        };
        ecfg.stripe_boards = stripes.iter().map(|(nic, _)| *nic).collect();
        let stripes: Vec<PacketSocket> = stripes.into_iter().map(|(_, s)| s).collect();
        let copier = Copier::new(rt.cfg.copy.clone());
        // Receives of messages the copy engine never takes complete in the pass that
        // delivered them (their copies are made as they are taken, unreported).
        ecfg.inline_copy_msg_max = match copier.backend() {
            Some(_) => copier.limits.min_msg.saturating_sub(1),
            None => u32::MAX,
        };
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
                        crate::say!(
                            crate::config::messages::At { board: b.index, endpoint: index, board_name: &b.name };
                            "no shared-memory channel ({e}); local peers use the network"
                        );
                    }
                    None
                }
            }
        };
        let shm_fd = local.as_ref().map(|s| s.wake_fd());
        let stripe_fds = stripes.iter().map(PacketSocket::fd).collect();
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        b.dir.mark_reach(index, local.as_ref().map(|_| uid));
        let core = Core {
            engine,
            sock,
            stripes,
            direct_rx,
            mem: MemRegistry::default(),
            copier,
            local,
            faults: rt.cfg.faults.clone().map(|mut c| {
                // A distinct stream per endpoint and process.
                c.seed = c.seed ^ ((index as u64) << 32) ^ std::process::id() as u64;
                FaultInjector::new(c)
            }),
            completions: Completions::default(),
            inbound: Inbound::new(),
            outbound: Outbound::new(),
            upkeep: Upkeep::new(board_lock, discovery),
            unexpected: UnexpectedSlot::default(),
            timer_at: 0,
            _index_lock: lock,
        };
        let wake = Wake::new(
            // SAFETY: efd is a fresh descriptor we own.
            unsafe { OwnedFd::from_raw_fd(efd) },
            NetFds {
                sock: sock_fd,
                direct: direct_fd,
                stripes: stripe_fds,
            },
            shm_fd,
            coalescing,
            rt.cfg.coalescing_delay.as_nanos() as u64,
            wake_sock,
        );
        let inner = Arc::new(EndpointInner {
            rt: rt.clone(),
            board: b,
            index,
            session,
            core: CoreLock::new(core),
            wake,
            activity: Activity::default(),
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
}

impl Endpoint {
    /// Before a close: keep answering the network until every sequenced packet this
    /// endpoint sent is acknowledged and its partners have been quiet for twice their
    /// longest retransmission timeout, at most `OMX_CLOSE_LINGER_MS`. A notify or ack
    /// lost just before the close is then resent or answered, so the peer's send
    /// completes with success instead of meeting a closed endpoint (TCP's close
    /// delivers its final acknowledgements the same way). Costs nothing when
    /// everything was acknowledged and the link went quiet.
    pub fn linger(&self) {
        let limit = self.inner.rt.cfg.close_linger;
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            let settled = {
                let mut core = self.inner.lock();
                core.engine.flush_acks();
                self.inner.progress(&mut core);
                let q = core.engine.stats();
                let quiet_needed = core
                    .engine
                    .path_stats()
                    .iter()
                    .filter(|p| p.srtt > 0)
                    .map(|p| p.rto)
                    .max()
                    .unwrap_or(0)
                    .saturating_mul(2);
                let now = self.inner.rt.now();
                let last_rx = self.inner.wake.last_rx.load(Ordering::Relaxed);
                q.unacked == 0 && q.throttled == 0 && now.saturating_sub(last_rx) >= quiet_needed
            };
            if settled {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.linger();
        {
            let mut core = self.inner.lock();
            core.engine.flush_acks();
            self.inner.progress(&mut core);
            // No copy may land in user memory after close returns.
            let Core { engine, copier, .. } = &mut *core;
            copier.wait_all(|id| engine.copy_done(0, id));
        }
        self.inner.activity.closing.store(true, Ordering::SeqCst);
        self.inner.wake.signal();
        self.inner.activity.idle.1.notify_all();
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
