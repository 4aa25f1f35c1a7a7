//! Run-time configuration from `OMX_*` environment variables (with the MX aliases the
//! original honoured), read once per process through the settings table.

pub mod messages;
pub mod settings;

use settings::{atoi, flag, num, text};

use omx_proto::{EngineConfig, NS_PER_MS};
use omx_wire::{Extensions, WireConfig, NATIVE_MTU_MIN};
use std::time::Duration;

/// A numeric setting only when it is set to something.
fn set_num(name: &str) -> Option<i64> {
    text(name)
        .filter(|v| !v.trim().is_empty())
        .map(|v| atoi(&v))
}

/// Pull-reply payload from which direct receive places each frame straight into the
/// receive buffer (two system calls per frame). Measured on veth: 4 MiB moved 1.4x
/// faster with 64 KiB frames placed, and no faster with 9 KiB ones placed.
pub const DIRECT_RECV_MIN_REPLY: u32 = 16 * 1024;

/// Pull-reply payload from which direct receive is on by default in the batched mode
/// (below [`DIRECT_RECV_MIN_REPLY`]). Measured on veth: 4 MiB moved 1.16x faster with
/// 9 KiB frames (MTU 9000), and no faster with 4 KiB (MX wire) or 1.5 KiB frames.
pub const DIRECT_RECV_BATCHED_MIN_REPLY: u32 = 8 * 1024;

/// Frame buffers of the batched direct receive (one `recvmmsg`).
pub const DIRECT_RECV_BATCH: usize = 32;

/// How pull replies are received (`OMX_DIRECT_RECV`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectRecv {
    /// Through the data socket's ring with every other frame (`0`).
    Off,
    /// A socket of their own, each frame received straight into the receive
    /// buffer: one copy, two system calls per frame (`placed`).
    Placed,
    /// A socket of their own, drained in batches of frames copied out of buffers:
    /// the kernel's copy is made by the receiving CPU (`batched`).
    Batched,
}

/// Default wake-up policy (see `docs/PERFORMANCE.md` for the measurements behind it).
pub const DEFAULT_COALESCING: Coalescing = Coalescing::Stream;

/// Pull blocks in flight in native mode (MX-wire-compatible mode keeps the original 4).
pub const NATIVE_PULL_BLOCKS: u32 = 8;

/// When a sleeping thread (a blocking wait or the progress thread) is woken by the
/// network (`OMX_COALESCING`), the user-space counterpart of interrupt coalescing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coalescing {
    /// On every frame.
    Off,
    /// Every `OMX_COALESCING_US` while frames may be pending, never by a frame.
    Timer,
    /// At once on frames the sender marked latency-sensitive, else on the timer.
    Marked,
    /// As `Marked`, and once awake, keeps taking frames while a stream keeps them
    /// coming, so one wake-up serves the whole burst.
    Stream,
}

impl Coalescing {
    pub fn name(self) -> &'static str {
        match self {
            Coalescing::Off => "off",
            Coalescing::Timer => "timer",
            Coalescing::Marked => "marked",
            Coalescing::Stream => "stream",
        }
    }
}

#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    pub wire: WireConfig,
    pub ifaces: Option<Vec<String>>,
    pub hostname: String,
    pub peers_file: Option<String>,
    /// `OMX_IPMAP`: IP addresses of peers to omx boards (`ipmap`).
    pub ip_map_file: Option<String>,
    pub rndv_threshold: u32,
    pub resends_max: u32,
    pub zombie_max: usize,
    pub not_acked_max: u16,
    /// Blocking waits busy-poll forever (`OMX_WAITSPIN=1`).
    pub wait_spin: bool,
    /// A signal that interrupts a blocking wait's sleep ends the wait like its timeout
    /// (`OMX_WAITINTR`); otherwise the wait goes back to sleep.
    pub wait_intr: bool,
    /// State dumps on a signal (`OMX_DEBUG_SIGNAL`: 0 off, 1 queues, 2 and up also
    /// each partner), on signal `OMX_DEBUG_SIGNAL_NUM`.
    pub debug_signal: u32,
    pub debug_signal_num: i32,
    /// Blocking waits busy-poll this long before sleeping (`OMX_WAITSPIN_US`): a reply
    /// that arrives within it avoids the cost of waking a sleeping CPU.
    pub wait_spin_for: Duration,
    /// Blocking waits spin longer, up to this, when recent waits ended within it
    /// (`OMX_WAITSPIN_MAX_US`; at or below `wait_spin_for`: a fixed budget).
    pub wait_spin_max: Duration,
    /// `OMX_CLOCK`: the engines' clock scales the CPU's time-stamp counter where the
    /// kernel's clocksource is it (crate::clock), else reads `clock_gettime` each time.
    pub counter_clock: bool,
    pub verbose: bool,
    pub disable_self: bool,
    pub disable_shared: bool,
    /// `OMX_STRIPE`: endpoints list the host's other boards in their CONNECT and pull
    /// large messages over every link both hosts share (docs/ARCHITECTURE.md "Several
    /// boards").
    pub stripe: bool,
    /// Local messages above this use the one-copy rendezvous (`OMX_SHARED_RNDV_THRESHOLD`).
    pub shared_rndv_threshold: u32,
    /// Cross-process copies (`process_vm_readv`) may be used (`OMX_SHARED_CMA=0` forces
    /// the two-copy path through the rings, as when the kernel refuses them).
    pub shared_cma: bool,
    /// Faults injected on the packet path (`OMX_FAULTS`, testing only).
    pub faults: Option<omx_transport::FaultConfig>,
    /// Wake-up policy of sleeping threads (`OMX_COALESCING`).
    pub coalescing: Coalescing,
    /// Its timer (`OMX_COALESCING_US`).
    pub coalescing_delay: Duration,
    /// Receive-copy offload settings (`OMX_COPY_*`).
    pub copy: crate::copy::CopyConfig,
    /// Bytes of each shared-memory ring (one per sending endpoint) (`OMX_SHARED_RING_KB`).
    pub shared_ring_bytes: usize,
    /// Run the background progress thread (`OMX_PROGRESS_THREAD=0` disables it).
    pub progress_thread: bool,
    pub unexp_max_bytes: usize,
    pub rx_ring_bytes: usize,
    /// `OMX_TRANSPORT`: the network data path of endpoints.
    pub transport: Transport,
    /// `OMX_XDP_MODE`: where the XDP program runs.
    pub xdp_mode: omx_transport::xdp::XdpMode,
    /// `OMX_XDP_COPY_MTU`: the largest frames for which `auto` takes AF_XDP in copy mode.
    pub xdp_copy_mtu: u32,
    /// `OMX_DIRECT_RECV`: pull replies through a second socket (`0`, `1`, `placed`,
    /// `batched`). `1`: placed when pull replies carry at least
    /// [`DIRECT_RECV_MIN_REPLY`] bytes, where the copy saved outweighs the calls,
    /// batched below. Default: as `1` down to [`DIRECT_RECV_BATCHED_MIN_REPLY`], off
    /// below. The sizes are a board's own (see [`RuntimeConfig::direct_recv_for`]).
    pub direct_recv: Option<String>,
    /// When endpoints go through `omxd` instead of their own packet socket (`OMX_DAEMON`).
    pub daemon: DaemonUse,
    /// How long a closing endpoint keeps answering for what it sent and received
    /// (`OMX_CLOSE_LINGER_MS`, see `Endpoint::linger`).
    pub close_linger: Duration,
}

/// The network data path of an endpoint (`OMX_TRANSPORT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// AF_PACKET sockets with an mmap receive ring.
    Packet,
    /// AF_XDP (copy or zero-copy, whichever the driver offers), else packet sockets.
    Xdp,
    /// What wins here: AF_XDP zero-copy where the driver offers it; else AF_XDP in
    /// copy mode on small frames (MTU up to `OMX_XDP_COPY_MTU`, where it beat the packet
    /// ring on veth: docs/PERFORMANCE.md, "AF_XDP"); else packet sockets.
    Auto,
}

impl Transport {
    /// The AF_XDP binds to try, in order, for a board whose frames are at most `mtu`
    /// bytes (`true`: zero-copy only); none left means packet sockets.
    pub fn xdp_binds(self, mtu: u32, copy_mtu_max: u32) -> &'static [bool] {
        match self {
            Transport::Packet => &[],
            Transport::Xdp => &[false],
            Transport::Auto if mtu <= copy_mtu_max => &[true, false],
            Transport::Auto => &[true],
        }
    }
}

/// Whether endpoints are opened through the privileged `omxd` (see `daemon`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DaemonUse {
    /// Only when this process may not open packet sockets (no CAP_NET_RAW).
    Auto,
    Always,
    Never,
}

/// `OMX_FATAL_ERRORS` (or MX's `MX_ERRORS_ARE_FATAL`, unless `OMX_IGNORE_MX_ENV`):
/// whether the default error handler ends the process (default true). Read on its own
/// by `mx_init`, before the runtime exists.
pub fn fatal_errors_from_env() -> bool {
    flag("OMX_FATAL_ERRORS")
}

/// The directory of the per-board state (`OMX_STATE_DIR`).
pub fn state_dir() -> std::path::PathBuf {
    text("OMX_STATE_DIR").unwrap_or_default().into()
}

pub fn system_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl RuntimeConfig {
    /// Binds an AF_XDP socket on `iface` for `filter` as `OMX_TRANSPORT` asks (the binds
    /// of `Transport::xdp_binds`, in order): the socket and whether it runs zero-copy,
    /// or the last refusal (`Unsupported` when no bind is asked for).
    pub fn open_xdp(
        &self,
        iface: &omx_transport::Interface,
        filter: &omx_transport::EndpointFilter,
    ) -> std::io::Result<(omx_transport::PacketSocket, bool)> {
        let mut last = Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "AF_XDP not asked for",
        ));
        for &zero_copy in self.transport.xdp_binds(iface.mtu, self.xdp_copy_mtu) {
            let opts = omx_transport::xdp::XdpOptions {
                mode: self.xdp_mode,
                rx_bytes: self.rx_ring_bytes,
                zero_copy,
                ..omx_transport::xdp::XdpOptions::default()
            };
            match omx_transport::PacketSocket::open_xdp(iface, self.wire.ethertype, &opts, filter) {
                Ok(s) => return Ok((s, zero_copy)),
                Err(e) => last = Err(e),
            }
        }
        last
    }

    /// The largest send buffered at post time whatever path it takes (MX's
    /// `MX_COPY_SEND_MAX`; see `EngineConfig::copy_send_max`): larger local sends are
    /// read in place by the receiver, so their buffer stays lent until they complete.
    pub fn copy_send_max(&self) -> u32 {
        let local_paths = !(self.disable_self && self.disable_shared);
        self.engine_config().copy_send_max(&self.wire, local_paths)
    }

    pub fn from_env() -> Self {
        let shared_ring_bytes =
            (num("OMX_SHARED_RING_KB").clamp(64, 16384) as usize * 1024).next_power_of_two();
        // An eager message is one ring record: larger ones would never fit and wait forever.
        let eager_record_max = omx_transport::shm::max_record_for_ring(shared_ring_bytes)
            - omx_wire::LOCAL_EAGER_HEADER;
        let shared_rndv_threshold = num("OMX_SHARED_RNDV_THRESHOLD")
            .clamp(0, 1 << 20)
            .min(eager_record_max as i64) as u32;
        let checksum = flag("OMX_CHECKSUM");
        let wire = match text("OMX_WIRE").as_deref() {
            Some("mx") | Some("mx-compat") => {
                if checksum && flag("OMX_VERBOSE") {
                    crate::say!(
                        "OMX_CHECKSUM ignored: MX-wire-compatible frames have no room for a checksum"
                    );
                }
                WireConfig::mx_compat()
            }
            // A cap: each board uses its own MTU up to it.
            _ => WireConfig::native_checksummed(
                num("OMX_MTU").clamp(i64::from(NATIVE_MTU_MIN), 65535) as u32,
                checksum,
            ),
        };
        let mut wire = wire;
        if let Some((t, _)) = settings::lookup("OMX_ETHERTYPE") {
            let t = t.trim_start_matches("0x");
            if let Ok(v) = u16::from_str_radix(t, 16) {
                if wire.mode == omx_wire::WireMode::Native {
                    wire.ethertype = v;
                }
            }
        }
        // Extensions offered to peers (each used only with peers that offer it too).
        let offered = match text("OMX_WIRE_EXTENSIONS").map(|v| (Extensions::parse(&v), v)) {
            None => Extensions::ALL,
            Some((Some(e), _)) => e,
            Some((None, v)) => {
                crate::say!(
                    "OMX_WIRE_EXTENSIONS={v} ignored: not 'all', 'none' or a list of {}",
                    Extensions::ALL
                );
                Extensions::ALL
            }
        };
        // Whether trailers are wanted is OMX_CHECKSUM's to say.
        let offered = offered.union(Extensions::CHECKSUM_WANTED);
        wire.extensions = wire.extensions.intersection(offered);
        if !flag("OMX_BUNDLE") {
            wire.extensions = wire.extensions.without(Extensions::BUNDLE);
        }
        if !wire.uses(Extensions::CHECKSUM) {
            wire = wire.with_checksum(false);
        }
        for notice in settings::inert_notices() {
            crate::say!("{notice}");
        }
        let spin_us = num("OMX_WAITSPIN_US").max(0) as u64;
        RuntimeConfig {
            wire,
            ifaces: text("OMX_IFACES")
                .map(|s| omx_transport::parse_iface_list(&s))
                .filter(|l| !l.is_empty()),
            hostname: text("OMX_HOSTNAME").unwrap_or_else(system_hostname),
            peers_file: text("OMX_PEERS_FILE"),
            ip_map_file: text("OMX_IPMAP"),
            rndv_threshold: num("OMX_RNDV_THRESHOLD").clamp(128, u32::MAX as i64) as u32,
            resends_max: num("OMX_RESENDS_MAX").max(1) as u32,
            zombie_max: num("OMX_ZOMBIE_SEND").max(0) as usize,
            not_acked_max: num("OMX_NOTACKED_MAX").clamp(1, 8191) as u16,
            wait_spin: flag("OMX_WAITSPIN"),
            wait_intr: flag("OMX_WAITINTR"),
            debug_signal: num("OMX_DEBUG_SIGNAL").clamp(0, u32::MAX as i64) as u32,
            debug_signal_num: num("OMX_DEBUG_SIGNAL_NUM") as i32,
            wait_spin_for: Duration::from_micros(spin_us),
            wait_spin_max: Duration::from_micros(num("OMX_WAITSPIN_MAX_US").max(0) as u64),
            counter_clock: match text("OMX_CLOCK").as_deref().map(str::trim) {
                Some("kernel") => false,
                Some("auto") | None => true,
                Some(v) => {
                    crate::say!("OMX_CLOCK={v} ignored: not 'auto' or 'kernel'");
                    true
                }
            },
            verbose: flag("OMX_VERBOSE"),
            disable_self: flag("OMX_DISABLE_SELF"),
            disable_shared: flag("OMX_DISABLE_SHARED"),
            stripe: flag("OMX_STRIPE"),
            shared_rndv_threshold,
            shared_cma: flag("OMX_SHARED_CMA"),
            shared_ring_bytes,
            faults: text("OMX_FAULTS").and_then(|s| match omx_transport::FaultConfig::parse(&s) {
                Ok(c) if c.is_active() => Some(c),
                Ok(_) => None,
                Err(e) => {
                    crate::say!("OMX_FAULTS ignored: {e}");
                    None
                }
            }),
            coalescing: match text("OMX_COALESCING").as_deref().map(str::trim) {
                Some("off") => Coalescing::Off,
                Some("timer") => Coalescing::Timer,
                Some("stream") => Coalescing::Stream,
                Some("marked") => Coalescing::Marked,
                _ => DEFAULT_COALESCING,
            },
            coalescing_delay: Duration::from_micros(
                num("OMX_COALESCING_US").clamp(1, 1_000_000) as u64
            ),
            copy: crate::copy::CopyConfig {
                mode: match text("OMX_COPY_OFFLOAD").as_deref().map(str::trim) {
                    Some("0") | Some("off") => crate::copy::OffloadMode::Off,
                    Some("1") | Some("on") => crate::copy::OffloadMode::On,
                    _ => crate::copy::OffloadMode::Auto,
                },
                // Unset (or empty): derived from the start-up measurement.
                min_frag: set_num("OMX_COPY_MIN_FRAG").map(|v| v.max(0) as usize),
                min_msg: set_num("OMX_COPY_MIN_MSG").map(|v| v.clamp(0, u32::MAX as i64) as u32),
                sync_min: set_num("OMX_COPY_SYNC_MIN").map(|v| v.max(0) as usize),
                cpu: text("OMX_COPY_CPU").and_then(|v| v.trim().parse().ok()),
                service: match text("OMX_COPY_STACK").as_deref().map(str::trim) {
                    Some("0") | Some("off") => crate::copy::ServiceUse::Off,
                    Some("1") | Some("on") => crate::copy::ServiceUse::On,
                    _ => crate::copy::ServiceUse::Auto,
                },
            },
            progress_thread: flag("OMX_PROGRESS_THREAD"),
            unexp_max_bytes: num("OMX_UNEXP_MAX").max(0) as usize,
            rx_ring_bytes: num("OMX_RX_RING_KB").max(0) as usize * 1024,
            direct_recv: text("OMX_DIRECT_RECV"),
            transport: match text("OMX_TRANSPORT").as_deref().map(str::trim) {
                Some("xdp") => Transport::Xdp,
                Some("auto") => Transport::Auto,
                _ => Transport::Packet,
            },
            xdp_mode: text("OMX_XDP_MODE")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_default(),
            xdp_copy_mtu: num("OMX_XDP_COPY_MTU").clamp(0, u32::MAX as i64) as u32,
            close_linger: Duration::from_millis(num("OMX_CLOSE_LINGER_MS").clamp(0, 600_000) as u64),
            daemon: match text("OMX_DAEMON").as_deref().map(str::trim) {
                Some("1") | Some("always") => DaemonUse::Always,
                Some("0") | Some("never") => DaemonUse::Never,
                _ => DaemonUse::Auto,
            },
        }
    }

    /// Smallest interface MTU a board needs: the native floor, or the MX-wire
    /// layout's fixed frame size.
    pub fn min_board_mtu(&self) -> u32 {
        match self.wire.mode {
            omx_wire::WireMode::Native => NATIVE_MTU_MIN,
            omx_wire::WireMode::MxCompat => self.wire.mtu,
        }
    }

    /// The frame sizes of a board whose interface has MTU `iface_mtu`: its own MTU up
    /// to the `OMX_MTU` cap (native), or the MX-wire layout's.
    pub fn board_wire(&self, iface_mtu: u32) -> WireConfig {
        self.wire
            .with_mtu(iface_mtu.min(self.wire.mtu).max(NATIVE_MTU_MIN))
    }

    /// How a board with frame sizes `wire` receives pull replies (`OMX_DIRECT_RECV`).
    pub fn direct_recv_for(&self, wire: &WireConfig) -> DirectRecv {
        match self.direct_recv.as_deref().map(str::trim) {
            Some("placed") => DirectRecv::Placed,
            Some("batched") => DirectRecv::Batched,
            Some(v) if atoi(v) == 0 => DirectRecv::Off,
            _ if wire.pull_reply_max >= DIRECT_RECV_MIN_REPLY => DirectRecv::Placed,
            Some(_) => DirectRecv::Batched,
            None if wire.pull_reply_max >= DIRECT_RECV_BATCHED_MIN_REPLY => DirectRecv::Batched,
            None => DirectRecv::Off,
        }
    }

    /// The engine configuration at the `OMX_MTU` cap.
    pub fn engine_config(&self) -> EngineConfig {
        self.engine_config_for(self.wire)
    }

    /// The engine configuration of an endpoint on a board with frame sizes `wire`.
    pub fn engine_config_for(&self, wire: WireConfig) -> EngineConfig {
        let mut e = EngineConfig::new(wire);
        e.rndv_threshold = self.rndv_threshold;
        e.resends_max = self.resends_max;
        e.zombie_max = self.zombie_max;
        e.not_acked_max = self.not_acked_max;
        e.unexp_max_bytes = self.unexp_max_bytes;
        e.shared_rndv_threshold = self.shared_rndv_threshold;
        e.self_enabled = !self.disable_self;
        if let Some(v) = text("OMX_PULL_BLOCKS") {
            e.pull_blocks_outstanding = atoi(&v).clamp(1, 64) as u32;
        } else if self.wire.mode == omx_wire::WireMode::Native {
            // The native mode's deeper pipeline: more blocks in flight keep the link busy
            // while completed blocks are being copied and re-requested.
            e.pull_blocks_outstanding = NATIVE_PULL_BLOCKS;
        }
        e.partners_max = num("OMX_PARTNERS_MAX").clamp(1, 1 << 20) as usize;
        e.resend_delay = num("OMX_RESEND_DELAY_MS").max(1) as u64 * NS_PER_MS;
        e.pull_resend_delay = num("OMX_PULL_RESEND_DELAY_MS").max(1) as u64 * NS_PER_MS;
        // Floors of the measured timeouts (the delays above are their caps).
        e.rto_min = num("OMX_RTO_MIN_US").max(1) as u64 * 1_000;
        e.pull_rto_min = num("OMX_PULL_RTO_MIN_US").max(1) as u64 * 1_000;
        e
    }
}

#[cfg(test)]
mod tests {
    use super::Transport;

    #[test]
    fn auto_tries_zero_copy_then_copy_mode_only_on_small_frames() {
        assert_eq!(Transport::Packet.xdp_binds(1500, 1500), &[] as &[bool]);
        assert_eq!(Transport::Xdp.xdp_binds(9000, 1500), &[false]);
        assert_eq!(Transport::Auto.xdp_binds(1500, 1500), &[true, false]);
        assert_eq!(Transport::Auto.xdp_binds(3498, 1500), &[true]);
        assert_eq!(Transport::Auto.xdp_binds(3498, 0), &[true]);
    }
}
