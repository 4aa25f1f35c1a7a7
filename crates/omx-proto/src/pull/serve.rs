//! The pulled side: answering a pull request with the frames of its region, or a nack.

use super::*;

impl Engine {
    fn nack_mcp(&mut self, src: NicId, p: &PullPacket, kind: NackType) {
        let nack = NackMcp {
            src_endpoint: p.src_endpoint,
            nack_type: kind as u8,
            src_pull_handle: p.src_pull_handle,
            src_magic: p.src_magic,
        };
        let header = Header {
            dst_mac: mac_from_nic_id(src),
            src_mac: self.mac,
            ethertype: self.cfg.wire.ethertype,
            dst_src_peer_index: omx_wire::PEER_INDEX_NONE,
        };
        let wire = self.wire_to(src, p.src_endpoint);
        self.counters.send_nack_mcp += 1;
        self.emit(&wire, header, Packet::NackMcp(nack), Payload::None, true);
    }

    /// Data owner side: answer a block request with pull replies read from the region.
    pub(crate) fn on_pull(&mut self, now: Time, src: NicId, p: PullPacket) {
        self.counters.recv_pull_req += 1;
        if !self.for_me(p.dst_endpoint) {
            return;
        }
        if p.session != self.me.session {
            self.counters.drop_bad_session += 1;
            self.nack_mcp(src, &p, NackType::BadSession);
            return;
        }
        let Some(pid) = self.known_partner(now, src, p.src_endpoint) else {
            return;
        };
        self.serve_pull(pid, p, 0);
    }

    /// Answers a checked PULL from partner `pid` that came on link `path`, on that
    /// link (a bad request on another link than 0 is dropped without a nack).
    pub(crate) fn serve_pull(&mut self, pid: PartnerId, p: PullPacket, path: u8) {
        let src = self.partners[pid].nic_id;
        let region = self.regions.get(p.pulled_rdma_id as usize);
        // A region is readable only by the partner its rendezvous was sent to.
        let region = region.filter(
            |r| matches!(self.requests.get(r.req), Some(Request::Send(s)) if s.partner == pid),
        );
        let Some(region) = region else {
            self.counters.drop_pull_bad_region += 1;
            if path == 0 {
                self.nack_mcp(src, &p, NackType::BadRdmaWin);
            }
            return;
        };
        let (handle, region_len, base) = (region.handle, region.len as u64, region.base);
        let wire = self.partners[pid].wire;
        let r = wire.pull_reply_max as u64;
        let off0 = p.pulled_rdma_offset as u64 % r;
        let first = (p.frame_index as u64 * r + p.first_frame_offset as u64).checked_sub(off0);
        let in_range = first.filter(|f| {
            p.first_frame_offset as u64 + p.block_length as u64 <= wire.pull_block_max() as u64
                && f + p.block_length as u64 + p.pulled_rdma_offset as u64 <= region_len
                && p.first_frame_offset as u64 + p.block_length as u64 > 0
                && f + p.block_length as u64 <= u32::MAX as u64
        });
        let Some(mut msg_offset) = in_range else {
            self.counters.drop_pull_bad_offset_length += 1;
            return;
        };
        let header = Header {
            dst_src_peer_index: omx_wire::PEER_INDEX_NONE,
            ..self.header_on(pid, path)
        };
        let mut remaining = p.block_length as u64;
        let mut frame_len = r - p.first_frame_offset as u64;
        let mut i = 0u32;
        while remaining > 0 {
            let len = frame_len.min(remaining);
            remaining -= len;
            let reply = PullReply {
                frame_seqnum: (p.frame_index.wrapping_add(i)) as u8,
                frame_length: len as u16,
                msg_offset: msg_offset as u32,
                dst_pull_handle: p.src_pull_handle,
                dst_magic: p.src_magic,
            };
            let payload = Payload::User {
                handle,
                offset: base + msg_offset + p.pulled_rdma_offset as u64,
                len: len as u32,
            };
            self.counters.send_pull_reply += 1;
            self.emit_on(
                path,
                &wire,
                header,
                Packet::PullReply(reply),
                payload,
                remaining == 0,
            );
            msg_offset += len;
            frame_len = r;
            i += 1;
        }
    }
}
