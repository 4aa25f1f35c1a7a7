//! Close and linger: `shutdown`, the program's last `close` (a closing thread still
//! delivers what was written), and the exit's wait for every connection's data.

use super::*;

/// What the closing thread does once a connection's data is delivered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Then {
    /// The program closed it: drop the connection, closing the kernel socket first
    /// when it was kept for a forked child (see `Conn::release`).
    Close { close_sock: bool },
    /// The program shut its writing side down (`shutdown_write`): our FIN now.
    ShutWr,
}

/// Connections whose data is still on its way after the program closed them, or shut
/// their writing side down.
static CLOSING: Mutex<Vec<(Arc<Conn>, Then)>> = Mutex::new(Vec::new());
/// The closing thread's eventfd (rung when `CLOSING` gains a connection), once it runs.
static CLOSER: OnceLock<Option<i32>> = OnceLock::new();

pub(super) fn flush_closing(deadline: Option<Instant>) {
    let closing: Vec<(Arc<Conn>, Then)> = CLOSING.lock().clone();
    for (c, then) in closing {
        if c.flush_until(deadline) && then == Then::ShutWr {
            c.send_fin();
            CLOSING
                .lock()
                .retain(|(d, t)| !(Arc::ptr_eq(d, &c) && *t == then));
        }
    }
}

/// Hands a connection to the closing thread (or, without one, waits here).
fn add_closing(c: Arc<Conn>, then: Then) {
    CLOSING.lock().push((c, then));
    match *CLOSER.get_or_init(start_closer) {
        Some(added) => fabric::signal(added),
        None => flush_closing(None),
    }
}

/// Makes the closing thread look at its connections now.
pub(super) fn wake_closer() {
    if let Some(Some(added)) = CLOSER.get() {
        fabric::signal(*added);
    }
}

/// Starts the closing thread; its eventfd.
fn start_closer() -> Option<i32> {
    let evfd = new_evfd()?;
    let started = std::thread::Builder::new()
        .name("omx-sockets-close".into())
        .spawn(move || closer(evfd));
    if started.is_err() {
        // SAFETY: our own eventfd, not handed out.
        unsafe { real::close(evfd) };
        return None;
    }
    Some(evfd)
}

/// One thread for every closing connection of the process (a thread per close cost
/// more than the rest of a connection's set-up and end). It sleeps until a send
/// completes (the endpoint's completion notifier), a connection is added, or
/// `PEER_CHECK` passes, then looks at each connection without waiting: spinning in
/// the endpoint, as a writer does, would take the CPU from the program.
fn closer(added: i32) {
    loop {
        let notify = CLOSING
            .lock()
            .first()
            .and_then(|(c, _)| c.completion_notifier());
        let batch = CLOSING.lock().clone();
        for (c, then) in &batch {
            if c.flush_step() {
                match *then {
                    Then::Close { close_sock: true } => c.close_sock(),
                    Then::Close { close_sock: false } => {}
                    Then::ShutWr => c.send_fin(),
                }
                // The last reference, usually: `Drop` closes the kernel socket (its FIN).
                CLOSING
                    .lock()
                    .retain(|(d, t)| !(Arc::ptr_eq(d, c) && t == then));
            }
        }
        drop(batch);
        let mut watch = vec![libc::pollfd {
            fd: added,
            events: libc::POLLIN,
            revents: 0,
        }];
        let timeout = if CLOSING.lock().is_empty() {
            -1
        } else if let Some(fd) = notify {
            watch.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            PEER_CHECK.as_millis() as i32
        } else {
            // Work under way that rings nothing: look again soon.
            1
        };
        // SAFETY: valid pollfds.
        unsafe { real::poll(watch.as_mut_ptr(), watch.len() as libc::nfds_t, timeout) };
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a local from our non-blocking eventfd.
        unsafe { real::read(added, &mut count as *mut u64 as *mut libc::c_void, 8) };
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let mut rx = std::mem::replace(self.rx.get_mut(), Rx::new(RxMode::Omx));
        self.abandon_ahead(&mut rx);
        let fd = self.sock();
        // A client closed before it looked for the server's hello (its bytes went over
        // TCP): the hello is the library's, not unread data of the program; left
        // unread, the kernel would answer the close with a reset where TCP sends a FIN.
        if fd >= 0 && matches!(rx.mode, RxMode::AwaitHello) && !self.maybe_shared() {
            let mut buf = [0u8; crate::handshake::HELLO_LEN];
            let n = self
                .recv_tcp(&mut buf, libc::MSG_PEEK | libc::MSG_DONTWAIT, false)
                .unwrap_or(0);
            if matches!(
                crate::handshake::check_hello(&buf[..n]),
                crate::handshake::HelloCheck::Hello(_)
            ) {
                let _ = self.recv_tcp(&mut buf, libc::MSG_DONTWAIT, false);
            }
        }
        // Probe bytes left unread would make the kernel answer our close with a reset
        // instead of a FIN (unless the bytes may be a child's, or the stream's own).
        if fd >= 0 && !self.fell_back.load(Ordering::Acquire) && !self.maybe_shared() {
            let mut buf = [0u8; 64];
            loop {
                let n = self.recv_tcp(&mut buf, libc::MSG_PEEK, false).unwrap_or(0);
                let zeros = buf[..n].iter().take_while(|&&b| b == 0).count();
                if zeros == 0 {
                    break;
                }
                let _ = self.recv_tcp(&mut buf[..zeros], 0, false);
            }
        }
        // SAFETY: the library's own descriptors.
        unsafe {
            real::close(self.evfd);
            if fd >= 0 {
                real::close(fd);
            }
        }
    }
}

/// Delivers what every connection wrote before the process exits (as the kernel
/// would after it), waiting `EXIT_LINGER` at most. A connection that a child forked
/// since may still use goes back to TCP first, as for an `exec` (the child finds a
/// plain TCP socket with every byte in order), including those the program closed
/// that are still on their way back (`release`).
pub fn flush_all() {
    if fabric::in_forked_child() {
        return;
    }
    let deadline = Instant::now() + EXIT_LINGER;
    let mut sent_back = handover::finish_urgent(deadline);
    for c in fds::all() {
        if c.maybe_shared() && handover::start_take_back(&c) {
            c.send_back(Some(deadline));
            sent_back = true;
        } else {
            c.flush_until(Some(deadline));
        }
    }
    let closing: Vec<(Arc<Conn>, Then)> = CLOSING.lock().clone();
    for (c, then) in closing {
        if c.handing_back.load(Ordering::Acquire) {
            c.send_back(Some(deadline));
            sent_back = true;
        } else if c.flush_until(Some(deadline)) && then == Then::ShutWr {
            c.send_fin();
        }
    }
    if sent_back {
        handover::linger();
    }
}

impl Conn {
    /// Waits until everything written has been taken by the peer's endpoint (or the
    /// peer is gone).
    pub fn flush(&self) {
        self.flush_until(None);
    }

    /// `flush` until `deadline`: false when it passed with data still under way.
    pub(super) fn flush_until(&self, deadline: Option<Instant>) -> bool {
        let Some(mut tx) = (match deadline {
            None => Some(self.tx.lock()),
            Some(d) => self.tx.try_lock_until(d),
        }) else {
            return false;
        };
        while !tx.pending.is_empty() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            match self.complete_oldest(&mut tx, deadline) {
                Err(e) if e.raw_os_error() == Some(PEER_MOVED) => {
                    drop(tx);
                    if self.follow_peer_to_tcp().is_err() {
                        return true;
                    }
                    tx = self.tx.lock();
                }
                Err(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) => return false,
                // The peer is gone: nothing more will be delivered.
                Err(_) => return true,
                Ok(()) => {}
            }
        }
        true
    }

    /// One look, without waiting, at a closing connection's sends: true once nothing
    /// more is to be delivered (all taken, or the peer is gone).
    fn flush_step(&self) -> bool {
        let Some(mut tx) = self.tx.try_lock() else {
            return false;
        };
        // On its way back to TCP: done once sent back (`handover`), or the peer is gone.
        let handing_back =
            self.handing_back.load(Ordering::Acquire) && matches!(tx.mode, TxMode::Omx { .. });
        if self.reap(&mut tx).is_err() || (tx.pending.is_empty() && !handing_back) {
            return true;
        }
        // As a waiting write watches the peer (`complete_oldest`).
        match self.tcp_state() {
            TcpState::Failed(_) => {
                tx.mode = TxMode::Broken;
                true
            }
            TcpState::Eof => {
                self.probe_peer();
                false
            }
            TcpState::Data if self.tcp_bytes_ours.load(Ordering::Acquire) => false,
            TcpState::Data => {
                drop(tx);
                self.follow_peer_to_tcp().unwrap_or(true)
            }
            TcpState::Empty => false,
        }
    }

    /// `shutdown(SHUT_WR)`: later writes fail with `EPIPE` at once and, as TCP's, the
    /// call returns at once, its FIN queued behind the data: true when the caller is to
    /// send the FIN now (everything written was taken), false when the closing thread
    /// sends it once the peer has taken the rest. (It once waited here for the peer to
    /// take everything: two ends that both wrote more than an eager message, then shut
    /// down before reading, waited for each other for ever.) While a forked child may
    /// share the socket, it waits here as before: a hand-back must not find the FIN
    /// sent ahead of the bytes it sends back.
    pub fn shutdown_write(self: &Arc<Self>) -> bool {
        let pending = {
            let mut tx = self.tx.lock();
            if tx.shut {
                // Shut already: a FIN still deferred stays behind the data.
                return self.fin_sent.load(Ordering::Acquire);
            }
            tx.shut = true;
            let _ = self.reap(&mut tx);
            !tx.pending.is_empty()
        };
        if pending && self.maybe_shared() {
            self.flush();
        } else if pending {
            add_closing(self.clone(), Then::ShutWr);
            return false;
        }
        self.fin_sent.store(true, Ordering::Release);
        true
    }

    /// The deferred FIN of `shutdown_write`, once the peer took every byte before it.
    fn send_fin(&self) {
        self.fin_sent.store(true, Ordering::Release);
        let fd = self.sock();
        if fd >= 0 {
            // SAFETY: the library's own descriptor of the kernel socket.
            unsafe { real::shutdown(fd, libc::SHUT_WR) };
        }
    }

    /// The program closed its last descriptor. As TCP's `close`, it returns at once and
    /// what was written is still delivered: the closing thread waits for it (or for the
    /// peer's end), then the kernel socket closes, so its FIN follows the data. A forked
    /// child has no endpoint to deliver with. A child forked since the connection was
    /// made may still use it: the connection goes back to TCP now, as a child's first
    /// use would take it (`handover`): our marker, the peer's `FALLBACK`, what we hold
    /// sent back; the closing thread then closes our kernel socket, so that the child's
    /// close ends the stream, and this process may exit before the child uses it (the
    /// exit waits for a hand-back under way, `flush_all`). A connection that cannot go
    /// back (not settled on omx) is kept without its kernel socket, as before: a child
    /// that takes it later is answered while this process lives.
    /// Tells the peer that the program closed its socket (`fabric::CLOSED`): its
    /// writes then look at its kernel socket every time, so the first one after our
    /// FIN probes and the next fails once our reset came, as TCP's (it looked once in
    /// `TCP_LOOK_EVERY` writes). A hint: sent behind our data, its completion is not
    /// waited for (no closing thread for it); lost, the peer finds out as before.
    fn say_closed(&self) {
        let tx = self.tx.lock();
        let TxMode::Omx { partner, peer_conn } = tx.mode else {
            return;
        };
        let ep = &self.fab.ep;
        let none = Segment::memory(std::ptr::NonNull::<u8>::dangling().as_ptr(), 0);
        // SAFETY: a zero-length message.
        if let Ok(r) = unsafe {
            ep.isend(
                &[none],
                partner,
                fabric::CLOSED | peer_conn as u64,
                0,
                false,
            )
        } {
            ep.forget(r);
        }
    }

    pub fn release(self: Arc<Self>) {
        if fabric::in_forked_child() {
            return;
        }
        let kept_for_child = self.maybe_shared() && !self.fell_back.load(Ordering::Acquire);
        if !kept_for_child {
            fabric::unregister_waker(self.id);
            handover::unregister(self.id);
        }
        if kept_for_child && handover::start_take_back(&self) {
            self.handing_back.store(true, Ordering::Release);
            add_closing(self, Then::Close { close_sock: true });
            return;
        }
        // Closed with bytes it had not read: TCP answers with a reset (the peer's
        // reads and writes then fail with ECONNRESET or EPIPE), not a FIN behind the
        // data. Over omx those bytes are not in the kernel socket, so the kernel would
        // send a FIN: the reset is asked for (SO_LINGER {1, 0}). It goes when the kernel
        // socket closes: at once, or once the peer took what this end wrote (the
        // closing thread), so that the peer never finds the reset while it still pulls
        // our messages (it would take our process for dead, `drop_dead_peer`).
        // (Only bytes that came on omx: the kernel resets for its own, and a hello
        // not yet looked for is the library's.)
        let abort = !kept_for_child
            && matches!(self.rx.lock().mode, RxMode::Omx)
            && self.readable_bytes() > 0;
        if abort {
            let lg = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: a linger struct from a local, on the library's descriptor.
            unsafe {
                libc::setsockopt(
                    self.sock(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    &lg as *const libc::linger as *const libc::c_void,
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                )
            };
            self.tx.lock().shut = true;
            if fabric::verbose() {
                eprintln!(
                    "omx_sockets: conn {:#x} closed with unread data: reset",
                    self.id
                );
            }
        }
        if !kept_for_child {
            self.say_closed();
        }
        // Sends whose completion already came (a reply carried the peer's ack) need
        // no closing thread.
        let pending = {
            let mut tx = self.tx.lock();
            let _ = self.reap(&mut tx);
            !tx.pending.is_empty()
        };
        if !pending {
            if kept_for_child {
                self.close_sock();
            }
            return;
        }
        add_closing(
            self,
            Then::Close {
                close_sock: kept_for_child,
            },
        );
    }
}
