//! Peer tables, discovery (board service) and the once-a-second housekeeping: counters
//! published for the tools, liveness of local partners, board-service takeover.

use super::{random_u32, Core, EndpointInner};
use crate::discovery::Discovery;
use crate::registry::{EndpointInfo, LockFile};
use crate::runtime::MAX_ENDPOINTS;
use omx_proto::*;
use omx_transport::EndpointFilter;
use std::sync::atomic::Ordering;

const SEC: Time = 1_000_000_000;
/// Partners whose round-trip estimates an endpoint publishes for the tools (the
/// first measured ones: a host of thousands stays readable and cheap to write).
const PUBLISHED_PATHS_MAX: usize = 256;

/// The peer table version, the board service (discovery) and the housekeeping timer.
pub(super) struct Upkeep {
    /// Version of the board's peer table last loaded into the engine.
    peers_version: u64,
    /// The board-service lock, held by the endpoint that runs discovery.
    board_lock: Option<LockFile>,
    pub(super) discovery: Option<Discovery>,
    /// When to try again to take over the board service (runtime ns).
    next_board_try: Time,
    /// When housekeeping runs next (runtime ns).
    pub(super) next_publish: Time,
    /// `OMX_DEBUG_SIGNAL` dumps asked for when this endpoint last looked.
    dumps_seen: u64,
}

impl Upkeep {
    pub(super) fn new(board_lock: Option<LockFile>, discovery: Option<Discovery>) -> Upkeep {
        Upkeep {
            peers_version: 0,
            board_lock,
            discovery,
            next_board_try: 0,
            next_publish: 0,
            dumps_seen: 0,
        }
    }
}

fn command_name() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl EndpointInner {
    /// The board-service owner also receives frames for every endpoint no process has
    /// open, so that it can nack them.
    pub(super) fn owner_filter(&self) -> EndpointFilter {
        let open = self.board.dir.open_endpoints(MAX_ENDPOINTS);
        let endpoints = (0..=255u8)
            .filter(|i| *i == self.index || !open.contains(i))
            .collect();
        EndpointFilter {
            endpoints,
            board_frames: true,
            marked_only: false,
            direct: self.wake.direct_fd.map(|_| self.index),
        }
    }
}

impl EndpointInner {
    /// Loads the board's peer table into the engine when another endpoint or process
    /// changed it.
    #[inline]
    pub(super) fn sync_peers(&self, core: &mut Core) {
        if self.board.peers_version.load(Ordering::Acquire) != core.upkeep.peers_version {
            self.load_peers(core);
        }
    }

    fn load_peers(&self, core: &mut Core) {
        let st = self.board.peers.lock().expect("peer lock");
        if st.version == core.upkeep.peers_version {
            return;
        }
        for (_, p) in st.table.iter() {
            core.engine.add_peer(p.nic_id, p.name.clone());
        }
        core.upkeep.peers_version = st.version;
    }

    /// After dispatch, the board service: board frames taken in this pass, due
    /// announcements, and solicitations asked for by a connect to an unknown board.
    pub(super) fn serve_board(&self, core: &mut Core, now: Time) {
        let solicit = self.board.solicit.load(Ordering::Relaxed);
        if !core.inbound.board.is_empty()
            || core
                .upkeep
                .discovery
                .as_ref()
                .is_some_and(|d| d.deadline() <= now || d.solicited != solicit)
        {
            self.run_discovery(core, now);
        }
    }

    fn run_discovery(&self, core: &mut Core, now: Time) {
        let frames = std::mem::take(&mut core.inbound.board);
        let Some(d) = core.upkeep.discovery.as_mut() else {
            return;
        };
        let wire = self.rt.cfg.wire;
        let mut out = Vec::new();
        let mut changed = false;
        let mut offers_changed = false;
        {
            let mut st = self.board.peers.lock().expect("peer lock");
            for f in &frames {
                let o = d.on_frame(now, f, &mut st.table, &wire);
                changed |= o.changed;
                offers_changed |= o.offers_changed;
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
        if offers_changed {
            let _ = self.board.dir.save_peer_offers(&d.offered());
        }
        if changed {
            let _ = self.board.dir.save_peers(&self.board.peer_snapshot());
            self.sync_peers(core);
        }
    }

    /// Last in a pass, once a second: publish counters for the tools, check that local
    /// partners are alive, pick up peers other processes learned, and take over the
    /// board service if its owner went away.
    pub(super) fn housekeeping(&self, core: &mut Core, now: Time) {
        core.upkeep.next_publish = now + SEC;
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
            paths: core
                .engine
                .path_stats()
                .into_iter()
                .filter(|p| p.srtt > 0 || p.pull_srtt > 0)
                .take(PUBLISHED_PATHS_MAX)
                .collect(),
        };
        let _ = self.board.dir.publish_endpoint(&info, core.sock.is_relay());
        if crate::debug_signal::asked_since(&mut core.upkeep.dumps_seen) {
            self.dump_state(core, &info);
        }
        if core.upkeep.discovery.is_some() {
            let filter = self.owner_filter();
            let _ = core.sock.set_filter(Some(&filter));
        }
        if core.upkeep.discovery.is_none() {
            self.board.merge_peers(&self.board.dir.load_peers());
            // A relayed endpoint never sees board frames: omxd serves the board.
            if now >= core.upkeep.next_board_try && !core.sock.is_relay() {
                core.upkeep.next_board_try = now + SEC;
                if let Ok(Some(l)) = self.board.dir.try_lock_board() {
                    let filter = self.owner_filter();
                    if core.sock.set_filter(Some(&filter)).is_ok() {
                        core.upkeep.board_lock = Some(l);
                        core.upkeep.discovery = Some(Discovery::new(
                            self.board.nic_id,
                            self.board.name.clone(),
                            random_u32(),
                        ));
                    }
                }
            }
        }
    }

    /// The `OMX_DEBUG_SIGNAL` dump, on stdout: queues, then (level 2) each partner.
    fn dump_state(&self, core: &Core, info: &EndpointInfo) {
        use std::io::Write;
        let at = crate::config::messages::At {
            board: self.board.index,
            endpoint: self.index,
            board_name: &self.board.name,
        };
        let p = crate::config::messages::prefix(Some(at));
        let q = core.engine.stats();
        let mut out = format!(
            "{p}endpoint {} of board {} ({}): {} requests, {} posted receives, {} unexpected \
             ({} bytes), {} unacked sends, {} pulls, {} partners\n",
            self.index,
            self.board.index,
            self.board.name,
            q.requests,
            q.posted_recvs,
            q.unexpected,
            q.unexpected_bytes,
            q.unacked,
            q.pulls,
            core.engine.path_stats().len(),
        );
        if self.rt.cfg.debug_signal > 1 {
            for s in core.engine.path_stats() {
                out.push_str(&format!(
                    "{p}  partner {:012x} ep {}: srtt {} ns, rto {} ns, pull srtt {} ns, {} pull blocks\n",
                    s.nic_id, s.endpoint, s.srtt, s.rto, s.pull_srtt, s.pull_blocks
                ));
            }
            for (name, v) in info.counters.iter().filter(|(_, v)| *v != 0) {
                out.push_str(&format!("{p}  {name} {v}\n"));
            }
        }
        let mut so = std::io::stdout().lock();
        let _ = so.write_all(out.as_bytes());
        let _ = so.flush();
    }

    /// Counters kept by the runtime itself (sleeps and wake-ups, copy offload).
    pub(super) fn runtime_counters(&self, core: &Core) -> Vec<(String, u64)> {
        let stats = &self.wake.stats;
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
            ("sleeps".into(), stats.sleeps.load(Ordering::Relaxed)),
            (
                "wakeups_io".into(),
                stats.woken_by_io.load(Ordering::Relaxed),
            ),
            (
                "wakeups_timer".into(),
                stats.woken_by_timer.load(Ordering::Relaxed),
            ),
            ("copy_offloaded".into(), core.copier.offloaded),
            ("copy_inline_full".into(), core.copier.inline_full),
            ("copy_inline_unheld".into(), core.copier.inline_unheld),
        ]);
        if let Some(sc) = core.copier.backend().and_then(|b| b.service_counters()) {
            v.extend([
                (
                    "copy_service".to_string(),
                    sc.served.load(Ordering::Relaxed),
                ),
                (
                    "copy_service_redone".to_string(),
                    sc.redone.load(Ordering::Relaxed),
                ),
                (
                    "copy_service_fallback".to_string(),
                    sc.fallback.load(Ordering::Relaxed),
                ),
            ]);
        }
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
}
