//! Peer discovery run by one endpoint per board and host (the one holding the board
//! lock): broadcast RAW announcements carrying the board's nic id (8 one second apart,
//! then one every 180 s, restarted when a new peer or a restarted one is heard; an
//! unknown peer is also answered at once so start-up takes milliseconds), and
//! HOST_QUERY/HOST_REPLY to learn names. Learned peers go to the board's shared peer
//! file so other processes on the host see them.
//!
//! An announcement's 64 bytes: EtherType and RAW type as any frame, the nic id at
//! 32..40 (big-endian, high half first), the sender's serial at 40..44 (a change means
//! a restart), and the wire extensions it offers at 45 behind the marker at 44 (the
//! CONNECT handshake's pair): a board that writes nothing there (Open-MX 1.5) offers
//! none.

use omx_proto::{mac_from_nic_id, nic_id_from_mac, NicId, PeerTable, Time};
use omx_wire::{
    decode, encode, peek, Extensions, Header, HostQuery, HostReply, Packet, PacketType, WireConfig,
    CONNECT_EXT_MARKER, HOST_QUERY_MAGIC_INIT, PEER_INDEX_NONE,
};
use std::collections::HashMap;

const SEC: Time = 1_000_000_000;
const FAST_ANNOUNCES: u32 = 8;
const SLOW_PERIOD: Time = 180 * SEC;
const QUERY_PERIOD: Time = 5 * SEC;
/// Raw announcements always use the original's EtherType.
const RAW_ETHERTYPE: u16 = 0x86DF;
const BROADCAST: [u8; 6] = [0xff; 6];

pub struct Discovery {
    nic: NicId,
    name: String,
    serial: u32,
    fast_left: u32,
    next_announce: Time,
    serials: HashMap<NicId, u32>,
    /// What each announcing board offers (`None`: it wrote no marker).
    offered: HashMap<NicId, Option<Extensions>>,
    queried: HashMap<NicId, Time>,
    magic: u32,
    /// The board's `solicit` count last acted on.
    pub solicited: u64,
}

/// What happened to the peer table.
#[derive(Default)]
pub struct Outcome {
    pub frames: Vec<Vec<u8>>,
    pub changed: bool,
    /// A board's offered extensions were learned or changed ([`Discovery::offered`]).
    pub offers_changed: bool,
}

impl Discovery {
    pub fn new(nic: NicId, name: String, serial: u32) -> Self {
        Discovery {
            nic,
            name,
            serial,
            fast_left: FAST_ANNOUNCES,
            next_announce: 0,
            serials: HashMap::new(),
            offered: HashMap::new(),
            queried: HashMap::new(),
            magic: HOST_QUERY_MAGIC_INIT,
            solicited: 0,
        }
    }

    /// Asks the network now (a name lookup or a connect found nothing): a broadcast
    /// announcement, which every board that does not know this one answers, and a
    /// name query to every peer whose name is unknown.
    pub fn solicit(&mut self, now: Time, peers: &PeerTable, wire: &WireConfig) -> Vec<Vec<u8>> {
        let mut out = vec![self.announcement(BROADCAST, wire)];
        for (_, p) in peers.iter() {
            if p.name.is_none() && p.nic_id != self.nic {
                self.queried.insert(p.nic_id, now);
                out.extend(self.query(peers, p.nic_id, wire));
            }
        }
        out
    }

    fn announcement(&self, dst: [u8; 6], wire: &WireConfig) -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&mac_from_nic_id(self.nic));
        f[peek::ETHERTYPE_OFFSET..][..2].copy_from_slice(&RAW_ETHERTYPE.to_be_bytes());
        f[peek::TYPE_OFFSET] = PacketType::Raw as u8;
        f[32..36].copy_from_slice(&((self.nic >> 32) as u32).to_be_bytes());
        f[36..40].copy_from_slice(&(self.nic as u32).to_be_bytes());
        f[40..44].copy_from_slice(&self.serial.to_be_bytes());
        f[44] = CONNECT_EXT_MARKER;
        f[45] = wire.extensions.bits();
        f
    }

    /// What each board heard announcing offers, by nic id (`None`: no marker, as from
    /// Open-MX 1.5), in nic id order.
    pub fn offered(&self) -> Vec<(NicId, Option<Extensions>)> {
        let mut v: Vec<_> = self.offered.iter().map(|(&n, &e)| (n, e)).collect();
        v.sort_unstable_by_key(|&(n, _)| n);
        v
    }

    fn query(&self, peers: &PeerTable, nic: NicId, wire: &WireConfig) -> Option<Vec<u8>> {
        let index = peers.index_of(nic)?;
        let header = Header {
            dst_mac: mac_from_nic_id(nic),
            src_mac: mac_from_nic_id(self.nic),
            ethertype: wire.ethertype,
            dst_src_peer_index: PEER_INDEX_NONE,
        };
        let p = Packet::HostQuery(HostQuery {
            src_dst_peer_index: index,
            magic: self.magic,
        });
        let mut out = Vec::new();
        encode(&header, &p, &[], wire, &mut out).ok()?;
        Some(out)
    }

    /// Periodic work: announcements and name queries.
    pub fn tick(&mut self, now: Time, peers: &PeerTable, wire: &WireConfig) -> Outcome {
        let mut o = Outcome::default();
        if now >= self.next_announce {
            o.frames.push(self.announcement(BROADCAST, wire));
            if self.fast_left > 0 {
                self.fast_left -= 1;
                self.next_announce = now + SEC;
            } else {
                self.next_announce = now + SLOW_PERIOD;
            }
        }
        for (_, p) in peers.iter() {
            if p.name.is_some() || p.nic_id == self.nic {
                continue;
            }
            let last = self.queried.get(&p.nic_id).copied();
            if last.is_none_or(|t| now >= t + QUERY_PERIOD) {
                self.queried.insert(p.nic_id, now);
                o.frames.extend(self.query(peers, p.nic_id, wire));
            }
        }
        o
    }

    /// Earliest time `tick` has something to do.
    pub fn deadline(&self) -> Time {
        self.next_announce
    }

    /// A board frame (RAW, HOST_QUERY, HOST_REPLY) received on the board.
    pub fn on_frame(
        &mut self,
        now: Time,
        frame: &[u8],
        peers: &mut PeerTable,
        wire: &WireConfig,
    ) -> Outcome {
        let mut o = Outcome::default();
        if frame.len() < 44 || !peek::is_raw(frame) {
            return self.on_host_frame(now, frame, peers, wire);
        }
        let hi = u32::from_be_bytes(frame[32..36].try_into().expect("4 bytes")) as u64;
        let lo = u32::from_be_bytes(frame[36..40].try_into().expect("4 bytes")) as u64;
        let serial = u32::from_be_bytes(frame[40..44].try_into().expect("4 bytes"));
        let nic = ((hi & 0xFFFF) << 32) | lo;
        if nic == self.nic || nic == 0 {
            return o;
        }
        // Learn a new peer first: when the table is full (a flood of announcements from
        // made-up boards), nothing is recorded or answered, so this state stays bounded
        // by the peer table.
        if peers.index_of(nic).is_none() {
            // A full table gives up a peer that never told its name (one such board per
            // new announcement, round robin), so a flood of made-up boards cannot lock
            // real ones out: those answer the name query at once and are kept.
            let Some((_, evicted)) = peers.add_or_evict(nic, None, |_| false) else {
                return o;
            };
            if let Some(old) = evicted {
                self.serials.remove(&old);
                self.queried.remove(&old);
                o.offers_changed |= self.offered.remove(&old).is_some();
            }
            o.changed = true;
        }
        let offers = match frame.get(44..46) {
            Some(&[CONNECT_EXT_MARKER, bits]) => Some(Extensions::from_bits(bits)),
            _ => None,
        };
        if self.offered.insert(nic, offers) != Some(offers) {
            o.offers_changed = true;
        }
        let known = self.serials.insert(nic, serial);
        if known != Some(serial) {
            // New or restarted peer: answer it directly, speed announcements up.
            if known.is_some() {
                // A restarted peer may have a new name.
                self.queried.remove(&nic);
            }
            o.frames.push(self.announcement(mac_from_nic_id(nic), wire));
            self.fast_left = FAST_ANNOUNCES;
            self.next_announce = now;
            self.queried.insert(nic, now);
            o.frames.extend(self.query(peers, nic, wire));
        }
        o
    }

    fn on_host_frame(
        &mut self,
        _now: Time,
        frame: &[u8],
        peers: &mut PeerTable,
        wire: &WireConfig,
    ) -> Outcome {
        let mut o = Outcome::default();
        let Ok(d) = decode(frame, wire) else { return o };
        let src = nic_id_from_mac(d.header.src_mac);
        if nic_id_from_mac(d.header.dst_mac) != self.nic || peers.index_of(src).is_none() {
            return o;
        }
        match d.packet {
            Packet::HostQuery(q) => {
                let mut name = self.name.clone().into_bytes();
                name.truncate(omx_wire::HOSTNAME_MAX - 1);
                name.push(0);
                let header = Header {
                    dst_mac: d.header.src_mac,
                    src_mac: mac_from_nic_id(self.nic),
                    ethertype: wire.ethertype,
                    dst_src_peer_index: PEER_INDEX_NONE,
                };
                let reply = Packet::HostReply(HostReply {
                    length: name.len() as u8,
                    src_dst_peer_index: peers.index_of(src).unwrap_or(PEER_INDEX_NONE),
                    magic: q.magic,
                });
                let mut out = Vec::new();
                if encode(&header, &reply, &name, wire, &mut out).is_ok() {
                    o.frames.push(out);
                }
            }
            Packet::HostReply(r) if r.magic == self.magic => {
                let raw = d.payload;
                let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                let name = String::from_utf8_lossy(&raw[..end]).into_owned();
                let current = peers
                    .index_of(src)
                    .and_then(|i| peers.get(i))
                    .and_then(|p| p.name.clone());
                if !name.is_empty() && current.as_deref() != Some(&name) {
                    peers.add(src, Some(name));
                    o.changed = true;
                }
            }
            _ => {}
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcement_flood_stays_within_the_peer_table_and_locks_no_one_out() {
        let wire = WireConfig::native_9000();
        let mut d = Discovery::new(1, "me".into(), 7);
        let mut peers = PeerTable::new(64);
        let mut answered = 0;
        for i in 0..5000u64 {
            let other = Discovery::new(0x0A00_0000_0000 | i, String::new(), i as u32);
            let f = other.announcement(mac_from_nic_id(1), &wire);
            answered += d.on_frame(i, &f, &mut peers, &wire).frames.len();
        }
        assert_eq!(peers.len(), 64);
        assert!(d.serials.len() <= 64 && d.queried.len() <= 64 && d.offered.len() <= 64);
        // Unnamed boards take turns in the table; each got an announcement and a query.
        assert_eq!(peers.evicted, 5000 - 64);
        assert_eq!(answered, 2 * 5000);
        // A named peer is kept; a real board arriving after the flood gets in.
        let named = peers.iter().next().map(|(_, p)| p.nic_id).unwrap();
        peers.add(named, Some("real".into()));
        for i in 5000..6000u64 {
            let other = Discovery::new(0x0A00_0000_0000 | i, String::new(), i as u32);
            d.on_frame(
                i,
                &other.announcement(mac_from_nic_id(1), &wire),
                &mut peers,
                &wire,
            );
        }
        assert!(peers.index_of(named).is_some());
        assert!(peers.index_of(0x0A00_0000_0000 | 5999).is_some());
    }

    #[test]
    fn announcements_say_what_a_board_offers_and_silence_means_none() {
        let wire = WireConfig::native_9000();
        let mut d = Discovery::new(1, "me".into(), 7);
        let mut peers = PeerTable::new(64);
        let omx = Discovery::new(2, String::new(), 1);
        let o = d.on_frame(
            0,
            &omx.announcement(mac_from_nic_id(1), &wire),
            &mut peers,
            &wire,
        );
        assert!(o.offers_changed);
        // An Open-MX 1.5 board's announcement carries nothing past the serial.
        let mut original = Discovery::new(3, String::new(), 1).announcement(BROADCAST, &wire);
        original[44..].fill(0);
        assert!(d.on_frame(1, &original, &mut peers, &wire).offers_changed);
        assert_eq!(d.offered(), vec![(2, Some(wire.extensions)), (3, None)]);
        // Heard again unchanged: nothing to save.
        let again = d.on_frame(2, &omx.announcement(BROADCAST, &wire), &mut peers, &wire);
        assert!(!again.offers_changed);
        // A truncated announcement is read without its offer, never past its end.
        let mut short = Discovery::new(4, String::new(), 1).announcement(BROADCAST, &wire);
        short.truncate(45);
        d.on_frame(3, &short, &mut peers, &wire);
        assert_eq!(d.offered().last(), Some(&(4, None)));
    }
}
