//! The Wireshark dissector (dist/wireshark/omx.lua) has its own copy of the frame
//! layout, since Lua cannot read omx-wire: this test keeps the two from drifting. For
//! every packet type of both layouts it encodes a packet with distinct field values
//! through omx-wire and reads each field where the Lua table says it is; the Lua table
//! must also name every field omx-wire has, and the same type numbers and names.

use std::collections::{BTreeMap, BTreeSet};

use omx_wire::*;

/// The layout section of the dissector: table name -> type name -> (body, fields).
type Fields = Vec<(String, usize, usize)>;
type Tables = BTreeMap<String, BTreeMap<String, (usize, Fields)>>;

fn lua() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dist/wireshark/omx.lua");
    let all = std::fs::read_to_string(path).expect("dist/wireshark/omx.lua");
    let start = all.find("-- BEGIN LAYOUT").expect("BEGIN LAYOUT");
    let end = all.find("-- END LAYOUT").expect("END LAYOUT");
    all[start..end].to_string()
}

fn fields_in(s: &str) -> Fields {
    s.split("{ \"")
        .skip(1)
        .map(|f| {
            let (name, rest) = f.split_once('"').unwrap();
            let nums: Vec<usize> = rest
                .split(['}', ','])
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .take(2)
                .map(|x| x.parse().unwrap())
                .collect();
            (name.to_string(), nums[0], nums[1])
        })
        .collect()
}

fn parse(section: &str) -> Tables {
    let msg_start = section.find("local MSG = {").unwrap();
    let msg = fields_in(&section[msg_start..msg_start + section[msg_start..].find("\n}").unwrap()]);
    let mut tables = Tables::new();
    for table in ["LAYOUT", "NATIVE", "MX"] {
        let at = section.find(&format!("local {table} = {{")).unwrap();
        let body = &section[at..at + section[at..].find("\n}").unwrap()];
        let mut types = BTreeMap::new();
        // Each entry starts with `  name = { body = N`.
        let entries: Vec<&str> = body.split("\n  ").skip(1).collect();
        let mut current: Option<(String, usize, String)> = None;
        let mut done = Vec::new();
        for e in entries {
            if let Some((name, rest)) = e.split_once(" = { body = ") {
                if let Some(c) = current.take() {
                    done.push(c);
                }
                let n: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
                current = Some((name.trim().to_string(), n.parse().unwrap(), e.to_string()));
            } else if let Some(c) = &mut current {
                c.2.push_str(e);
            }
        }
        done.extend(current);
        for (name, body_len, text) in done {
            let mut f = fields_in(&text);
            if text.contains("table.unpack(MSG)") {
                f.extend(msg.iter().cloned());
            }
            types.insert(name, (body_len, f));
        }
        tables.insert(table.to_string(), types);
    }
    tables
}

fn header() -> Header {
    Header {
        dst_mac: [2, 0, 0, 0, 0, 1],
        src_mac: [2, 0, 0, 0, 0, 2],
        ethertype: DEFAULT_ETHERTYPE,
        dst_src_peer_index: 0x0102,
    }
}

/// A packet of each type with distinct field values, its payload, and every field of
/// its omx-wire struct by name.
/// A packet, its payload, and its fields by name.
type Case = (Packet, Vec<u8>, Vec<(&'static str, u64)>);

fn packets(mode: WireMode) -> Vec<Case> {
    let compat = mode == WireMode::MxCompat;
    let msg = Msg {
        dst_endpoint: 3,
        src_endpoint: 4,
        flags: if compat { 0 } else { 5 },
        length: 6,
        checksum: 0x0708,
        lib_seqnum: 0x090a,
        lib_piggyack: 0x0b0c,
        match_info: 0x1112_1314_1516_1718,
        session: 0x2122_2324,
    };
    let msg_fields = |m: &Msg| {
        vec![
            ("dst_endpoint", m.dst_endpoint.into()),
            ("src_endpoint", m.src_endpoint.into()),
            ("flags", m.flags.into()),
            ("length", m.length.into()),
            ("checksum", m.checksum.into()),
            ("lib_seqnum", m.lib_seqnum.into()),
            ("lib_piggyack", m.lib_piggyack.into()),
            ("match_info", m.match_info),
            ("session", m.session.into()),
        ]
    };
    let rndv = Rndv {
        msg: Msg {
            length: RNDV_DATA_LEN,
            ..msg
        },
        msg_length: 0x3132_3334,
        pulled_rdma_id: 0x35,
        pulled_rdma_seqnum: 0x36,
        pulled_rdma_offset: 0x3738,
    };
    let medium = Medium {
        dst_endpoint: 3,
        src_endpoint: 4,
        length: 100,
        lib_seqnum: 0x090a,
        lib_piggyack: 0x0b0c,
        match_info: 0x1112_1314_1516_1718,
        session: 0x2122_2324,
        frag_length: 100,
        frag_seqnum: 0,
        frag_pipeline: if compat { COMPAT_FRAG_PIPELINE } else { 0 },
        checksum: 0x4142,
    };
    let pull = Pull {
        dst_endpoint: 3,
        src_endpoint: 4,
        session: 0x2122_2324,
        total_length: 0x0005_0000,
        pulled_rdma_id: 0x35,
        pulled_rdma_seqnum: 0x36,
        pulled_rdma_offset: 0x3738,
        src_pull_handle: 0x5152_5354,
        src_magic: PULL_MAGIC_XOR ^ 4,
        first_frame_offset: 0x10,
        block_length: 0x1000,
        frame_index: 0x6162_6364,
    };
    let notify = Notify {
        dst_endpoint: 3,
        src_endpoint: 4,
        flags: if compat { 0 } else { 5 },
        session: 0x2122_2324,
        total_length: 0x3132_3334,
        pulled_rdma_id: 0x35,
        pulled_rdma_seqnum: 0x36,
        lib_seqnum: 0x090a,
        lib_piggyack: 0x0b0c,
    };
    let pull_reply = PullReply {
        frame_seqnum: 7,
        frame_length: 50,
        msg_offset: 0x7172_7374,
        dst_pull_handle: 0x5152_5354,
        dst_magic: PULL_MAGIC_XOR ^ 3,
    };
    let connect = Connect {
        dst_endpoint: 3,
        src_endpoint: 4,
        length: CONNECT_DATA_LEN,
        lib_seqnum: 0,
        src_dst_peer_index: 0x0203,
        src_session_id: 0x2122_2324,
        app_key_or_target_session: 0x2526_2728,
        target_recv_seqnum_start: 0x090a,
        is_reply: true,
        connect_seqnum: 9,
        status_code: CONNECT_STATUS_BAD_KEY,
        link_mtu: if compat { 0 } else { 9000 },
        extensions: if compat {
            Extensions::NONE
        } else {
            Extensions::ALL
        },
        stripe_boards: 0,
    };
    let truc = Truc {
        dst_endpoint: 3,
        src_endpoint: 4,
        length: TRUC_DATA_LEN,
        session: 0x2122_2324,
        truc_type: TRUC_TYPE_ACK,
        lib_seqnum: 0x090a,
        session_id: 0x2122_2324,
        acknum: 0x3132_3334,
        send_seq: 0x090b,
        resent: 2,
    };
    let nack_lib = NackLib {
        src_endpoint: 4,
        nack_type: NackType::BadSession as u8,
        dst_endpoint: 3,
        dst_src_peer_index: 0x0203,
        lib_seqnum: 0x090a,
    };
    let nack_mcp = NackMcp {
        src_endpoint: 4,
        nack_type: NackType::BadRdmaWin as u8,
        src_pull_handle: 0x5152_5354,
        src_magic: PULL_MAGIC_XOR ^ 3,
    };
    let hq = HostQuery {
        src_dst_peer_index: 0x0203,
        magic: 0x1305_2008,
    };
    let hr = HostReply {
        length: 3,
        src_dst_peer_index: 0x0203,
        magic: 0x1305_2008,
    };
    let mut medium_fields = vec![
        ("dst_endpoint", 3),
        ("src_endpoint", 4),
        ("length", 100),
        ("lib_seqnum", 0x090a),
        ("lib_piggyack", 0x0b0c),
        ("match_info", 0x1112_1314_1516_1718),
        ("session", 0x2122_2324),
        ("frag_length", 100),
        ("frag_seqnum", 0),
        ("checksum", 0x4142),
    ];
    if compat {
        medium_fields.push(("frag_pipeline", COMPAT_FRAG_PIPELINE.into()));
    }
    let mut rndv_fields = msg_fields(&rndv.msg);
    rndv_fields.extend([
        ("msg_length", rndv.msg_length.into()),
        ("pulled_rdma_id", rndv.pulled_rdma_id.into()),
        ("pulled_rdma_seqnum", rndv.pulled_rdma_seqnum.into()),
        ("pulled_rdma_offset", rndv.pulled_rdma_offset.into()),
    ]);
    vec![
        (Packet::Tiny(msg), vec![1; 6], msg_fields(&msg)),
        (Packet::Small(msg), vec![1; 6], msg_fields(&msg)),
        (Packet::Rndv(rndv), vec![], rndv_fields),
        (Packet::Medium(medium), vec![2; 100], medium_fields),
        (
            Packet::Pull(pull),
            vec![],
            vec![
                ("dst_endpoint", 3),
                ("src_endpoint", 4),
                ("session", pull.session.into()),
                ("total_length", pull.total_length.into()),
                ("pulled_rdma_id", pull.pulled_rdma_id.into()),
                ("pulled_rdma_seqnum", pull.pulled_rdma_seqnum.into()),
                ("pulled_rdma_offset", pull.pulled_rdma_offset.into()),
                ("src_pull_handle", pull.src_pull_handle.into()),
                ("src_magic", pull.src_magic.into()),
                ("first_frame_offset", pull.first_frame_offset.into()),
                ("block_length", pull.block_length.into()),
                ("frame_index", pull.frame_index.into()),
            ],
        ),
        (
            Packet::Notify(notify),
            vec![],
            vec![
                ("dst_endpoint", 3),
                ("src_endpoint", 4),
                ("flags", notify.flags.into()),
                ("session", notify.session.into()),
                ("total_length", notify.total_length.into()),
                ("pulled_rdma_id", 0x35),
                ("pulled_rdma_seqnum", 0x36),
                ("lib_seqnum", 0x090a),
                ("lib_piggyack", 0x0b0c),
            ],
        ),
        (
            Packet::PullReply(pull_reply),
            vec![3; 50],
            vec![
                ("frame_seqnum", 7),
                ("frame_length", 50),
                ("msg_offset", pull_reply.msg_offset.into()),
                ("dst_pull_handle", pull_reply.dst_pull_handle.into()),
                ("dst_magic", pull_reply.dst_magic.into()),
            ],
        ),
        (
            Packet::Connect(connect),
            vec![],
            vec![
                ("dst_endpoint", 3),
                ("src_endpoint", 4),
                ("length", CONNECT_DATA_LEN.into()),
                ("lib_seqnum", 0),
                ("src_dst_peer_index", 0x0203),
                ("src_session_id", 0x2122_2324),
                ("app_key_or_target_session", 0x2526_2728),
                ("target_recv_seqnum_start", 0x090a),
                ("is_reply", 1),
                ("connect_seqnum", 9),
                ("status_code", CONNECT_STATUS_BAD_KEY.into()),
                (
                    "mtu_marker",
                    if compat { 0 } else { CONNECT_MTU_MARKER.into() },
                ),
                ("link_mtu", connect.link_mtu.into()),
                (
                    "ext_marker",
                    if compat { 0 } else { CONNECT_EXT_MARKER.into() },
                ),
                ("extensions", connect.extensions.bits().into()),
            ],
        ),
        (
            Packet::Truc(truc),
            vec![],
            vec![
                ("dst_endpoint", 3),
                ("src_endpoint", 4),
                ("length", TRUC_DATA_LEN.into()),
                ("session", 0x2122_2324),
                ("truc_type", TRUC_TYPE_ACK.into()),
                ("lib_seqnum", 0x090a),
                ("session_id", 0x2122_2324),
                ("acknum", 0x3132_3334),
                ("send_seq", 0x090b),
                ("resent", 2),
            ],
        ),
        (
            Packet::NackLib(nack_lib),
            vec![],
            vec![
                ("src_endpoint", 4),
                ("nack_type", NackType::BadSession as u64),
                ("dst_endpoint", 3),
                ("dst_src_peer_index", 0x0203),
                ("lib_seqnum", 0x090a),
            ],
        ),
        (
            Packet::NackMcp(nack_mcp),
            vec![],
            vec![
                ("src_endpoint", 4),
                ("nack_type", NackType::BadRdmaWin as u64),
                ("src_pull_handle", 0x5152_5354),
                ("src_magic", nack_mcp.src_magic.into()),
            ],
        ),
        (
            Packet::HostQuery(hq),
            vec![],
            vec![("src_dst_peer_index", 0x0203), ("magic", 0x1305_2008)],
        ),
        (
            Packet::HostReply(hr),
            b"h1\0".to_vec(),
            vec![
                ("length", 3),
                ("src_dst_peer_index", 0x0203),
                ("magic", 0x1305_2008),
            ],
        ),
    ]
}

#[test]
fn lua_layout_matches_omx_wire() {
    let tables = parse(&lua());
    for (mode, cfg, table) in [
        (WireMode::Native, WireConfig::native_9000(), "NATIVE"),
        (WireMode::MxCompat, WireConfig::mx_compat(), "MX"),
    ] {
        for (packet, payload, want) in packets(mode) {
            let name = packet.packet_type().name();
            let (body, lua_fields) = tables[table]
                .get(name)
                .or_else(|| tables["LAYOUT"].get(name))
                .unwrap_or_else(|| panic!("no Lua layout for {name}"));
            assert_eq!(
                *body,
                packet.body_len(&cfg),
                "{name} body length in {mode:?}"
            );
            let mut frame = Vec::new();
            encode(&header(), &packet, &payload, &cfg, &mut frame).unwrap();
            let want: BTreeMap<&str, u64> = want.into_iter().collect();
            let lua_names: BTreeSet<&str> = lua_fields.iter().map(|f| f.0.as_str()).collect();
            let rust_names: BTreeSet<&str> = want.keys().copied().collect();
            assert_eq!(lua_names, rust_names, "{name} fields in {mode:?}");
            for (field, off, size) in lua_fields {
                let at = COMMON_HEADER_LEN + off;
                let got = frame[at..at + size]
                    .iter()
                    .fold(0u64, |v, b| (v << 8) | u64::from(*b));
                assert_eq!(got, want[field.as_str()], "{name}.{field} in {mode:?}");
            }
        }
    }
}

#[test]
fn lua_constants_and_type_names_match_omx_wire() {
    let s = lua();
    let constant = |name: &str| -> u64 {
        let line = s
            .lines()
            .find(|l| l.starts_with(&format!("local {name} = ")))
            .unwrap_or_else(|| panic!("{name} missing"));
        let v = line.rsplit(' ').next().unwrap();
        match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).unwrap(),
            None => v.parse().unwrap(),
        }
    };
    assert_eq!(constant("ETHERTYPE"), DEFAULT_ETHERTYPE.into());
    assert_eq!(constant("ETH_HEADER_LEN"), ETH_HEADER_LEN as u64);
    assert_eq!(constant("COMMON_HEADER_LEN"), COMMON_HEADER_LEN as u64);
    assert_eq!(constant("LATENCY_FLAG"), LATENCY_FLAG.into());
    assert_eq!(constant("CHECKSUM_FLAG"), CHECKSUM_FLAG.into());
    assert_eq!(constant("CHECKSUM_LEN"), CHECKSUM_LEN as u64);
    assert_eq!(constant("PULL_MAGIC_XOR"), PULL_MAGIC_XOR.into());
    assert_eq!(constant("BUNDLE_TYPE"), BUNDLE_TYPE.into());
    assert_eq!(constant("BUNDLE_HEADER_LEN"), BUNDLE_HEADER_LEN as u64);
    assert_eq!(constant("STRIPE_PULL_TYPE"), STRIPE_PULL_TYPE.into());
    assert_eq!(
        constant("STRIPE_PULL_REPLY_TYPE"),
        STRIPE_PULL_REPLY_TYPE.into()
    );
    // Every defined type, by number and name, and nothing else.
    let lua_types: BTreeMap<u8, String> = s
        .split("[")
        .skip(1)
        .filter_map(|x| {
            let (n, rest) = x.split_once("] = \"")?;
            Some((n.parse().ok()?, rest.split('"').next()?.to_string()))
        })
        .collect();
    let rust_types: BTreeMap<u8, String> = (0..=u8::MAX)
        .filter_map(|t| PacketType::from_u8(t).map(|p| (t, p.name().to_string())))
        .collect();
    assert_eq!(lua_types, rust_types);
}
