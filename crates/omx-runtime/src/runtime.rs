//! Process-wide state: configuration, attached boards and their peer tables.

use crate::clock::Clock;
use crate::config::RuntimeConfig;
use crate::registry::{parse_peers, BoardDir};
use omx_proto::{nic_id_from_mac, NicId, PeerTable};
use omx_transport::{select_boards, Interface};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Peer table entries the runtime accepts per board (the original's default).
pub const MAX_PEERS: usize = 1024;
/// Endpoints per board (the original's default).
pub const MAX_ENDPOINTS: u8 = 32;

pub struct PeerState {
    pub table: PeerTable,
    /// Bumped on every change so endpoints can refresh their engines' copies.
    pub version: u64,
}

pub struct Board {
    pub index: u32,
    pub iface: Interface,
    /// Frame sizes of this board: its interface's MTU up to the `OMX_MTU` cap (native
    /// mode), which its endpoints advertise and agree down with each partner.
    pub wire: omx_wire::WireConfig,
    pub nic_id: NicId,
    /// `host:index`, the name peers resolve.
    pub name: String,
    pub dir: BoardDir,
    pub peers: Mutex<PeerState>,
    /// Mirror of `peers.version`, read without the lock on every progress pass.
    pub peers_version: AtomicU64,
    /// Bumped to ask this process's discovery (if it runs the board service) to ask
    /// the network now: a broadcast announcement and name queries to unnamed peers.
    pub solicit: AtomicU64,
}

impl Board {
    /// Merges entries (from the shared file or discovery); true if anything changed.
    pub fn merge_peers(&self, entries: &[(NicId, Option<String>)]) -> bool {
        let mut st = self.peers.lock().expect("peer lock");
        let mut changed = false;
        for (nic, name) in entries {
            let before = st
                .table
                .index_of(*nic)
                .and_then(|i| st.table.get(i))
                .map(|p| p.name.clone());
            if before
                .as_ref()
                .is_some_and(|b| b.is_some() && name.is_none())
            {
                continue;
            }
            let added = st.table.add_or_evict(*nic, name.clone(), |_| false);
            if added.is_some() && before != Some(name.clone()) {
                changed = true;
            }
        }
        if changed {
            st.version += 1;
            self.peers_version.store(st.version, Ordering::Release);
        }
        changed
    }

    /// Removes a peer from the board's table and the shared peer file (mapper tools).
    /// Endpoints already talking to it keep their sessions.
    pub fn remove_peer(&self, nic: NicId) -> bool {
        let removed = {
            let mut st = self.peers.lock().expect("peer lock");
            let r = st.table.remove(nic);
            if r {
                st.version += 1;
                self.peers_version.store(st.version, Ordering::Release);
            }
            r
        };
        if removed {
            let _ = self.dir.save_peers(&self.peer_snapshot());
        }
        removed
    }

    pub fn peer_snapshot(&self) -> Vec<(NicId, Option<String>)> {
        let st = self.peers.lock().expect("peer lock");
        st.table
            .iter()
            .map(|(_, p)| (p.nic_id, p.name.clone()))
            .collect()
    }
}

pub struct Runtime {
    pub cfg: RuntimeConfig,
    pub boards: Vec<Arc<Board>>,
    pub warnings: Vec<String>,
    /// The engines' clock (CLOCK_MONOTONIC since the start).
    clock: Clock,
    /// How far [`Runtime::coarse_now`] may lag the precise clock (the coarse clock's
    /// resolution: the kernel tick, 1-4 ms).
    pub coarse_lag: u64,
    /// Set by `omxd` when it owns the boards' AF_XDP sockets (one per receive queue):
    /// the process's own endpoints then use packet sockets whatever `OMX_TRANSPORT` says.
    pub xdp_held_by_daemon: std::sync::atomic::AtomicBool,
}

static GLOBAL: OnceLock<Result<Arc<Runtime>, String>> = OnceLock::new();

impl Runtime {
    /// The process's runtime, initialised on first use from the environment.
    pub fn global() -> Result<Arc<Runtime>, String> {
        GLOBAL
            .get_or_init(|| Runtime::init(RuntimeConfig::from_env()).map(Arc::new))
            .clone()
    }

    pub fn init(cfg: RuntimeConfig) -> Result<Runtime, String> {
        let (ifaces, warnings) = select_boards(cfg.min_board_mtu(), cfg.ifaces.as_deref())
            .map_err(|e| format!("cannot list interfaces: {e}"))?;
        let static_peers = match &cfg.peers_file {
            Some(f) => {
                let text =
                    std::fs::read_to_string(f).map_err(|e| format!("peers file {f}: {e}"))?;
                parse_peers(&text).map_err(|e| format!("peers file {f}: {e}"))?
            }
            None => Vec::new(),
        };
        let mut boards = Vec::new();
        for (i, iface) in ifaces.into_iter().enumerate() {
            let nic_id = nic_id_from_mac(iface.mac);
            let dir = BoardDir::open(nic_id).map_err(|e| format!("state directory: {e}"))?;
            let name = match dir.saved_name() {
                Some(n) => n,
                None if iface.loopback => "localhost".to_string(),
                None => format!("{}:{}", cfg.hostname, i),
            };
            let mut table = PeerTable::new(MAX_PEERS);
            table.add(nic_id, Some(name.clone()));
            let board = Board {
                index: i as u32,
                wire: cfg.board_wire(iface.mtu),
                iface,
                nic_id,
                name,
                dir,
                peers: Mutex::new(PeerState { table, version: 1 }),
                peers_version: AtomicU64::new(1),
                solicit: AtomicU64::new(0),
            };
            board.merge_peers(&static_peers);
            board.merge_peers(&board.dir.load_peers());
            // The saved peer table may hold this board under an older name (it was saved
            // before `mx_raw_set_hostname` or `omx_hostname -n`): its own name wins.
            board.merge_peers(&[(nic_id, Some(board.name.clone()))]);
            boards.push(Arc::new(board));
        }
        let clock = Clock::new(cfg.counter_clock);
        Ok(Runtime {
            cfg,
            boards,
            warnings,
            coarse_lag: clock.coarse_lag,
            clock,
            xdp_held_by_daemon: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Monotonic nanoseconds since the runtime started (the engines' clock).
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// The same clock read coarsely (a few ns instead of tens, up to `coarse_lag`
    /// late): enough to tell that no timer is due yet while the next deadline is more
    /// than a tick away (see `EndpointInner::before_deadline`).
    #[inline]
    pub fn coarse_now(&self) -> u64 {
        self.clock.coarse_now()
    }

    /// Whether the clock scales the CPU's time-stamp counter (`OMX_CLOCK`).
    pub fn clock_uses_counter(&self) -> bool {
        self.clock.uses_counter()
    }

    fn find_name(&self, name: &str) -> Option<NicId> {
        for b in &self.boards {
            let st = b.peers.lock().expect("peer lock");
            if let Some((_, p)) = st.table.find_by_name(name) {
                return Some(p.nic_id);
            }
        }
        None
    }

    /// Resolves a board name (`host:board`) to its nic id, waiting up to `wait` for
    /// discovery (run by the endpoints) to learn it. An unknown name makes discovery
    /// ask the network at once (and every half second while waiting), instead of
    /// waiting for the next periodic announcement or name query.
    pub fn hostname_to_nic_id(&self, name: &str, wait: Duration) -> Option<NicId> {
        const ASK_EVERY: Duration = Duration::from_millis(500);
        let until = Instant::now() + wait;
        let mut next_ask = Instant::now();
        loop {
            if let Some(n) = self.find_name(name) {
                return Some(n);
            }
            for b in &self.boards {
                b.merge_peers(&b.dir.load_peers());
            }
            if let Some(n) = self.find_name(name) {
                return Some(n);
            }
            if Instant::now() >= until {
                return None;
            }
            if Instant::now() >= next_ask {
                next_ask = Instant::now() + ASK_EVERY;
                for b in &self.boards {
                    b.solicit.fetch_add(1, Ordering::Relaxed);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether any board's peer table holds `nic` (it was heard, or a peers file
    /// names it).
    pub fn knows_nic(&self, nic: NicId) -> bool {
        self.boards.iter().any(|b| {
            b.merge_peers(&b.dir.load_peers());
            b.peers
                .lock()
                .expect("peer lock")
                .table
                .index_of(nic)
                .is_some()
        })
    }

    pub fn nic_id_to_hostname(&self, nic: NicId) -> Option<String> {
        for b in &self.boards {
            b.merge_peers(&b.dir.load_peers());
            let st = b.peers.lock().expect("peer lock");
            if let Some(i) = st.table.index_of(nic) {
                return st.table.get(i).and_then(|p| p.name.clone());
            }
        }
        None
    }

    /// Boards in the order an open of any endpoint on any board tries them: the
    /// original searches endpoint index first, then board (index 0 of every board
    /// before index 1 of any), so endpoints spread over the boards. Boards with a free
    /// index come by that index, then by board number; full boards last.
    pub fn boards_for_any_open(&self) -> Vec<u32> {
        let mut order: Vec<(u8, u32)> = self
            .boards
            .iter()
            .map(|b| {
                let free = b.dir.lowest_free_endpoint(MAX_ENDPOINTS).unwrap_or(u8::MAX);
                (free, b.index)
            })
            .collect();
        order.sort_unstable();
        order.into_iter().map(|(_, b)| b).collect()
    }

    pub fn board(&self, index: u32) -> Option<&Arc<Board>> {
        self.boards.get(index as usize)
    }
}
