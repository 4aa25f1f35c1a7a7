//! Vocabulary shared by the engine and the runtime: time, identifiers, statuses, events.

use bytes::Bytes;

/// Monotonic time in nanoseconds. The engine never reads a clock: the caller passes `now`.
pub type Time = u64;

pub const NS_PER_MS: u64 = 1_000_000;
pub const NS_PER_US: u64 = 1_000;

/// A request handle returned by the engine (slot index and generation, so a stale id is
/// recognised instead of aliasing a newer request).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub u64);

/// A remote endpoint known to this engine (index into its partner table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartnerId(pub u32);

/// Opaque reference to user memory owned by the runtime. The engine only ever names a
/// handle and a byte offset inside it; the runtime resolves segments and performs copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemHandle(pub u64);

/// Identifies one copy action so the runtime can report its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopyId(pub u64);

/// A 48-bit Ethernet address held in a u64 (first MAC byte in bits 47..40), as MX nic ids.
pub type NicId = u64;

pub fn nic_id_from_mac(mac: [u8; 6]) -> NicId {
    mac.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64)
}

/// Whether `nic` can be a board's MAC: 48 bits, not zero, not multicast/broadcast.
pub fn is_unicast_nic(nic: NicId) -> bool {
    nic != 0 && nic >> 48 == 0 && (nic >> 40) & 1 == 0
}

pub fn mac_from_nic_id(id: NicId) -> [u8; 6] {
    let b = id.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// How a partner is reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reach {
    #[default]
    Network,
    /// This very endpoint: messages are looped back inside the engine.
    SelfEndpoint,
    /// Another endpoint of this host, through shared memory.
    Shared,
}

/// Completion status codes, numerically equal to `mx_status_code_t`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatusCode {
    Success = 0,
    Timeout = 4,
    Truncated = 5,
    Cancelled = 6,
    EndpointClosed = 8,
    EndpointUnreachable = 9,
    BadSession = 10,
    BadKey = 11,
    BadEndpoint = 12,
    BadRdmaWin = 13,
    Aborted = 14,
    NoResources = 16,
}

/// Final state of a request, mirroring `mx_status_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub code: StatusCode,
    /// The remote endpoint (sender for receives, destination for sends and connects).
    pub source: Option<PartnerId>,
    pub match_info: u64,
    pub msg_length: u32,
    pub xfer_length: u32,
    /// The caller's context value given when the request was posted.
    pub context: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    Send,
    Recv,
    Connect,
}

/// Something the application must learn about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub req: ReqId,
    pub kind: RequestKind,
    pub status: Status,
    /// The user memory the request had lent to the engine, now free to release.
    pub mem: Option<MemHandle>,
    /// The session of `status.source` when the request completed (0: none yet), so
    /// that the C API names the source's address without asking the engine again.
    pub source_session: u32,
}

/// Data of a send. Eager messages are captured by the caller at post time (MX completes
/// them early, so the user buffer may be reused at once); large ones stay in user memory
/// and are read by the runtime when pull replies are built.
#[derive(Clone, Debug)]
pub enum SendData {
    Eager(Bytes),
    Region { handle: MemHandle, len: u32 },
}

impl SendData {
    pub fn len(&self) -> u32 {
        match self {
            SendData::Eager(b) => b.len() as u32,
            SendData::Region { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A payload copy the runtime must perform (or hand to a copy engine) and then report
/// with [`crate::Engine::copy_done`]. The source bytes keep their frame alive.
#[derive(Clone, Debug)]
pub struct CopyOp {
    pub id: CopyId,
    pub src: Bytes,
    pub dst: MemHandle,
    pub dst_offset: u64,
    /// Length of the whole message the copy belongs to (offload thresholds).
    pub msg_length: u32,
    /// False for a copy the caller makes as it takes it, before acting on any later
    /// output, and does not report (its receive counts it done: see
    /// [`crate::EngineConfig::inline_copy_msg_max`]).
    pub report: bool,
}

/// Errors returned synchronously by engine calls (bad arguments, not network events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineError {
    UnknownPeer,
    UnknownPartner,
    NotConnected,
    BadRequest,
    /// A receive's match info has bits outside its mask.
    MatchOutsideMask,
    /// A send's data passed the wrong way for its protocol (see `SendPlan`).
    WrongSendData,
    /// A one-sided region id already exposed on this endpoint.
    RegionExposed,
    /// A one-sided region with a bad range or flags.
    BadRegion,
    /// One-sided operations need a partner that took the one-sided extension (native
    /// wire mode on both sides).
    NeedsNativeWire,
    /// An atomic operation that does not exist for its type and kind, or whose
    /// element count or operand vectors are wrong.
    BadAtomic,
    NoResources,
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::UnknownPeer => write!(f, "nic id not in the peer table"),
            EngineError::UnknownPartner => write!(f, "unknown partner"),
            EngineError::NotConnected => write!(f, "partner not connected"),
            EngineError::BadRequest => write!(f, "no such request"),
            EngineError::MatchOutsideMask => write!(f, "match info has bits outside the mask"),
            EngineError::WrongSendData => {
                write!(
                    f,
                    "send data passed the wrong way (capture eager sends, lend others)"
                )
            }
            EngineError::RegionExposed => write!(f, "region id already exposed"),
            EngineError::BadRegion => write!(f, "bad region range or flags"),
            EngineError::NeedsNativeWire => {
                write!(
                    f,
                    "one-sided operations need the native wire mode and a partner that offers them"
                )
            }
            EngineError::BadAtomic => {
                write!(f, "atomic operation, type, count or operands not valid")
            }
            EngineError::NoResources => write!(f, "no resources"),
        }
    }
}

impl std::error::Error for EngineError {}
