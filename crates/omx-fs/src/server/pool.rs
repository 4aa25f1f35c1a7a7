//! omxfsd's threads, a leader/follower pool: one thread at a time waits for the next
//! request header. The one that receives a request that may take long (one that
//! writes to the file system, an open, a large transfer, the connection back to a new
//! peer) hands the waiting over to the next idle thread and serves it; a quick one it
//! serves still as the waiter (no thread woken for it). So a slow request (a create
//! that scans the inode table, an fsync) holds only its own thread, and no request is
//! handed from one thread to another.

use super::*;

/// The posted receives for request headers, owned by the thread that waits.
struct Posted {
    bufs: Vec<Vec<u8>>,
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
        let posted = Arc::new(Mutex::new(Posted { bufs }));
        for _ in 1..self.opts.threads.max(1) {
            let (s, posted) = (self.clone(), posted.clone());
            std::thread::spawn(move || loop {
                s.serve_next(&posted);
            });
        }
        loop {
            self.serve_next(&posted);
        }
    }

    /// Waits for requests as the leader, serving the quick ones; the first that may
    /// take long it serves after handing the waiting over.
    fn serve_next(&self, posted: &Mutex<Posted>) {
        let job = {
            let mut posted = posted.lock();
            loop {
                match self.next_request(&mut posted) {
                    Some(job) if self.is_quick(&job) => self.handle(job),
                    Some(job) => break job,
                    None => {}
                }
            }
        };
        self.handle(job);
    }

    /// Whether a request is served without handing the waiting over: one that adds,
    /// removes or syncs nothing on the file system and cannot wait on the network (not
    /// an entry change, a truncate, an fsync, a large read or write, an open, which may
    /// be of a FIFO, or the first request of a peer, which connects back).
    fn is_quick(&self, job: &Job) -> bool {
        let Some(op) = job.msg.get(3).and_then(|&b| Op::from_u8(b)) else {
            return true;
        };
        let small_io = || io_len(&job.msg).is_some_and(|n| n as usize <= INLINE_WRITE);
        let quick = match op {
            Op::Read | Op::Write => small_io(),
            Op::Setattr => !truncates(&job.msg),
            Op::Hello | Op::Open | Op::Fsync | Op::Fallocate => false,
            Op::Flush | Op::Release | Op::Releasedir => true,
            Op::Getlk | Op::Setlk | Op::CancelLockWait => true,
            op => !op.mutates(),
        };
        quick
            && self
                .ep
                .partner_addr(job.source)
                .is_some_and(|(nic, ep, _)| self.backs.lock().contains_key(&(nic, ep)))
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

/// Whether a SETATTR request sets the size (header, path, fh, then the valid bits).
fn truncates(msg: &[u8]) -> bool {
    let mut r = Reader::new(msg);
    let valid = decode_header(&mut r).and_then(|_| {
        r.bytes()?;
        r.u64()?;
        r.u32()
    });
    valid.map_or(true, |v| v & set::SIZE != 0)
}
