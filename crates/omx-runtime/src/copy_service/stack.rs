//! The stack's own copies on the host's copy service: a [`CopyBackend`] that posts
//! receive-offload copies (pull-reply payloads, straight from their held ring slots)
//! and the copy-engine half of intra-node one-copy transfers to `omx_copyd`.
//!
//! Memory rules: a held receive-ring slot and a receive buffer are this process's
//! own memory, so the service reads and writes them with `process_vm_*` on its
//! behalf (pid 0 in the request: the client itself, which it may always access); the
//! peer of an intra-node transfer is named by pid and the service applies the same
//! same-user rule the kernel applies to this process's own `process_vm_readv`.
//!
//! Order: the service completes a ring's requests in order, and the jobs are kept
//! in submission order here, so each submitter's completion count still rises in
//! submission order ("only the last copy waits" is unchanged). A job the service
//! failed (or lost: it died) is made again on the thread that finds it, before any
//! later job is reported; once the service is gone, new jobs go to the process's own
//! copy thread.

use super::client::{RangeStatus, ServiceClient};
use crate::copy::{cma_outcome, run_job, Completions, CopyBackend, CopyJob, CopyThread};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Progress calls without a completion between checks of the service's socket.
const ALIVE_EVERY: u32 = 4096;

/// One request per contiguous piece: (dst_pid, dst, src_pid, src, len).
type Piece = (u32, u64, u32, u64, u64);

struct Held {
    first: u64,
    last: u64,
    done: Arc<Completions>,
    /// Kept (with the ring slot its `Bytes` hold) until the service copied it.
    job: CopyJob,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Held>,
    idle: u32,
}

/// Counters of the stack's copies on the service (`omx_counters`).
#[derive(Default, Debug)]
pub struct ServiceCounters {
    /// Jobs the service completed.
    pub served: AtomicU64,
    /// Jobs it failed or lost, made again by the process.
    pub redone: AtomicU64,
    /// Jobs sent to the process's copy thread because the service was gone.
    pub fallback: AtomicU64,
}

pub struct ServiceBackend {
    client: ServiceClient,
    state: Mutex<State>,
    cpu: Option<usize>,
    thread: OnceLock<Option<Arc<CopyThread>>>,
    pub counters: ServiceCounters,
}

impl ServiceBackend {
    /// The process's backend on the service at `OMX_COPY_SERVICE`, when one answers
    /// (its own ring pair: `omx_memcpy_async`'s cookies stay the application's).
    /// `cpu` pins the copy thread it falls back to.
    pub fn connect(cpu: Option<usize>) -> Option<ServiceBackend> {
        Some(ServiceBackend {
            client: ServiceClient::connect_default()?,
            state: Mutex::default(),
            cpu,
            thread: OnceLock::new(),
            counters: ServiceCounters::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fallback_thread(&self) -> Option<&Arc<CopyThread>> {
        self.thread
            .get_or_init(|| crate::copy::process_thread(self.cpu))
            .as_ref()
    }

    /// Reports finished jobs in order; `wait`: until none is left.
    fn advance(&self, st: &mut State, wait: bool) {
        while let Some(h) = st.jobs.front() {
            let check = st.idle >= ALIVE_EVERY;
            match self.client.range_status(h.first, h.last, check) {
                RangeStatus::Pending => {
                    st.idle += 1;
                    if check {
                        st.idle = 0;
                    }
                    if !wait {
                        return;
                    }
                    std::thread::yield_now();
                    continue;
                }
                RangeStatus::Done => {
                    let h = st.jobs.pop_front().expect("front exists");
                    if let CopyJob::Cma { outcome, .. } = &h.job {
                        outcome.store(cma_outcome::DONE, Ordering::Release);
                    }
                    self.counters.served.fetch_add(1, Ordering::Relaxed);
                    h.done.add_one();
                }
                RangeStatus::Failed => {
                    // Bytes the service may have written are written again, whole.
                    let h = st.jobs.pop_front().expect("front exists");
                    run_job(h.job);
                    self.counters.redone.fetch_add(1, Ordering::Relaxed);
                    h.done.add_one();
                }
            }
            st.idle = 0;
        }
    }
}

/// The requests a job becomes; `None` when it cannot go to the service.
fn pieces(job: &CopyJob) -> Option<Vec<Piece>> {
    let mut v = Vec::new();
    match job {
        CopyJob::Frame { src, dst } => {
            let mut at = 0usize;
            for &(p, n) in dst {
                let n = n.min(src.len() - at);
                if n > 0 {
                    v.push((0, p as u64, 0, src.as_ptr() as u64 + at as u64, n as u64));
                }
                at += n;
            }
        }
        CopyJob::Cma {
            pid,
            remote,
            offset,
            local,
            len,
            ..
        } => {
            // Walk both lists: the remote one from `offset`, the local one from 0.
            let mut rem = remote.iter().map(|r| (r.addr, r.len));
            let (mut skip, mut left) = (*offset, *len as u64);
            let mut cur = None;
            for &(p, n) in local {
                let (mut laddr, mut lleft) = (p as u64, (n as u64).min(left));
                while lleft > 0 {
                    let (raddr, rlen) = match cur.take() {
                        Some(x) => x,
                        None => {
                            let (a, l) = rem.next()?;
                            if skip >= l {
                                skip -= l;
                                continue;
                            }
                            let x = (a + skip, l - skip);
                            skip = 0;
                            x
                        }
                    };
                    let n = lleft.min(rlen);
                    v.push((0, laddr, *pid, raddr, n));
                    (laddr, lleft, left) = (laddr + n, lleft - n, left - n);
                    if n < rlen {
                        cur = Some((raddr + n, rlen - n));
                    }
                }
            }
            if left > 0 {
                return None;
            }
        }
        CopyJob::Memory { src, dst, len } => v.push((0, *dst as u64, 0, *src as u64, *len as u64)),
    }
    (!v.is_empty()).then_some(v)
}

impl CopyBackend for ServiceBackend {
    fn submit(&self, done: &Arc<Completions>, job: CopyJob) -> Result<(), CopyJob> {
        let mut st = self.lock();
        if self.client.is_dead() {
            // Everything the service held is made here first, so counts stay in order.
            self.advance(&mut st, true);
            drop(st);
            self.counters.fallback.fetch_add(1, Ordering::Relaxed);
            return match self.fallback_thread() {
                Some(t) => t.submit(done, job),
                None => Err(job),
            };
        }
        let Some(p) = pieces(&job) else {
            return Err(job);
        };
        let Some((first, last)) = self.client.try_post_all(&p) else {
            return Err(job);
        };
        st.jobs.push_back(Held {
            first,
            last,
            done: done.clone(),
            job,
        });
        Ok(())
    }

    fn progress(&self) {
        let mut st = self.lock();
        if !st.jobs.is_empty() {
            self.advance(&mut st, false);
        }
    }

    fn name(&self) -> &'static str {
        "copy-service"
    }

    fn service_counters(&self) -> Option<&ServiceCounters> {
        Some(&self.counters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use omx_transport::cma::RemoteIov;

    #[test]
    fn a_cross_process_job_becomes_one_piece_per_overlap() {
        let job = CopyJob::Cma {
            pid: 77,
            remote: vec![
                RemoteIov {
                    addr: 1000,
                    len: 100,
                },
                RemoteIov {
                    addr: 5000,
                    len: 300,
                },
            ],
            offset: 50,
            local: vec![(20_000, 120), (30_000, 200)],
            len: 250,
            outcome: Default::default(),
        };
        assert_eq!(
            pieces(&job).unwrap(),
            vec![
                (0, 20_000, 77, 1050, 50),
                (0, 20_050, 77, 5000, 70),
                (0, 30_000, 77, 5070, 130),
            ]
        );
        let short = CopyJob::Cma {
            pid: 77,
            remote: vec![RemoteIov {
                addr: 1000,
                len: 10,
            }],
            offset: 0,
            local: vec![(20_000, 100)],
            len: 100,
            outcome: Default::default(),
        };
        assert!(
            pieces(&short).is_none(),
            "remote ranges shorter than the copy"
        );
    }
}
