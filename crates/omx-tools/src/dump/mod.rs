//! `omx_dump`'s reading of frames: one line per frame in omx's words, decoded by
//! omx-wire (the one home of the layout), filters, and pcap files ([`pcap`]).

pub mod pcap;

use std::fmt::Write as _;

use omx_wire::{
    bundle_items, decode, observer_config, peek, Decoded, NackType, Packet, PacketType, WireMode,
    CHECKSUM_FLAG, COMMON_HEADER_LEN, LATENCY_FLAG, PULL_MAGIC_XOR,
};

/// Which layout to read frames in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Wire {
    /// Native, or MX-wire-compatible for a frame that only decodes so.
    Auto,
    Native,
    Mx,
}

/// One printed line: a frame, or an inner frame of a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// The type name (`PacketType::name`, `bundle`, or `malformed`).
    pub kind: &'static str,
    pub dst_endpoint: Option<u8>,
    pub src_endpoint: Option<u8>,
    /// Inside a bundle.
    pub inner: bool,
    /// Everything after the addresses.
    pub text: String,
}

/// What to show: every list empty shows everything; otherwise a line must match one
/// entry of each non-empty list.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// MAC addresses, either side of the frame.
    pub peers: Vec<[u8; 6]>,
    /// Endpoint indexes, source or destination.
    pub endpoints: Vec<u8>,
    /// Type names.
    pub types: Vec<String>,
}

impl Filter {
    pub fn accepts(&self, l: &Line) -> bool {
        (self.peers.is_empty()
            || self
                .peers
                .iter()
                .any(|p| *p == l.src_mac || *p == l.dst_mac))
            && (self.endpoints.is_empty()
                || self
                    .endpoints
                    .iter()
                    .any(|e| Some(*e) == l.src_endpoint || Some(*e) == l.dst_endpoint))
            && (self.types.is_empty() || self.types.iter().any(|t| t == l.kind))
    }
}

/// Every type name a filter may name.
pub fn type_names() -> Vec<&'static str> {
    (0..=u8::MAX)
        .filter_map(PacketType::from_u8)
        .map(PacketType::name)
        .chain(["bundle", "stripe_pull", "stripe_pull_reply", "malformed"])
        .collect()
}

pub fn fmt_mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    let mut m = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!("{s}: not a MAC address (xx:xx:xx:xx:xx:xx)"));
    }
    for (b, p) in m.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).map_err(|_| format!("{s}: not a MAC address"))?;
    }
    Ok(m)
}

/// The lines of one frame: one, or a bundle's envelope followed by its inner frames.
pub fn describe(frame: &[u8], wire: Wire, ethertype: u16) -> Vec<Line> {
    let mut lines = Vec::new();
    let macs = |f: &[u8]| -> ([u8; 6], [u8; 6]) {
        let mut d = [0u8; 6];
        let mut s = [0u8; 6];
        if let (Some(a), Some(b)) = (f.get(0..6), f.get(6..12)) {
            d.copy_from_slice(a);
            s.copy_from_slice(b);
        }
        (s, d)
    };
    if peek::is_bundle(frame) {
        let (src_mac, dst_mac) = macs(frame);
        let dst = peek::dst_endpoint(frame);
        match bundle_items(frame) {
            Ok(items) => {
                lines.push(Line {
                    src_mac,
                    dst_mac,
                    kind: "bundle",
                    dst_endpoint: dst,
                    src_endpoint: None,
                    inner: false,
                    text: format!(
                        "bundle ep=>{} items={} frame={}",
                        dst.unwrap_or(0),
                        items.len(),
                        frame.len()
                    ),
                });
                for r in items {
                    let mut l = one(&frame[r], wire, ethertype);
                    l.inner = true;
                    lines.push(l);
                }
            }
            Err(e) => lines.push(malformed(frame, src_mac, dst_mac, &e.to_string())),
        }
        return lines;
    }
    lines.push(one(frame, wire, ethertype));
    lines
}

fn malformed(frame: &[u8], src_mac: [u8; 6], dst_mac: [u8; 6], why: &str) -> Line {
    let t = frame.get(COMMON_HEADER_LEN).copied();
    Line {
        src_mac,
        dst_mac,
        kind: "malformed",
        dst_endpoint: None,
        src_endpoint: None,
        inner: false,
        text: format!(
            "malformed type={} frame={} error=\"{why}\"",
            t.map_or("none".into(), |t| format!("{t:#04x}")),
            frame.len()
        ),
    }
}

/// Decodes one (non-bundle) frame in the chosen layout.
fn decode_as(
    frame: &[u8],
    wire: Wire,
    ethertype: u16,
) -> Result<Decoded<'_>, omx_wire::DecodeError> {
    let native = || decode(frame, &observer_config(frame, WireMode::Native, ethertype));
    let mx = || {
        decode(
            frame,
            &observer_config(frame, WireMode::MxCompat, ethertype),
        )
    };
    match wire {
        Wire::Native => native(),
        Wire::Mx => mx(),
        // Flags exist only natively; otherwise a frame is native unless only MX reads it.
        Wire::Auto => native().or_else(|e| match frame.get(COMMON_HEADER_LEN) {
            Some(t) if t & (LATENCY_FLAG | CHECKSUM_FLAG) == 0 => mx().map_err(|_| e),
            _ => Err(e),
        }),
    }
}

fn one(frame: &[u8], wire: Wire, ethertype: u16) -> Line {
    let mut src_mac = [0u8; 6];
    let mut dst_mac = [0u8; 6];
    if let (Some(d), Some(s)) = (frame.get(0..6), frame.get(6..12)) {
        dst_mac.copy_from_slice(d);
        src_mac.copy_from_slice(s);
    }
    let d = match decode_as(frame, wire, ethertype) {
        Ok(d) => d,
        Err(e) => return malformed(frame, src_mac, dst_mac, &e.to_string()),
    };
    // Striped pulls (`OMX_STRIPE`, on a host's other boards) decode as pulls.
    let kind = match (&d.packet, d.striped) {
        (Packet::Pull(_), true) => "stripe_pull",
        (Packet::PullReply(_), true) => "stripe_pull_reply",
        (p, _) => p.packet_type().name(),
    };
    let mut t = String::from(kind);
    let (mut dst, mut src) = (None, None);
    let mut ep = |t: &mut String, s: u8, d: u8| {
        let _ = write!(t, " ep={s}>{d}");
        (src, dst) = (Some(s), Some(d));
    };
    match &d.packet {
        Packet::Raw => {
            let _ = write!(t, " len={}", d.payload.len());
        }
        Packet::HostQuery(q) => {
            let _ = write!(t, " peer={} magic={:#010x}", q.src_dst_peer_index, q.magic);
        }
        Packet::HostReply(r) => {
            let name = String::from_utf8_lossy(d.payload);
            let _ = write!(
                t,
                " name=\"{}\" peer={} magic={:#010x}",
                name.trim_end_matches('\0').escape_default(),
                r.src_dst_peer_index,
                r.magic
            );
        }
        Packet::Tiny(m) | Packet::Small(m) => {
            ep(&mut t, m.src_endpoint, m.dst_endpoint);
            let _ = write!(
                t,
                " seq={} ack={} match={:#018x} len={} sess={:#010x}",
                m.lib_seqnum, m.lib_piggyack, m.match_info, m.length, m.session
            );
            onesided(&mut t, m.flags);
        }
        Packet::Medium(m) => {
            ep(&mut t, m.src_endpoint, m.dst_endpoint);
            let _ = write!(
                t,
                " seq={} ack={} match={:#018x} len={} frag={} flen={} sess={:#010x}",
                m.lib_seqnum,
                m.lib_piggyack,
                m.match_info,
                m.length,
                m.frag_seqnum,
                m.frag_length,
                m.session
            );
        }
        Packet::Rndv(r) => {
            let m = &r.msg;
            ep(&mut t, m.src_endpoint, m.dst_endpoint);
            let _ = write!(
                t,
                " seq={} ack={} match={:#018x} len={} rdma={} sess={:#010x}",
                m.lib_seqnum,
                m.lib_piggyack,
                m.match_info,
                r.msg_length,
                r.pulled_rdma_id,
                m.session
            );
            onesided(&mut t, m.flags);
        }
        Packet::Notify(n) => {
            ep(&mut t, n.src_endpoint, n.dst_endpoint);
            let _ = write!(
                t,
                " seq={} ack={} len={} rdma={} sess={:#010x}",
                n.lib_seqnum, n.lib_piggyack, n.total_length, n.pulled_rdma_id, n.session
            );
            onesided(&mut t, n.flags);
        }
        Packet::Pull(p) => {
            ep(&mut t, p.src_endpoint, p.dst_endpoint);
            let _ = write!(
                t,
                " len={} rdma={} handle={:#x} block={}+{} index={}",
                p.total_length,
                p.pulled_rdma_id,
                p.src_pull_handle,
                p.first_frame_offset,
                p.block_length,
                p.frame_index
            );
        }
        Packet::PullReply(p) => {
            let to = (p.dst_magic ^ PULL_MAGIC_XOR) as u8;
            dst = Some(to);
            let _ = write!(
                t,
                " ep=>{to} handle={:#x} offset={} flen={} fseq={}",
                p.dst_pull_handle, p.msg_offset, p.frame_length, p.frame_seqnum
            );
            if d.striped {
                // The puller's session, above the endpoint byte of a striped magic.
                let _ = write!(t, " session={:#x}", (p.dst_magic ^ PULL_MAGIC_XOR) >> 8);
            }
        }
        Packet::Connect(c) => {
            ep(&mut t, c.src_endpoint, c.dst_endpoint);
            let what = if c.is_reply { "reply" } else { "request" };
            let _ = write!(
                t,
                " {what} cseq={} sess={:#010x} {}={:#010x} recv_seq={}",
                c.connect_seqnum,
                c.src_session_id,
                if c.is_reply { "target_sess" } else { "key" },
                c.app_key_or_target_session,
                c.target_recv_seqnum_start
            );
            if c.is_reply {
                let _ = write!(t, " status={}", c.status_code);
            }
            if c.link_mtu != 0 {
                let _ = write!(t, " mtu={}", c.link_mtu);
            }
        }
        Packet::Truc(r) => {
            ep(&mut t, r.src_endpoint, r.dst_endpoint);
            let _ = write!(
                t,
                " ack={} acknum={} sess={:#010x} resent={}",
                r.lib_seqnum, r.acknum, r.session, r.resent
            );
        }
        Packet::NackLib(n) => {
            ep(&mut t, n.src_endpoint, n.dst_endpoint);
            let _ = write!(t, " reason={} seq={}", nack(n.nack_type), n.lib_seqnum);
        }
        Packet::NackMcp(n) => {
            let to = (n.src_magic ^ PULL_MAGIC_XOR) as u8;
            ep(&mut t, n.src_endpoint, to);
            let _ = write!(
                t,
                " reason={} handle={:#x}",
                nack(n.nack_type),
                n.src_pull_handle
            );
        }
    }
    let _ = write!(t, " frame={}", frame.len());
    let type_byte = frame.get(COMMON_HEADER_LEN).copied().unwrap_or(0);
    let flags: Vec<&str> = [
        (
            type_byte & LATENCY_FLAG != 0 && d.packet != Packet::Raw,
            "latency",
        ),
        (d.checksummed, "checksum"),
    ]
    .into_iter()
    .filter_map(|(on, n)| on.then_some(n))
    .collect();
    if !flags.is_empty() {
        let _ = write!(t, " flags={}", flags.join(","));
    }
    Line {
        src_mac,
        dst_mac,
        kind,
        dst_endpoint: dst,
        src_endpoint: src,
        inner: false,
        text: t,
    }
}

/// One-sided operation flags of a message body (native mode), by name, when set.
fn onesided(t: &mut String, flags: u8) {
    use omx_proto::onesided::{DENIED, GET_DENIED, GET_REPLY, GET_REQ, PUT_REQ};
    if flags == 0 {
        return;
    }
    let names: Vec<&str> = [
        (GET_REQ, "get_req"),
        (GET_REPLY, "get_reply"),
        (GET_DENIED, "get_denied"),
        (PUT_REQ, "put_req"),
        (DENIED, "denied"),
    ]
    .into_iter()
    .filter_map(|(bit, n)| (flags & bit != 0).then_some(n))
    .collect();
    let _ = write!(t, " onesided={}", names.join(","));
}

fn nack(v: u8) -> &'static str {
    match NackType::from_u8(v) {
        Some(NackType::BadEndpoint) => "bad_endpoint",
        Some(NackType::EndpointClosed) => "endpoint_closed",
        Some(NackType::BadSession) => "bad_session",
        Some(NackType::BadRdmaWin) => "bad_rdma_win",
        None => "unknown",
    }
}

/// The printed form of a line, after its timestamp.
pub fn render(l: &Line) -> String {
    format!(
        "{}{} > {} {}",
        if l.inner { "  " } else { "" },
        fmt_mac(&l.src_mac),
        fmt_mac(&l.dst_mac),
        l.text
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use omx_wire::{
        bundle_push, bundle_start, encode, Header, Medium, Msg, WireConfig, DEFAULT_ETHERTYPE,
    };

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn frame(packet: Packet, payload: &[u8], cfg: &WireConfig) -> Vec<u8> {
        let h = Header {
            dst_mac: B,
            src_mac: A,
            ethertype: DEFAULT_ETHERTYPE,
            dst_src_peer_index: 1,
        };
        let mut f = Vec::new();
        encode(&h, &packet, payload, cfg, &mut f).unwrap();
        f
    }

    fn tiny() -> Packet {
        Packet::Tiny(Msg {
            dst_endpoint: 3,
            src_endpoint: 4,
            length: 2,
            lib_seqnum: 9,
            lib_piggyack: 8,
            match_info: 0xabcd,
            session: 0x11,
            ..Msg::default()
        })
    }

    #[test]
    fn lines_in_omx_words() {
        let cfg = WireConfig::native_checksummed(9000, true);
        let f = frame(tiny(), &[1, 2], &cfg);
        let l = describe(&f, Wire::Auto, DEFAULT_ETHERTYPE);
        assert_eq!(l.len(), 1);
        assert_eq!(
            render(&l[0]),
            "02:00:00:00:00:01 > 02:00:00:00:00:02 tiny ep=4>3 seq=9 ack=8 \
             match=0x000000000000abcd len=2 sess=0x00000011 frame=60 flags=checksum"
        );
        // One flipped byte: a malformed line with the reason, never a panic.
        let mut bad = f.clone();
        bad[30] ^= 1;
        let l = describe(&bad, Wire::Auto, DEFAULT_ETHERTYPE);
        assert_eq!(l[0].kind, "malformed");
        assert!(l[0].text.contains("checksum mismatch"), "{}", l[0].text);
        for cut in 0..f.len() {
            assert_eq!(describe(&f[..cut], Wire::Auto, DEFAULT_ETHERTYPE).len(), 1);
        }
    }

    #[test]
    fn mx_frames_and_bundles() {
        let mx = WireConfig::mx_compat();
        let m = Medium {
            dst_endpoint: 1,
            length: 5000,
            frag_length: 904,
            frag_seqnum: 1,
            frag_pipeline: omx_wire::COMPAT_FRAG_PIPELINE,
            ..Medium::default()
        };
        let f = frame(Packet::Medium(m), &[0; 904], &mx);
        let l = describe(&f, Wire::Auto, DEFAULT_ETHERTYPE);
        assert!(
            l[0].text.contains("len=5000 frag=1 flen=904"),
            "{}",
            l[0].text
        );
        assert_eq!(
            describe(&f, Wire::Native, DEFAULT_ETHERTYPE)[0].kind,
            "malformed"
        );

        let inner = frame(tiny(), &[1, 2], &WireConfig::native_9000());
        let mut b = Vec::new();
        bundle_start(&mut b, B, A, DEFAULT_ETHERTYPE, 3);
        bundle_push(&mut b, &inner[..42]);
        bundle_push(&mut b, &inner[..42]);
        let l = describe(&b, Wire::Auto, DEFAULT_ETHERTYPE);
        assert_eq!(
            l.iter().map(|l| l.kind).collect::<Vec<_>>(),
            ["bundle", "tiny", "tiny"]
        );
        assert!(l[1].inner && render(&l[1]).starts_with("  "));
    }

    #[test]
    fn striped_pulls_are_named_and_show_the_pullers_session() {
        let cfg = WireConfig::native_9000();
        let r = omx_wire::PullReply {
            frame_length: 4,
            msg_offset: 8192,
            dst_pull_handle: 7,
            dst_magic: omx_wire::stripe_magic(5, 0xabcdef),
            ..Default::default()
        };
        let mut f = frame(Packet::PullReply(r), &[9; 4], &cfg);
        f[COMMON_HEADER_LEN] = omx_wire::STRIPE_PULL_REPLY_TYPE;
        let l = &describe(&f, Wire::Auto, DEFAULT_ETHERTYPE)[0];
        assert_eq!(l.kind, "stripe_pull_reply");
        assert_eq!(l.dst_endpoint, Some(5));
        assert!(l.text.contains("session=0xabcdef"), "{}", l.text);
        let pull = omx_wire::Pull {
            dst_endpoint: 2,
            src_endpoint: 5,
            total_length: 1 << 20,
            block_length: 32768,
            ..Default::default()
        };
        let mut p = frame(Packet::Pull(pull), &[], &cfg);
        p[COMMON_HEADER_LEN] = omx_wire::STRIPE_PULL_TYPE;
        let l = &describe(&p, Wire::Auto, DEFAULT_ETHERTYPE)[0];
        assert_eq!(l.kind, "stripe_pull", "{}", l.text);
        assert!(type_names().contains(&"stripe_pull_reply"));
    }

    #[test]
    fn filters() {
        let f = frame(tiny(), &[1, 2], &WireConfig::native_9000());
        let l = &describe(&f, Wire::Auto, DEFAULT_ETHERTYPE)[0];
        let yes = |f: Filter| assert!(f.accepts(l));
        let no = |f: Filter| assert!(!f.accepts(l));
        yes(Filter::default());
        yes(Filter {
            peers: vec![B],
            endpoints: vec![4],
            types: vec!["small".into(), "tiny".into()],
        });
        no(Filter {
            peers: vec![[9; 6]],
            ..Filter::default()
        });
        no(Filter {
            endpoints: vec![5],
            ..Filter::default()
        });
        no(Filter {
            types: vec!["small".into()],
            ..Filter::default()
        });
        assert!(type_names().contains(&"pull_reply") && type_names().contains(&"bundle"));
        assert_eq!(parse_mac("02:00:00:00:00:01"), Ok(A));
        assert!(parse_mac("02:00:00").is_err() && parse_mac("zz:00:00:00:00:01").is_err());
    }
}
