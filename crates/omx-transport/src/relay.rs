//! The `omxd` relay: how a process without CAP_NET_RAW reaches the wire.
//!
//! A packet socket cannot be handed to an unprivileged process safely: once
//! it holds one, it can send any frame (the kernel checks the capability only
//! when the socket is created, and `PACKET_QDISC_BYPASS` even skips egress
//! filters), so it could impersonate any endpoint of the host. Instead the
//! privileged daemon keeps the packet sockets and relays frames over one
//! `AF_UNIX`/`SOCK_SEQPACKET` connection per endpoint: one message per
//! Ethernet frame in each direction, after a fixed-size open exchange.
//! The daemon checks every frame the client sends (see `omx-runtime`'s
//! `daemon` module); the client receives only frames addressed to its endpoint.
//!
//! Both sides see the connection as a [`PacketSocket`] (`from_relay`), so
//! batching, flushing and waiting are the packet socket's own.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

use crate::sys;

pub use crate::sys::{
    is_abstract_socket, peer_cred, poll_many, seqpacket_accept, seqpacket_connect, seqpacket_listen,
};

const MAGIC: [u8; 4] = *b"OMXD";
/// Version of the open exchange; the daemon refuses any other.
pub const RELAY_VERSION: u16 = 1;
const OP_OPEN: u16 = 1;
/// Bytes of an [`OpenRequest`] on the connection.
pub const OPEN_REQUEST_LEN: usize = 24;
/// Bytes of an [`OpenReply`] on the connection.
pub const OPEN_REPLY_LEN: usize = 16;
/// How long either side waits for the other's open message.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// First message of a connection: which endpoint the client wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenRequest {
    /// Board, by its 48-bit nic id (MAC).
    pub nic_id: u64,
    /// Endpoint index, or `None` for the first free one.
    pub endpoint: Option<u8>,
}

impl OpenRequest {
    pub fn encode(&self) -> [u8; OPEN_REQUEST_LEN] {
        let mut b = [0u8; OPEN_REQUEST_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&RELAY_VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&OP_OPEN.to_le_bytes());
        b[8..16].copy_from_slice(&self.nic_id.to_le_bytes());
        b[16] = self.endpoint.unwrap_or(u8::MAX);
        b
    }

    /// Parses a request; anything but exactly a version-1 open is `None`.
    pub fn decode(b: &[u8]) -> Option<OpenRequest> {
        if b.len() != OPEN_REQUEST_LEN
            || b[0..4] != MAGIC
            || u16::from_le_bytes([b[4], b[5]]) != RELAY_VERSION
            || u16::from_le_bytes([b[6], b[7]]) != OP_OPEN
            || b[17..].iter().any(|&x| x != 0)
        {
            return None;
        }
        let mut nic = [0u8; 8];
        nic.copy_from_slice(&b[8..16]);
        Some(OpenRequest {
            nic_id: u64::from_le_bytes(nic),
            endpoint: (b[16] != u8::MAX).then_some(b[16]),
        })
    }
}

/// The daemon's answer to an [`OpenRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenReply {
    /// The connection now relays the frames of this endpoint.
    Opened {
        endpoint: u8,
    },
    Refused(Refusal),
}

/// Why the daemon refused to open an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Refusal {
    /// The endpoint (or every endpoint) is in use.
    Busy = 1,
    /// No board with that nic id on this host.
    NoSuchBoard = 2,
    /// Endpoint index beyond the host's range.
    BadEndpoint = 3,
    /// Malformed request or unknown version.
    BadRequest = 4,
    /// The daemon could not set the endpoint up (socket, files).
    Internal = 5,
}

impl Refusal {
    fn from_u16(v: u16) -> Refusal {
        match v {
            1 => Refusal::Busy,
            2 => Refusal::NoSuchBoard,
            3 => Refusal::BadEndpoint,
            4 => Refusal::BadRequest,
            _ => Refusal::Internal,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::Busy => "endpoint busy",
            Refusal::NoSuchBoard => "no such board",
            Refusal::BadEndpoint => "endpoint index out of range",
            Refusal::BadRequest => "bad request",
            Refusal::Internal => "daemon could not open the endpoint",
        })
    }
}

impl OpenReply {
    pub fn encode(&self) -> [u8; OPEN_REPLY_LEN] {
        let mut b = [0u8; OPEN_REPLY_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&RELAY_VERSION.to_le_bytes());
        match *self {
            OpenReply::Opened { endpoint } => b[8] = endpoint,
            OpenReply::Refused(r) => b[6..8].copy_from_slice(&(r as u16).to_le_bytes()),
        }
        b
    }

    pub fn decode(b: &[u8]) -> Option<OpenReply> {
        if b.len() != OPEN_REPLY_LEN || b[0..4] != MAGIC {
            return None;
        }
        if u16::from_le_bytes([b[4], b[5]]) != RELAY_VERSION {
            return Some(OpenReply::Refused(Refusal::BadRequest));
        }
        Some(match u16::from_le_bytes([b[6], b[7]]) {
            0 => OpenReply::Opened { endpoint: b[8] },
            r => OpenReply::Refused(Refusal::from_u16(r)),
        })
    }
}

/// Why a client could not get an endpoint from the daemon.
#[derive(Debug)]
pub enum RelayError {
    /// No daemon listens at the path (or the socket cannot be reached).
    Unreachable(io::Error),
    Refused(Refusal),
    /// The daemon closed the connection or answered nonsense.
    Protocol(String),
}

impl std::fmt::Display for RelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayError::Unreachable(e) => write!(f, "omxd unreachable: {e}"),
            RelayError::Refused(r) => write!(f, "omxd refused: {r}"),
            RelayError::Protocol(m) => write!(f, "omxd protocol error: {m}"),
        }
    }
}

impl std::error::Error for RelayError {}

/// Client side: connects to the daemon at `path` and opens an endpoint.
/// Returns the connection (blocking mode, ready for [`crate::PacketSocket::from_relay`])
/// and the endpoint index granted.
pub fn open_endpoint(path: &Path, req: OpenRequest) -> Result<(OwnedFd, u8), RelayError> {
    let fd = sys::seqpacket_connect(path).map_err(RelayError::Unreachable)?;
    let raw = fd.as_raw_fd();
    if sys::is_abstract_socket(path) {
        // Any user may bind a free abstract name (no file permissions guard it), so
        // only a daemon run by root, or by this very user, is trusted with frames.
        let (pid, uid, _) = sys::peer_cred(raw).map_err(RelayError::Unreachable)?;
        if uid != 0 && uid != sys::geteuid() {
            return Err(RelayError::Protocol(format!(
                "{} is held by pid {pid} of uid {uid}, not by root: not trusted",
                path.display()
            )));
        }
    }
    sys::send_message(raw, &req.encode()).map_err(RelayError::Unreachable)?;
    let ev = sys::poll_fd(raw, libc::POLLIN, Some(OPEN_TIMEOUT))
        .map_err(|e| RelayError::Protocol(e.to_string()))?;
    if ev == 0 {
        return Err(RelayError::Protocol("no answer to the open request".into()));
    }
    let mut buf = [0u8; 64];
    let n = sys::recv_message(raw, &mut buf).map_err(|e| RelayError::Protocol(e.to_string()))?;
    match OpenReply::decode(&buf[..n]) {
        Some(OpenReply::Opened { endpoint }) => Ok((fd, endpoint)),
        Some(OpenReply::Refused(r)) => Err(RelayError::Refused(r)),
        None if n == 0 => Err(RelayError::Protocol("connection closed".into())),
        None => Err(RelayError::Protocol(format!("{n}-byte malformed answer"))),
    }
}

/// Daemon side: reads the open request of a new connection (bounded wait).
pub fn read_open_request(fd: RawFd) -> io::Result<Option<OpenRequest>> {
    if sys::poll_fd(fd, libc::POLLIN, Some(OPEN_TIMEOUT))? == 0 {
        return Ok(None);
    }
    let mut buf = [0u8; 64];
    let n = sys::recv_message(fd, &mut buf)?;
    Ok(OpenRequest::decode(&buf[..n]))
}

/// Daemon side: answers the open request.
pub fn send_open_reply(fd: RawFd, reply: OpenReply) -> io::Result<()> {
    sys::send_message(fd, &reply.encode())
}

/// Whether this process can open packet sockets itself (else it needs `omxd`).
pub fn can_open_packet_socket() -> bool {
    sys::can_open_packet_socket()
}

/// Sets a relay connection's send buffer; `force` (root only) passes the sysctl cap.
pub fn set_send_buffer(fd: RawFd, bytes: usize, force: bool) {
    let n = bytes.min(i32::MAX as usize) as libc::c_int;
    if !force || sys::setsockopt_int(fd, libc::SOL_SOCKET, sys::SO_SNDBUFFORCE, n).is_err() {
        let _ = sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_messages_round_trip_and_reject_garbage() {
        for ep in [None, Some(0), Some(31)] {
            let r = OpenRequest {
                nic_id: 0x0200_0000_0001,
                endpoint: ep,
            };
            assert_eq!(OpenRequest::decode(&r.encode()), Some(r));
        }
        let mut bad = OpenRequest {
            nic_id: 1,
            endpoint: None,
        }
        .encode();
        bad[4] = 9; // version
        assert_eq!(OpenRequest::decode(&bad), None);
        assert_eq!(OpenRequest::decode(&[0u8; 3]), None);
        for rep in [
            OpenReply::Opened { endpoint: 7 },
            OpenReply::Refused(Refusal::Busy),
            OpenReply::Refused(Refusal::NoSuchBoard),
            OpenReply::Refused(Refusal::BadEndpoint),
            OpenReply::Refused(Refusal::BadRequest),
            OpenReply::Refused(Refusal::Internal),
        ] {
            assert_eq!(OpenReply::decode(&rep.encode()), Some(rep));
        }
        assert_eq!(OpenReply::decode(b"nope"), None);
    }

    #[test]
    fn relay_connection_carries_requests_and_frames() {
        let dir = std::env::temp_dir().join(format!("omx-relay-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("d.sock");
        let _ = std::fs::remove_file(&path);
        let l = seqpacket_listen(&path, 4).unwrap();
        let server = std::thread::spawn(move || {
            let c = seqpacket_accept(l.as_raw_fd()).unwrap();
            let req = read_open_request(c.as_raw_fd()).unwrap().unwrap();
            assert_eq!(req.endpoint, Some(3));
            let (pid, _, _) = peer_cred(c.as_raw_fd()).unwrap();
            assert_eq!(pid, std::process::id());
            send_open_reply(c.as_raw_fd(), OpenReply::Opened { endpoint: 3 }).unwrap();
            let mut buf = [0u8; 128];
            let n = sys::recv_message(c.as_raw_fd(), &mut buf).unwrap();
            buf[..n].to_vec()
        });
        let (fd, ep) = open_endpoint(
            &path,
            OpenRequest {
                nic_id: 5,
                endpoint: Some(3),
            },
        )
        .unwrap();
        assert_eq!(ep, 3);
        sys::send_message(fd.as_raw_fd(), b"a frame").unwrap();
        assert_eq!(server.join().unwrap(), b"a frame");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
