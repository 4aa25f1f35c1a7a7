//! Open files: open (close-to-open: whether the kernel keeps the file's pages),
//! read, flush, release, fsync, fallocate and lseek through the kernel's handles.
//! Writes are in `behind.rs`, the batching of releases in `releases.rs`.

use super::releases::release_request;
use super::request::{body, path_or, req, stale};
use super::shared::Handle;
use super::OmxFs;
use crate::proto::*;
use fuser::{consts, ReplyData, ReplyEmpty, ReplyLseek, ReplyOpen};

/// An `OPEN` of the file at `path` with the kernel's `flags` (no create: mode, uid and
/// gid 0): the one layout of an open, first or again after a server restart.
pub(super) fn open_request(path: &[u8], flags: i32) -> Writer {
    let mut w = req(Op::Open);
    w.bytes(path).u32(flags as u32).u32(0).u32(0).u32(0);
    w
}

/// An `OPEN` reply: the server's handle and the file's attributes.
pub(super) fn opened(rd: &mut Reader) -> Result<(u64, Attr), Malformed> {
    Ok((rd.u64()?, Attr::decode(rd)?))
}

impl OmxFs {
    pub(super) fn open_file(&self, ino: u64, flags: i32, reply: ReplyOpen) {
        let path = path_or!(self, ino, reply);
        let w = open_request(&path, flags);
        // Close-to-open as NFS: the kernel keeps the file's cached pages
        // (FOPEN_KEEP_CACHE) only when the file is as it was when they were cached
        // (inode, size, mtime, ctime) and nothing changed it through this client since;
        // otherwise it drops them.
        let (sh, generation) = (self.sh.clone(), self.sh.conn.generation());
        let data_epoch = sh.nodes.lock().data_epoch(ino);
        self.send(w, move |r| {
            match body(r, |_, rd| opened(rd)) {
                Ok((server_fh, a)) if a.mode & libc::S_IFMT == libc::S_IFDIR => {
                    // The kernel opens a file, the path names a directory now: the
                    // file is gone.
                    sh.close_now(server_fh);
                    reply.error(stale(&sh, ino, libc::ENOENT))
                }
                Ok((server_fh, a)) if sh.other_file_open(ino, a.ino) => {
                    // The node's open files are another file than the one now at its
                    // path (removed or renamed over by someone else): the kernel's inode
                    // has the old file's attributes (its size would cut this file's
                    // reads). The node leaves the path and `ESTALE` has the kernel look
                    // the name up again (a new node) and open that.
                    sh.close_now(server_fh);
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

    pub(super) fn read_data(&self, ino: u64, fh: u64, offset: i64, size: u32, reply: ReplyData) {
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

    pub(super) fn flush_file(&self, ino: u64, fh: u64, lock_owner: u64, reply: ReplyEmpty) {
        // The writes behind are on the server first; their error is the close's.
        if let Some(e) = self.sh.settle(ino) {
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

    pub(super) fn release_file(&self, fh: u64, lock_owner: Option<u64>, reply: ReplyEmpty) {
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
        self.empty(release_request(&[server_fh], lock_owner), reply);
    }

    pub(super) fn fsync_file(&self, ino: u64, fh: u64, datasync: bool, reply: ReplyEmpty) {
        if let Some(e) = self.sh.settle(ino) {
            return reply.error(e);
        }
        let build = move |fh| {
            let mut w = req(Op::Fsync);
            w.u64(fh).u32(datasync as u32);
            w
        };
        self.empty_fh(fh, build, reply);
    }

    pub(super) fn allocate(
        &self,
        ino: u64,
        fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.data_changing(ino);
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

    pub(super) fn seek(&self, fh: u64, offset: i64, whence: i32, reply: ReplyLseek) {
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
