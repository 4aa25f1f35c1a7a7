//! omxfsd's threads, a leader/follower pool. The leader waits for the next request
//! header and serves it itself (no hand-over to another thread), letting go of the
//! leadership while it serves; one standby thread looks every [`TAKE_OVER`] whether
//! the leadership is free and takes it. So a request that takes long (a create that
//! scans the inode table, an fsync, a large transfer, the connection back to a new
//! peer) holds back the others by at most [`TAKE_OVER`], while quick ones cost no
//! thread wake-up (letting go and taking the leadership back wakes nobody: no thread
//! sleeps on it). The other threads sleep until the standby becomes the leader. While
//! no request comes, the standby looks less and less often (up to [`IDLE_LOOK`]), so an
//! idle server does not wake a thousand times a second.

use super::*;
use std::sync::atomic::AtomicU64;

/// How often the standby thread looks whether the leader is busy serving, while
/// requests come.
const TAKE_OVER: Duration = Duration::from_millis(1);
/// The longest gap between two looks of the standby on an idle server (the first
/// slow request after a quiet spell may hold the others back this long).
const IDLE_LOOK: Duration = Duration::from_millis(64);

/// The posted receives for request headers, owned by the thread that waits.
struct Posted {
    bufs: Vec<Vec<u8>>,
}

struct Pool {
    /// Held by the leader while it waits for a request.
    posted: Mutex<Posted>,
    /// Held by the standby thread; the other idle threads sleep on it.
    standby: Mutex<()>,
    /// Requests taken so far (the standby backs off while it does not move).
    taken: AtomicU64,
}

impl Server {
    /// Serves forever on `threads` threads (this one included).
    pub fn run(self: &Arc<Self>) -> ! {
        let s = self.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            s.expire_sessions();
        });
        let mut bufs: Vec<Vec<u8>> = (0..POSTED).map(|_| vec![0u8; MAX_HEADER]).collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            self.post_header_recv(b, i);
        }
        let pool = Arc::new(Pool {
            posted: Mutex::new(Posted { bufs }),
            standby: Mutex::new(()),
            taken: AtomicU64::new(0),
        });
        for _ in 1..self.opts.threads.max(1) {
            let (s, pool) = (self.clone(), pool.clone());
            std::thread::spawn(move || s.serve(&pool));
        }
        self.serve(&pool)
    }

    fn serve(&self, pool: &Pool) -> ! {
        loop {
            let Some(mut posted) = pool.posted.try_lock() else {
                Self::stand_by(pool);
                continue;
            };
            let job = self.next_request(&mut posted);
            drop(posted);
            pool.taken.fetch_add(1, Ordering::Relaxed);
            if let Some(job) = job {
                self.handle(job);
            }
        }
    }

    /// Returns once the leadership looks free (the leader is serving).
    fn stand_by(pool: &Pool) {
        let _standby = pool.standby.lock();
        let mut look = TAKE_OVER;
        let mut seen = pool.taken.load(Ordering::Relaxed);
        while pool.posted.is_locked() {
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

    /// The next request header (None: nothing usable arrived).
    fn next_request(&self, posted: &mut Posted) -> Option<Job> {
        let c = self
            .ep
            .wait_any(kind_bits(Kind::Request), KIND_MASK, None)?;
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
