//! Striping large messages over several links (`OMX_STRIPE`, [`Extensions::STRIPE`]).
//!
//! Two endpoints whose hosts share several links pull a message's blocks over all of
//! them. Path 0 is the link between the endpoints' own boards; path `i` joins our
//! `i`-th other board (`EngineConfig::stripe_boards`) with the partner's `i`-th, as
//! listed in its CONNECT. A pull gives its blocks round-robin to the open paths with
//! room in their window; each path keeps its own requests awaited, round trip and
//! window (so loss recovery and fast re-requests stay per link, which keeps its frames
//! in order), the sender answers a PULL on the link it came in on, and replies land
//! by offset as on one link. A path whose blocks time out [`STRIPE_TIMEOUTS_MAX`]
//! times in a row with nothing heard on it is closed: its blocks move to the other
//! paths. Frames on paths other than 0 have their own packet types
//! ([`omx_wire::STRIPE_PULL_TYPE`]) and, in replies, a magic holding the puller's
//! session ([`stripe_magic`]): the endpoint with the same index on that board belongs
//! to another process, whose socket must not take them.

use crate::engine::Engine;
use crate::partner::PullPath;
use crate::transmit::Payload;
use crate::types::*;
use bytes::Bytes;
pub use omx_wire::stripe_magic;
use omx_wire::{Extensions, Header, Packet, PULL_MAGIC_XOR, STRIPE_BOARDS_MAX};

/// Block timeouts in a row, with nothing heard on the path since, that close it.
pub(crate) const STRIPE_TIMEOUTS_MAX: u32 = 3;
/// A closed path is tried again this long after it closed (a link brought back up).
pub(crate) const STRIPE_PROBE_AFTER: Time = 1_000_000_000;

/// One link to a partner besides the endpoints' own boards.
pub(crate) struct StripePath {
    /// Our board on this link and the partner's.
    pub local: NicId,
    pub remote: NicId,
    pub pull: PullPath,
    /// Block timeouts in a row with nothing heard on this path since.
    pub timeouts: u32,
    /// Closed after [`STRIPE_TIMEOUTS_MAX`] timeouts: it gets no more blocks until
    /// probed ([`Engine::probe_closed_paths`]).
    pub closed: bool,
    /// When it last closed.
    pub closed_at: Time,
}

impl Engine {
    /// What a CONNECT says about striping: the number of our other boards and their
    /// addresses (its payload); nothing unless we offer the extension.
    pub(crate) fn stripe_advert(&self) -> (u8, Payload) {
        if !self.cfg.wire.uses(Extensions::STRIPE) || self.cfg.stripe_boards.is_empty() {
            return (0, Payload::None);
        }
        let boards = &self.cfg.stripe_boards[..self.cfg.stripe_boards.len().min(STRIPE_BOARDS_MAX)];
        let macs: Vec<u8> = boards.iter().flat_map(|&b| mac_from_nic_id(b)).collect();
        (boards.len() as u8, Payload::Bytes(Bytes::from(macs)))
    }

    /// A CONNECT from the partner listed its other boards (`macs`): one path per
    /// board both sides have, when both offered striping. Paths already learned stay
    /// (a repeated CONNECT lists the same boards).
    pub(crate) fn learn_stripes(&mut self, pid: PartnerId, macs: &[u8]) {
        let p = &self.partners[pid];
        if !p.wire.uses(Extensions::STRIPE) {
            self.partners.set_stripes(pid, Vec::new());
            return;
        }
        let theirs = macs
            .chunks_exact(6)
            .map(|m| nic_id_from_mac(m.try_into().expect("6 bytes")));
        let paths: Vec<(NicId, NicId)> =
            self.cfg.stripe_boards.iter().copied().zip(theirs).collect();
        let same = p.stripes.len() == paths.len()
            && p.stripes
                .iter()
                .zip(&paths)
                .all(|(s, &(l, r))| s.local == l && s.remote == r);
        if same {
            return;
        }
        let paths = paths
            .into_iter()
            .map(|(local, remote)| StripePath {
                local,
                remote,
                pull: PullPath::default(),
                timeouts: 0,
                closed: false,
                closed_at: 0,
            })
            .collect();
        self.partners.set_stripes(pid, paths);
    }

    /// The header of a frame to the partner on `path`.
    pub(crate) fn header_on(&self, pid: PartnerId, path: u8) -> Header {
        let header = self.header_to(pid);
        match self.partners[pid]
            .stripes
            .get((path as usize).wrapping_sub(1))
        {
            Some(s) if path != 0 => Header {
                dst_mac: mac_from_nic_id(s.remote),
                src_mac: mac_from_nic_id(s.local),
                ..header
            },
            _ => header,
        }
    }

    /// The pull magic the puller uses on `path`.
    pub(crate) fn pull_magic(&self, path: u8) -> u32 {
        match path {
            0 => self.me.endpoint as u32 ^ PULL_MAGIC_XOR,
            _ => stripe_magic(self.me.endpoint, self.me.session),
        }
    }

    /// Closed paths to the partner closed [`STRIPE_PROBE_AFTER`] ago or more reopen one
    /// timeout short of closing: their next block is a probe. A reply opens the path
    /// fully (its timeouts count restarts), another timeout closes it for as long again
    /// (the probe block moves, at the cost of one timeout per probe).
    pub(crate) fn probe_closed_paths(&mut self, now: Time, pid: PartnerId) {
        for s in &mut self.partners[pid].stripes {
            if s.closed && now >= s.closed_at.saturating_add(STRIPE_PROBE_AFTER) {
                s.closed = false;
                s.timeouts = STRIPE_TIMEOUTS_MAX - 1;
                // The probe waits one plain timeout, not the backed-off one.
                s.pull.rtt.progress();
                self.counters.stripe_paths_probed += 1;
            }
        }
    }

    /// Whether `path` to the partner may get blocks.
    pub(crate) fn path_open(&self, pid: PartnerId, path: u8) -> bool {
        match path {
            0 => true,
            i => self.partners[pid]
                .stripes
                .get(i as usize - 1)
                .is_some_and(|s| !s.closed),
        }
    }

    /// Paths to the partner, 0 included (closed ones too).
    pub(crate) fn path_count(&self, pid: PartnerId) -> u8 {
        1 + self.partners[pid].stripes.len() as u8
    }

    /// A striped frame (admitted by type): a PULL to serve or a PULL_REPLY to place,
    /// arrived on one of our other boards from one of the partner's. Anything else
    /// is dropped (`drop_bad_stripe`).
    pub(crate) fn on_striped(&mut self, now: Time, header: Header, packet: Packet, payload: Bytes) {
        let local = nic_id_from_mac(header.dst_mac);
        let remote = nic_id_from_mac(header.src_mac);
        let on_board = self.cfg.stripe_boards.iter().position(|&b| b == local);
        let Some(board) = on_board else {
            self.counters.drop_bad_stripe += 1;
            return;
        };
        let path = board as u8 + 1;
        match packet {
            Packet::Pull(p) => {
                let pid = self.partners.lookup_stripe(remote, p.src_endpoint);
                let from_partner = pid.filter(|&pid| {
                    let q = &self.partners[pid];
                    q.session.is_some() && q.stripes.get(board).is_some_and(|s| s.remote == remote)
                });
                match from_partner {
                    Some(pid)
                        if p.dst_endpoint == self.me.endpoint && p.session == self.me.session =>
                    {
                        self.partners[pid].last_heard = now;
                        self.counters.recv_pull_req += 1;
                        self.serve_pull(pid, p, path);
                    }
                    _ => self.counters.drop_bad_stripe += 1,
                }
            }
            Packet::PullReply(r) => {
                let from_partner = self
                    .pulls
                    .by_wire_handle(r.dst_pull_handle)
                    .is_some_and(|k| {
                        let pid = self.pulls.get(k).expect("resolved").partner;
                        self.partners[pid]
                            .stripes
                            .get(board)
                            .is_some_and(|s| s.remote == remote)
                    });
                if !from_partner {
                    self.counters.drop_bad_stripe += 1;
                    return;
                }
                self.counters.recv_stripe_reply += 1;
                self.on_pull_reply_on(now, r, payload, path);
            }
            _ => self.counters.drop_bad_stripe += 1,
        }
    }
}
