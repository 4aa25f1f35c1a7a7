//! AF_XDP data path: an XDP program on the interface steers Open-MX frames into an
//! AF_XDP socket (XSK) per endpoint, whose frames live in memory shared with the
//! kernel (the umem); every other frame goes on to the kernel untouched.
//!
//! * [`bpf`]: the hand-assembled program, its XSKMAP, `bpf(2)` load and link attach.
//! * [`xsk`]: umem, rings and the socket (copy mode, `need_wakeup`).
//!
//! Demultiplexing is done by the program: the XSKMAP is keyed by destination
//! endpoint index (plus [`bpf::BOARD_KEY`] for board frames), so each endpoint's XSK
//! only sees its own frames. A frame for an endpoint without an XSK passes to the
//! kernel, where that endpoint's packet socket takes it: XDP and packet-socket
//! endpoints coexist on one interface.
//!
//! Limits (each makes [`XdpPort::open`] fail, and the caller falls back to a packet
//! socket): one XDP program per interface, so only one process at a time uses XDP
//! on an interface (the attach of another finds it busy); one XSK per queue, so
//! within that process one endpoint per interface; the interface must have a single
//! receive queue (a redirect into an XSK bound to another queue is dropped); frames
//! are at most one page ([`xsk::MAX_FRAME`] bytes, MTU 3826), and native mode on
//! veth allows MTU 3498 at most.
//!
//! Lifetime: the program is attached through a BPF link owned by an [`Attachment`]
//! shared by the process's ports on that interface; when the last one closes, the
//! link closes and the kernel detaches the program (also when the process dies).

pub mod bpf;
pub mod xsk;

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

use crate::filter::EndpointFilter;
use crate::iface::Interface;
pub use xsk::{XskCounts, XskKernelStats, MAX_FRAME};

/// How the XDP program runs on the interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum XdpMode {
    /// Native (driver) mode, else generic.
    #[default]
    Auto,
    /// In the driver, before any socket buffer is allocated.
    Native,
    /// Generic (skb) mode: works on every interface, after the skb is built.
    Generic,
}

impl std::str::FromStr for XdpMode {
    type Err = String;
    fn from_str(s: &str) -> Result<XdpMode, String> {
        match s {
            "auto" => Ok(XdpMode::Auto),
            "native" => Ok(XdpMode::Native),
            "generic" => Ok(XdpMode::Generic),
            _ => Err(format!("'{s}': expected auto, native or generic")),
        }
    }
}

/// The program attached to one interface, shared by the ports of this process.
pub struct Attachment {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    /// The mode it runs in (native or generic).
    pub native: bool,
}

/// (network namespace, interface index) -> attachment.
type Registry = HashMap<(u64, u32), Weak<Attachment>>;
static ATTACHED: Mutex<Option<Registry>> = Mutex::new(None);

fn netns_id() -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())
}

impl Attachment {
    /// The program on `iface`: this process's if attached, else a new attachment.
    fn get(iface: &Interface, ethertype: u16, mode: XdpMode) -> io::Result<Arc<Attachment>> {
        let key = (netns_id()?, iface.index);
        let mut reg = ATTACHED.lock().expect("xdp registry");
        let reg = reg.get_or_insert_with(HashMap::new);
        if let Some(a) = reg.get(&key).and_then(Weak::upgrade) {
            return Ok(a);
        }
        let map = bpf::create_xskmap()?;
        let prog = bpf::load_program(map.as_raw_fd(), ethertype)?;
        let try_mode = |flags| bpf::attach(&prog, iface.index, flags);
        let (link, native) = match mode {
            XdpMode::Native => (try_mode(bpf::XDP_FLAGS_DRV_MODE)?, true),
            XdpMode::Generic => (try_mode(bpf::XDP_FLAGS_SKB_MODE)?, false),
            XdpMode::Auto => match try_mode(bpf::XDP_FLAGS_DRV_MODE) {
                Ok(l) => (l, true),
                Err(_) => (try_mode(bpf::XDP_FLAGS_SKB_MODE)?, false),
            },
        };
        let a = Arc::new(Attachment {
            map,
            _prog: prog,
            _link: link,
            native,
        });
        reg.retain(|_, w| w.strong_count() > 0);
        reg.insert(key, Arc::downgrade(&a));
        Ok(a)
    }
}

/// Sizing of an [`XdpPort`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpOptions {
    pub mode: XdpMode,
    /// Umem bytes for receive frames (rounded to a power of two of pages).
    pub rx_bytes: usize,
    /// Umem bytes for send frames.
    pub tx_bytes: usize,
    /// Frames queued before an automatic flush.
    pub send_batch: usize,
    /// Bind in zero-copy mode only (the driver DMAs into the umem); refused by
    /// drivers without it (veth, generic mode). False: copy mode.
    pub zero_copy: bool,
}

impl Default for XdpOptions {
    fn default() -> Self {
        XdpOptions {
            mode: XdpMode::Auto,
            rx_bytes: 8 << 20,
            tx_bytes: 4 << 20,
            send_batch: 64,
            zero_copy: false,
        }
    }
}

fn frames_for(bytes: usize) -> u32 {
    (bytes / xsk::CHUNK).clamp(64, 1 << 16).next_power_of_two() as u32
}

/// An endpoint's XSK on an interface and the map entries that steer frames to it.
pub struct XdpPort {
    xsk: xsk::XskPort,
    keys: Vec<u32>,
    attachment: Arc<Attachment>,
}

impl XdpPort {
    /// Attaches the program if needed, opens an XSK on queue 0 of `iface` and steers
    /// the frames `filter` selects to it. Fails (leaving nothing behind) where XDP
    /// cannot serve: see the module comment.
    pub fn open(
        iface: &Interface,
        ethertype: u16,
        opts: &XdpOptions,
        filter: &EndpointFilter,
    ) -> io::Result<XdpPort> {
        let unsupported = |why: String| io::Error::new(io::ErrorKind::Unsupported, why);
        if iface.max_frame_len() > MAX_FRAME {
            return Err(unsupported(format!(
                "frames of {} bytes exceed an XDP frame ({MAX_FRAME})",
                iface.max_frame_len()
            )));
        }
        if filter.marked_only || filter.direct.is_some() {
            return Err(unsupported(
                "wake-up and direct filters are packet-socket features".into(),
            ));
        }
        let queues = crate::sys::IfCtl::new()?.rx_queues(&iface.name)?;
        if queues > 1 {
            return Err(unsupported(format!(
                "{} has {queues} receive queues (XDP needs one)",
                iface.name
            )));
        }
        let attachment = Attachment::get(iface, ethertype, opts.mode)?;
        let xsk = xsk::XskPort::open(
            iface.index,
            0,
            frames_for(opts.rx_bytes),
            frames_for(opts.tx_bytes),
            opts.send_batch,
            opts.zero_copy,
        )?;
        let mut port = XdpPort {
            xsk,
            keys: Vec::new(),
            attachment,
        };
        port.set_filter(filter)?;
        Ok(port)
    }

    /// Steers exactly the endpoints (and board frames) of `filter` to this socket.
    pub fn set_filter(&mut self, filter: &EndpointFilter) -> io::Result<()> {
        if filter.marked_only || filter.direct.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "wake-up and direct filters are packet-socket features",
            ));
        }
        let mut want: Vec<u32> = filter.endpoints.iter().map(|&e| e as u32).collect();
        if filter.board_frames {
            want.push(bpf::BOARD_KEY);
        }
        let map = self.attachment.map.as_raw_fd();
        for &k in &want {
            bpf::map_set(map, k, self.xsk.fd())?;
        }
        for &k in self.keys.iter().filter(|k| !want.contains(k)) {
            bpf::map_clear(map, k)?;
        }
        self.keys = want;
        Ok(())
    }

    /// Whether the program runs in the driver (native) rather than generic mode.
    pub fn native(&self) -> bool {
        self.attachment.native
    }

    pub fn xsk(&mut self) -> &mut xsk::XskPort {
        &mut self.xsk
    }
    pub fn xsk_ref(&self) -> &xsk::XskPort {
        &self.xsk
    }
}
