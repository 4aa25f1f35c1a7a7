//! The write path: a write cut into messages posted on omx within the connection's
//! window, their completions, and the window's room (`POLLOUT`).

use super::*;

impl Tx {
    /// Bytes a write may post now: none once the window is full, in bytes or messages.
    fn room(&self) -> usize {
        if self.pending.len() >= WINDOW_MESSAGES {
            return 0;
        }
        WINDOW.saturating_sub(self.pending_bytes)
    }
}

impl Conn {
    pub(super) fn post(&self, tx: &mut Tx, data: Vec<u8>, match_info: u64) -> Result<()> {
        let TxMode::Omx { partner, .. } = tx.mode else {
            return Err(os_err(libc::EPIPE));
        };
        let seg = Segment::memory(data.as_ptr() as *mut u8, data.len());
        // SAFETY: the buffer is kept in `pending` until its request completes.
        let r = unsafe { self.fab.ep.isend(&[seg], partner, match_info, 0, false) }
            .map_err(|e| Error::other(e.to_string()))?;
        tx.pending_bytes += data.len();
        tx.pending.push_back((r, data));
        Ok(())
    }

    /// Completes the sends that already finished.
    pub(super) fn reap(&self, tx: &mut Tx) -> Result<()> {
        while let Some(&(r, _)) = tx.pending.front() {
            let Some(c) = self.fab.ep.test(r) else { break };
            self.completed(tx, c)?;
        }
        Ok(())
    }

    pub(super) fn completed(&self, tx: &mut Tx, c: omx_proto::Completion) -> Result<()> {
        let (_, data) = tx.pending.pop_front().expect("a pending send");
        tx.pending_bytes -= data.len();
        // Kept while a stream runs; an idle connection holds no spare memory.
        if tx.pending.is_empty() {
            tx.spare.clear();
        } else if tx.spare.len() < ahead::SPARE_BUFFERS && data.capacity() >= ahead::READ_AHEAD_MIN
        {
            tx.spare.push(data);
        }
        if c.status.code != StatusCode::Success {
            tx.mode = TxMode::Broken;
            return Err(os_err(libc::ECONNRESET));
        }
        Ok(())
    }

    /// Waits for the oldest posted send. The peer's end is watched meanwhile: its reset
    /// ends the wait (a dead peer's kernel answers the probe byte with one).
    pub(super) fn complete_oldest(&self, tx: &mut Tx, deadline: Option<Instant>) -> Result<()> {
        let Some(&(r, _)) = tx.pending.front() else {
            return Ok(());
        };
        loop {
            let step = deadline.map_or(PEER_CHECK, |d| {
                d.saturating_duration_since(Instant::now()).min(PEER_CHECK)
            });
            if let Some(c) = self.fab.ep.wait(r, Some(step)) {
                return self.completed(tx, c);
            }
            match self.tcp_state() {
                TcpState::Failed(_) => {
                    tx.mode = TxMode::Broken;
                    return Err(os_err(libc::ECONNRESET));
                }
                TcpState::Eof => self.probe_peer(),
                TcpState::Data => return Err(os_err(PEER_MOVED)),
                TcpState::Empty => {}
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(os_err(libc::ETIMEDOUT));
            }
        }
    }

    /// Writes go on omx (or fail), no longer on the kernel socket.
    pub fn writes_on_omx(&self) -> bool {
        !matches!(self.tx.lock().mode, TxMode::Tcp { .. })
    }

    /// How many writes found the window full so far.
    pub fn full_hits(&self) -> u64 {
        self.full_hits.load(Ordering::Acquire)
    }

    /// Room for a write now (poll's POLLOUT): the window is not full.
    pub fn writable(&self) -> bool {
        if fabric::in_forked_child() {
            return true;
        }
        let mut tx = self.tx.lock();
        if !matches!(tx.mode, TxMode::Omx { .. }) {
            return true;
        }
        let _ = self.reap(&mut tx);
        tx.room() > 0
    }

    pub fn send(&self, buf: &[u8], flags: i32) -> Result<usize> {
        self.check_owner()?;
        self.await_hello_before_first_write();
        if !self.settle_client(false)? {
            return self.send_tcp(buf, flags);
        }
        let mut tx = self.tx.lock();
        if tx.shut {
            return Err(os_err(libc::EPIPE));
        }
        match tx.mode {
            TxMode::Tcp { ref mut sent } => {
                // Counted under the lock: the switch to omx tells the peer how many
                // bytes came over TCP.
                let n = self.send_tcp(buf, flags)?;
                *sent += n as u64;
                Ok(n)
            }
            TxMode::Broken => Err(os_err(libc::EPIPE)),
            TxMode::FellBack => self.send_tcp(buf, flags),
            TxMode::Omx { peer_conn, .. } => {
                // The kernel socket is looked at every `TCP_LOOK_EVERY` writes only (a
                // system call each): a peer's reset, FIN or hand-back is still seen
                // within a few writes, and a full window looks at it every time.
                let look = self
                    .writes
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(TCP_LOOK_EVERY);
                match if look {
                    self.tcp_state()
                } else {
                    TcpState::Empty
                } {
                    TcpState::Failed(_) => {
                        tx.mode = TxMode::Broken;
                        return Err(os_err(libc::EPIPE));
                    }
                    // The peer ended its side: is it still there to read?
                    TcpState::Eof => self.probe_peer(),
                    TcpState::Data => {
                        drop(tx);
                        if self.follow_peer_to_tcp()? {
                            return self.send(buf, flags);
                        }
                        tx = self.tx.lock();
                    }
                    TcpState::Empty => {}
                }
                let dontwait = flags & libc::MSG_DONTWAIT != 0 || self.nonblocking();
                let mut sent = 0;
                while sent < buf.len() {
                    self.reap(&mut tx)?;
                    let room = tx.room();
                    if room == 0 {
                        self.full_hits.fetch_add(1, Ordering::AcqRel);
                        if dontwait {
                            break;
                        }
                        match self.complete_oldest(&mut tx, None) {
                            Err(e) if e.raw_os_error() == Some(PEER_MOVED) => {
                                drop(tx);
                                if self.follow_peer_to_tcp()? {
                                    return match self.send(&buf[sent..], flags) {
                                        Ok(n) => Ok(sent + n),
                                        Err(_) if sent > 0 => Ok(sent),
                                        Err(e) => Err(e),
                                    };
                                }
                                tx = self.tx.lock();
                            }
                            r => r?,
                        }
                        continue;
                    }
                    let n = (buf.len() - sent).min(CHUNK).min(room);
                    // Copied: the write returns before the peer has the bytes.
                    let mut data = tx.spare.pop().unwrap_or_default();
                    data.clear();
                    data.extend_from_slice(&buf[sent..sent + n]);
                    self.post(&mut tx, data, peer_conn as u64)?;
                    sent += n;
                }
                if sent == 0 && !buf.is_empty() {
                    return Err(os_err(libc::EAGAIN));
                }
                Ok(sent)
            }
        }
    }

    pub(super) fn send_tcp(&self, buf: &[u8], flags: i32) -> Result<usize> {
        // SAFETY: buf is a valid slice.
        let n = unsafe {
            real::send(
                self.sock(),
                buf.as_ptr() as *const libc::c_void,
                buf.len(),
                flags,
            )
        };
        byte_count(n)
    }

    /// The endpoint's descriptor that rings at the next completion, armed; `None` when
    /// the caller should look again soon instead (work under way that rings nothing).
    pub fn completion_notifier(&self) -> Option<i32> {
        let fd = self.fab.ep.notify_fd().ok()?;
        self.fab.ep.arm_notify().then_some(fd)
    }
}
