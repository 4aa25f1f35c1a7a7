//! `omxfs`: the FUSE client. Every operation becomes one request sent at once; its
//! reply is given to the kernel from the completion thread, so many requests are in
//! flight (and a blocked lock wait stops nothing else).
//!
//! Node ids are the client's own, one per path (like sshfs) but shared by the names of
//! one file with several links: a node maps to a path relative to the export (and to
//! its other names), renames move the paths under it.
//!
//! This file holds the mount's state and the kernel's entry points, each handed to
//! the module of its role: `request` (sending, reply decoding, stale nodes),
//! `entries` (lookups and entry changes), `attrs` (getattr/setattr, kept
//! attributes), `files` (open, read, flush, release, fsync...), `behind` (writes
//! behind), `releases` (batched closes), `listing` (directories), `xattrs`,
//! `locking`; `nodes` and `shared` are the state they share, `conn` the connection.

mod attrs;
mod behind;
pub mod conn;
mod entries;
mod files;
mod listing;
mod locking;
mod nodes;
mod releases;
mod request;
mod shared;
mod xattrs;

use crate::proto::*;
use attrs::AttrChanges;
use conn::Conn;
use fuser::*;
use locking::LockRange;
use nodes::Nodes;
use parking_lot::Mutex;
use request::{body, path_or, req, stale};
use shared::{Handles, Shared};
use std::ffi::OsStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub struct Options {
    pub attr_timeout: Duration,
    pub entry_timeout: Duration,
}

pub struct OmxFs {
    sh: Arc<Shared>,
    opts: Options,
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

    /// The data of `ino` may be changing through this client (a write, setattr,
    /// fallocate): as [`OmxFs::changed`], and its next open drops the kernel's pages.
    fn data_changing(&self, ino: u64) -> u64 {
        let epoch = self.changed(&[ino]);
        self.sh.nodes.lock().data_changed(ino);
        epoch
    }

    fn paths_changed(&self, paths: &[&[u8]]) {
        let mut nodes = self.sh.nodes.lock();
        for p in paths {
            nodes.path_changed(p);
        }
    }
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
        self.look_up(parent, name, reply)
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, nlookup: u64) {
        self.sh.nodes.lock().forget(ino, nlookup);
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, fh: Option<u64>, reply: ReplyAttr) {
        self.get_attr(ino, fh, reply)
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
        let ch = AttrChanges {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        self.set_attr(ino, fh, ch, reply)
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
        self.make_node(req_, parent, name, mode, rdev, reply)
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
        self.make_dir(req_, parent, name, mode, reply)
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
        self.make_symlink(req_, parent, link_name, target, reply)
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
        self.rename_entry(parent, name, newparent, newname, flags, reply)
    }

    fn link(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.make_link(ino, newparent, newname, reply)
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        self.open_file(ino, flags, reply)
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
        self.create_file(req_, parent, name, mode, flags, reply)
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
        self.read_data(ino, fh, offset, size, reply)
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
        self.write_data(ino, fh, offset, data, reply)
    }

    fn flush(&mut self, _req: &Request<'_>, ino: u64, fh: u64, lock_owner: u64, reply: ReplyEmpty) {
        self.flush_file(ino, fh, lock_owner, reply)
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
        self.release_file(fh, lock_owner, reply)
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, fh: u64, datasync: bool, reply: ReplyEmpty) {
        self.fsync_file(ino, fh, datasync, reply)
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        self.open_dir(ino, reply)
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        reply: ReplyDirectory,
    ) {
        self.read_dir(fh, offset, reply)
    }

    fn readdirplus(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        reply: ReplyDirectoryPlus,
    ) {
        self.read_dir_plus(ino, fh, offset, reply)
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        self.release_dir(fh, reply)
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
        ino: u64,
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
        self.set_lock(ino, fh, range, sleep, req_.pid(), reply)
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
        self.allocate(ino, fh, offset, length, mode, reply)
    }

    fn lseek(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.seek(fh, offset, whence, reply)
    }
}
