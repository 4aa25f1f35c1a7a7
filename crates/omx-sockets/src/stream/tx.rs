//! The write path: a write cut into messages posted on omx within the connection's
//! window, their completions, and the window's room (`POLLOUT`).

use super::*;

/// Writes from this size on are sent from the program's memory (`send`):
/// `OMX_SOCKETS_DIRECT_MIN` bytes; by default 128 KiB on a board whose pull replies
/// carry `DIRECT_REPLY_MIN` bytes or more (jumbo frames), none otherwise (`None`:
/// not set).
fn direct_min_set() -> Option<usize> {
    static V: OnceLock<Option<usize>> = OnceLock::new();
    *V.get_or_init(|| {
        omx_runtime::config::settings::var("OMX_SOCKETS_DIRECT_MIN")
            .and_then(|v| v.trim().parse().ok())
    })
}

/// Default threshold of direct writes on boards with large pull replies.
const DIRECT_MIN: usize = 128 * 1024;
/// Pull replies from this size on (MTU 65535): a write that waits for its pull costs
/// a round trip per write, which pays for the copy saved with a few frames per write
/// only. At MTU 9000 (8 KiB replies) iperf3 moved 0.77-0.86x the copying build's
/// rate, pinned; at 65535 1.04-1.95x.
const DIRECT_REPLY_MIN: u32 = 32 * 1024;

/// Bytes at the end of such a write that are copied all the same:
/// `OMX_SOCKETS_COPY_TAIL`, 64 KiB by default (one message the peer takes while the
/// program comes back with its next write; as large as the write: no direct send).
fn copy_tail() -> usize {
    static V: OnceLock<usize> = OnceLock::new();
    *V.get_or_init(|| env_bytes("OMX_SOCKETS_COPY_TAIL", 64 * 1024))
}

fn env_bytes(name: &str, default: usize) -> usize {
    omx_runtime::config::settings::var(name)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Where the direct part of a blocking write of `len` bytes ends (0: all copied), on
/// a board whose pull replies carry `reply_max` bytes. The direct part is at least a
/// rendezvous message (pulled by the peer).
fn direct_split(len: usize, reply_max: u32) -> usize {
    let min = direct_min_set().unwrap_or(if reply_max >= DIRECT_REPLY_MIN {
        DIRECT_MIN
    } else {
        usize::MAX
    });
    if len < min {
        return 0;
    }
    let end = len.saturating_sub(copy_tail());
    if end < ahead::READ_AHEAD_MIN {
        0
    } else {
        end
    }
}

/// Bytes a write may post with `messages` of `bytes` under way.
fn room_with(messages: usize, bytes: usize) -> usize {
    if messages >= WINDOW_MESSAGES {
        return 0;
    }
    WINDOW.saturating_sub(bytes)
}

/// `Tx::writable` with `messages` of `bytes` under way.
fn writable_with(messages: usize, bytes: usize) -> bool {
    let room = room_with(messages, bytes);
    let free_messages = WINDOW_MESSAGES.saturating_sub(messages);
    room > 0 && room >= bytes / 2 && free_messages >= messages / 2
}

impl Tx {
    /// Bytes a write may post now: none once the window is full, in bytes or messages.
    fn room(&self) -> usize {
        room_with(self.pending.len(), self.pending_bytes)
    }

    /// `POLLOUT`/`EPOLLOUT`: TCP's rule (`sk_stream_is_writeable`), the free part of
    /// the window at least half of what is under way, in bytes and in messages. A
    /// non-blocking writer that filled the window is then woken once a third of it
    /// drained, not at each message that completes: iperf3's sender met `EAGAIN`, a
    /// `select` and the completion notifier's wake-up per 128 KiB written. A write still
    /// takes whatever room there is.
    fn writable(&self) -> bool {
        writable_with(self.pending.len(), self.pending_bytes)
    }

    /// How many of the sends under way must complete, at the least, before the window
    /// is writable (0: it is): the largest ones first, so whichever complete, the
    /// window is not writable before that many did. The completion notifier rings
    /// after that many (`Conn::room_notifier`), not at each.
    fn completions_until_writable(&self) -> usize {
        if self.writable() {
            return 0;
        }
        let mut lens: Vec<usize> = self.pending.iter().map(|p| p.2).collect();
        lens.sort_unstable_by(|a, b| b.cmp(a));
        let (mut messages, mut bytes) = (self.pending.len(), self.pending_bytes);
        for (done, len) in lens.into_iter().enumerate() {
            messages -= 1;
            bytes -= len;
            if writable_with(messages, bytes) {
                return done + 1;
            }
        }
        self.pending.len()
    }
}

impl Conn {
    pub(super) fn post(&self, tx: &mut Tx, data: Vec<u8>, match_info: u64) -> Result<()> {
        // SAFETY: the buffer is kept in `pending` (its heap block stays put) until its
        // request completes.
        let r = unsafe { self.post_from(tx, data.as_ptr(), data.len(), match_info) }?;
        let len = data.len();
        tx.pending.push_back((r, data, len));
        Ok(())
    }

    /// Posts a send of `len` bytes of the program's memory at `ptr` (no copy); the
    /// caller waits for its completion before the write returns (`send`).
    ///
    /// # Safety
    /// The memory must stay valid, untouched, until the request completes.
    unsafe fn post_direct(
        &self,
        tx: &mut Tx,
        ptr: *const u8,
        len: usize,
        match_info: u64,
    ) -> Result<ReqId> {
        // SAFETY: as the caller promises.
        let r = unsafe { self.post_from(tx, ptr, len, match_info) }?;
        tx.pending.push_back((r, Vec::new(), len));
        Ok(r)
    }

    /// # Safety
    /// `len` bytes at `ptr` stay valid, untouched, until the request completes.
    unsafe fn post_from(
        &self,
        tx: &mut Tx,
        ptr: *const u8,
        len: usize,
        match_info: u64,
    ) -> Result<ReqId> {
        let TxMode::Omx { partner, .. } = tx.mode else {
            return Err(os_err(libc::EPIPE));
        };
        let seg = Segment::memory(ptr as *mut u8, len);
        // SAFETY: as the caller promises.
        let r = unsafe { self.fab.ep.isend(&[seg], partner, match_info, 0, false) }
            .map_err(|e| Error::other(e.to_string()))?;
        tx.pending_bytes += len;
        Ok(r)
    }

    /// Completes the sends that already finished.
    pub(super) fn reap(&self, tx: &mut Tx) -> Result<()> {
        while let Some(&(r, ..)) = tx.pending.front() {
            let Some(c) = self.fab.ep.test(r) else { break };
            self.completed(tx, c)?;
        }
        Ok(())
    }

    pub(super) fn completed(&self, tx: &mut Tx, c: omx_proto::Completion) -> Result<()> {
        let (_, data, len) = tx.pending.pop_front().expect("a pending send");
        tx.pending_bytes -= len;
        // Kept while a stream runs; an idle connection holds no spare memory.
        if tx.pending.is_empty() {
            tx.spare.clear();
        } else if tx.spare.len() < ahead::SPARE_BUFFERS && data.capacity() >= ahead::READ_AHEAD_MIN
        {
            tx.spare.push(data);
        }
        if c.status.code != StatusCode::Success {
            if fabric::verbose() {
                eprintln!(
                    "omx_sockets: conn {:#x}: a send failed ({:?}): the connection is reset",
                    self.id, c.status.code
                );
            }
            tx.mode = TxMode::Broken;
            return Err(os_err(libc::ECONNRESET));
        }
        Ok(())
    }

    /// Waits for the oldest posted send. The peer's end is watched meanwhile: its reset
    /// ends the wait (a dead peer's kernel answers the probe byte with one).
    pub(super) fn complete_oldest(&self, tx: &mut Tx, deadline: Option<Instant>) -> Result<()> {
        self.complete_oldest_or_signal(tx, deadline, false)
    }

    /// [`Conn::complete_oldest`]; with `interruptible`, a signal handler that ran
    /// during the wait ends it with `EINTR` as it ends the kernel's blocked write
    /// (signal(7)): a handler without `SA_RESTART`, or any under `SO_SNDTIMEO`.
    fn complete_oldest_or_signal(
        &self,
        tx: &mut Tx,
        deadline: Option<Instant>,
        interruptible: bool,
    ) -> Result<()> {
        let Some(&(r, ..)) = tx.pending.front() else {
            return Ok(());
        };
        loop {
            let step = deadline.map_or(PEER_CHECK, |d| {
                d.saturating_duration_since(Instant::now()).min(PEER_CHECK)
            });
            let done = if interruptible {
                let handlers = crate::signals::no_restart_count();
                match self.fab.ep.wait_or_signal(r, Some(step)) {
                    Ok(c) => c,
                    Err(_) if deadline.is_some() || !crate::signals::restarts(handlers) => {
                        return Err(os_err(libc::EINTR));
                    }
                    Err(_) => None,
                }
            } else {
                self.fab.ep.wait(r, Some(step))
            };
            if let Some(c) = done {
                return self.completed(tx, c);
            }
            self.pull_while_writing();
            match self.tcp_state() {
                TcpState::Failed(_) => {
                    tx.mode = TxMode::Broken;
                    return Err(os_err(libc::ECONNRESET));
                }
                TcpState::Eof => self.probe_peer(),
                // The peer's own bytes, sent before it saw our hello: for the reader.
                TcpState::Data if self.tcp_bytes_ours.load(Ordering::Acquire) => {}
                TcpState::Data => return Err(os_err(PEER_MOVED)),
                TcpState::Empty => {}
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(os_err(libc::ETIMEDOUT));
            }
        }
    }

    /// A write waiting for the peer to take its messages reads ahead the peer's large
    /// messages already announced (into the library's buffers, as a read would). Both
    /// ends of a connection may write before either reads (TCP's buffers take both
    /// writes): a blocking write sent from the program's memory returns only once the
    /// peer pulled it, and the peer's large messages are pulled only once a receive is
    /// posted for them, so two such writes waited for each other for ever. Looked at
    /// after each `PEER_CHECK` of a wait; only while the program holds the connection
    /// (a closed one is not read).
    fn pull_while_writing(&self) {
        if self.users.load(Ordering::Acquire) == 0 || fabric::in_forked_child() {
            return;
        }
        // Never waits for the reading side (its lock is taken before this one's).
        if let Some(mut rx) = self.rx.try_lock() {
            self.read_ahead(&mut rx);
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

    /// Room for writes now (poll's POLLOUT): the window is not full, and once it was,
    /// a third of it drained (see `Tx::writable`).
    pub fn writable(&self) -> bool {
        if fabric::in_forked_child() {
            return true;
        }
        let mut tx = self.tx.lock();
        if !matches!(tx.mode, TxMode::Omx { .. }) {
            return true;
        }
        let _ = self.reap(&mut tx);
        tx.writable()
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
            TxMode::Omx { peer_conn, partner } => {
                // The kernel socket is looked at every `TCP_LOOK_EVERY` writes only (a
                // system call each): a peer's reset, FIN or hand-back is still seen
                // within a few writes, and a full window looks at it every time.
                let look = self
                    .writes
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(TCP_LOOK_EVERY)
                    || self.peer_ended.load(Ordering::Relaxed)
                    || self.ready.peer_closed();
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
                    TcpState::Eof => {
                        self.peer_ended.store(true, Ordering::Relaxed);
                        self.probe_peer();
                    }
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
                // A large blocking write is sent from the program's memory, without a
                // copy, and returns once the peer's endpoint has it; only its last
                // `copy_tail()` bytes are copied, so that the peer has them to take
                // while this write returns and the program makes its next one (see
                // `direct_split`). Not under `SO_SNDTIMEO`: a send from the program's
                // memory must complete before the write returns, which a peer that does
                // not read delays past any timeout; copied, the write gives up at it.
                let direct_end = if dontwait || self.has_send_timeout() {
                    0
                } else {
                    direct_split(buf.len(), self.fab.ep.board().wire.pull_reply_max)
                };
                let mut last_direct = None;
                let mut sent = 0;
                // SO_SNDTIMEO, read once the window is first found full (a system call
                // per write otherwise).
                let mut give_up: Option<Option<Instant>> = None;
                let mut interrupted = false;
                while sent < buf.len() {
                    if let Err(e) = self.reap(&mut tx) {
                        return self.end_write(tx, (partner, last_direct), sent, e);
                    }
                    let room = tx.room();
                    if room == 0 {
                        self.full_hits.fetch_add(1, Ordering::AcqRel);
                        if dontwait {
                            break;
                        }
                        let deadline = *give_up.get_or_insert_with(|| self.send_deadline());
                        match self.complete_oldest_or_signal(&mut tx, deadline, true) {
                            // SO_SNDTIMEO passed: what was written so far, else EAGAIN,
                            // as TCP's.
                            Err(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) => break,
                            // A signal: what was written so far, else EINTR (the sends
                            // from the program's memory are still waited for).
                            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                                interrupted = true;
                                break;
                            }
                            Err(e) if e.raw_os_error() == Some(PEER_MOVED) => {
                                drop(tx);
                                let moved = self.follow_peer_to_tcp();
                                tx = self.tx.lock();
                                match moved {
                                    // Every send completed (`fall_back`): the program's
                                    // memory is free again.
                                    Ok(true) => {
                                        drop(tx);
                                        return match self.send(&buf[sent..], flags) {
                                            Ok(n) => Ok(sent + n),
                                            Err(_) if sent > 0 => Ok(sent),
                                            Err(e) => Err(e),
                                        };
                                    }
                                    Ok(false) => {}
                                    Err(e) => {
                                        return self.end_write(tx, (partner, last_direct), sent, e)
                                    }
                                }
                            }
                            Err(e) => return self.end_write(tx, (partner, last_direct), sent, e),
                            Ok(()) => {}
                        }
                        continue;
                    }
                    if sent < direct_end {
                        let n = (direct_end - sent).min(CHUNK).min(room);
                        let part = &buf[sent..sent + n];
                        // SAFETY: this write returns only once the request completed
                        // (`end_write`), so `buf` outlives it untouched.
                        match unsafe {
                            self.post_direct(&mut tx, part.as_ptr(), n, peer_conn as u64)
                        } {
                            Ok(r) => last_direct = Some(r),
                            Err(e) => return self.end_write(tx, (partner, last_direct), sent, e),
                        }
                        sent += n;
                        continue;
                    }
                    let n = (buf.len() - sent).min(CHUNK).min(room);
                    // Copied: the write returns before the peer has the bytes.
                    let mut data = tx.spare.pop().unwrap_or_default();
                    data.clear();
                    data.extend_from_slice(&buf[sent..sent + n]);
                    if let Err(e) = self.post(&mut tx, data, peer_conn as u64) {
                        return self.end_write(tx, (partner, last_direct), sent, e);
                    }
                    sent += n;
                }
                if sent == 0 && !buf.is_empty() {
                    return Err(os_err(if interrupted {
                        libc::EINTR
                    } else {
                        libc::EAGAIN
                    }));
                }
                self.end_write(tx, (partner, last_direct), sent, os_err(0))
            }
        }
    }

    /// Ends a write whose sends from the program's memory up to `last_direct` may still
    /// be posted: waits until they completed (the program may reuse its buffer once the
    /// write returns), then answers `sent` bytes, or `err` when none was sent (`err` of
    /// 0: no error happened). A failure while waiting forgets the peer (its operations
    /// fail at once, as `drop_dead_peer` does) so the wait ends.
    fn end_write<'a>(
        &'a self,
        mut tx: parking_lot::MutexGuard<'a, Tx>,
        (partner, last_direct): (PartnerId, Option<ReqId>),
        sent: usize,
        err: Error,
    ) -> Result<usize> {
        let mut err = (err.raw_os_error() != Some(0)).then_some(err);
        if let Some(last) = last_direct {
            let mut forgot = false;
            // Sends complete in order (`pending` is FIFO): `last` gone, all are.
            while tx.pending.iter().any(|&(r, ..)| r == last) {
                if err.is_some() && !forgot {
                    // The partner the sends went to, even once the mode says broken.
                    self.fab.forget_partner(partner);
                    tx.mode = TxMode::Broken;
                    forgot = true;
                }
                let front = tx.pending.front().expect("a pending send").0;
                if forgot {
                    if let Some(c) = self.fab.ep.wait(front, None) {
                        let _ = self.completed(&mut tx, c);
                    }
                    continue;
                }
                match self.complete_oldest(&mut tx, None) {
                    Ok(()) => {}
                    // Bytes on TCP while the peer is carried: the peer's probes or its
                    // process handing the connection back. A hand-back completes every
                    // send before it answers (`fall_back`).
                    Err(e) if e.raw_os_error() == Some(PEER_MOVED) => {
                        drop(tx);
                        let moved = self.follow_peer_to_tcp();
                        tx = self.tx.lock();
                        if let Err(e) = moved {
                            err = Some(e);
                        }
                    }
                    Err(e) => err = Some(e),
                }
            }
        }
        match err {
            Some(e) if sent == 0 => Err(e),
            // The bytes posted before the failure may have reached the peer: counted,
            // as TCP counts what it queued.
            Some(_) | None => Ok(sent),
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

    /// The endpoint's descriptor armed to ring once enough of this connection's sends
    /// completed for its window to be writable (`Tx::completions_until_writable`; a
    /// third of a full window: about ten messages of 128 KiB), not at each: a writer
    /// waiting for room wakes once. Completions of other requests count too, so it may
    /// ring early (the caller looks and arms again), never late, unless sends complete
    /// out of order beyond the first `OUT_OF_ORDER_LOOK` (the caller looks again
    /// every `FULL_LOOK` anyway). `None` as `completion_notifier`.
    pub fn room_notifier(&self) -> Option<i32> {
        const OUT_OF_ORDER_LOOK: usize = 16;
        let fd = self.fab.ep.notify_fd().ok()?;
        // Read before the look: completions made after it are counted, or reaped.
        let mark = self.fab.ep.notify_mark();
        let need = {
            let mut tx = self.tx.lock();
            let _ = self.reap(&mut tx);
            let need = tx.completions_until_writable();
            // Sends behind the oldest that completed already were counted before the
            // mark, and will not count again.
            let done_behind = tx
                .pending
                .iter()
                .skip(1)
                .take(need.min(OUT_OF_ORDER_LOOK))
                .filter(|p| self.fab.ep.peek_done(p.0))
                .count();
            need.saturating_sub(done_behind)
        };
        self.fab
            .ep
            .arm_notify_at(mark + need.max(1) as u64)
            .then_some(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::{direct_split, Tx, TxMode, WINDOW, WINDOW_MESSAGES};
    use omx_proto::ReqId;

    fn tx_with(messages: usize, each: usize) -> Tx {
        let mut tx = Tx::new(TxMode::Broken);
        for i in 0..messages {
            tx.pending.push_back((ReqId(i as u64), Vec::new(), each));
            tx.pending_bytes += each;
        }
        tx
    }

    #[test]
    fn writable_as_tcp_once_a_third_of_a_full_window_drained() {
        let big = 128 * 1024;
        let full = WINDOW / big;
        assert!(tx_with(0, big).writable());
        assert!(tx_with(1, big).writable());
        assert_eq!(tx_with(full, big).room(), 0);
        assert!(!tx_with(full, big).writable());
        // Room for one more write, but less than half of what is under way.
        assert!(tx_with(full - 1, big).room() > 0);
        assert!(!tx_with(full - 1, big).writable());
        // Free 1/3 of the window: free (1/3) >= queued (2/3) / 2.
        let two_thirds = WINDOW * 2 / 3 / big;
        assert!(tx_with(two_thirds, big).writable());
        assert!(!tx_with(two_thirds + 1, big).writable());
        // The same in messages when they are small.
        let small = 16;
        assert!(!tx_with(WINDOW_MESSAGES, small).writable());
        assert!(!tx_with(WINDOW_MESSAGES - 1, small).writable());
        assert!(tx_with(WINDOW_MESSAGES * 2 / 3, small).writable());
    }

    #[test]
    fn a_full_window_needs_a_third_of_its_sends_done_before_it_is_writable() {
        let big = 128 * 1024;
        let full = WINDOW / big;
        assert_eq!(tx_with(0, big).completions_until_writable(), 0);
        let need = tx_with(full, big).completions_until_writable();
        assert!(need > 1 && need < full, "{need} of {full}");
        assert!(!tx_with(full - need + 1, big).writable());
        assert!(tx_with(full - need, big).writable());
        // Small messages: the count of messages under way decides.
        let small = 16;
        let need = tx_with(WINDOW_MESSAGES, small).completions_until_writable();
        assert!(tx_with(WINDOW_MESSAGES - need, small).writable());
        assert!(!tx_with(WINDOW_MESSAGES - need + 1, small).writable());
    }

    #[test]
    fn the_largest_sends_count_first_whichever_complete() {
        let mut tx = tx_with(0, 0);
        // One large message among small ones: its completion alone may free the room.
        tx.pending.push_back((ReqId(0), Vec::new(), WINDOW / 2));
        tx.pending_bytes += WINDOW / 2;
        for i in 1..=8 {
            tx.pending.push_back((ReqId(i), Vec::new(), WINDOW / 16));
            tx.pending_bytes += WINDOW / 16;
        }
        assert!(!tx.writable());
        assert_eq!(tx.completions_until_writable(), 1);
    }

    #[test]
    fn direct_split_copies_the_tail_of_large_writes_only() {
        // Defaults: from 128 KiB on, all but the last 64 KiB go from the program's memory,
        // with jumbo pull replies only.
        let jumbo = 64 * 1024;
        assert_eq!(direct_split(0, jumbo), 0);
        assert_eq!(direct_split(64 * 1024, jumbo), 0);
        assert_eq!(direct_split(128 * 1024 - 1, jumbo), 0);
        assert_eq!(direct_split(128 * 1024, jumbo), 64 * 1024);
        assert_eq!(direct_split(1 << 20, jumbo), (1 << 20) - 64 * 1024);
        assert_eq!(direct_split(1 << 20, 8 * 1024), 0);
    }
}
