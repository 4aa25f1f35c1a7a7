//! Request plumbing: how a FUSE operation becomes a request and its reply an answer.
//! Every request is sent at once and finished on the completion thread; this module
//! owns the sending (after the writes behind, retried once in a new session after a
//! server restart), the decoding of a reply body, and the errors of a node named by a
//! path the server no longer has. Every handler goes through it, so these rules hold
//! for all of them.

use super::conn::{Done, Reply};
use super::shared::Shared;
use super::OmxFs;
use crate::proto::*;
use fuser::ReplyEmpty;
use std::sync::Arc;

/// Builds a request (again for a retry: it maps handles to the current session's).
pub type Build = Box<dyn Fn(&Arc<Shared>) -> Result<Writer, i32> + Send>;

/// A request of kind `op` (its session and id are set when it is sent).
pub(crate) fn req(op: Op) -> Writer {
    Writer::request(op, 0, 0)
}

/// Decodes a reply body, mapping a malformed one to EIO.
pub(crate) fn body<T>(
    r: Result<Reply, i32>,
    f: impl FnOnce(&Reply, &mut Reader) -> Result<T, Malformed>,
) -> Result<T, i32> {
    let reply = r?;
    let mut rd = Reader::new(&reply.body);
    f(&reply, &mut rd).map_err(|_| libc::EIO)
}

/// The error of a request that names node `ino` by its path. A path the server no
/// longer has (`ENOENT`; `ENOTDIR`: a directory on it is something else now) means the
/// kernel's node is stale, its name removed by someone else: `ESTALE` has the kernel
/// look the name up again and make the call once more (`retry_estale`, as for NFS),
/// so an `open(O_CREAT)` creates the file anew and the others get `ENOENT` from the
/// new lookup, never the error of a node that is gone.
pub(crate) fn stale(sh: &Shared, ino: u64, e: i32) -> i32 {
    if e != libc::ENOENT && e != libc::ENOTDIR {
        return e;
    }
    sh.nodes.lock().gone(ino);
    libc::ESTALE
}

/// The path of node `$ino`, or the handler answers `ESTALE` (a node forgotten).
macro_rules! path_or {
    ($self:ident, $ino:expr, $reply:ident) => {
        match $self.path($ino) {
            Some(p) => p,
            None => return $reply.error(libc::ESTALE),
        }
    };
}
pub(crate) use path_or;

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
}

impl OmxFs {
    /// Sends the request `w` (built once: it names no handle).
    pub(super) fn send(&self, w: Writer, done: impl FnOnce(Result<Reply, i32>) + Send + 'static) {
        let w = w.0;
        self.sh.request(
            Box::new(move |_| Ok(Writer(w.clone()))),
            None,
            0,
            Box::new(done),
            true,
        );
    }

    /// Sends the request `build` makes for the server's handle of client handle `fh`.
    pub(super) fn send_fh(
        &self,
        fh: u64,
        build: impl Fn(u64) -> Writer + Send + 'static,
        write: Option<Arc<Vec<u8>>>,
        read: u32,
        done: impl FnOnce(Result<Reply, i32>) + Send + 'static,
    ) {
        self.sh.request(
            Box::new(move |sh| Ok(build(sh.server_fh(fh)?))),
            write,
            read,
            Box::new(done),
            true,
        );
    }

    /// A request naming node `ino` by its path, answered with nothing.
    pub(super) fn empty_node(&self, w: Writer, ino: u64, reply: ReplyEmpty) {
        let sh = self.sh.clone();
        self.send(w, move |r| match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(stale(&sh, ino, e)),
        });
    }

    /// A request answered with nothing.
    pub(super) fn empty(&self, w: Writer, reply: ReplyEmpty) {
        self.send(w, move |r| match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        });
    }

    /// A request for client handle `fh`, answered with nothing.
    pub(super) fn empty_fh(
        &self,
        fh: u64,
        build: impl Fn(u64) -> Writer + Send + 'static,
        reply: ReplyEmpty,
    ) {
        self.send_fh(fh, build, None, 0, move |r| match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        });
    }
}
