//! `omxd` over AF_XDP: the daemon, not its clients, owns each board's XSK (a client
//! holding one could send any frame, and the umem is shared with the kernel). One hub
//! thread per board moves frames between that XSK and the clients' relay
//! connections: a received frame goes to the client of its destination endpoint (the
//! XDP program steers only the clients' endpoints to the XSK; board frames and the
//! daemon's own service endpoint stay on its packet sockets), and every frame a client
//! sends is checked as on the packet-socket relay before it reaches the XSK.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use omx_transport::relay;
use omx_transport::{EndpointFilter, PacketSocket, ETH_HEADER_LEN};
use omx_wire::peek;

use super::{check_client_frame, DaemonStats, FrameRefusal, RELAY_BATCH};
use crate::runtime::{Board, Runtime};

/// Passes between two checks for clients gone while frames keep the hub busy.
const HANGUP_CHECK_PASSES: u32 = 256;

/// A board's XSK and the thread that serves it.
pub(super) struct XdpHub {
    new_clients: mpsc::Sender<HubClient>,
    wake: Arc<OwnedFd>,
    pub native: bool,
}

struct HubClient {
    index: u8,
    relay: PacketSocket,
    /// Dropped when the hub lets go of the client: its `serve` thread then cleans up.
    _gone: mpsc::Sender<()>,
}

impl XdpHub {
    /// Opens `board`'s XSK (none of its endpoints steered to it yet) and starts the hub
    /// thread. Fails where XDP cannot serve (driver, MTU, queues): the daemon then
    /// relays over packet sockets.
    pub(super) fn start(
        rt: &Runtime,
        board: &Board,
        spin: Duration,
        stats: Arc<DaemonStats>,
    ) -> io::Result<XdpHub> {
        let mut iface = board.iface.clone();
        iface.mtu = iface.mtu.min(board.wire.mtu);
        let none = EndpointFilter::new([], false);
        let (xsk, _) = rt.cfg.open_xdp(&iface, &none)?;
        let native = xsk.xdp_native() == Some(true);
        // SAFETY: eventfd returns a new descriptor that nothing else owns (or -1).
        let wake = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if wake < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `wake` was just created and is owned here only.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(wake) });
        let (new_clients, arrivals) = mpsc::channel();
        let hub = Hub {
            xsk,
            clients: Vec::new(),
            arrivals,
            wake: wake.clone(),
            mac: board.iface.mac,
            spin,
            stats,
        };
        std::thread::Builder::new()
            .name(format!("omxd-xdp-{}", board.iface.name))
            .spawn(move || hub.run())?;
        Ok(XdpHub {
            new_clients,
            wake,
            native,
        })
    }

    /// Serves endpoint `index` through the XSK for the client at the other end of
    /// `relay`. The receiver disconnects once the hub has let go of the client (it
    /// closed its connection or died).
    pub(super) fn attach(&self, index: u8, relay: PacketSocket) -> mpsc::Receiver<()> {
        let (gone, on_gone) = mpsc::channel();
        let client = HubClient {
            index,
            relay,
            _gone: gone,
        };
        // A failed send drops the client at once: the caller sees it gone.
        if self.new_clients.send(client).is_ok() {
            ring(self.wake.as_raw_fd());
        }
        on_gone
    }
}

fn ring(fd: RawFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer to an eventfd.
    unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) };
}

fn drain(fd: RawFd) {
    let mut buf = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live buffer (non-blocking eventfd).
    unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
}

struct Hub {
    xsk: PacketSocket,
    clients: Vec<HubClient>,
    arrivals: mpsc::Receiver<HubClient>,
    wake: Arc<OwnedFd>,
    mac: [u8; 6],
    spin: Duration,
    stats: Arc<DaemonStats>,
}

impl Hub {
    fn run(mut self) {
        let mut idle_since: Option<Instant> = None;
        let mut passes = 0u32;
        loop {
            self.take_arrivals();
            let mut gone = vec![false; self.clients.len()];
            let moved = self.wire_to_clients(&mut gone) + self.clients_to_wire(&mut gone);
            passes = passes.wrapping_add(1);
            if moved > 0 && passes.is_multiple_of(HANGUP_CHECK_PASSES) {
                self.mark_hung_up(Some(Duration::ZERO), &mut gone);
            }
            self.drop_gone(&gone);
            if moved > 0 {
                idle_since = None;
                continue;
            }
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() < self.spin {
                std::hint::spin_loop();
                continue;
            }
            let mut gone = vec![false; self.clients.len()];
            if !self.mark_hung_up(Some(Duration::from_secs(1)), &mut gone) {
                return;
            }
            self.drop_gone(&gone);
        }
    }

    /// New clients join; the XSK map steers exactly the clients' endpoints.
    fn take_arrivals(&mut self) {
        let mut changed = false;
        while let Ok(c) = self.arrivals.try_recv() {
            self.clients.retain(|o| o.index != c.index);
            self.clients.push(c);
            changed = true;
        }
        if changed {
            drain(self.wake.as_raw_fd());
            self.steer();
        }
    }

    fn steer(&mut self) {
        let f = EndpointFilter::new(self.clients.iter().map(|c| c.index), false);
        if let Err(e) = self.xsk.set_filter(Some(&f)) {
            eprintln!("omxd: cannot steer endpoints to the XSK: {e}");
        }
    }

    fn wire_to_clients(&mut self, gone: &mut [bool]) -> usize {
        let clients = &mut self.clients;
        let stats = &self.stats;
        let got = self
            .xsk
            .recv_batch(RELAY_BATCH, |f| {
                let dst = peek::dst_endpoint(f);
                match clients.iter_mut().find(|c| Some(c.index) == dst) {
                    Some(c) => {
                        let _ = c.relay.queue_send(f.len(), |b| b.copy_from_slice(f));
                        stats.frames_to_clients.fetch_add(1, Ordering::Relaxed);
                    }
                    // Steered before its client left: nobody to take it.
                    None => {
                        stats.xdp_unclaimed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .unwrap_or(0);
        for (c, g) in self.clients.iter_mut().zip(gone.iter_mut()) {
            if c.relay.flush().is_err() {
                *g = true;
            }
        }
        got
    }

    fn clients_to_wire(&mut self, gone: &mut [bool]) -> usize {
        let mut moved = 0;
        let ethertype = self.xsk.ethertype();
        for (c, g) in self.clients.iter_mut().zip(gone.iter_mut()) {
            let (xsk, stats, mac, index) = (&mut self.xsk, &self.stats, self.mac, c.index);
            let got = c.relay.recv_batch(RELAY_BATCH, |f| {
                if f.len() < ETH_HEADER_LEN {
                    stats.refuse(FrameRefusal::Short);
                    return;
                }
                match check_client_frame(f, mac, ethertype, index) {
                    Ok(()) => {
                        if xsk.queue_send(f.len(), |b| b.copy_from_slice(f)).is_ok() {
                            stats.frames_to_wire.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(r) => stats.refuse(r),
                }
            });
            match got {
                Ok(n) => moved += n,
                Err(_) => *g = true,
            }
        }
        let _ = self.xsk.flush();
        moved
    }

    /// Polls the XSK, the wake-up and every client for up to `timeout`, marking the
    /// clients whose connection hung up. False if polling itself failed.
    fn mark_hung_up(&mut self, timeout: Option<Duration>, gone: &mut [bool]) -> bool {
        let mut fds = vec![
            (self.xsk.fd(), libc::POLLIN),
            (self.wake.as_raw_fd(), libc::POLLIN),
        ];
        fds.extend(self.clients.iter().map(|c| (c.relay.fd(), libc::POLLIN)));
        let Ok(ev) = relay::poll_many(&fds, timeout) else {
            return false;
        };
        for (i, g) in gone.iter_mut().enumerate() {
            let e = ev[i + 2];
            if e & (libc::POLLHUP | libc::POLLERR) != 0 && e & libc::POLLIN == 0 {
                *g = true;
            }
        }
        true
    }

    fn drop_gone(&mut self, gone: &[bool]) {
        if !gone.iter().any(|&g| g) {
            return;
        }
        let mut i = 0;
        self.clients.retain(|_| {
            i += 1;
            !gone[i - 1]
        });
        self.steer();
    }
}
