//! What the FUSE handlers and the completion thread share: the connection, the nodes,
//! and the open handles (mapped to the server's, reopened after a server restart).

use super::conn::{Conn, Done};
use super::nodes::Nodes;
use super::req;
use crate::proto::*;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Closed handles released on the server in one request once this many are waiting...
pub const RELEASE_BATCH: usize = 32;
/// ... or once the first has waited this long.
pub const RELEASE_DELAY: Duration = Duration::from_millis(20);

/// Handles the kernel released that the server has yet to close (never locked through
/// this mount: closing them there has nothing to tell anyone), sent together.
#[derive(Default)]
pub struct Releases {
    fhs: Vec<u64>,
    generation: u64,
    /// When the first waiting one was queued.
    since: Option<Instant>,
}

/// An open file or directory as the kernel holds it: the fh the kernel has is the
/// client's own, mapped to the server's handle of the session it was opened in. After
/// a server restart (a new session) it is reopened by path with the same flags at its
/// next use; a file that is gone, or is another file now, gives `ESTALE`.
pub struct Handle {
    pub node: u64,
    pub flags: i32,
    pub dir: bool,
    /// The file's inode number on the server (0 for directories: not checked).
    pub ino: u64,
    pub server_fh: u64,
    pub generation: u64,
    /// Locked through this mount: its flush goes to the server (which releases the
    /// closing owner's locks there).
    pub locked: bool,
    /// A directory's listing as far as the client already has it.
    pub listing: super::listing::Listing,
}

impl Handle {
    /// A file just opened (or created) in session `generation`.
    pub fn file(node: u64, flags: i32, ino: u64, server_fh: u64, generation: u64) -> Handle {
        Handle {
            node,
            flags,
            dir: false,
            ino,
            server_fh,
            generation,
            locked: false,
            listing: Default::default(),
        }
    }
}

#[derive(Default)]
pub struct Handles {
    pub map: HashMap<u64, Handle>,
    pub next: u64,
}

/// What requests are built from, shared with the completion thread and with retries.
pub struct Shared {
    pub conn: Arc<Conn>,
    /// The session's notifier, once mounted: tells the kernel to drop what it caches.
    pub notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
    pub nodes: Mutex<Nodes>,
    pub handles: Mutex<Handles>,
    pub behind: Mutex<Behind>,
    /// Signalled whenever a write behind is answered.
    pub behind_done: Condvar,
    pub releases: Mutex<Releases>,
    /// Signalled when the first release is queued.
    pub releases_queued: Condvar,
}

/// Bytes of writes behind (answered to the kernel before the server) in flight at most.
pub const BEHIND_MAX: usize = 8 << 20;

/// Writes behind: answered to the kernel as soon as they are sent, so that a
/// sequential writer has several in flight (the kernel sends one `WRITE` per `write`
/// call and waits for it). Every other request waits until none is in flight (so it
/// sees them all on the server, whatever order the server's threads serve them in), a
/// write waits for those it overlaps, and an error is kept for the node's next
/// write, flush or fsync (as NFS reports one at close).
#[derive(Default)]
pub struct Behind {
    /// (id, node, start, end) of each write in flight.
    in_flight: Vec<(u64, u64, u64, u64)>,
    bytes: usize,
    next: u64,
    /// The first error of a node's writes behind, until reported.
    errors: HashMap<u64, i32>,
}

/// Builds a request (again for a retry: it maps handles to the current session's).
pub type Build = Box<dyn Fn(&Arc<Shared>) -> Result<Writer, i32> + Send>;

impl Shared {
    /// Sends the request `build` makes; one whose session the server no longer knows
    /// (it restarted) is made again in a new session, once. Never called on the
    /// completion thread (building may reconnect or reopen, which wait for replies).
    pub fn request(
        self: &Arc<Self>,
        build: Build,
        write: Option<Arc<Vec<u8>>>,
        read: u32,
        done: Done,
        retry: bool,
    ) {
        self.drain();
        self.request_now(build, write, read, done, retry)
    }

    /// [`Shared::request`] without waiting for the writes behind (one of them).
    pub fn request_now(
        self: &Arc<Self>,
        build: Build,
        write: Option<Arc<Vec<u8>>>,
        read: u32,
        done: Done,
        retry: bool,
    ) {
        let conn = &self.conn;
        if !conn.connected() && conn.reconnect(conn.generation(), false).is_err() {
            return done(Err(libc::ENOTCONN));
        }
        let generation = conn.generation();
        let w = match build(self) {
            Ok(w) => w,
            Err(e) => return done(Err(e)),
        };
        let sh = self.clone();
        let data = write.clone();
        conn.submit(
            w,
            data,
            read,
            true,
            Box::new(move |r| match r {
                Err(libc::EBADR) if retry => {
                    std::thread::spawn(move || match sh.conn.reconnect(generation, true) {
                        Ok(()) => sh.request_now(build, write, read, done, false),
                        Err(_) => done(Err(libc::EIO)),
                    });
                }
                Err(libc::EBADR) => done(Err(libc::EIO)),
                r => done(r),
            }),
        );
    }

    /// Queues the server's close of handle `server_fh` (of session `generation`): sent
    /// with others by [`Shared::release_now`] ([`RELEASE_BATCH`] of them, or
    /// [`RELEASE_DELAY`] after the first, by [`Shared::run_releases`]).
    pub fn release_later(self: &Arc<Self>, server_fh: u64, generation: u64) {
        let mut r = self.releases.lock();
        if r.generation != generation {
            // Those of an older session were closed with it on the server.
            r.fhs.clear();
            r.generation = generation;
        }
        r.fhs.push(server_fh);
        if r.since.is_none() {
            r.since = Some(Instant::now());
            self.releases_queued.notify_one();
        }
        if r.fhs.len() >= RELEASE_BATCH {
            self.release_now(&mut r);
        }
    }

    /// Sends the waiting releases in one request (not waited for; an error has no
    /// one to go to: the kernel was answered).
    fn release_now(self: &Arc<Self>, r: &mut Releases) {
        let fhs = std::mem::take(&mut r.fhs);
        r.since = None;
        if fhs.is_empty() || r.generation != self.conn.generation() {
            return;
        }
        let mut w = req(Op::Release);
        for fh in fhs {
            w.u64(fh).u64(0).u32(0);
        }
        let w = w.0;
        self.request_now(
            Box::new(move |_| Ok(Writer(w.clone()))),
            None,
            0,
            Box::new(|_| {}),
            false,
        );
    }

    /// Sends the queued releases and waits for the answer (at unmount: the process
    /// ends right after).
    pub fn release_all_now(&self) {
        let (fhs, generation) = {
            let mut r = self.releases.lock();
            r.since = None;
            (std::mem::take(&mut r.fhs), r.generation)
        };
        if fhs.is_empty() || generation != self.conn.generation() {
            return;
        }
        let mut w = req(Op::Release);
        for fh in fhs {
            w.u64(fh).u64(0).u32(0);
        }
        let _ = self.conn.call(w, None, 0);
    }

    /// Sends queued releases [`RELEASE_DELAY`] after the first (a thread of its own).
    pub fn run_releases(self: Arc<Self>) {
        let mut r = self.releases.lock();
        loop {
            match r.since {
                None => self.releases_queued.wait(&mut r),
                Some(t) if t.elapsed() >= RELEASE_DELAY => self.release_now(&mut r),
                Some(t) => {
                    self.releases_queued.wait_until(&mut r, t + RELEASE_DELAY);
                }
            }
        }
    }

    /// Waits until no write behind is in flight (never on the completion thread).
    pub fn drain(&self) {
        let mut b = self.behind.lock();
        while !b.in_flight.is_empty() {
            self.behind_done.wait(&mut b);
        }
    }

    /// Waits until `node`'s range `start..end` overlaps no write behind in flight and
    /// `len` more bytes fit; then counts it in flight. Its id, for [`Shared::behind_end`].
    pub fn behind_start(&self, node: u64, start: u64, end: u64) -> u64 {
        let len = (end - start) as usize;
        let mut b = self.behind.lock();
        loop {
            let overlaps = b
                .in_flight
                .iter()
                .any(|&(_, n, s, e)| n == node && s < end && start < e);
            let full = !b.in_flight.is_empty() && b.bytes + len > BEHIND_MAX;
            if !overlaps && !full {
                break;
            }
            self.behind_done.wait(&mut b);
        }
        b.next += 1;
        let id = b.next;
        b.in_flight.push((id, node, start, end));
        b.bytes += len;
        id
    }

    /// Write behind `id` of `node` was answered (`error`: how it failed).
    pub fn behind_end(&self, id: u64, node: u64, error: Option<i32>) {
        let mut b = self.behind.lock();
        if let Some(i) = b.in_flight.iter().position(|w| w.0 == id) {
            let (_, _, s, e) = b.in_flight.swap_remove(i);
            b.bytes -= (e - s) as usize;
        }
        if let Some(e) = error {
            b.errors.entry(node).or_insert(e);
        }
        drop(b);
        self.behind_done.notify_all();
    }

    /// The error of a write behind of `node` not reported yet (reported now).
    pub fn behind_error(&self, node: u64) -> Option<i32> {
        self.behind.lock().errors.remove(&node)
    }

    /// A lookup (or listing, or create) found the server's file `server_ino` at `path`:
    /// when the node of that path has files open here and none of them is that file,
    /// the name was removed or renamed over by someone else since. The node is detached
    /// from the path (as for a removal through this client: its `fstat` goes through its
    /// open handles) and the path gets a new node, so the kernel makes a new inode for
    /// it instead of mixing the two files' attributes. Called before `looked_up`.
    pub fn check_replaced(&self, path: &[u8], server_ino: u64) {
        let Some(id) = self.nodes.lock().id_of(path) else {
            return;
        };
        if self.other_file_open(id, server_ino) {
            self.nodes.lock().replaced(path);
        }
    }

    /// Whether node `id` has files open here and none of them is the server's file
    /// `server_ino`.
    pub fn other_file_open(&self, id: u64, server_ino: u64) -> bool {
        let hs = self.handles.lock();
        let mut files = hs
            .map
            .values()
            .filter(|h| h.node == id && !h.dir && h.ino != 0)
            .peekable();
        files.peek().is_some() && files.all(|h| h.ino != server_ino)
    }

    /// A file handle open on node `ino`, if any.
    pub fn open_file_of(&self, ino: u64) -> Option<u64> {
        let hs = self.handles.lock();
        hs.map
            .iter()
            .find(|(_, h)| h.node == ino && !h.dir)
            .map(|(&fh, _)| fh)
    }

    /// A new client handle for the server's `server_fh` opened in session `generation`.
    pub fn add_handle(&self, h: Handle) -> u64 {
        let mut hs = self.handles.lock();
        hs.next += 1;
        let fh = hs.next;
        hs.map.insert(fh, h);
        fh
    }

    /// The server's handle for client handle `fh`, reopened first if it belongs to an
    /// older session (blocking).
    pub fn server_fh(&self, fh: u64) -> Result<u64, i32> {
        let generation = self.conn.generation();
        let (node, flags, dir, ino, locked) = {
            let hs = self.handles.lock();
            let h = hs.map.get(&fh).ok_or(libc::EBADF)?;
            if h.generation == generation {
                return Ok(h.server_fh);
            }
            (h.node, h.flags, h.dir, h.ino, h.locked)
        };
        let path = self.nodes.lock().path(node).ok_or(libc::ESTALE)?;
        let mut w = req(if dir { Op::Opendir } else { Op::Open });
        w.bytes(&path);
        if !dir {
            // Created or truncated once is enough.
            let flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
            w.u32(flags as u32).u32(0).u32(0).u32(0);
        }
        let reply = self.conn.call(w, None, 0).map_err(|e| match e {
            libc::ENOENT => libc::ESTALE,
            libc::EBADR | libc::ENOTCONN => libc::EIO,
            e => e,
        })?;
        let mut rd = Reader::new(&reply.body);
        let server_fh = rd.u64().map_err(|_| libc::EIO)?;
        if !dir {
            let a = Attr::decode(&mut rd).map_err(|_| libc::EIO)?;
            if a.ino != ino {
                // Another file took the name meanwhile.
                let mut w = req(Op::Release);
                w.u64(server_fh).u64(0).u32(0);
                self.conn.submit(w, None, 0, true, Box::new(|_| {}));
                return Err(libc::ESTALE);
            }
        }
        if locked {
            eprintln!(
                "omxfs: {}: reopened after a server restart; the locks held on it were lost",
                String::from_utf8_lossy(&path)
            );
        }
        if let Some(h) = self.handles.lock().map.get_mut(&fh) {
            h.server_fh = server_fh;
            h.generation = generation;
            h.locked = false;
        }
        Ok(server_fh)
    }

    /// Forgets client handle `fh`; the server's handle if it is of the current session.
    pub fn take_handle(&self, fh: u64) -> Option<(u64, bool)> {
        let h = self.handles.lock().map.remove(&fh)?;
        (h.generation == self.conn.generation()).then_some((h.server_fh, h.locked))
    }
}
