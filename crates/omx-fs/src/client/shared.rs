//! What the FUSE handlers and the completion thread share: the connection, the nodes,
//! and the open handles (mapped to the server's, reopened after a server restart).
//! The handles live here because both sides use them: a handler maps the kernel's
//! handle to the server's (reopening it in a new session), a reply adds one.

use super::behind::Behind;
use super::conn::Conn;
use super::files::{open_request, opened};
use super::nodes::Nodes;
use super::releases::Releases;
use super::request::req;
use crate::proto::*;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::Arc;

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

impl Shared {
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
        let w = if dir {
            let mut w = req(Op::Opendir);
            w.bytes(&path);
            w
        } else {
            // Created or truncated once is enough.
            open_request(
                &path,
                flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC),
            )
        };
        let reply = self.conn.call(w, None, 0).map_err(|e| match e {
            libc::ENOENT => libc::ESTALE,
            libc::EBADR | libc::ENOTCONN => libc::EIO,
            e => e,
        })?;
        let mut rd = Reader::new(&reply.body);
        let server_fh = if dir {
            rd.u64().map_err(|_| libc::EIO)?
        } else {
            let (server_fh, a) = opened(&mut rd).map_err(|_| libc::EIO)?;
            if a.ino != ino {
                // Another file took the name meanwhile.
                self.close_now(server_fh);
                return Err(libc::ESTALE);
            }
            server_fh
        };
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
