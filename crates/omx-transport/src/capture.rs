//! A packet socket for watching the wire (`omx_dump`): every frame of one EtherType on
//! one interface, in both directions (the endpoints' sockets ignore their own
//! transmissions; a capture wants them), one at a time with its direction.

use std::io;
use std::mem::zeroed;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use crate::sys;
use crate::Interface;

/// Which way a captured frame went, as the kernel reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Sent by this host.
    Outgoing,
    /// Addressed to this host (or broadcast).
    Incoming,
    /// Addressed to another host (seen through a bridge or promiscuous mode).
    OtherHost,
}

/// An AF_PACKET socket bound to one interface and EtherType that sees every frame.
pub struct CaptureSocket {
    fd: OwnedFd,
    ethertype: u16,
    buf: Vec<u8>,
}

impl CaptureSocket {
    /// Opens the capture socket (needs CAP_NET_RAW).
    pub fn open(iface: &Interface, ethertype: u16) -> io::Result<CaptureSocket> {
        // Bound to one EtherType a socket sees only received frames: the host's own
        // go to sockets of every protocol, so bind to all and filter in the kernel
        // (before binding, so no frame of another EtherType is ever queued).
        let fd = sys::packet_socket()?;
        sys::attach_filter(fd.as_raw_fd(), &crate::filter::ethertype_only(ethertype))?;
        sys::bind_packet(fd.as_raw_fd(), iface.index, libc::ETH_P_ALL as u16)?;
        Ok(CaptureSocket {
            fd,
            ethertype,
            buf: vec![0; iface.max_frame_len().max(1 << 16)],
        })
    }

    /// The next frame, waiting at most `timeout`: `None` when none came. The frame is
    /// whole (up to 64 KiB) and valid until the next call.
    pub fn next(&mut self, timeout: Duration) -> io::Result<Option<(&[u8], Direction)>> {
        if sys::poll_fd(self.fd.as_raw_fd(), libc::POLLIN, Some(timeout))? == 0 {
            return Ok(None);
        }
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut from: libc::sockaddr_ll = unsafe { zeroed() };
        let mut from_len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: `buf` is writable for its length; `from` and `from_len` are live and sized.
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr().cast(),
                self.buf.len(),
                0,
                (&mut from as *mut libc::sockaddr_ll).cast(),
                &mut from_len,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        let frame = &self.buf[..n as usize];
        // The filter already checked; a frame queued by another path would be skipped.
        if omx_wire::peek::ethertype(frame) != Some(self.ethertype) {
            return Ok(None);
        }
        let dir = match from.sll_pkttype {
            sys::PACKET_OUTGOING => Direction::Outgoing,
            sys::PACKET_OTHERHOST => Direction::OtherHost,
            _ => Direction::Incoming,
        };
        Ok(Some((frame, dir)))
    }
}
