//! An open endpoint: its engine, packet socket and memory, driven by whichever thread
//! needs progress (a waiting application thread first, else the background progress
//! thread), so retransmissions, acks and pulls move while the application computes.

mod api;
mod completions;
mod direct_rx;
mod housekeeping;
mod open;
mod progress;
mod rx;
mod sleep;
mod spin;
mod tx;

use completions::Completions;
pub use completions::RequestInfo;

/// Whether a blocking wait spins before it sleeps ([`Endpoint::wait_with`],
/// [`Endpoint::wait_watching_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spin {
    /// The runtime's adaptive spin (`OMX_WAITSPIN_US`, longer to cover recent waits),
    /// then a sleep: a reply that comes within microseconds costs no wake-up.
    Adaptive,
    /// Sleep at once (after one progress pass): for waits the caller knows to last
    /// longer than a wake-up, such as the next message of a bulk stream, which comes
    /// at the pace of the peer's pulls; spinning through them takes the CPU from the
    /// peer when the two share the machine. Copies on the copy thread still keep the
    /// wait polling (nothing wakes a sleep when they end), `OMX_WAITSPIN=1` still
    /// spins, and the wait's duration does not feed the adaptive spin.
    Skip,
}

/// [`Endpoint::wait_or_signal`] was ended by a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupted;

/// How [`Endpoint::wait_watching`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchEnd {
    /// The caller's condition holds.
    Ready,
    /// One of the caller's descriptors is ready.
    Watched,
    /// A signal interrupted the sleep (`EINTR`).
    Interrupted,
    /// The timeout passed (or `wakeup`, or the endpoint closes).
    TimedOut,
}
use housekeeping::Upkeep;
use progress::{Activity, UnexpectedSlot};
use rx::Inbound;
use sleep::Wake;
use tx::Outbound;

use crate::copy::Copier;
use crate::local::LocalChannel;
use crate::memory::MemRegistry;
use crate::registry::LockFile;
use crate::runtime::{Board, Runtime};
use omx_proto::*;
use omx_transport::{DirectRx, FaultInjector, PacketSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
// The endpoint lock: taken several times per message, and poisoning (which std's
// lock checks on every acquire and release) is ignored here anyway.
type CoreLock = parking_lot::Mutex<Core>;
type CoreGuard<'a> = parking_lot::MutexGuard<'a, Core>;
use std::thread::JoinHandle;
use std::time::Instant;

#[derive(Debug)]
pub enum Error {
    NoSuchBoard,
    /// The requested endpoint index is taken (or all are, for "any").
    Busy,
    /// An endpoint index beyond the range (or reserved by `omxd`).
    BadEndpointIndex,
    /// More than 256 segments.
    TooManySegments,
    /// A segment with bytes but a null pointer.
    NullSegment,
    /// Segments adding up to more than 4 GiB (MX lengths are 32-bit).
    MessageTooLong,
    /// A file or process segment that cannot be used (checked when posting).
    Segment(crate::memory::SegmentError),
    Engine(EngineError),
    Io(std::io::Error),
    Timeout,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoSuchBoard => write!(f, "no such board"),
            Error::Busy => write!(f, "endpoint busy"),
            Error::BadEndpointIndex => write!(f, "endpoint index out of range or reserved"),
            Error::TooManySegments => write!(f, "more than 256 segments"),
            Error::NullSegment => write!(f, "null segment pointer"),
            Error::MessageTooLong => write!(f, "message longer than 4 GiB"),
            Error::Segment(e) => write!(f, "{e}"),
            Error::Engine(e) => write!(f, "{e}"),
            Error::Io(e) => write!(f, "{e}"),
            Error::Timeout => write!(f, "timed out"),
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::memory::SegmentError> for Error {
    fn from(e: crate::memory::SegmentError) -> Self {
        Error::Segment(e)
    }
}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Self {
        Error::Engine(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

const RX_BATCH: usize = 64;

/// Received frames are copied into chunks of this size (a retained frame keeps at most
/// one chunk alive).
const RX_POOL_CHUNK: usize = 256 * 1024;

/// The endpoint's state under its lock, in parts owned by the steps that use them.
struct Core {
    engine: Engine,
    sock: PacketSocket,
    /// `OMX_STRIPE`: one socket per other board of the host (path `i` is `stripes[i - 1]`,
    /// the engine's `stripe_boards` in the same order), for striped pulls and replies.
    stripes: Vec<PacketSocket>,
    /// This endpoint's pull replies, received straight into place (`OMX_DIRECT_RECV`).
    direct_rx: Option<DirectRx>,
    mem: MemRegistry,
    /// Receive copies handed to the copy engine.
    copier: Copier,
    /// Shared-memory channel to the other endpoints of this host (none when
    /// `OMX_DISABLE_SHARED=1` or when it could not be set up).
    local: Option<LocalChannel>,
    /// `OMX_FAULTS`: faults injected on this endpoint's packet path.
    faults: Option<FaultInjector>,
    completions: Completions,
    inbound: Inbound,
    outbound: Outbound,
    upkeep: Upkeep,
    unexpected: UnexpectedSlot,
    /// Earliest engine, discovery or housekeeping deadline (runtime ns).
    timer_at: Time,
    /// The endpoint index lock (`None` when `omxd` holds it for us).
    _index_lock: Option<LockFile>,
}

impl Core {
    /// Earliest deadline of the engine, discovery or housekeeping (runtime ns).
    fn next_deadline(&self) -> Time {
        let mut next = self
            .engine
            .poll_timeout()
            .unwrap_or(u64::MAX)
            .min(self.upkeep.next_publish);
        if let Some(d) = &self.upkeep.discovery {
            next = next.min(d.deadline());
        }
        next
    }
}

/// The endpoint state shared by the application threads and the progress thread.
struct EndpointInner {
    rt: Arc<Runtime>,
    board: Arc<Board>,
    index: u8,
    session: u32,
    core: CoreLock,
    /// Sleeping threads and what wakes them.
    wake: Wake,
    /// Who drives progress: application threads, or the progress thread.
    activity: Activity,
}

/// The application's unexpected-message handler; returns true to discard.
pub type UnexpectedHandler = Box<dyn FnMut(&UnexpectedInfo) -> bool + Send>;

pub struct Endpoint {
    inner: Arc<EndpointInner>,
    progress: Option<JoinHandle<()>>,
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most 4 bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr() as *mut libc::c_void, 4, 0) };
    if n == 4 {
        u32::from_ne_bytes(b)
    } else {
        (std::process::id() ^ Instant::now().elapsed().subsec_nanos()).rotate_left(13)
    }
}

impl Endpoint {
    pub fn index(&self) -> u8 {
        self.inner.index
    }

    pub fn board(&self) -> &Arc<Board> {
        &self.inner.board
    }

    pub fn session(&self) -> u32 {
        self.inner.session
    }

    /// Bounds this endpoint's unexpected-message bytes (see the engine's doc).
    pub fn set_unexpected_max(&self, bytes: usize) {
        self.inner.app_lock().engine.set_unexpected_max(bytes);
    }

    /// Bounds the eager sends that complete before their ack (see the engine's doc);
    /// 0: a completed send is one the partner has.
    pub fn set_zombie_max(&self, sends: usize) {
        self.inner.app_lock().engine.set_zombie_max(sends);
    }

    /// The application key this endpoint was opened with.
    pub fn key(&self) -> u32 {
        self.inner.lock().engine.params().key
    }

    /// Forgets a partner locally (MX `mx_disconnect`): its pending operations fail.
    pub fn disconnect(&self, p: PartnerId) {
        let mut core = self.inner.app_lock();
        let now = self.inner.rt.now();
        core.engine.disconnect(now, p);
        self.inner.post_drain(&mut core, now, true);
    }

    /// Whether `req` completed (its completion is left for test/wait).
    pub fn peek_done(&self, req: ReqId) -> bool {
        let core = self.inner.app_lock();
        let core = self.inner.progress_guard(core);
        core.completions.contains(req)
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.inner.rt
    }

    // Read-only accessors make no progress, so they do not count as application calls
    // (which hold the progress thread back): an application that only polls its
    // counters still has its frames processed.

    pub fn counters(&self) -> Counters {
        self.inner.lock().engine.counters.clone()
    }

    /// The runtime's own counters (copy offload, sleeps and wake-ups, injected
    /// faults), as `omx_counters` shows them after the protocol's.
    pub fn runtime_counters(&self) -> Vec<(String, u64)> {
        let core = self.inner.lock();
        self.inner.runtime_counters(&core)
    }

    pub fn stats(&self) -> QueueStats {
        self.inner.lock().engine.stats()
    }

    /// Faults injected so far on this endpoint's packet path (`OMX_FAULTS`), if any.
    pub fn fault_stats(&self) -> Option<omx_transport::FaultStats> {
        self.inner.lock().faults.as_ref().map(|f| f.stats)
    }

    /// Remote nic id, endpoint index and session of a partner.
    pub fn partner_addr(&self, p: PartnerId) -> Option<(NicId, u8, Option<u32>)> {
        self.inner.app_lock().engine.partner_addr(p)
    }
}

impl EndpointInner {
    fn lock(&self) -> CoreGuard<'_> {
        self.core.lock()
    }

    /// Lock taken on behalf of the application: records that it is active.
    fn app_lock(&self) -> CoreGuard<'_> {
        // A plain load and store, not a locked increment (tens of cycles per call):
        // the progress thread only looks for a change, and an increment lost to a
        // race between two threads at worst lets it run one pass early (harmless).
        let calls = self.activity.app_calls.load(Ordering::Relaxed);
        self.activity
            .app_calls
            .store(calls.wrapping_add(1), Ordering::Relaxed);
        self.lock()
    }

    /// Application lock plus the current time (one clock read for the whole call).
    fn app_lock_now(&self) -> (CoreGuard<'_>, Time) {
        let core = self.app_lock();
        (core, self.rt.now())
    }
}
