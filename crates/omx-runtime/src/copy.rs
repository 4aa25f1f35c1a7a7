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
    /// Smallest frame payload worth offloading (`OMX_COPY_MIN_FRAG`, the spec's
    /// `dmaasyncfragmin`, 1024).
    pub min_frag: usize,
    /// Smallest message whose copies are offloaded (`OMX_COPY_MIN_MSG`, the spec's
    /// `dmaasyncmin`, 65536).
    pub min_msg: u32,
    /// Intra-node one-copy transfers at least this long are split between the caller
    /// and the copy thread (`OMX_COPY_SYNC_MIN`, the spec's `dmasyncmin`, 2 MiB).
    pub sync_min: usize,
    /// Pin the copy thread to this CPU (`OMX_COPY_CPU`).
    pub cpu: Option<usize>,
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
}

/// A copy engine. Jobs of one submitter complete in submission order.
pub trait CopyBackend: Send + Sync {
    /// Queues `job`; gives it back when the engine is full (copy it inline then).
    fn submit(&self, done: &Arc<Completions>, job: CopyJob) -> Result<(), CopyJob>;
    fn name(&self) -> &'static str;
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
        done.0.fetch_add(1, Ordering::Release);
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

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays within it for cpu < 1024.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu < 1024 {
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

/// The process's copy engine, started on first use when offload is enabled (after
/// the start-up measurement in `auto` mode). `None`: copies stay inline.
pub fn engine(cfg: &CopyConfig) -> Option<Arc<dyn CopyBackend>> {
    static ENGINE: OnceLock<Option<Arc<dyn CopyBackend>>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let on = match cfg.mode {
                OffloadMode::Off => false,
                OffloadMode::On => true,
                OffloadMode::Auto => calibration().offload,
            };
            if !on {
                return None;
            }
            CopyThread::spawn(cfg.cpu)
                .ok()
                .map(|t| Arc::new(t) as Arc<dyn CopyBackend>)
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
pub fn calibration() -> Calibration {
    static CAL: OnceLock<Calibration> = OnceLock::new();
    *CAL.get_or_init(|| {
        let path = cache_path();
        let again = crate::config::settings::flag("OMX_COPY_RECALIBRATE");
        if !again {
            if let Some(c) = std::fs::read_to_string(&path)
                .ok()
                .and_then(|s| parse_cal(&s))
            {
                return c;
            }
        }
        let c = measure();
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

fn cache_path() -> std::path::PathBuf {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    crate::config::state_dir().join(format!("omx-copy-calibration-{uid}"))
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

fn measure() -> Calibration {
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
    if let Ok(th) = CopyThread::spawn(None) {
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
        Copier {
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
        self.backend.is_some() && len >= self.cfg.min_frag && msg_length >= self.cfg.min_msg
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
