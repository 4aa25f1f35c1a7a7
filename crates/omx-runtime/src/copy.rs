//! Receive-copy offload. The receive-side copy of large messages (frame payload to the
//! user's buffer) is the protocol path's main cost; the original handed it to the
//! chipset's DMA engine (I/OAT) and a later design to a dedicated core. Here a copy
//! thread plays that engine: the protocol path submits a copy and moves on; each
//! endpoint counts its submissions, the thread publishes a monotonically increasing
//! completion count per endpoint, and a copy is reported done to the protocol engine
//! once the count passed its cookie (so only the receive's last copy is ever waited
//! for, and only when the application asks for it).
//!
//! Submissions that do not fit the queue are copied inline, so the frames held by
//! pending copies never exceed the queue depth, whatever the message size. Large
//! intra-node one-copy transfers can be split between the copy thread and the caller
//! (synchronous offload) to use two cores.
//!
//! [`CopyBackend`] is the seam for a hardware engine (Intel DSA, the successor of
//! I/OAT); only the thread backend ships, as it is the only one testable here.

use bytes::Bytes;
use omx_transport::cma::{self, RemoteIov};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Copies queued to the copy thread at most (bounds the frames they hold).
pub const QUEUE_DEPTH: usize = 512;
/// The copy thread polls this many times for more work before blocking (about 5 us
/// here: a poll of the channel costs about 27 ns).
const IDLE_POLLS: u32 = 200;

/// `OMX_COPY_OFFLOAD`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffloadMode {
    Off,
    On,
    /// Decided by a start-up measurement (cached per host).
    Auto,
}

#[derive(Clone, Debug)]
pub struct CopyConfig {
    pub mode: OffloadMode,
    /// Overrides of the thresholds the start-up measurement derives ([`Thresholds`]):
    /// `OMX_COPY_MIN_FRAG`, `OMX_COPY_MIN_MSG`, `OMX_COPY_SYNC_MIN`.
    pub min_frag: Option<usize>,
    pub min_msg: Option<u32>,
    pub sync_min: Option<usize>,
    /// Pin the copy thread to this CPU (`OMX_COPY_CPU`).
    pub cpu: Option<usize>,
    /// Whether offloaded copies go to the host's copy service (`OMX_COPY_STACK`).
    pub service: ServiceUse,
}

/// `OMX_COPY_STACK`: the stack's offloaded copies on `omx_copyd`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceUse {
    /// Always on the process's own copy thread.
    Off,
    /// On the service when one answers at start, else on the copy thread.
    Auto,
    /// As `Auto`, and a service that answers also turns `OMX_COPY_OFFLOAD=auto` on
    /// (the service has a core of its own; the measurement is about a copy thread
    /// sharing the application's).
    On,
}

/// When copies go to the copy engine, and why each limit is what it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Thresholds {
    /// Smallest frame payload worth offloading (the spec's `dmaasyncfragmin`).
    pub min_frag: usize,
    /// Smallest message whose copies are offloaded (the spec's `dmaasyncmin`).
    pub min_msg: u32,
    /// Intra-node one-copy transfers at least this long are split between the
    /// caller and the copy thread (the spec's `dmasyncmin`).
    pub sync_min: usize,
    /// One reason per limit, in the order above.
    pub why: [String; 3],
}

/// What a sleeping copy thread costs to wake here (a halted vCPU: about 30 us, see
/// `/docs/PERFORMANCE.md`); it idles-polls about 5 us first.
const WAKE_NS: f64 = 30_000.0;

impl Thresholds {
    /// The original's defaults (1 KiB, 64 KiB, 2 MiB), used when nothing is measured.
    pub fn spec_defaults() -> Thresholds {
        let why = || "default (offload off)".to_string();
        Thresholds {
            min_frag: 1024,
            min_msg: 65536,
            sync_min: 2 << 20,
            why: [why(), why(), why()],
        }
    }

    /// Limits derived from the start-up measurement: a frame is offloaded when
    /// submitting it costs under half of copying it (the receiving thread saves at
    /// least as much as it spends); a message when the copy time
    /// its frames save the receiving thread exceeds what waiting for its last copy
    /// can cost (one frame on the copy thread plus a wake-up); an intra-node copy is
    /// split when half of it takes longer than two wake-ups.
    pub fn derive(c: &Calibration) -> Thresholds {
        let chunk = CAL_CHUNK as f64;
        let per_byte = c.inline_ns / chunk;
        let pow2 =
            |x: f64, lo: usize, hi: usize| (x.ceil() as usize).next_power_of_two().clamp(lo, hi);
        let min_frag = pow2(2.0 * c.submit_ns / per_byte.max(1e-6), 256, 64 << 10);
        let saved = c.inline_ns - c.submit_ns;
        let (min_msg, msg_why) = if saved <= 0.0 {
            (
                u32::MAX,
                format!(
                    "never: submitting a frame ({:.0} ns) costs as much as copying it ({:.0} ns)",
                    c.submit_ns, c.inline_ns
                ),
            )
        } else {
            let frames = (c.offload_ns + WAKE_NS) / saved;
            let m = pow2(frames * chunk, 16 << 10, 16 << 20) as u32;
            (
                m,
                format!(
                    "{frames:.0} frames save {:.0} ns each, more than the last copy's wait \
                     ({:.0} ns on the copy thread + {:.0} ns wake-up)",
                    saved, c.offload_ns, WAKE_NS
                ),
            )
        };
        let sync_min = pow2(4.0 * WAKE_NS / per_byte.max(1e-6), 256 << 10, 64 << 20);
        Thresholds {
            min_frag,
            min_msg,
            sync_min,
            why: [
                format!(
                    "submitting ({:.0} ns) costs under half of copying from here \
                     ({:.3} ns/B)",
                    c.submit_ns, per_byte
                ),
                msg_why,
                format!(
                    "half of it copies ({:.3} ns/B) for longer than two wake-ups ({:.0} ns)",
                    per_byte,
                    2.0 * WAKE_NS
                ),
            ],
        }
    }

    /// The limits for `cfg`: overrides win, the rest derived from `cal` (or the
    /// original's defaults without one).
    pub fn resolve(cfg: &CopyConfig, cal: Option<&Calibration>) -> Thresholds {
        let mut t = cal.map_or_else(Thresholds::spec_defaults, Thresholds::derive);
        let set = |name: &str| format!("{name} (set)");
        if let Some(v) = cfg.min_frag {
            (t.min_frag, t.why[0]) = (v, set("OMX_COPY_MIN_FRAG"));
        }
        if let Some(v) = cfg.min_msg {
            (t.min_msg, t.why[1]) = (v, set("OMX_COPY_MIN_MSG"));
        }
        if let Some(v) = cfg.sync_min {
            (t.sync_min, t.why[2]) = (v, set("OMX_COPY_SYNC_MIN"));
        }
        t
    }
}

/// Whether copy offload runs for `cfg`, with the limits, in words (`omx_info -v`).
pub fn describe(cfg: &CopyConfig) -> Vec<String> {
    let cal = (cfg.mode != OffloadMode::Off).then(|| calibration(cfg.cpu));
    let state = match (cfg.mode, &cal) {
        (OffloadMode::Off, _) => "off (OMX_COPY_OFFLOAD=0)".to_string(),
        (OffloadMode::On, _) => "on (OMX_COPY_OFFLOAD=1)".to_string(),
        (OffloadMode::Auto, Some(c)) => format!(
            "{} (auto: {} CPUs; a frame copies in {:.0} ns, is submitted in {:.0} ns; \
             offload needs more than 2 CPUs and submitting under a third of copying)",
            if c.offload { "on" } else { "off" },
            c.cpus,
            c.inline_ns,
            c.submit_ns
        ),
        (OffloadMode::Auto, None) => unreachable!("measured when not off"),
    };
    let mut v = vec![format!("copy offload: {state}")];
    let t = Thresholds::resolve(cfg, cal.as_ref());
    for (name, value, why) in [
        ("OMX_COPY_MIN_FRAG", t.min_frag as u64, &t.why[0]),
        ("OMX_COPY_MIN_MSG", t.min_msg as u64, &t.why[1]),
        ("OMX_COPY_SYNC_MIN", t.sync_min as u64, &t.why[2]),
    ] {
        v.push(format!("  {name}={value}: {why}"));
    }
    v
}

/// Where a copy goes: address ranges of user memory (valid until the copy is reported).
pub type DstRanges = Vec<(usize, usize)>;

/// One copy for a backend.
pub enum CopyJob {
    /// A received payload into a receive buffer.
    Frame { src: Bytes, dst: DstRanges },
    /// Part of an intra-node one-copy transfer; `outcome` receives a [`CmaOutcome`].
    Cma {
        pid: u32,
        remote: Vec<RemoteIov>,
        offset: u64,
        local: DstRanges,
        len: usize,
        outcome: Arc<AtomicU8>,
    },
    /// An application's copy (`omx_memcpy_async`): `len` bytes at `src` to `dst`,
    /// which the caller checked do not overlap and keeps valid until it completes.
    Memory { src: usize, dst: usize, len: usize },
}

/// Result codes of a [`CopyJob::Cma`] (0 = still running).
pub mod cma_outcome {
    pub const PENDING: u8 = 0;
    pub const DONE: u8 = 1;
    pub const REFUSED: u8 = 2;
    pub const GONE: u8 = 3;
    pub const FAULT: u8 = 4;
}

/// Completion count of one submitter (an endpoint): the backend adds one per finished
/// job, in submission order.
#[derive(Default, Debug)]
pub struct Completions(AtomicU64);

impl Completions {
    pub fn load(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// One more job of this submitter finished (after its bytes are in place).
    pub(crate) fn add_one(&self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// A copy engine. Jobs of one submitter complete in submission order.
pub trait CopyBackend: Send + Sync {
    /// Queues `job`; gives it back when the engine is full (copy it inline then).
    fn submit(&self, done: &Arc<Completions>, job: CopyJob) -> Result<(), CopyJob>;
    /// Collects finished jobs (engines that report through shared memory need the
    /// submitter's threads to look; a thread backend reports by itself).
    fn progress(&self) {}
    fn name(&self) -> &'static str;
    /// Counters of the host's copy service, when this backend is it.
    fn service_counters(&self) -> Option<&crate::copy_service::stack::ServiceCounters> {
        None
    }
}

/// Performs a job on the calling thread.
pub fn run_job(job: CopyJob) {
    match job {
        CopyJob::Frame { src, dst } => {
            let mut at = 0usize;
            for (p, n) in dst {
                let n = n.min(src.len() - at);
                // SAFETY: the ranges are user memory lent to a pending receive, which
                // does not complete before this copy is reported.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(at), p as *mut u8, n) };
                at += n;
            }
        }
        CopyJob::Cma {
            pid,
            remote,
            offset,
            local,
            len,
            outcome,
        } => {
            let local: Vec<(*mut u8, usize)> =
                local.into_iter().map(|(p, n)| (p as *mut u8, n)).collect();
            // SAFETY: as for frames; the submitter waits for the outcome before it
            // reports the transfer.
            let r = unsafe { cma::read_from(pid, &remote, offset, &local, 0, len) };
            let code = match r {
                Ok(()) => cma_outcome::DONE,
                Err(cma::CmaError::PermissionDenied) => cma_outcome::REFUSED,
                Err(cma::CmaError::ProcessGone) => cma_outcome::GONE,
                Err(_) => cma_outcome::FAULT,
            };
            outcome.store(code, Ordering::Release);
        }
        CopyJob::Memory { src, dst, len } => {
            // SAFETY: the submitter checked the ranges (non-null, no overlap, no
            // wrap-around) and promised them valid until the copy is reported.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
        }
    }
}

/// The dedicated copy thread: a bounded lock-free queue in, completion counts out.
pub struct CopyThread {
    tx: SyncSender<(Arc<Completions>, CopyJob)>,
}

impl CopyThread {
    pub fn spawn(cpu: Option<usize>) -> std::io::Result<CopyThread> {
        let (tx, rx) = sync_channel::<(Arc<Completions>, CopyJob)>(QUEUE_DEPTH);
        std::thread::Builder::new()
            .name("omx-copy".into())
            .spawn(move || {
                if let Some(c) = cpu {
                    pin_to(c);
                }
                copy_loop(rx)
            })?;
        Ok(CopyThread { tx })
    }
}

fn copy_loop(rx: Receiver<(Arc<Completions>, CopyJob)>) {
    loop {
        let (done, job) = match rx.try_recv() {
            Ok(x) => x,
            Err(TryRecvError::Disconnected) => return,
            Err(TryRecvError::Empty) => {
                // Work comes in bursts (blocks of pull replies): poll briefly before
                // paying a wake-up on the next submission.
                let mut got = None;
                for _ in 0..IDLE_POLLS {
                    if let Ok(x) = rx.try_recv() {
                        got = Some(x);
                        break;
                    }
                    std::hint::spin_loop();
                }
                match got {
                    Some(x) => x,
                    None => match rx.recv() {
                        Ok(x) => x,
                        Err(_) => return,
                    },
                }
            }
        };
        run_job(job);
        done.add_one();
    }
}

impl CopyBackend for CopyThread {
    fn submit(&self, done: &Arc<Completions>, job: CopyJob) -> Result<(), CopyJob> {
        match self.tx.try_send((done.clone(), job)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full((_, j))) | Err(TrySendError::Disconnected((_, j))) => Err(j),
        }
    }

    fn name(&self) -> &'static str {
        "copy-thread"
    }
}

pub(crate) fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays within it for cpu < 1024.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu < 1024 {
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

/// The process's one copy thread, started on first use (by receive offload or by
/// `omx_memcpy_async`), pinned to `cpu` if given by its first user. `None` when no
/// thread can be started.
pub fn process_thread(cpu: Option<usize>) -> Option<Arc<CopyThread>> {
    static THREAD: OnceLock<Option<Arc<CopyThread>>> = OnceLock::new();
    THREAD
        .get_or_init(|| CopyThread::spawn(cpu).ok().map(Arc::new))
        .clone()
}

/// The process's copy engine for receive offload, when offload is enabled (after
/// the start-up measurement in `auto` mode). `None`: copies stay inline.
pub fn engine(cfg: &CopyConfig) -> Option<Arc<dyn CopyBackend>> {
    static ENGINE: OnceLock<Option<Arc<dyn CopyBackend>>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let service = (cfg.mode != OffloadMode::Off && cfg.service != ServiceUse::Off)
                .then(|| crate::copy_service::stack::ServiceBackend::connect(cfg.cpu))
                .flatten();
            let on = match cfg.mode {
                OffloadMode::Off => false,
                OffloadMode::On => true,
                OffloadMode::Auto => {
                    (cfg.service == ServiceUse::On && service.is_some())
                        || calibration(cfg.cpu).offload
                }
            };
            if !on {
                return None;
            }
            if let Some(s) = service {
                return Some(Arc::new(s) as Arc<dyn CopyBackend>);
            }
            process_thread(cfg.cpu).map(|t| t as Arc<dyn CopyBackend>)
        })
        .clone()
}

/// What the start-up measurement found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    /// Inline copy of one frame-sized chunk, ns.
    pub inline_ns: f64,
    /// Submitting it to the copy thread, ns (the protocol path's cost with offload).
    pub submit_ns: f64,
    /// Whole batch through the copy thread, ns per chunk (its throughput).
    pub offload_ns: f64,
    pub cpus: usize,
    pub offload: bool,
}

/// Chunk measured: a native MTU-9000 pull reply.
const CAL_CHUNK: usize = 8968;
const CAL_CHUNKS: usize = 256;

/// Measures inline copies against the copy thread for frame-sized chunks, once per
/// host (cached in the state directory; `OMX_COPY_RECALIBRATE=1` measures again).
/// Offload pays when submitting costs the protocol path well under a third of the copy
/// and a second CPU exists to run it.
pub fn calibration(cpu: Option<usize>) -> Calibration {
    static CAL: OnceLock<Calibration> = OnceLock::new();
    *CAL.get_or_init(|| {
        let path = cache_path(cpu);
        let again = crate::config::settings::flag("OMX_COPY_RECALIBRATE");
        if !again {
            if let Some(c) = std::fs::read_to_string(&path)
                .ok()
                .and_then(|s| parse_cal(&s))
            {
                return c;
            }
        }
        let c = measure(cpu);
        let _ = std::fs::write(
            &path,
            format!(
                "inline_ns {:.1}\nsubmit_ns {:.1}\noffload_ns {:.1}\ncpus {}\noffload {}\n",
                c.inline_ns, c.submit_ns, c.offload_ns, c.cpus, c.offload as u8
            ),
        );
        c
    })
}

/// Per user, and per copy-thread CPU when pinned (a copy thread sharing the
/// application's CPU measures very differently from one on its own).
fn cache_path(cpu: Option<usize>) -> std::path::PathBuf {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let pin = cpu.map_or(String::new(), |c| format!("-cpu{c}"));
    crate::config::state_dir().join(format!("omx-copy-calibration-{uid}{pin}"))
}

fn parse_cal(s: &str) -> Option<Calibration> {
    let get = |k: &str| -> Option<f64> {
        s.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().parse::<f64>().ok())
    };
    Some(Calibration {
        inline_ns: get("inline_ns ")?,
        submit_ns: get("submit_ns ")?,
        offload_ns: get("offload_ns ")?,
        cpus: get("cpus ")? as usize,
        offload: get("offload ")? != 0.0,
    })
}

/// Measured with the copy thread where it will run (`OMX_COPY_CPU`).
fn measure(cpu: Option<usize>) -> Calibration {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let src = Bytes::from(vec![7u8; CAL_CHUNK]);
    let mut dst = vec![0u8; CAL_CHUNK * CAL_CHUNKS];
    let base = dst.as_mut_ptr() as usize;
    let job = |i: usize| CopyJob::Frame {
        src: src.clone(),
        dst: vec![(base + i * CAL_CHUNK, CAL_CHUNK)],
    };
    // Warm both paths, then take the best of a few rounds (noise only adds time).
    let mut inline_ns = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for i in 0..CAL_CHUNKS {
            run_job(job(i));
        }
        inline_ns = inline_ns.min(t.elapsed().as_nanos() as f64 / CAL_CHUNKS as f64);
    }
    let (mut submit_ns, mut offload_ns) = (f64::MAX, f64::MAX);
    if let Ok(th) = CopyThread::spawn(cpu) {
        let done = Arc::new(Completions::default());
        let mut submitted = 0u64;
        for _ in 0..5 {
            let t = Instant::now();
            for i in 0..CAL_CHUNKS {
                match th.submit(&done, job(i)) {
                    Ok(()) => submitted += 1,
                    Err(j) => run_job(j),
                }
            }
            let s = t.elapsed().as_nanos() as f64;
            while done.load() < submitted {
                std::hint::spin_loop();
            }
            submit_ns = submit_ns.min(s / CAL_CHUNKS as f64);
            offload_ns = offload_ns.min(t.elapsed().as_nanos() as f64 / CAL_CHUNKS as f64);
        }
    }
    drop(dst);
    Calibration {
        inline_ns,
        submit_ns,
        offload_ns,
        cpus,
        // The copy thread needs a core of its own: with two, the application and
        // progress threads (and a local peer) already compete for them.
        offload: cpus > 2 && submit_ns * 3.0 < inline_ns,
    }
}

/// An endpoint's view of the copy engine: cookies of its pending copies.
pub struct Copier {
    pub cfg: CopyConfig,
    /// The limits in force (measured, unless overridden).
    pub limits: Thresholds,
    backend: Option<Arc<dyn CopyBackend>>,
    done: Arc<Completions>,
    submitted: u64,
    pending: std::collections::VecDeque<(u64, omx_proto::CopyId)>,
    /// Copies handed to the backend and copies done inline because it was full.
    pub offloaded: u64,
    pub inline_full: u64,
    /// Pull replies copied inline from the receive path because their frame could
    /// not be held for the backend (holding more ring slots could stall the ring, or
    /// the frame was not in a slot).
    pub inline_unheld: u64,
}

impl Copier {
    pub fn new(cfg: CopyConfig) -> Copier {
        let backend = engine(&cfg);
        // The measurement ran (or was read from the cache) if offload is on.
        let cal = backend.as_ref().map(|_| calibration(cfg.cpu));
        Copier {
            limits: Thresholds::resolve(&cfg, cal.as_ref()),
            cfg,
            backend,
            done: Arc::new(Completions::default()),
            submitted: 0,
            pending: Default::default(),
            offloaded: 0,
            inline_full: 0,
            inline_unheld: 0,
        }
    }

    pub fn backend(&self) -> Option<&Arc<dyn CopyBackend>> {
        self.backend.as_ref()
    }

    /// Copies in flight on the backend.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Whether a copy of `len` bytes of a `msg_length`-byte message goes to the backend.
    pub fn offloads(&self, len: usize, msg_length: u32) -> bool {
        self.backend.is_some() && len >= self.limits.min_frag && msg_length >= self.limits.min_msg
    }

    /// Hands a copy to the backend; `Err(job)` when it is full or there is none (copy
    /// inline then).
    pub fn submit(&mut self, id: omx_proto::CopyId, job: CopyJob) -> Result<(), CopyJob> {
        let Some(b) = self.backend.as_ref() else {
            return Err(job);
        };
        match b.submit(&self.done, job) {
            Ok(()) => {
                self.submitted += 1;
                self.offloaded += 1;
                self.pending.push_back((self.submitted, id));
                Ok(())
            }
            Err(j) => {
                self.inline_full += 1;
                Err(j)
            }
        }
    }

    /// Copies finished since the last call, oldest first.
    pub fn reap(&mut self, mut f: impl FnMut(omx_proto::CopyId)) {
        if self.pending.is_empty() {
            return;
        }
        if let Some(b) = &self.backend {
            b.progress();
        }
        let c = self.done.load();
        while self.pending.front().is_some_and(|&(k, _)| k <= c) {
            let (_, id) = self.pending.pop_front().expect("checked");
            f(id);
        }
    }

    /// Waits until every submitted copy is finished (a receive failed while copies
    /// into its buffer were in flight; the endpoint closes).
    pub fn wait_all(&mut self, f: impl FnMut(omx_proto::CopyId)) {
        while self.done.load() < self.submitted {
            if let Some(b) = &self.backend {
                b.progress();
            }
            std::hint::spin_loop();
        }
        self.reap(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_backend_completes_in_order_and_copies_every_byte() {
        let th = CopyThread::spawn(None).unwrap();
        let done = Arc::new(Completions::default());
        let mut dst = vec![0u8; 64 * 1000];
        let base = dst.as_mut_ptr() as usize;
        let mut n = 0;
        for i in 0..64usize {
            let src = Bytes::from(vec![i as u8; 1000]);
            // Two ranges per job, to cover split destinations.
            let job = CopyJob::Frame {
                src,
                dst: vec![(base + i * 1000, 300), (base + i * 1000 + 300, 700)],
            };
            match th.submit(&done, job) {
                Ok(()) => n += 1,
                Err(j) => {
                    run_job(j);
                }
            }
        }
        while done.load() < n {
            std::hint::spin_loop();
        }
        for i in 0..64 {
            assert!(dst[i * 1000..(i + 1) * 1000].iter().all(|&b| b == i as u8));
        }
    }

    #[test]
    fn a_full_queue_gives_the_job_back() {
        let (tx, _rx) = sync_channel::<(Arc<Completions>, CopyJob)>(1);
        let th = CopyThread { tx };
        let done = Arc::new(Completions::default());
        let job = || CopyJob::Frame {
            src: Bytes::new(),
            dst: vec![],
        };
        assert!(th.submit(&done, job()).is_ok());
        assert!(th.submit(&done, job()).is_err(), "nobody drains the queue");
    }

    #[test]
    fn calibration_cache_round_trips() {
        let s = "inline_ns 1200.5\nsubmit_ns 80.0\noffload_ns 900.0\ncpus 2\noffload 1\n";
        let c = parse_cal(s).unwrap();
        assert_eq!(
            (c.inline_ns, c.submit_ns, c.cpus, c.offload),
            (1200.5, 80.0, 2, true)
        );
        assert!(parse_cal("garbage").is_none());
    }

    #[test]
    fn thresholds_follow_the_measurement_and_overrides_win() {
        let cal = |inline_ns: f64, submit_ns: f64| Calibration {
            inline_ns,
            submit_ns,
            offload_ns: inline_ns,
            cpus: 4,
            offload: true,
        };
        // Cheap submissions: small frames pay; slow copies: smaller splits pay.
        let fast_submit = Thresholds::derive(&cal(3000.0, 60.0));
        let slow_submit = Thresholds::derive(&cal(3000.0, 1500.0));
        assert!(fast_submit.min_frag < slow_submit.min_frag);
        assert!(fast_submit.min_msg < slow_submit.min_msg);
        let slow_copy = Thresholds::derive(&cal(6000.0, 60.0));
        assert!(slow_copy.sync_min < fast_submit.sync_min);
        for t in [&fast_submit, &slow_submit, &slow_copy] {
            assert!(t.min_frag.is_power_of_two() && t.sync_min.is_power_of_two());
            assert!(t.min_frag <= CAL_CHUNK.next_power_of_two());
        }
        // Submitting costs more than copying: messages are never offloaded.
        assert_eq!(Thresholds::derive(&cal(100.0, 200.0)).min_msg, u32::MAX);
        let cfg = CopyConfig {
            mode: OffloadMode::On,
            min_frag: Some(0),
            min_msg: None,
            sync_min: Some(12345),
            cpu: None,
            service: ServiceUse::Off,
        };
        let t = Thresholds::resolve(&cfg, Some(&cal(3000.0, 60.0)));
        assert_eq!(
            (t.min_frag, t.min_msg, t.sync_min),
            (0, fast_submit.min_msg, 12345)
        );
        assert!(t.why[0].contains("OMX_COPY_MIN_FRAG") && t.why[2].contains("set"));
        assert_eq!(Thresholds::resolve(&cfg, None).min_msg, 65536);
    }

    #[test]
    fn cma_job_reports_its_outcome() {
        let src = vec![5u8; 10_000];
        let mut dst = vec![0u8; 10_000];
        let outcome = Arc::new(AtomicU8::new(cma_outcome::PENDING));
        run_job(CopyJob::Cma {
            pid: std::process::id(),
            remote: vec![RemoteIov {
                addr: src.as_ptr() as u64,
                len: 10_000,
            }],
            offset: 0,
            local: vec![(dst.as_mut_ptr() as usize, 10_000)],
            len: 10_000,
            outcome: outcome.clone(),
        });
        assert_eq!(outcome.load(Ordering::Acquire), cma_outcome::DONE);
        assert_eq!(dst, src);
    }
}
