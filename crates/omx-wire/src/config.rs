//! Build-time wire configurations (spec §1.1).
//!
//! Both peers must agree on every value here: the sizes decide how a message
//! is cut into frames and how large a frame may legally be, and the mode picks
//! the MEDIUM and PULL body layouts.

/// EtherType used by Open-MX (shared with nothing else; Open-MX coexists with IP).
pub const DEFAULT_ETHERTYPE: u16 = 0x86DF;
/// Destination MAC + source MAC + EtherType.
pub const ETH_HEADER_LEN: usize = 14;
/// Ethernet header plus the 2-byte `dst_src_peer_index` present in every frame.
pub const COMMON_HEADER_LEN: usize = 16;

/// Native mode only: set in the packet-type byte (frame offset 16) of a frame the
/// receiver should act on at once (tiny/small, the last medium fragment, rendezvous,
/// pull request, the last pull reply of a block, notify, connect, nacks), so that its
/// wake-up policy can wake a sleeping thread right away and batch the others. Packet
/// types stay below 0x80, so the bit is free; MX peers never see it.
pub const LATENCY_FLAG: u8 = 0x80;

/// Native mode only: set in the packet-type byte of an endpoint frame (TRUC to NACK_MCP)
/// that ends with a [`CHECKSUM_LEN`]-byte trailer right after its payload (before any
/// padding): the CRC32C (Castagnoli), big-endian, of every frame byte before it, from
/// the destination MAC on, flag bits included. A receiver verifies every frame that
/// carries the flag, whatever its own setting, and drops it on a mismatch (see
/// [`crate::DecodeError::BadChecksum`]); a receiver with checksums on also drops
/// endpoint frames without it. Packet types stay below 0x40.
pub const CHECKSUM_FLAG: u8 = 0x40;
/// Bytes of the checksum trailer.
pub const CHECKSUM_LEN: usize = 4;

/// Native extension ([`Extensions::STRIPE`]): a PULL sent on another link than the
/// endpoint's own board. Same body as PULL; its own type so that the socket of the
/// process owning the same endpoint index on that board never takes it.
pub const STRIPE_PULL_TYPE: u8 = 47;
/// Native extension: the PULL_REPLY answering a [`STRIPE_PULL_TYPE`] (same body).
pub const STRIPE_PULL_REPLY_TYPE: u8 = 48;
/// CONNECT body byte 14, with [`Extensions::STRIPE`] advertised: how many 6-byte board
/// addresses follow the body (the sender's other boards, in link order).
pub const CONNECT_STRIPE_BOARDS_OFFSET: usize = 14;
/// Most other boards a CONNECT lists.
pub const STRIPE_BOARDS_MAX: usize = 7;

/// The striped type of PULL and PULL_REPLY, and back: `None` for every other type.
pub const fn striped_type(t: u8) -> Option<u8> {
    match t {
        41 => Some(STRIPE_PULL_TYPE),
        42 => Some(STRIPE_PULL_REPLY_TYPE),
        _ => None,
    }
}

/// The type a striped type stands for (PULL or PULL_REPLY); `None` if not striped.
pub const fn unstriped_type(t: u8) -> Option<u8> {
    match t {
        STRIPE_PULL_TYPE => Some(41),
        STRIPE_PULL_REPLY_TYPE => Some(42),
        _ => None,
    }
}

/// The packet type of a type byte, without [`LATENCY_FLAG`] and [`CHECKSUM_FLAG`].
pub const fn type_of(type_byte: u8) -> u8 {
    type_byte & !(LATENCY_FLAG | CHECKSUM_FLAG)
}

/// The checksum trailer of `covered` (a frame's bytes up to the end of its payload).
pub fn checksum_of(covered: &[u8]) -> [u8; CHECKSUM_LEN] {
    crc32c::crc32c(covered).to_be_bytes()
}

/// The checksum trailer of a frame given in pieces (header, then payload).
pub fn checksum_of_parts(parts: &[&[u8]]) -> [u8; CHECKSUM_LEN] {
    parts
        .iter()
        .fold(0, |crc, p| crc32c::crc32c_append(crc, p))
        .to_be_bytes()
}

/// Native mode: the seal an omx CONNECT without [`CHECKSUM_FLAG`] (the handshake, before
/// both ends agreed on checksums) carries after its payload, in what the original treats
/// as padding: this magic, then the checksum of every byte before it. The handshake
/// decides sessions and sequence numbers, so a corrupted one must not be believed. Only
/// connects that advertise extensions carry it (an Open-MX peer's never do); a receiver
/// verifies every connect with the magic in place and drops it on a mismatch.
pub const CONNECT_SEAL_MAGIC: [u8; 4] = *b"OMXs";
/// Bytes of the connect seal: magic and checksum.
pub const CONNECT_SEAL_LEN: usize = 4 + CHECKSUM_LEN;

/// Bytes that follow the payload of the frame whose encoded header is `header`, before
/// any padding: the checksum trailer when it has [`CHECKSUM_FLAG`], the connect seal
/// ([`CONNECT_SEAL_MAGIC`]) for a CONNECT without it that advertises extensions, else
/// none. The one rule for every sender; [`write_trailer`] writes it.
pub fn trailer_len(header: &[u8]) -> usize {
    let Some(&t) = header.get(COMMON_HEADER_LEN) else {
        return 0;
    };
    if t & CHECKSUM_FLAG != 0 {
        CHECKSUM_LEN
    } else if sealed_connect(t, header) {
        CONNECT_SEAL_LEN
    } else {
        0
    }
}

/// Writes the trailer of [`trailer_len`] into `out` (exactly that long), `covered`
/// being the frame's bytes before it in pieces (header, then payload).
pub fn write_trailer(covered: &[&[u8]], out: &mut [u8]) {
    // Most frames have none: no checksum is computed for them.
    match out.len() {
        CHECKSUM_LEN => out.copy_from_slice(&checksum_of_parts(covered)),
        CONNECT_SEAL_LEN => {
            out[..4].copy_from_slice(&CONNECT_SEAL_MAGIC);
            out[4..].copy_from_slice(&checksum_of_parts(covered));
        }
        _ => debug_assert!(out.is_empty(), "not a trailer length"),
    }
}

/// Whether a frame with type byte `t` (no flags) and these header bytes is a CONNECT
/// that advertises extensions (the marker at body byte 12, see the encoder).
fn sealed_connect(t: u8, header: &[u8]) -> bool {
    t == crate::packet::PacketType::Connect as u8
        && header.get(COMMON_HEADER_LEN + 12) == Some(&CONNECT_EXT_MARKER)
}

/// Whether a frame carries [`LATENCY_FLAG`].
pub fn is_marked(frame: &[u8]) -> bool {
    frame
        .get(COMMON_HEADER_LEN)
        .is_some_and(|&t| t & LATENCY_FLAG != 0)
}
/// Ethernet minimum frame length without FCS; shorter frames are zero-padded.
pub const MIN_FRAME_LEN: usize = 60;
/// XOR applied to the puller endpoint index to form a pull magic.
pub const PULL_MAGIC_XOR: u32 = 0x2107_1980;
/// The pull magic of a striped pull ([`STRIPE_PULL_TYPE`]): the puller's endpoint in
/// the low byte as the original's, and its session in the upper bytes, so that a
/// socket filter tells this endpoint's striped replies from those of another process
/// with the same endpoint index.
pub const fn stripe_magic(endpoint: u8, session: u32) -> u32 {
    ((session << 8) | endpoint as u32) ^ PULL_MAGIC_XOR
}
/// Initial host-query magic (incremented each time peer names are cleared).
pub const HOST_QUERY_MAGIC_INIT: u32 = 0x1305_2008;
/// The only defined TRUC type: an explicit library ack ("liback").
pub const TRUC_TYPE_ACK: u8 = 0x55;
/// In a liback's `resent` byte toward a peer with [`Extensions::GAP_ACKS`]: the ack
/// reports a gap (the receiver holds later packets, or the last fragment of a medium
/// whose earlier one is missing). Zero otherwise, as the original sends it.
pub const TRUC_RESENT_GAP: u8 = 1;
/// Largest TINY payload.
pub const TINY_MAX: usize = 32;
/// Largest SMALL payload.
pub const SMALL_MAX: usize = 128;
/// Peer index value meaning "not known yet".
pub const PEER_INDEX_NONE: u16 = 0xFFFF;
/// Largest HOST_REPLY hostname, NUL included.
pub const HOSTNAME_MAX: usize = 80;
/// CONNECT reply status: success.
pub const CONNECT_STATUS_SUCCESS: u8 = 0;
/// CONNECT reply status: application key mismatch (value chosen for MX compat).
pub const CONNECT_STATUS_BAD_KEY: u8 = 11;
/// Data length carried by RNDV (`msg.length`); receivers drop anything shorter.
pub const RNDV_DATA_LEN: u16 = 8;
/// Data length carried by CONNECT; receivers drop anything shorter.
pub const CONNECT_DATA_LEN: u8 = 16;
/// Data length carried by an ACK TRUC; receivers drop anything shorter.
pub const TRUC_DATA_LEN: u8 = 16;
/// CONNECT body byte 29 when bytes 30..31 carry the sender's frame size
/// ([`crate::Connect::link_mtu`]); the original leaves these pads unset.
pub const CONNECT_MTU_MARKER: u8 = 0x4D;
/// CONNECT body byte 12 when byte 13 carries the sender's [`Extensions`]
/// ([`crate::Connect::extensions`]); the original leaves these pads unset.
pub const CONNECT_EXT_MARKER: u8 = 0x58;
/// Smallest interface MTU native mode runs on (the IPv6 minimum: every link that
/// carries IPv6 carries it).
pub const NATIVE_MTU_MIN: u32 = 1280;
/// Native frame size assumed for a peer that does not advertise one in its CONNECT (an
/// Open-MX peer, whose sizes are fixed at build time and must equal ours): the
/// original's default build, or our own size when smaller (`OMX_MTU` matches an
/// Open-MX built for standard Ethernet).
pub const NATIVE_MTU_UNADVERTISED: u32 = 9000;
/// `frag_pipeline` value of MX-wire-compat MEDIUM fragments (log2 of 4096).
pub const COMPAT_FRAG_PIPELINE: u8 = 12;
/// Largest frame the raw endpoint accepts, Ethernet header included.
pub const RAW_FRAME_MAX: usize = 1024;

/// Largest frame length a 16-bit `frame_length` / Ethernet payload can describe.
const U16_FRAME_MAX: u32 = u16::MAX as u32;

/// Which body layouts are used for MEDIUM and PULL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireMode {
    /// Open-MX native layout: 32-bit medium length, 44-byte pull body.
    Native,
    /// MX-wire-compatible layout: 16-bit medium length + `frag_pipeline`,
    /// 32-byte pull body with 8/16-bit fields.
    MxCompat,
}

/// Sizes and layout choice shared by both peers of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireConfig {
    /// Body layout selection.
    pub mode: WireMode,
    /// Required interface MTU.
    pub mtu: u32,
    /// EtherType written to and expected in every frame.
    pub ethertype: u16,
    /// Largest payload of one MEDIUM fragment.
    pub medium_frag_max: u32,
    /// Largest number of fragments of one MEDIUM message.
    pub medium_frags_max: u32,
    /// Largest payload of one PULL_REPLY frame.
    pub pull_reply_max: u32,
    /// Largest number of PULL_REPLY frames answering one PULL block.
    pub pull_block_replies: u32,
    /// Pull blocks a puller keeps outstanding at once.
    pub pull_blocks_outstanding: u32,
    /// Native mode: every endpoint frame sent carries a checksum trailer
    /// ([`CHECKSUM_FLAG`]); fragment and pull-reply payloads are 4 bytes smaller where
    /// the MTU would not fit the trailer. Both peers must agree, as on the MTU.
    pub checksum: bool,
    /// omx's extensions of the original's frames: the ones offered (our own
    /// configuration) or in use with one partner (the ones both advertised).
    pub extensions: Extensions,
}

/// omx's extensions of the Open-MX wire. Each one is used toward a peer only when that
/// peer advertised it (CONNECT body byte 13, behind [`CONNECT_EXT_MARKER`]): a peer that
/// advertises nothing (Open-MX 1.5, MX) receives the original's frames byte for byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Extensions(u8);

impl Extensions {
    pub const NONE: Extensions = Extensions(0);
    /// [`LATENCY_FLAG`] in the type byte of latency-sensitive frames.
    pub const LATENCY_FLAG: Extensions = Extensions(1);
    /// Checksum trailers ([`CHECKSUM_FLAG`]) are understood.
    pub const CHECKSUM: Extensions = Extensions(2);
    /// The advertiser sends checksum trailers (`OMX_CHECKSUM`): a link uses them when
    /// both understand them and either side wants them.
    pub const CHECKSUM_WANTED: Extensions = Extensions(4);
    /// Bundles of small frames ([`crate::BUNDLE_TYPE`]).
    pub const BUNDLE: Extensions = Extensions(8);
    /// One-sided operations (flags in body byte 3 of messages, unset in the original).
    pub const ONE_SIDED: Extensions = Extensions(16);
    /// Every extension offered by default (all but [`Extensions::STRIPE`]).
    pub const ALL: Extensions = Extensions(31 | 64);
    /// Large messages striped over several links (`OMX_STRIPE`): the advertiser lists
    /// its other boards in its CONNECT ([`crate::Connect::stripe_boards`]) and takes
    /// [`crate::STRIPE_PULL_TYPE`] and [`crate::STRIPE_PULL_REPLY_TYPE`] on them.
    /// Offered only by an endpoint with striping on and several boards.
    pub const STRIPE: Extensions = Extensions(32);
    /// Acks that report a gap in the stream say so ([`TRUC_RESENT_GAP`]), so that only
    /// they start a fast retransmit: the ack a receiver repeats when a packet arrives
    /// twice (its earlier ack was late or lost) is then no loss signal.
    pub const GAP_ACKS: Extensions = Extensions(64);
    /// Every extension this version knows.
    pub const KNOWN: Extensions = Extensions(127);
    /// Names for settings and tools, in bit order.
    pub const NAMES: [(&'static str, Extensions); 7] = [
        ("latency", Self::LATENCY_FLAG),
        ("checksum", Self::CHECKSUM),
        ("checksum-wanted", Self::CHECKSUM_WANTED),
        ("bundle", Self::BUNDLE),
        ("one-sided", Self::ONE_SIDED),
        ("stripe", Self::STRIPE),
        ("gap-acks", Self::GAP_ACKS),
    ];

    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Known bits only: bits of a later version are ignored.
    pub const fn from_bits(bits: u8) -> Extensions {
        Extensions(bits & Self::KNOWN.0)
    }

    pub const fn contains(self, other: Extensions) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: Extensions) -> Extensions {
        Extensions(self.0 | other.0)
    }

    pub const fn intersection(self, other: Extensions) -> Extensions {
        Extensions(self.0 & other.0)
    }

    pub const fn without(self, other: Extensions) -> Extensions {
        Extensions(self.0 & !other.0)
    }

    /// Parses `all`, `none` or a comma-separated list of [`Extensions::NAMES`].
    pub fn parse(text: &str) -> Option<Extensions> {
        match text.trim() {
            "all" | "" => return Some(Self::ALL),
            "none" => return Some(Self::NONE),
            _ => {}
        }
        text.split(',').try_fold(Self::NONE, |acc, name| {
            let name = name.trim();
            Self::NAMES
                .iter()
                .find(|(n, _)| *n == name)
                .map(|&(_, e)| acc.union(e))
        })
    }
}

impl std::fmt::Display for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == Self::NONE {
            return f.write_str("none");
        }
        let mut sep = "";
        for (name, e) in Self::NAMES {
            if self.contains(e) {
                write!(f, "{sep}{name}")?;
                sep = ",";
            }
        }
        Ok(())
    }
}

impl WireConfig {
    /// Native configuration derived from an interface MTU (spec §1.1).
    ///
    /// * pull-reply payload = MTU − 32 (16-byte common header + 16-byte body),
    ///   capped at 65503 because `frame_length` and the frame itself must fit
    ///   16 bits;
    /// * medium fragment = MTU − 48 when that is at most 4096, otherwise 8192
    ///   when a full 8192-byte fragment fits the MTU, else 4096.
    ///
    /// MTUs below 48 are meaningless; arithmetic saturates instead of panicking.
    pub fn native(mtu: u32) -> WireConfig {
        Self::native_sized(mtu, false)
    }

    /// Native configuration whose frames carry a checksum trailer when `checksum` is
    /// set: as [`WireConfig::native`], with the trailer counted as header bytes (pull
    /// replies MTU − 36, medium fragments MTU − 52 up to 4096, 8192 when 8244 bytes fit).
    pub fn native_checksummed(mtu: u32, checksum: bool) -> WireConfig {
        Self::native_sized(mtu, checksum)
    }

    fn native_sized(mtu: u32, checksum: bool) -> WireConfig {
        let trailer = if checksum { CHECKSUM_LEN as u32 } else { 0 };
        let headers_medium = (COMMON_HEADER_LEN + 32) as u32 + trailer;
        let headers_pull_reply = (COMMON_HEADER_LEN + 16) as u32 + trailer;
        let small_frag = mtu.saturating_sub(headers_medium);
        let medium_frag_max = if small_frag <= 4096 {
            small_frag
        } else if 8192 + headers_medium <= mtu {
            8192
        } else {
            4096
        };
        let pull_reply_max = mtu.min(U16_FRAME_MAX).saturating_sub(headers_pull_reply);
        WireConfig {
            mode: WireMode::Native,
            mtu,
            ethertype: DEFAULT_ETHERTYPE,
            medium_frag_max,
            medium_frags_max: 32,
            pull_reply_max,
            pull_block_replies: 32,
            pull_blocks_outstanding: 4,
            checksum,
            extensions: if checksum {
                Extensions::ALL
            } else {
                Extensions::ALL.without(Extensions::CHECKSUM_WANTED)
            },
        }
    }

    /// The default native build (MTU 9000, jumbo frames).
    pub fn native_9000() -> WireConfig {
        WireConfig::native(9000)
    }

    /// Native build for standard Ethernet (MTU 1500).
    pub fn native_1500() -> WireConfig {
        WireConfig::native(1500)
    }

    /// MX-wire-compatible build: 4 KiB payloads, at most 8 fragments/replies,
    /// MTU 4144 = 16 + max(32 + 4096, 16 + 4096).
    pub fn mx_compat() -> WireConfig {
        WireConfig {
            mode: WireMode::MxCompat,
            mtu: 4144,
            ethertype: DEFAULT_ETHERTYPE,
            medium_frag_max: 4096,
            medium_frags_max: 8,
            pull_reply_max: 4096,
            pull_block_replies: 8,
            pull_blocks_outstanding: 4,
            checksum: false,
            // The mode exists to talk to MX peers: the original's frames only.
            extensions: Extensions::NONE,
        }
    }

    /// Whether frames of this type byte get a checksum trailer when sent with this
    /// configuration (native endpoint frames, TRUC to NACK_MCP).
    pub fn checksums(&self, type_byte: u8) -> bool {
        self.checksum
            && self.mode == WireMode::Native
            && crate::peek::is_endpoint_type(type_of(type_byte))
    }

    /// The same configuration at another native frame size (ethertype and checksum
    /// kept). MX-wire mode has one fixed layout: returned unchanged.
    pub fn with_mtu(&self, mtu: u32) -> WireConfig {
        if self.is_compat() {
            return *self;
        }
        WireConfig {
            ethertype: self.ethertype,
            extensions: self.extensions,
            ..Self::native_sized(mtu, self.checksum)
        }
    }

    /// The configuration to use with a partner that advertised frame size `advertised`
    /// (0: none) and `extensions` in its CONNECT: the smaller of the two frame sizes, an
    /// unadvertised peer counted as [`NATIVE_MTU_UNADVERTISED`], never below
    /// [`NATIVE_MTU_MIN`]; the extensions both offer, with checksum trailers when both
    /// understand them and either wants them. MX-wire mode has one fixed size for all.
    pub fn for_partner(&self, advertised: u16, extensions: Extensions) -> WireConfig {
        let ext = self
            .extensions
            .intersection(extensions)
            .without(Extensions::CHECKSUM_WANTED);
        let checksum = ext.contains(Extensions::CHECKSUM)
            && (self.checksum || extensions.contains(Extensions::CHECKSUM_WANTED));
        if self.is_compat() {
            return WireConfig {
                extensions: ext,
                ..*self
            };
        }
        let theirs = match u32::from(advertised) {
            0 => NATIVE_MTU_UNADVERTISED,
            m => m.max(NATIVE_MTU_MIN),
        };
        WireConfig {
            ethertype: self.ethertype,
            extensions: ext,
            ..Self::native_sized(self.mtu.min(theirs), checksum)
        }
    }

    /// The same configuration with checksum trailers on or off (sizes follow: the
    /// trailer takes payload room). MX-wire mode has none.
    pub fn with_checksum(&self, checksum: bool) -> WireConfig {
        if self.is_compat() {
            return *self;
        }
        let wanted = if checksum {
            self.extensions.union(Extensions::CHECKSUM_WANTED)
        } else {
            self.extensions.without(Extensions::CHECKSUM_WANTED)
        };
        WireConfig {
            ethertype: self.ethertype,
            extensions: wanted,
            ..Self::native_sized(self.mtu, checksum)
        }
    }

    /// What CONNECT advertises: the extensions offered, with the wish for checksum
    /// trailers exactly when this side sends them.
    pub fn advertised_extensions(&self) -> Extensions {
        let offered = self.extensions.without(Extensions::CHECKSUM_WANTED);
        if self.checksum && offered.contains(Extensions::CHECKSUM) {
            offered.union(Extensions::CHECKSUM_WANTED)
        } else {
            offered
        }
    }

    /// A peer that advertised nothing (an Open-MX peer, or any peer before its
    /// CONNECT): the original's frames at the assumed size.
    pub fn unadvertised(&self) -> WireConfig {
        self.for_partner(0, Extensions::NONE)
    }

    /// Whether frames under this configuration may carry `e`.
    pub fn uses(&self, e: Extensions) -> bool {
        self.extensions.contains(e)
    }

    /// What this configuration advertises in its CONNECT packets (0 in MX-wire mode,
    /// whose layout has no room for it).
    pub fn advertised_mtu(&self) -> u16 {
        match self.mode {
            WireMode::Native => self.mtu.min(U16_FRAME_MAX) as u16,
            WireMode::MxCompat => 0,
        }
    }

    /// True for the MX-wire-compatible layouts.
    pub fn is_compat(&self) -> bool {
        self.mode == WireMode::MxCompat
    }

    /// Largest MEDIUM message (fragment max × fragments max).
    pub fn medium_max(&self) -> u32 {
        self.medium_frag_max.saturating_mul(self.medium_frags_max)
    }

    /// Largest PULL block (reply max × replies per block).
    pub fn pull_block_max(&self) -> u32 {
        self.pull_reply_max.saturating_mul(self.pull_block_replies)
    }

    /// Byte offset of a MEDIUM fragment within its message.
    ///
    /// Native peers use a fixed fragment size; MX-compat peers announce it
    /// per fragment as a shift (`frag_pipeline`). Saturates at `u32::MAX`
    /// (never reachable for frames that pass [`crate::decode`]).
    pub fn medium_frag_offset(&self, frag_seqnum: u8, frag_pipeline: u8) -> u32 {
        let offset = match self.mode {
            WireMode::Native => u64::from(frag_seqnum) * u64::from(self.medium_frag_max),
            WireMode::MxCompat if frag_seqnum == 0 => 0,
            WireMode::MxCompat => u64::from(frag_seqnum)
                .checked_shl(u32::from(frag_pipeline))
                .filter(|v| v >> u32::from(frag_pipeline) == u64::from(frag_seqnum))
                .unwrap_or(u64::MAX),
        };
        u32::try_from(offset).unwrap_or(u32::MAX)
    }

    /// Number of PULL_REPLY frames answering a block:
    /// ceil((first_frame_offset + block_length) / pull_reply_max).
    ///
    /// Returns `u64` so that hostile 32-bit inputs cannot overflow; returns
    /// `u64::MAX` if `pull_reply_max` is zero.
    pub fn pull_block_frames(&self, first_frame_offset: u32, block_length: u32) -> u64 {
        let total = u64::from(first_frame_offset) + u64::from(block_length);
        let per = u64::from(self.pull_reply_max);
        if per == 0 {
            return u64::MAX;
        }
        total.div_ceil(per)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_9000_matches_spec_table() {
        let c = WireConfig::native_9000();
        assert_eq!(c, WireConfig::native(9000));
        assert_eq!(c.mode, WireMode::Native);
        assert_eq!(c.mtu, 9000);
        assert_eq!(c.ethertype, 0x86DF);
        assert_eq!(c.medium_frag_max, 8192);
        assert_eq!(c.medium_frags_max, 32);
        assert_eq!(c.medium_max(), 262_144);
        assert_eq!(c.pull_reply_max, 8968);
        assert_eq!(c.pull_block_replies, 32);
        assert_eq!(c.pull_block_max(), 286_976);
        assert_eq!(c.pull_blocks_outstanding, 4);
        // 32768-byte medium (default rendezvous threshold) takes 4 fragments.
        assert_eq!(32768u32.div_ceil(c.medium_frag_max), 4);
    }

    #[test]
    fn native_1500_matches_spec_table() {
        let c = WireConfig::native_1500();
        assert_eq!(c, WireConfig::native(1500));
        assert_eq!(c.mode, WireMode::Native);
        assert_eq!(c.mtu, 1500);
        assert_eq!(c.medium_frag_max, 1452);
        assert_eq!(c.medium_frags_max, 32);
        assert_eq!(c.medium_max(), 46_464);
        assert_eq!(c.pull_reply_max, 1468);
        assert_eq!(c.pull_block_replies, 32);
        assert_eq!(c.pull_block_max(), 46_976);
        assert_eq!(c.pull_blocks_outstanding, 4);
        assert_eq!(32768u32.div_ceil(c.medium_frag_max), 23);
    }

    #[test]
    fn mx_compat_matches_spec_table() {
        let c = WireConfig::mx_compat();
        assert_eq!(c.mode, WireMode::MxCompat);
        assert!(c.is_compat());
        assert_eq!(c.mtu, 4144);
        assert_eq!(c.ethertype, 0x86DF);
        assert_eq!(c.medium_frag_max, 4096);
        assert_eq!(c.medium_frags_max, 8);
        assert_eq!(c.medium_max(), 32_768);
        assert_eq!(c.pull_reply_max, 4096);
        assert_eq!(c.pull_block_replies, 8);
        assert_eq!(c.pull_block_max(), 32_768);
        assert_eq!(c.pull_blocks_outstanding, 4);
        assert_eq!(32768u32.div_ceil(c.medium_frag_max), 8);
    }

    #[test]
    fn native_65535_caps_pull_reply() {
        let c = WireConfig::native(65535);
        assert_eq!(c.pull_reply_max, 65503);
        assert_eq!(c.medium_frag_max, 8192);
        // Above 16 bits the cap still holds.
        assert_eq!(WireConfig::native(100_000).pull_reply_max, 65503);
    }

    #[test]
    fn native_medium_fragment_derivation_edges() {
        // MTU - 48 <= 4096 -> MTU - 48.
        assert_eq!(WireConfig::native(4144).medium_frag_max, 4096);
        // Just above: too small for 8192 -> 4096.
        assert_eq!(WireConfig::native(4145).medium_frag_max, 4096);
        assert_eq!(WireConfig::native(8239).medium_frag_max, 4096);
        // 8192 + 48 fits -> 8192.
        assert_eq!(WireConfig::native(8240).medium_frag_max, 8192);
        // Degenerate MTUs do not panic.
        assert_eq!(WireConfig::native(0).medium_frag_max, 0);
        assert_eq!(WireConfig::native(0).pull_reply_max, 0);
    }

    #[test]
    fn checksummed_sizes_leave_room_for_the_trailer() {
        let c = WireConfig::native_checksummed(9000, true);
        assert!(c.checksum);
        assert_eq!(c.medium_frag_max, 8192);
        assert_eq!(c.pull_reply_max, 8964);
        assert_eq!(
            WireConfig::native_checksummed(9000, false),
            WireConfig::native(9000)
        );
        let c = WireConfig::native_checksummed(1500, true);
        assert_eq!(c.medium_frag_max, 1448);
        assert_eq!(c.pull_reply_max, 1464);
        // 8192 + 48 fits 8240 but not with the trailer.
        assert_eq!(
            WireConfig::native_checksummed(8240, true).medium_frag_max,
            4096
        );
        assert_eq!(
            WireConfig::native_checksummed(8244, true).medium_frag_max,
            8192
        );
        assert_eq!(
            WireConfig::native_checksummed(65535, true).pull_reply_max,
            65499
        );
        for mtu in [1500u32, 4144, 8240, 9000, 65535] {
            let c = WireConfig::native_checksummed(mtu, true);
            assert!(16 + 32 + c.medium_frag_max + 4 <= mtu);
            assert!(16 + 16 + c.pull_reply_max + 4 <= mtu.min(65535));
        }
        assert!(!WireConfig::mx_compat().checksums(37));
        assert!(c_checks(true, 42) && !c_checks(true, 3) && !c_checks(false, 37));
        fn c_checks(on: bool, t: u8) -> bool {
            WireConfig::native_checksummed(9000, on).checksums(t | LATENCY_FLAG)
        }
    }

    #[test]
    fn partners_agree_on_the_smaller_size() {
        let big = WireConfig::native_checksummed(9000, true);
        let small = WireConfig::native_checksummed(1500, true);
        let all = Extensions::ALL;
        let sizes = |w: WireConfig| WireConfig {
            extensions: Extensions::NONE,
            ..w
        };
        assert_eq!(
            sizes(big.for_partner(small.advertised_mtu(), all)),
            sizes(small)
        );
        assert_eq!(
            sizes(small.for_partner(big.advertised_mtu(), all)),
            sizes(small)
        );
        let mut odd = WireConfig::native(9000);
        odd.ethertype = 0x1234;
        let agreed = odd.for_partner(1400, odd.extensions);
        assert_eq!((agreed.mtu, agreed.ethertype), (1400, 0x1234));
        assert_eq!(agreed.medium_frag_max, 1352);
        // Unadvertised: the original's default build (or ours when smaller); nonsense
        // sizes: the floor.
        assert_eq!(big.for_partner(0, all).mtu, NATIVE_MTU_UNADVERTISED);
        assert_eq!(small.unadvertised().mtu, 1500);
        assert_eq!(WireConfig::native(65535).unadvertised().mtu, 9000);
        assert_eq!(big.for_partner(64, all).mtu, NATIVE_MTU_MIN);
        assert_eq!(WireConfig::native(65535).advertised_mtu(), 65535);
        let mx = WireConfig::mx_compat();
        assert_eq!(mx.for_partner(1500, all), mx);
        assert_eq!(mx.advertised_mtu(), 0);
    }

    #[test]
    fn extensions_are_those_both_offer() {
        let plain = WireConfig::native_9000();
        let summed = WireConfig::native_checksummed(9000, true);
        // An Open-MX peer: nothing, and the original's sizes.
        let legacy = summed.unadvertised();
        assert_eq!(legacy.extensions, Extensions::NONE);
        assert_eq!(
            legacy,
            WireConfig {
                extensions: Extensions::NONE,
                ..plain
            }
        );
        // Checksums when both understand them and either wants them.
        let agreed = plain.for_partner(9000, summed.extensions);
        assert!(agreed.checksum && agreed == summed.for_partner(9000, plain.extensions));
        assert!(!agreed.uses(Extensions::CHECKSUM_WANTED));
        assert_eq!(agreed.pull_reply_max, summed.pull_reply_max);
        assert!(!plain.for_partner(9000, plain.extensions).checksum);
        let no_sum = Extensions::ALL.without(Extensions::CHECKSUM);
        assert!(!summed.for_partner(9000, no_sum).checksum);
        // Only what both offer.
        let mut refusing = plain;
        refusing.extensions = Extensions::BUNDLE;
        let e = plain.for_partner(9000, refusing.extensions).extensions;
        assert_eq!(e, Extensions::BUNDLE);
        assert_eq!(WireConfig::mx_compat().extensions, Extensions::NONE);
    }

    #[test]
    fn extension_names_round_trip() {
        assert_eq!(Extensions::parse("all"), Some(Extensions::ALL));
        assert_eq!(Extensions::parse("none"), Some(Extensions::NONE));
        let e = Extensions::parse("bundle, latency").unwrap();
        assert_eq!(e, Extensions::BUNDLE.union(Extensions::LATENCY_FLAG));
        assert_eq!(e.to_string(), "latency,bundle");
        assert_eq!(
            Extensions::parse(&Extensions::ALL.to_string()),
            Some(Extensions::ALL)
        );
        assert_eq!(Extensions::NONE.to_string(), "none");
        assert_eq!(Extensions::parse("bundles"), None);
        assert_eq!(Extensions::from_bits(0xff), Extensions::KNOWN);
    }

    #[test]
    fn medium_frag_offsets() {
        let n = WireConfig::native_9000();
        assert_eq!(n.medium_frag_offset(3, 0), 3 * 8192);
        assert_eq!(n.medium_frag_offset(3, 99), 3 * 8192);
        let c = WireConfig::mx_compat();
        assert_eq!(c.medium_frag_offset(5, 12), 5 * 4096);
        assert_eq!(c.medium_frag_offset(255, 255), u32::MAX);
        assert_eq!(c.medium_frag_offset(0, 255), 0);
    }

    #[test]
    fn pull_block_frame_count() {
        let n = WireConfig::native_9000();
        assert_eq!(n.pull_block_frames(0, 286_976), 32);
        assert_eq!(n.pull_block_frames(1, 286_976), 33);
        assert_eq!(n.pull_block_frames(u32::MAX, u32::MAX), 957_843);
    }
}
