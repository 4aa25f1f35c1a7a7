//! Raw endpoints (MX `mx_raw_*`, used by fabric mappers and discovery tools): one per
//! board and host, sending complete Ethernet frames and receiving every RAW-type frame
//! (type byte 1) whole, up to 1024 bytes.

use crate::registry::LockFile;
use crate::runtime::{Board, Runtime};
use crate::Error;
use omx_transport::{EndpointFilter, PacketSocket, SocketOptions};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest raw frame delivered (the original's limit).
pub const RAW_FRAME_MAX: usize = 1024;
/// Received frames kept before new ones are dropped (the original's queue).
const RAW_QUEUE_MAX: usize = 32;

pub enum RawEvent {
    Sent(u64),
    Received(Vec<u8>),
}

pub struct RawEndpoint {
    board: Arc<Board>,
    sock: PacketSocket,
    events: VecDeque<RawEvent>,
    pub dropped: u64,
    _lock: LockFile,
}

impl RawEndpoint {
    pub fn open(rt: &Arc<Runtime>, board: u32) -> Result<RawEndpoint, Error> {
        let b = rt.board(board).ok_or(Error::NoSuchBoard)?.clone();
        let lock = b.dir.try_lock_raw()?.ok_or(Error::Busy)?;
        let filter = EndpointFilter {
            endpoints: Vec::new(),
            board_frames: true,
            marked_only: false,
            direct: None,
        };
        // Raw frames always use the original's EtherType.
        let sock = PacketSocket::open_filtered(
            &b.iface,
            0x86DF,
            &SocketOptions::default(),
            Some(&filter),
        )?;
        Ok(RawEndpoint {
            board: b,
            sock,
            events: VecDeque::new(),
            dropped: 0,
            _lock: lock,
        })
    }

    pub fn board(&self) -> &Arc<Board> {
        &self.board
    }

    pub fn fd(&self) -> i32 {
        self.sock.fd()
    }

    /// Sends a complete frame (header built by the caller); its completion is an event.
    pub fn send(&mut self, frame: &[u8], context: u64) -> Result<(), Error> {
        self.sock.send(frame)?;
        self.events.push_back(RawEvent::Sent(context));
        Ok(())
    }

    fn pull(&mut self) {
        let (events, dropped) = (&mut self.events, &mut self.dropped);
        let _ = self.sock.recv_batch(64, |f| {
            if !omx_wire::peek::is_raw(f) {
                return;
            }
            if f.len() > RAW_FRAME_MAX || events.len() >= RAW_QUEUE_MAX {
                *dropped += 1;
                return;
            }
            events.push_back(RawEvent::Received(f.to_vec()));
        });
    }

    /// The next event, waiting up to `timeout`.
    pub fn next_event(&mut self, timeout: Duration) -> Option<RawEvent> {
        let until = Instant::now() + timeout;
        loop {
            self.pull();
            if let Some(e) = self.events.pop_front() {
                return Some(e);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let _ = self.sock.wait_readable(Some(left));
        }
    }
}
