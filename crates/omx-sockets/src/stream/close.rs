//! Close and linger: `shutdown`, the program's last `close` (a closing thread still
//! delivers what was written), and the exit's wait for every connection's data.

use super::*;

/// Connections closed by the program whose data is still on its way.
static CLOSING: Mutex<Vec<Arc<Conn>>> = Mutex::new(Vec::new());

pub(super) fn flush_closing(deadline: Option<Instant>) {
    let closing: Vec<Arc<Conn>> = CLOSING.lock().clone();
    for c in closing {
        c.flush_until(deadline);
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let mut rx = std::mem::replace(self.rx.get_mut(), Rx::new(RxMode::Omx));
        self.abandon_read_ahead(&mut rx);
        let fd = self.sock();
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
/// would after it), waiting `EXIT_LINGER` at most.
pub fn flush_all() {
    if fabric::in_forked_child() {
        return;
    }
    let deadline = Some(Instant::now() + EXIT_LINGER);
    for c in fds::all() {
        c.flush_until(deadline);
    }
    flush_closing(deadline);
}

impl Conn {
    /// Waits until everything written has been taken by the peer's endpoint (or the
    /// peer is gone).
    pub fn flush(&self) {
        self.flush_until(None);
    }

    pub(super) fn flush_until(&self, deadline: Option<Instant>) {
        let Some(mut tx) = (match deadline {
            None => Some(self.tx.lock()),
            Some(d) => self.tx.try_lock_until(d),
        }) else {
            return;
        };
        while !tx.pending.is_empty() && deadline.is_none_or(|d| Instant::now() < d) {
            match self.complete_oldest(&mut tx, deadline) {
                Err(e) if e.raw_os_error() == Some(PEER_MOVED) => {
                    drop(tx);
                    if self.follow_peer_to_tcp().is_err() {
                        return;
                    }
                    tx = self.tx.lock();
                }
                Err(_) => break,
                Ok(()) => {}
            }
        }
    }

    pub fn shutdown_write(&self) {
        self.flush();
        self.tx.lock().shut = true;
        self.fin_sent.store(true, Ordering::Release);
    }

    /// The program closed its last descriptor. As TCP's `close`, it returns at once and
    /// what was written is still delivered: a closing thread waits for it (or for the
    /// peer's end), then the kernel socket closes, so its FIN follows the data. A forked
    /// child has no endpoint to deliver with. A child forked since the connection was
    /// made may still use it: what arrives for it is then kept (the child may hand the
    /// connection back to TCP, see `handover`), but not the kernel socket, so that the
    /// child's close ends the stream.
    pub fn release(self: Arc<Self>) {
        if fabric::in_forked_child() {
            return;
        }
        let kept_for_child =
            fabric::forks() != self.forks_at_creation && !self.fell_back.load(Ordering::Acquire);
        if !kept_for_child {
            fabric::unregister_waker(self.id);
            handover::unregister(self.id);
        }
        if self.tx.lock().pending.is_empty() {
            if kept_for_child {
                self.close_sock();
            }
            return;
        }
        CLOSING.lock().push(self.clone());
        let spawned = std::thread::Builder::new()
            .name("omx-sockets-close".into())
            .spawn(move || {
                self.flush();
                if kept_for_child {
                    self.close_sock();
                }
                CLOSING.lock().retain(|c| !Arc::ptr_eq(c, &self));
            });
        if spawned.is_err() {
            flush_closing(None);
        }
    }
}
