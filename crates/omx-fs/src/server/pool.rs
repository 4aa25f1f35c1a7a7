//! omxfsd's threads, a leader/follower pool. The leader waits for the next request
//! header and serves it itself (no hand-over to another thread), letting go of the
//! leadership while it serves; one standby thread looks every [`TAKE_OVER`] whether
//! the leadership is free. It takes the leadership only when it is needed: nobody
//! serves (the place is vacant), the same request has been served for a whole look
//! (a create that scans the inode table, an fsync, a large transfer, a blocked FIFO
//! open); a request already waiting meanwhile it serves itself. So a sequential client's
//! quick requests cost no thread wake-up and no second thread spinning for the next
//! request on the server's cores, and a slow request holds the others back by at
//! most about two looks. The other threads sleep until the standby leaves its place.
//! While no request comes, the standby looks less and less often (up to
//! [`IDLE_LOOK`]), so an idle server does not wake a thousand times a second.

use super::*;
use omx_proto::Completion;
use parking_lot::MutexGuard;
use std::sync::atomic::AtomicUsize;

/// How often the standby thread looks whether the leader is busy serving, while
/// requests come.
const TAKE_OVER: Duration = Duration::from_millis(1);
/// The longest gap between two looks of the standby on an idle server (the first
/// slow request after a quiet spell may hold the others back this long).
const IDLE_LOOK: Duration = Duration::from_millis(64);

/// The posted receives for request headers, owned by the thread that waits.
#[derive(Default)]
pub(super) struct Posted {
    bufs: Vec<Vec<u8>>,
}

#[derive(Default)]
pub(super) struct Pool {
    /// Held by the leader while it waits for a request.
    posted: Mutex<Posted>,
    /// Held by the standby thread; the other idle threads sleep on it.
    standby: Mutex<()>,
    /// Threads serving a request (counted before the leadership is let go).
    serving: AtomicUsize,
    /// Requests taken so far (the standby backs off while it does not move).
    taken: AtomicU64,
}

/// What a thread does next.
enum Turn<'a> {
    Lead(MutexGuard<'a, Posted>),
    /// A request the standby found waiting while the others served.
    Serve(Job),
}

impl Server {
    /// Serves forever on `threads` threads (this one included).
    pub fn run(self: &Arc<Self>) -> ! {
        let s = self.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            s.expire_sessions();
        });
        {
            let mut posted = self.pool.posted.lock();
            posted.bufs = (0..POSTED).map(|_| vec![0u8; MAX_HEADER]).collect();
            for (i, b) in posted.bufs.iter_mut().enumerate() {
                self.post_header_recv(b, i);
            }
        }
        for _ in 1..self.opts.threads.max(1) {
            let s = self.clone();
            std::thread::spawn(move || s.serve());
        }
        self.serve()
    }

    fn serve(&self) -> ! {
        let pool = &self.pool;
        loop {
            let turn = match pool.posted.try_lock() {
                Some(posted) => Turn::Lead(posted),
                None => self.stand_by(),
            };
            let job = match turn {
                Turn::Lead(mut posted) => {
                    let c = self.ep.wait_any(kind_bits(Kind::Request), KIND_MASK, None);
                    let job = c.and_then(|c| self.take_request(&mut posted, c));
                    // Counted before the leadership is let go: a standby that finds it
                    // free and nobody serving must lead.
                    pool.serving.fetch_add(1, Ordering::SeqCst);
                    pool.taken.fetch_add(1, Ordering::Relaxed);
                    drop(posted);
                    job
                }
                Turn::Serve(job) => Some(job),
            };
            if let Some(job) = job {
                self.handle(job);
            }
            pool.serving.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Waits in the standby's place until this thread must lead or serve.
    fn stand_by(&self) -> Turn<'_> {
        let pool = &self.pool;
        let _standby = pool.standby.lock();
        let mut look = TAKE_OVER;
        let mut seen = pool.taken.load(Ordering::Relaxed);
        // `taken` when a serve was last seen under way.
        let mut serve_seen = None;
        loop {
            if let Some(mut posted) = pool.posted.try_lock() {
                let taken = pool.taken.load(Ordering::Relaxed);
                if pool.serving.load(Ordering::SeqCst) == 0 || serve_seen == Some(taken) {
                    return Turn::Lead(posted);
                }
                if let Some(c) = self.ep.test_any(kind_bits(Kind::Request), KIND_MASK) {
                    pool.serving.fetch_add(1, Ordering::SeqCst);
                    pool.taken.fetch_add(1, Ordering::Relaxed);
                    match self.take_request(&mut posted, c) {
                        Some(job) => return Turn::Serve(job),
                        None => {
                            pool.serving.fetch_sub(1, Ordering::SeqCst);
                            continue;
                        }
                    }
                }
                drop(posted);
                // A server that finished while we held the place found it taken and
                // went to wait for ours: lead at once.
                if pool.serving.load(Ordering::SeqCst) == 0 {
                    continue;
                }
                serve_seen = Some(taken);
            } else {
                serve_seen = None;
            }
            std::thread::sleep(look);
            let now = pool.taken.load(Ordering::Relaxed);
            look = if now == seen {
                (look * 2).min(IDLE_LOOK)
            } else {
                TAKE_OVER
            };
            seen = now;
        }
    }

    /// The request a completed header receive brought (None: nothing usable), its
    /// receive posted again.
    fn take_request(&self, posted: &mut Posted, c: Completion) -> Option<Job> {
        let slot = c.status.context as usize;
        let st = c.status;
        let ok = st.code == StatusCode::Success && st.msg_length as usize <= MAX_HEADER;
        let job = (ok && slot < POSTED).then(|| Job {
            msg: posted.bufs[slot][..st.xfer_length as usize].to_vec(),
            source: st.source.expect("sender"),
        });
        if slot < POSTED {
            self.post_header_recv(&mut posted.bufs[slot], slot);
        }
        if job.is_none() {
            self.counters.malformed.fetch_add(1, Ordering::Relaxed);
        }
        job
    }

    fn post_header_recv(&self, buf: &mut [u8], slot: usize) {
        let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
        // SAFETY: the buffers live as long as the server's threads (they serve forever)
        // and each is only read after its receive completes.
        unsafe {
            self.ep
                .irecv(&[seg], kind_bits(Kind::Request), KIND_MASK, slot as u64)
                .expect("post a request receive");
        }
    }
}
