//! Moving a new connection onto omx: the client's reservation before its SYN, the
//! server's adoption of an accepted socket whose SYN offered omx (and its hello), and
//! the client's look for that hello.

use super::*;

/// A client's connection whose SYN offered omx.
/// A client's connection id and readiness descriptor, registered before its SYN
/// leaves: the server's first messages may arrive before `connect` returns.
pub fn reserve_client(fab: &'static Fabric) -> Option<(u32, i32)> {
    let id = fab.new_conn_id();
    let evfd = new_evfd()?;
    let _ = fabric::register_waker(id, evfd);
    Some((id, evfd))
}

/// A reservation whose connection is not carried after all.
pub fn unreserve(id: u32, evfd: i32) {
    fabric::unregister_waker(id);
    // SAFETY: the library's own eventfd, not handed out.
    unsafe { real::close(evfd) };
}

/// A client's connection whose SYN offered omx.
pub fn adopt_client(fd: i32, fab: &'static Fabric, id: u32, evfd: i32) {
    let tx = TxMode::Tcp { sent: 0 };
    match Conn::new(fd, fab, id, Some(evfd), tx, RxMode::AwaitHello) {
        Some(c) => {
            fds::attach(fd, &c);
        }
        None => {
            unreserve(id, evfd);
            fds::mark_plain(fd);
        }
    }
}

/// First use of a descriptor not looked at yet: an accepted connection whose client
/// offered omx in its SYN is carried (the server connects to the client's endpoint and
/// says hello). False when it stays plain.
pub fn adopt_accepted(fd: i32) -> bool {
    // A forked child of a process with an endpoint carries nothing (and may run under
    // a seccomp filter that kills it for a `getsockopt`, sshd's pre-auth child).
    if fabric::in_forked_child() {
        return false;
    }
    let mut syn = [0u8; 512];
    let mut len = syn.len() as libc::socklen_t;
    // SAFETY: syn and len are locals; the kernel frees the saved SYN once read.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_SAVED_SYN,
            syn.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return false;
    }
    let Some(client) = crate::handshake::parse_saved_syn(&syn[..len as usize]) else {
        return false;
    };
    adopt_server(fd, client)
}

pub(super) fn adopt_server(fd: i32, client: OmxAddr) -> bool {
    // In a forked child of a process with an endpoint there is none: plain TCP (the
    // client stops waiting for the hello and stays on TCP too).
    let Some(fab) = fabric() else { return false };
    let Some(partner) = fab.partner(client.nic, client.endpoint) else {
        return false;
    };
    let id = fab.new_conn_id();
    let tx = TxMode::Omx {
        partner,
        peer_conn: client.conn,
    };
    let rx = RxMode::TcpFirst {
        delivered: 0,
        expected: None,
    };
    let Some(conn) = Conn::new(fd, fab, id, None, tx, rx) else {
        return false;
    };
    let hello = crate::handshake::encode_hello(OmxAddr {
        nic: fab.nic,
        endpoint: fab.index,
        conn: id,
    });
    if send_all_tcp(conn.sock(), &hello).is_err() {
        conn.release();
        return false;
    }
    fds::attach(fd, &conn);
    // Descriptors inherited across exec may name the same socket (stdin and stdout).
    for dup in fds::undecided_dups_of(fd) {
        fds::attach(dup, &conn);
    }
    if fabric::verbose() {
        eprintln!("omx_sockets: fd {fd} accepted on omx (conn {id:#x})");
    }
    true
}

/// `OMX_SOCKETS_HELLO_WAIT_MS` (default 20).
pub(super) fn hello_wait() -> Duration {
    static MS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    Duration::from_millis(*MS.get_or_init(|| {
        omx_runtime::config::settings::var("OMX_SOCKETS_HELLO_WAIT_MS")
            .and_then(|v| v.parse().ok())
            .unwrap_or(20)
    }))
}

impl Conn {
    /// Client: looks for the server's hello at the head of the TCP stream and moves to
    /// omx if it is there. Returns false when the connection turned out to stay on TCP
    /// (it is then forgotten).
    pub(super) fn look_for_hello(&self, rx: &mut Rx, block: bool) -> Result<bool> {
        loop {
            let mut buf = [0u8; HELLO_LEN];
            let flags = libc::MSG_PEEK | if block { 0 } else { libc::MSG_DONTWAIT };
            // SAFETY: buf is HELLO_LEN bytes.
            let n = unsafe {
                real::recv(
                    self.sock(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    HELLO_LEN,
                    flags,
                )
            };
            if n < 0 {
                let e = Error::last_os_error();
                return match e.kind() {
                    ErrorKind::WouldBlock => Ok(true),
                    ErrorKind::Interrupted => continue,
                    _ => Ok(false),
                };
            }
            match check_hello(&buf[..n as usize]) {
                HelloCheck::Plain => return Ok(false),
                HelloCheck::Partial if n == 0 => return Ok(false),
                HelloCheck::Partial if block => {
                    poll_one(self.sock(), libc::POLLIN, 10);
                    continue;
                }
                HelloCheck::Partial => return Ok(true),
                HelloCheck::Hello(server) => {
                    // SAFETY: consumes the hello just peeked.
                    unsafe {
                        real::recv(
                            self.sock(),
                            buf.as_mut_ptr() as *mut libc::c_void,
                            HELLO_LEN,
                            libc::MSG_WAITALL,
                        )
                    };
                    self.switch_client(rx, server)?;
                    return Ok(true);
                }
            }
        }
    }

    pub(super) fn switch_client(&self, rx: &mut Rx, server: OmxAddr) -> Result<()> {
        rx.mode = RxMode::Omx;
        let mut tx = self.tx.lock();
        let TxMode::Tcp { sent } = tx.mode else {
            return Ok(());
        };
        // The server already writes on omx: without a partner the stream is lost.
        let Some(partner) = self.fab.partner(server.nic, server.endpoint) else {
            tx.mode = TxMode::Broken;
            return Err(os_err(libc::ECONNRESET));
        };
        let count = sent.to_be_bytes().to_vec();
        tx.mode = TxMode::Omx {
            partner,
            peer_conn: server.conn,
        };
        self.post(&mut tx, count, CONTROL | server.conn as u64)?;
        if fabric::verbose() {
            eprintln!(
                "omx_sockets: fd {} carried on omx (conn {:#x}, {sent} bytes before)",
                self.sock(),
                self.id
            );
        }
        Ok(())
    }

    /// Client connections move when the hello is seen; a look that finds the
    /// connection plain forgets it. True while the connection is still ours.
    pub(super) fn settle_client(&self, block: bool) -> Result<bool> {
        // A reader holds `rx` (perhaps blocked until the peer writes): it settles the
        // connection itself, and a write goes on as the send mode says meanwhile.
        let Some(mut rx) = self.rx.try_lock() else {
            return Ok(true);
        };
        if !matches!(rx.mode, RxMode::AwaitHello) {
            return Ok(true);
        }
        if !self.look_for_hello(&mut rx, block)? {
            drop(rx);
            self.forget();
            return Ok(false);
        }
        Ok(true)
    }

    /// A client's first write waits a little for the server's hello (it follows the
    /// SYN-ACK within a round trip when the server accepts at once), so that a stream
    /// is carried from its first byte; a server without the library costs this once.
    pub(super) fn await_hello_before_first_write(&self) {
        if !matches!(self.tx.lock().mode, TxMode::Tcp { sent: 0 }) {
            return;
        }
        let until = Instant::now() + hello_wait();
        // (A reader holding `rx` looks for the hello itself; moving switches `tx`.)
        let awaiting = || {
            self.rx
                .try_lock()
                .is_none_or(|rx| matches!(rx.mode, RxMode::AwaitHello))
                && matches!(self.tx.lock().mode, TxMode::Tcp { sent: 0 })
        };
        while awaiting() && self.users.load(Ordering::Acquire) > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            poll_one(self.sock(), libc::POLLIN, left.as_millis().max(1) as i32);
            if self.settle_client(false).is_err() {
                break;
            }
        }
    }
}
