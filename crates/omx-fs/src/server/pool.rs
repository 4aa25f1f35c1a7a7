//! omxfsd's threads, a leader/follower pool: one thread at a time waits for the next
//! request header; the one that receives it hands the waiting over to the next idle
//! thread and serves the request itself. A slow request (a create that scans the
//! inode table, an fsync, a large transfer, the connection back to a new peer) holds
//! only its own thread, and no request is handed from one thread to another.

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

    /// Waits for a request as the leader, then serves it as a follower.
    fn serve_next(&self, posted: &Mutex<Posted>) {
        let job = self.next_request(&mut posted.lock());
        if let Some(job) = job {
            self.handle(job);
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
