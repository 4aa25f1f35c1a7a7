//! `omxfs`: the FUSE client. Every operation becomes one request sent at once; its
//! reply is given to the kernel from the completion thread, so many requests are in
//! flight (and a blocked lock wait stops nothing else).
//!
//! Node ids are the client's own, one per path (like sshfs): a node maps to a path
//! relative to the export, renames move the paths under it.

mod attrs;
pub mod conn;
mod listing;
mod locking;
mod nodes;
mod shared;
mod xattrs;

use crate::proto::*;
use attrs::{dtype, file_attr};
use conn::{Conn, Reply};
use fuser::*;
use listing::{add_page, finish_page, Listing, DIR_PAGE};
use locking::LockRange;
use nodes::{join, Nodes, CAPABILITY_XATTR};
use parking_lot::Mutex;
use shared::{Handle, Handles, Shared};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub struct Options {
    pub attr_timeout: Duration,
    pub entry_timeout: Duration,
}

pub struct OmxFs {
    sh: Arc<Shared>,
    opts: Options,
}

/// Decodes a reply body, mapping a malformed one to EIO.
fn body<T>(
    r: Result<Reply, i32>,
    f: impl FnOnce(&Reply, &mut Reader) -> Result<T, Malformed>,
) -> Result<T, i32> {
    let reply = r?;
    let mut rd = Reader::new(&reply.body);
    f(&reply, &mut rd).map_err(|_| libc::EIO)
}

impl OmxFs {
    pub fn new(conn: Arc<Conn>, opts: Options) -> OmxFs {
        let sh = Arc::new(Shared {
            conn,
            notifier: Arc::new(std::sync::OnceLock::new()),
            nodes: Mutex::new(Nodes::new()),
            handles: Mutex::new(Handles::default()),
            behind: Default::default(),
            behind_done: Default::default(),
            releases: Default::default(),
            releases_queued: Default::default(),
        });
        let s = sh.clone();
        std::thread::spawn(move || s.run_releases());
        OmxFs { sh, opts }
    }

    /// Where the mount's session notifier goes once the session exists (the kernel is
    /// told to drop attributes it caches that a change made stale: a hard link's
    /// source's link count).
    pub fn notifier_slot(&self) -> Arc<std::sync::OnceLock<fuser::Notifier>> {
        self.sh.notifier.clone()
    }

    fn path(&self, ino: u64) -> Option<Vec<u8>> {
        self.sh.nodes.lock().path(ino)
    }

    /// These nodes may be changing: attributes kept for them are dropped. The epoch of
    /// the first, to keep the attributes its reply brings.
    fn changed(&self, inos: &[u64]) -> u64 {
        let mut nodes = self.sh.nodes.lock();
        for &ino in inos {
            nodes.changed(ino);
        }
        inos.first().map_or(0, |&ino| nodes.epoch(ino))
    }

    fn paths_changed(&self, paths: &[&[u8]]) {
        let mut nodes = self.sh.nodes.lock();
        for p in paths {
            nodes.path_changed(p);
        }
    }

    /// The handle a `getattr`/`setattr` of `ino` goes through: the one the kernel gave,
    /// else, when the node's name was removed through this client, any handle of it
    /// still open (none: the path is used, and the server says it is gone).
    /// (`GETATTR` also takes a directory's handle: a directory removed while open.)
    fn file_handle(&self, ino: u64, given: Option<u64>, dirs: bool) -> Option<u64> {
        if given.is_some() || !self.sh.nodes.lock().detached(ino) {
            return given;
        }
        let hs = self.sh.handles.lock();
        hs.map
            .iter()
            .find(|(_, h)| h.node == ino && (dirs || !h.dir))
            .map(|(&fh, _)| fh)
    }

    /// Sends the request `w` (built once: it names no handle).
    fn send(&self, w: Writer, done: impl FnOnce(Result<Reply, i32>) + Send + 'static) {
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
    fn send_fh(
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

    /// A request answered with an attribute that names a (new) entry at `path`.
    /// A request that makes entry `path` in directory `parent` (a directory: `dir`).
    /// `stale`: a node whose attributes in the kernel the change made stale (a link's
    /// source: another node, as nodes are paths), dropped once it is answered.
    fn entry(
        &self,
        w: Writer,
        parent: u64,
        path: Vec<u8>,
        dir: bool,
        stale: Option<u64>,
        reply: ReplyEntry,
    ) {
        let (sh, ttl, asked) = (self.sh.clone(), self.opts.entry_timeout, Instant::now());
        let epoch = self.sh.nodes.lock().change_sent(parent);
        let made = |_: &Reply, rd: &mut Reader| {
            let a = Attr::decode(rd)?;
            let change = Stamp::decode_change(rd);
            let parent_attr = Attr::decode(rd).ok();
            Ok((a, change, parent_attr, Stamp::decode(rd).ok()))
        };
        self.send(w, move |r| match body(r, made) {
            Ok((a, change, parent_attr, own)) => {
                sh.check_replaced(&path, a.ino);
                let mut nodes = sh.nodes.lock();
                let ino = nodes.looked_up(path);
                nodes.change_done(parent, epoch, with_count(parent_attr, change), asked);
                nodes.dir_changed(parent, change, asked);
                // Without its own stamp from a server that sends stamps, someone
                // changed the new directory already.
                if dir && (own.is_some() || change.is_none()) {
                    nodes.made_dir(ino, asked, own);
                }
                if let Some(src) = stale {
                    nodes.changed(src);
                }
                drop(nodes);
                // Before the reply: once the program has it, its next `stat` of the
                // source must not find the kernel's old attributes (after the reply it
                // sometimes did, `st_nlink` 1). The kernel's link does not make them
                // valid again.
                if let (Some(src), Some(n)) = (stale, sh.notifier.get()) {
                    // Attributes only (offset < 0): its pages stay.
                    let _ = n.inval_inode(src, -1, 0);
                }
                reply.entry(&ttl, &file_attr(ino, &a), 0);
            }
            Err(e) => {
                let mut nodes = sh.nodes.lock();
                nodes.change_done(parent, epoch, None, asked);
                nodes.dir_unknown(parent);
                drop(nodes);
                reply.error(e)
            }
        });
    }

    /// A request naming node `ino` by its path, answered with nothing.
    fn empty_node(&self, w: Writer, ino: u64, reply: ReplyEmpty) {
        let sh = self.sh.clone();
        self.send(w, move |r| match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(stale(&sh, ino, e)),
        });
    }

    fn empty(&self, w: Writer, reply: ReplyEmpty) {
        self.send(w, move |r| match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        });
    }

    fn empty_fh(&self, fh: u64, build: impl Fn(u64) -> Writer + Send + 'static, reply: ReplyEmpty) {
        self.send_fh(fh, build, None, 0, move |r| match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        });
    }
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

macro_rules! path_or {
    ($self:ident, $ino:expr, $reply:ident) => {
        match $self.path($ino) {
            Some(p) => p,
            None => return $reply.error(libc::ESTALE),
        }
    };
}
pub(crate) use path_or;

/// Writes ending past this offset are never behind (see `write`).
const SYNC_BEYOND: u64 = 1 << 40;

/// The longest name Linux file systems take (longer ones are always asked about).
const NAME_MAX: usize = 255;

pub(crate) fn req(op: Op) -> Writer {
    Writer::request(op, 0, 0)
}

impl Filesystem for OmxFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        // flock(2) too: the kernel sends it as a whole-file lock owned by the open file,
        // so the server's table enforces it between clients as well.
        let _ = config.add_capabilities(consts::FUSE_POSIX_LOCKS | consts::FUSE_FLOCK_LOCKS);
        // Asynchronous direct I/O (libaio, io_uring): without it the kernel sends an
        // O_DIRECT file's requests one at a time whatever the queue depth.
        let _ = config.add_capabilities(consts::FUSE_ASYNC_DIO);
        // Listings bring every entry's attributes (READDIRPLUS, every page: the
        // kernel's adaptive mode lists later pages plain when nothing was looked up
        // while reading, as a `stat` walk of a large directory does), so such a walk
        // costs one request per page, not one per entry; lookups and listings of one
        // directory run in parallel.
        let _ = config.add_capabilities(consts::FUSE_DO_READDIRPLUS);
        let _ = config.add_capabilities(consts::FUSE_PARALLEL_DIROPS);
        let _ = config.set_max_write(MAX_IO);
        let _ = config.set_max_readahead(MAX_IO);
        let _ = config.set_max_background(64);
        Ok(())
    }

    /// At unmount: the server closes the handles still waiting to be released (it
    /// would only at the session's expiry otherwise).
    fn destroy(&mut self) {
        self.sh.release_all_now();
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let path = join(&path_or!(self, parent, reply), name);
        // A name that does not exist is cached as such (a negative entry, node 0) for
        // entry_timeout, as a positive one is: asked again, or created, without a
        // lookup first. In a directory this client made, no need to ask.
        let (sh, ttl) = (self.sh.clone(), self.opts.entry_timeout);
        // A name too long for the server's file system is its to refuse (ENAMETOOLONG).
        let known = name.len() <= NAME_MAX;
        if let Some(left) = known
            .then(|| sh.nodes.lock().known_absent(parent, name.as_bytes(), ttl))
            .flatten()
        {
            return reply.entry(&left, &file_attr(0, &Attr::default()), 0);
        }
        let mut w = req(Op::Lookup);
        w.bytes(&path);
        self.send(w, move |r| match body(r, |_, rd| Attr::decode(rd)) {
            Ok(a) => {
                sh.check_replaced(&path, a.ino);
                let ino = sh.nodes.lock().looked_up(path);
                reply.entry(&ttl, &file_attr(ino, &a), 0)
            }
            Err(libc::ENOENT) => reply.entry(&ttl, &file_attr(0, &Attr::default()), 0),
            Err(e) => reply.error(e),
        });
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, nlookup: u64) {
        self.sh.nodes.lock().forget(ino, nlookup);
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, fh: Option<u64>, reply: ReplyAttr) {
        let path = path_or!(self, ino, reply);
        // Through an open file of the node, if any, as a local `fstat` (the kernel does
        // not say whether its GETATTR is one): its name may be gone or name another
        // file now, removed or renamed over by another client or on the server.
        let fh = self
            .file_handle(ino, fh, true)
            .or_else(|| self.sh.open_file_of(ino));
        if let Some(fh) = fh {
            let ttl = self.opts.attr_timeout;
            let epoch = self.sh.nodes.lock().epoch(ino);
            let (sh, asked) = (self.sh.clone(), Instant::now());
            let build = move |server_fh| {
                let mut w = req(Op::Getattr);
                w.bytes(&path).u64(server_fh);
                w
            };
            return self.send_fh(fh, build, None, 0, move |r| {
                match body(r, |_, rd| Attr::decode(rd)) {
                    Ok(a) => {
                        sh.nodes.lock().keep_attr(ino, epoch, a, asked);
                        reply.attr(&ttl, &file_attr(ino, &a))
                    }
                    Err(e) => reply.error(e),
                }
            });
        }
        let ttl = self.opts.attr_timeout;
        // Attributes a reply brought within the timeout (the kernel dropped its copy, as
        // it does before a chown): valid for what is left of it, as the kernel's were.
        let (epoch, kept) = {
            let nodes = self.sh.nodes.lock();
            (nodes.epoch(ino), nodes.fresh_attr(ino, ttl))
        };
        if let Some((a, left)) = kept {
            return reply.attr(&left, &file_attr(ino, &a));
        }
        let mut w = req(Op::Getattr);
        w.bytes(&path);
        let (sh, asked) = (self.sh.clone(), Instant::now());
        self.send(w, move |r| match body(r, |_, rd| Attr::decode(rd)) {
            Ok(a) => {
                sh.nodes.lock().keep_attr(ino, epoch, a, asked);
                reply.attr(&ttl, &file_attr(ino, &a))
            }
            Err(e) => reply.error(stale(&sh, ino, e)),
        });
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let path = path_or!(self, ino, reply);
        let fh = self.file_handle(ino, fh, false);
        let mut valid = 0;
        let mut flag = |present: bool, bit: u32| {
            if present {
                valid |= bit
            }
        };
        flag(mode.is_some(), set::MODE);
        flag(uid.is_some(), set::UID);
        flag(gid.is_some(), set::GID);
        flag(size.is_some(), set::SIZE);
        let stamp = |t: Option<TimeOrNow>, at: u32, now: u32| -> (u32, (i64, u32)) {
            match t {
                None => (0, (0, 0)),
                Some(TimeOrNow::Now) => (now, (0, 0)),
                Some(TimeOrNow::SpecificTime(t)) => {
                    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                    (at, (d.as_secs() as i64, d.subsec_nanos()))
                }
            }
        };
        let (ab, at) = stamp(atime, set::ATIME, set::ATIME_NOW);
        let (mb, mt) = stamp(mtime, set::MTIME, set::MTIME_NOW);
        valid |= ab | mb;
        let (mode, uid, gid, size) = (
            mode.unwrap_or(0),
            uid.unwrap_or(0),
            gid.unwrap_or(0),
            size.unwrap_or(0),
        );
        let build = move |sh: &Arc<Shared>| {
            let fh = match fh {
                Some(fh) => sh.server_fh(fh)?,
                None => 0,
            };
            let mut w = req(Op::Setattr);
            w.bytes(&path).u64(fh).u32(valid).u32(mode);
            w.u32(uid).u32(gid).u64(size);
            w.i64(at.0).u32(at.1).i64(mt.0).u32(mt.1);
            Ok(w)
        };
        let ttl = self.opts.attr_timeout;
        let epoch = self.changed(&[ino]);
        self.sh.nodes.lock().data_changed(ino);
        let (sh, asked) = (self.sh.clone(), Instant::now());
        let done = move |r| match body(r, |_, rd| Attr::decode(rd)) {
            Ok(a) => {
                sh.nodes.lock().keep_attr(ino, epoch, a, asked);
                reply.attr(&ttl, &file_attr(ino, &a))
            }
            Err(e) => reply.error(stale(&sh, ino, e)),
        };
        self.sh
            .request(Box::new(build), None, 0, Box::new(done), true);
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        let path = path_or!(self, ino, reply);
        let mut w = req(Op::Readlink);
        w.bytes(&path);
        let sh = self.sh.clone();
        self.send(w, move |r| {
            match body(r, |_, rd| rd.bytes().map(<[u8]>::to_vec)) {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(stale(&sh, ino, e)),
            }
        });
    }

    fn mknod(
        &mut self,
        req_: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let path = join(&path_or!(self, parent, reply), name);
        let mut w = req(Op::Mknod);
        w.bytes(&path)
            .u32(mode)
            .u32(rdev)
            .u32(req_.uid())
            .u32(req_.gid());
        self.entry(w, parent, path, false, None, reply);
    }

    fn mkdir(
        &mut self,
        req_: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let path = join(&path_or!(self, parent, reply), name);
        let mut w = req(Op::Mkdir);
        w.bytes(&path).u32(mode).u32(req_.uid()).u32(req_.gid());
        self.entry(w, parent, path, true, None, reply);
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.remove(Op::Unlink, parent, name, reply)
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.remove(Op::Rmdir, parent, name, reply)
    }

    fn symlink(
        &mut self,
        req_: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let path = join(&path_or!(self, parent, reply), link_name);
        let mut w = req(Op::Symlink);
        w.bytes(&path).bytes(target.as_os_str().as_bytes());
        w.u32(req_.uid()).u32(req_.gid());
        self.entry(w, parent, path, false, None, reply);
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let from = join(&path_or!(self, parent, reply), name);
        let to = join(&path_or!(self, newparent, reply), newname);
        let epochs = {
            let mut n = self.sh.nodes.lock();
            n.change_sent(parent);
            n.change_sent(newparent);
            [n.epoch(parent), n.epoch(newparent)]
        };
        self.paths_changed(&[&from, &to]);
        let mut w = req(Op::Rename);
        w.bytes(&from).bytes(&to).u32(flags);
        let (sh, asked) = (self.sh.clone(), Instant::now());
        self.send(w, move |r| match r {
            Ok(r) => {
                let mut n = sh.nodes.lock();
                let mut rd = Reader::new(&r.body);
                let (from_change, to_change) =
                    (Stamp::decode_change(&mut rd), Stamp::decode_change(&mut rd));
                let (from_attr, to_attr) = (Attr::decode(&mut rd).ok(), Attr::decode(&mut rd).ok());
                n.change_done(parent, epochs[0], with_count(from_attr, from_change), asked);
                n.change_done(newparent, epochs[1], with_count(to_attr, to_change), asked);
                n.dir_changed(parent, from_change, asked);
                n.dir_changed(newparent, to_change, asked);
                if flags & libc::RENAME_EXCHANGE != 0 {
                    let tmp = b"\0exchange".to_vec();
                    n.renamed(&to, &tmp);
                    n.renamed(&from, &to);
                    n.renamed(&tmp, &from);
                } else {
                    n.renamed(&from, &to);
                }
                reply.ok()
            }
            Err(e) => {
                let mut n = sh.nodes.lock();
                n.change_done(parent, epochs[0], None, asked);
                n.change_done(newparent, epochs[1], None, asked);
                n.dir_unknown(parent);
                n.dir_unknown(newparent);
                reply.error(e)
            }
        });
    }

    fn link(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let from = path_or!(self, ino, reply);
        let to = join(&path_or!(self, newparent, reply), newname);
        self.changed(&[ino]);
        let mut w = req(Op::Link);
        w.bytes(&from).bytes(&to);
        self.entry(w, newparent, to, false, Some(ino), reply);
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let path = path_or!(self, ino, reply);
        let mut w = req(Op::Open);
        w.bytes(&path).u32(flags as u32).u32(0).u32(0).u32(0);
        // Close-to-open as NFS: the kernel keeps the file's cached pages
        // (FOPEN_KEEP_CACHE) only when the file is as it was when they were cached
        // (inode, size, mtime, ctime) and nothing changed it through this client since;
        // otherwise it drops them.
        let (sh, generation) = (self.sh.clone(), self.sh.conn.generation());
        let data_epoch = sh.nodes.lock().data_epoch(ino);
        let release = |sh: &Arc<Shared>, server_fh: u64| {
            let mut w = req(Op::Release);
            w.u64(server_fh).u64(0).u32(0);
            let release = Box::new(move |_: &Arc<Shared>| Ok(Writer(w.0.clone())));
            sh.request_now(release, None, 0, Box::new(|_| {}), false);
        };
        self.send(w, move |r| {
            match body(r, |_, rd| Ok((rd.u64()?, Attr::decode(rd)?))) {
                Ok((server_fh, a)) if a.mode & libc::S_IFMT == libc::S_IFDIR => {
                    // The kernel opens a file, the path names a directory now: the
                    // file is gone.
                    release(&sh, server_fh);
                    reply.error(stale(&sh, ino, libc::ENOENT))
                }
                Ok((server_fh, a)) if sh.other_file_open(ino, a.ino) => {
                    // The node's open files are another file than the one now at its
                    // path (removed or renamed over by someone else): the kernel's inode
                    // has the old file's attributes (its size would cut this file's
                    // reads). The node leaves the path and `ESTALE` has the kernel look
                    // the name up again (a new node) and open that.
                    release(&sh, server_fh);
                    sh.nodes.lock().replaced(&path);
                    reply.error(libc::ESTALE)
                }
                Ok((server_fh, a)) => {
                    let (changed, keep) = {
                        let mut nodes = sh.nodes.lock();
                        (
                            nodes.changed_elsewhere(ino, &a),
                            nodes.opened(ino, data_epoch, &a),
                        )
                    };
                    // The file changed elsewhere since its last open here: the kernel's
                    // attributes of it go too (its cached size would cut the reads of a
                    // file grown, or replaced by a larger one, by another client).
                    if let (true, Some(n)) = (changed, sh.notifier.get()) {
                        let _ = n.inval_inode(ino, -1, 0);
                    }
                    let fh = sh.add_handle(Handle::file(ino, flags, a.ino, server_fh, generation));
                    reply.opened(fh, if keep { consts::FOPEN_KEEP_CACHE } else { 0 })
                }
                Err(e) => reply.error(stale(&sh, ino, e)),
            }
        });
    }

    fn create(
        &mut self,
        req_: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let path = join(&path_or!(self, parent, reply), name);
        let epoch = self.sh.nodes.lock().change_sent(parent);
        let mut w = req(Op::Create);
        w.bytes(&path).u32(flags as u32).u32(mode);
        w.u32(req_.uid()).u32(req_.gid());
        let (sh, ttl) = (self.sh.clone(), self.opts.entry_timeout);
        let attr_ttl = self.opts.attr_timeout;
        let generation = self.sh.conn.generation();
        let asked = Instant::now();
        let created = |_: &Reply, rd: &mut Reader| {
            let (fh, a, change) = (rd.u64()?, Attr::decode(rd)?, Stamp::decode_change(rd));
            Ok((fh, a, change, Attr::decode(rd).ok()))
        };
        self.send(w, move |r| {
            match body(r, created) {
                Ok((server_fh, a, change, parent_attr)) => {
                    // A new file (the server creates with O_EXCL): no capability to
                    // drop at its writes.
                    sh.check_replaced(&path, a.ino);
                    let ino = {
                        let mut nodes = sh.nodes.lock();
                        let ino = nodes.looked_up(path);
                        nodes.change_done(parent, epoch, with_count(parent_attr, change), asked);
                        nodes.dir_changed(parent, change, asked);
                        nodes.set_xattr_absent(ino, CAPABILITY_XATTR, Instant::now() + attr_ttl);
                        ino
                    };
                    let fh = sh.add_handle(Handle::file(ino, flags, a.ino, server_fh, generation));
                    reply.created(&ttl, &file_attr(ino, &a), 0, fh, 0)
                }
                Err(e) => {
                    {
                        let mut nodes = sh.nodes.lock();
                        nodes.change_done(parent, epoch, None, asked);
                        nodes.dir_unknown(parent);
                    }
                    if e == libc::EEXIST && flags & libc::O_EXCL == 0 {
                        // Made meanwhile by someone else (the kernel believed the name
                        // absent): opened as it is, as a local O_CREAT would. Off the
                        // completion thread (the open waits for its reply).
                        std::thread::spawn(move || {
                            open_existing(&sh, path, flags, ttl, generation, reply)
                        });
                    } else {
                        reply.error(e)
                    }
                }
            }
        });
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        self.changed(&[ino]);
        let size = size.min(MAX_IO);
        let build = move |fh| {
            let mut w = req(Op::Read);
            w.u64(fh).u64(offset as u64).u32(size);
            w
        };
        let inline = size as usize <= INLINE_WRITE;
        let conn = self.sh.conn.clone();
        self.send_fh(fh, build, None, size, move |r| {
            // From the received buffer straight into the reply: the body is the
            // length, then the data when it came inline.
            let checked = r.and_then(|rep| {
                let n = Reader::new(&rep.body).u32().map_err(|_| libc::EIO)? as usize;
                let got = if inline {
                    rep.body.len() - 4
                } else {
                    rep.data.len()
                };
                (got == n).then_some(rep).ok_or(libc::EIO)
            });
            match checked {
                Ok(rep) if inline => reply.data(&rep.body[4..]),
                Ok(rep) => {
                    reply.data(&rep.data);
                    conn.recycle_read_buf(rep.data);
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        self.changed(&[ino]);
        self.sh.nodes.lock().data_changed(ino);
        if let Some(e) = self.sh.behind_error(ino) {
            return reply.error(e);
        }
        let (inline, separate) = if data.len() <= INLINE_WRITE {
            (data.to_vec(), None)
        } else {
            (Vec::new(), Some(Arc::new(data.to_vec())))
        };
        let len = data.len() as u32;
        let build = move |fh| {
            let mut w = req(Op::Write);
            w.u64(fh).u64(offset as u64).u32(len);
            w.0.extend_from_slice(&inline);
            w
        };
        // Behind (answered now) unless the program asked for each write to be done
        // when it returns, or appends (a log other clients may append to as well:
        // each append on the server when it returns, as before).
        // A write ending past SYNC_BEYOND waits for the server too: the file systems'
        // size limits lie out there (ext4's 16 TiB), and its EFBIG is the write's, as
        // locally, not the next call's.
        let synchronous = libc::O_SYNC | libc::O_DSYNC | libc::O_APPEND | libc::O_DIRECT;
        let behind = self
            .sh
            .handles
            .lock()
            .map
            .get(&fh)
            .is_some_and(|h| h.flags & synchronous == 0)
            && (offset as u64).saturating_add(data.len() as u64) <= SYNC_BEYOND;
        if !behind {
            return self.send_fh(fh, build, separate, 0, move |r| {
                match body(r, |_, rd| rd.u32()) {
                    Ok(n) => reply.written(n),
                    Err(e) => reply.error(e),
                }
            });
        }
        let start = offset as u64;
        let id = self.sh.behind_start(ino, start, start + len as u64);
        let sh = self.sh.clone();
        let done = move |r| {
            let error = match body(r, |_, rd| rd.u32()) {
                Ok(n) if n == len => None,
                Ok(_) => Some(libc::EIO),
                Err(e) => Some(e),
            };
            sh.behind_end(id, ino, error);
        };
        self.sh.request_now(
            Box::new(move |sh| Ok(build(sh.server_fh(fh)?))),
            separate,
            0,
            Box::new(done),
            true,
        );
        reply.written(len);
    }

    fn flush(&mut self, _req: &Request<'_>, ino: u64, fh: u64, lock_owner: u64, reply: ReplyEmpty) {
        // The writes behind are on the server first; their error is the close's.
        self.sh.drain();
        if let Some(e) = self.sh.behind_error(ino) {
            return reply.error(e);
        }
        // A flush only releases the closing owner's locks (writes are already on the
        // server): answered here for a file this mount never locked (or locked in a
        // session that is gone, with its locks).
        let server_fh = {
            let hs = self.sh.handles.lock();
            hs.map
                .get(&fh)
                .filter(|h| h.locked && h.generation == self.sh.conn.generation())
                .map(|h| h.server_fh)
        };
        let Some(server_fh) = server_fh else {
            return reply.ok();
        };
        let mut w = req(Op::Flush);
        w.u64(server_fh).u64(lock_owner);
        self.empty(w, reply);
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // A handle of a session that is gone has nothing left on the server.
        let generation = self.sh.conn.generation();
        let Some((server_fh, locked)) = self.sh.take_handle(fh) else {
            return reply.ok();
        };
        // Nothing to unlock: the server's close tells no one anything, so it goes
        // later with others (the kernel does not wait for a RELEASE anyway, but each
        // one was a request served and answered on both sides).
        if !locked && lock_owner.is_none() {
            self.sh.release_later(server_fh, generation);
            return reply.ok();
        }
        let mut w = req(Op::Release);
        w.u64(server_fh)
            .u64(lock_owner.unwrap_or(0))
            .u32(lock_owner.is_some() as u32);
        self.empty(w, reply);
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, fh: u64, datasync: bool, reply: ReplyEmpty) {
        self.sh.drain();
        if let Some(e) = self.sh.behind_error(ino) {
            return reply.error(e);
        }
        let build = move |fh| {
            let mut w = req(Op::Fsync);
            w.u64(fh).u32(datasync as u32);
            w
        };
        self.empty_fh(fh, build, reply);
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let path = path_or!(self, ino, reply);
        let mut w = req(Op::Opendir);
        // With the listing's first page (READDIRPLUS, the kernel's next request).
        w.bytes(&path).u32(DIR_PAGE);
        let (sh, generation) = (self.sh.clone(), self.sh.conn.generation());
        self.send(w, move |r| {
            match body(r, |_, rd| Ok((rd.u64()?, rd.rest().to_vec()))) {
                Ok((server_fh, page)) => {
                    let fh = sh.add_handle(Handle {
                        node: ino,
                        flags: 0,
                        dir: true,
                        ino: 0,
                        server_fh,
                        generation,
                        locked: false,
                        listing: Listing {
                            first_page: (!page.is_empty()).then_some(page),
                            end: None,
                        },
                    });
                    reply.opened(fh, 0)
                }
                Err(e) => reply.error(stale(&sh, ino, e)),
            }
        });
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        // About what one kernel readdir buffer holds: the rest would be dropped.
        let build = move |fh| {
            let mut w = req(Op::Readdir);
            w.u64(fh).i64(offset).u32(8192);
            w
        };
        self.send_fh(fh, build, None, 0, move |r| {
            let res = body(r, |_, rd| {
                let n = rd.u32()?;
                for _ in 0..n {
                    let (ino, next, typ) = (rd.u64()?, rd.i64()?, rd.u8()?);
                    let name = rd.bytes()?;
                    if reply.add(ino.max(1), next, dtype(typ), OsStr::from_bytes(name)) {
                        break;
                    }
                }
                Ok(())
            });
            match res {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readdirplus(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let dir = path_or!(self, ino, reply);
        // The first page came with the handle; past the end nothing more will come.
        let known = {
            let mut hs = self.sh.handles.lock();
            hs.map.get_mut(&fh).and_then(|h| match h.listing.end {
                Some(end) if end == offset => Some(None),
                _ if offset == 0 => h.listing.first_page.take().map(Some),
                _ => None,
            })
        };
        let (sh, ttl) = (self.sh.clone(), self.opts.entry_timeout);
        match known {
            Some(None) => return reply.ok(),
            Some(Some(page)) => {
                let res = add_page(&sh, &dir, offset, ttl, &mut Reader::new(&page), &mut reply)
                    .map_err(|_| libc::EIO);
                return finish_page(&sh, fh, res, reply);
            }
            None => {}
        }
        // The kernel's buffer is one page: the server sends what fits in it.
        let build = move |fh| {
            let mut w = req(Op::Readdirplus);
            w.u64(fh).i64(offset).u32(DIR_PAGE);
            w
        };
        self.send_fh(fh, build, None, 0, move |r| {
            let res = body(r, |_, rd| add_page(&sh, &dir, offset, ttl, rd, &mut reply));
            finish_page(&sh, fh, res, reply);
        });
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        let Some((server_fh, _)) = self.sh.take_handle(fh) else {
            return reply.ok();
        };
        let mut w = req(Op::Releasedir);
        w.u64(server_fh);
        self.empty(w, reply);
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        self.send(req(Op::Statfs), move |r| {
            match body(r, |_, rd| {
                Ok((
                    [rd.u64()?, rd.u64()?, rd.u64()?, rd.u64()?, rd.u64()?],
                    [rd.u32()?, rd.u32()?, rd.u32()?],
                ))
            }) {
                Ok((a, b)) => reply.statfs(a[0], a[1], a[2], a[3], a[4], b[0], b[1], b[2]),
                Err(e) => reply.error(e),
            }
        });
    }

    fn setxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.set_xattr(ino, name, value, flags, reply)
    }

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        self.get_xattr(ino, name, size, reply)
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        self.list_xattr(ino, size, reply)
    }

    fn removexattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        self.remove_xattr(ino, name, reply)
    }

    fn getlk(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        lock_owner: u64,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let range = LockRange::new(lock_owner, start, end, typ, pid);
        self.get_lock(fh, range, reply)
    }

    fn setlk(
        &mut self,
        req_: &Request<'_>,
        _ino: u64,
        fh: u64,
        lock_owner: u64,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let range = LockRange::new(lock_owner, start, end, typ, pid);
        self.set_lock(fh, range, sleep, req_.pid(), reply)
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.changed(&[ino]);
        self.sh.nodes.lock().data_changed(ino);
        let build = move |fh| {
            let mut w = req(Op::Fallocate);
            w.u64(fh)
                .u64(offset as u64)
                .u64(length as u64)
                .u32(mode as u32);
            w
        };
        self.empty_fh(fh, build, reply);
    }

    fn lseek(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        whence: i32,
        reply: fuser::ReplyLseek,
    ) {
        // The kernel sends only SEEK_DATA and SEEK_HOLE: answered by the server's file
        // system, which knows the holes (writes behind reach it first).
        let build = move |fh| {
            let mut w = req(Op::Lseek);
            w.u64(fh).i64(offset).u32(whence as u32);
            w
        };
        self.send_fh(fh, build, None, 0, move |r| {
            match body(r, |_, rd| rd.i64()) {
                Ok(at) => reply.offset(at),
                Err(e) => reply.error(e),
            }
        });
    }
}

impl OmxFs {
    fn remove(&mut self, op: Op, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let path = join(&path_or!(self, parent, reply), name);
        let epoch = self.sh.nodes.lock().change_sent(parent);
        self.paths_changed(&[&path]);
        let mut w = req(op);
        w.bytes(&path);
        let (sh, asked) = (self.sh.clone(), Instant::now());
        self.send(w, move |r| match r {
            Ok(r) => {
                let mut nodes = sh.nodes.lock();
                nodes.removed(&path);
                let mut rd = Reader::new(&r.body);
                let change = Stamp::decode_change(&mut rd);
                let parent_attr = Attr::decode(&mut rd).ok();
                nodes.change_done(parent, epoch, with_count(parent_attr, change), asked);
                nodes.dir_changed(parent, change, asked);
                reply.ok()
            }
            Err(e) => {
                let mut nodes = sh.nodes.lock();
                nodes.change_done(parent, epoch, None, asked);
                nodes.dir_unknown(parent);
                drop(nodes);
                reply.error(e)
            }
        });
    }
}

/// A directory's attributes after an entry change, with the change's count (the
/// server's stamp after it): none without both.
fn with_count(attr: Option<Attr>, change: Option<(Stamp, Stamp)>) -> Option<(Attr, u64)> {
    Some((attr?, change?.1.count))
}

/// Answers a CREATE whose file already existed by opening it (blocking).
fn open_existing(
    sh: &Arc<Shared>,
    path: Vec<u8>,
    flags: i32,
    ttl: Duration,
    generation: u64,
    reply: ReplyCreate,
) {
    let mut w = req(Op::Open);
    w.bytes(&path).u32(flags as u32).u32(0).u32(0).u32(0);
    let opened = sh.conn.call(w, None, 0);
    match body(opened, |_, rd| Ok((rd.u64()?, Attr::decode(rd)?))) {
        Ok((server_fh, a)) => {
            sh.check_replaced(&path, a.ino);
            let ino = sh.nodes.lock().looked_up(path);
            let fh = sh.add_handle(Handle::file(ino, flags, a.ino, server_fh, generation));
            reply.created(&ttl, &file_attr(ino, &a), 0, fh, 0)
        }
        Err(e) => reply.error(e),
    }
}
