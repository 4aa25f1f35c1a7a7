//! Names: lookups and entry changes (create, mknod, mkdir, symlink, link, unlink,
//! rmdir, rename). Every entry change goes through the same steps here: counted in
//! flight in its directory before it is sent, then its reply's change stamps and
//! the directory's attributes given to the nodes (`Nodes::change_answered`), or the
//! directory's contents forgotten on an error (`Nodes::change_failed`); a lookup may
//! be answered from a directory the client knows complete.

use super::attrs::file_attr;
use super::conn::Reply;
use super::files::{open_request, opened};
use super::nodes::{join, CAPABILITY_XATTR};
use super::request::{body, path_or, req};
use super::shared::{Handle, Shared};
use super::OmxFs;
use crate::proto::*;
use fuser::{ReplyCreate, ReplyEmpty, ReplyEntry, Request};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest name Linux file systems take (longer ones are always asked about).
const NAME_MAX: usize = 255;

impl OmxFs {
    /// A request that makes entry `path` in directory `parent` (a directory: `dir`).
    /// `stale`: a node whose attributes in the kernel the change made stale (a link's
    /// source: another node, as nodes are paths), dropped once it is answered.
    pub(super) fn entry(
        &self,
        w: Writer,
        parent: u64,
        path: Vec<u8>,
        dir: bool,
        stale: Option<u64>,
        reply: ReplyEntry,
    ) {
        let (sh, ttl, asked) = (self.sh.clone(), self.opts.entry_timeout, Instant::now());
        let (epoch, sent) = {
            let mut nodes = self.sh.nodes.lock();
            (nodes.change_sent(parent), nodes.path_epoch(&path))
        };
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
                let ino = nodes.entry_given(path, a, sent);
                nodes.change_answered(parent, epoch, change, parent_attr, asked);
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
                sh.nodes.lock().change_failed(parent, epoch, asked);
                reply.error(e)
            }
        });
    }

    pub(super) fn look_up(&self, parent: u64, name: &OsStr, reply: ReplyEntry) {
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
        // A name it knows there (the kernel's entry expired, as before each unlink):
        // the node with the attributes the kernel holds, valid no longer (so asked for
        // again before they are used: `Nodes::known_present`).
        if let Some((ino, a)) = known
            .then(|| sh.nodes.lock().known_present(parent, name.as_bytes(), ttl))
            .flatten()
        {
            return reply.entry(&Duration::ZERO, &file_attr(ino, &a), 0);
        }
        let sent = sh.nodes.lock().path_epoch(&path);
        let mut w = req(Op::Lookup);
        w.bytes(&path);
        self.send(w, move |r| match body(r, |_, rd| Attr::decode(rd)) {
            Ok(a) => {
                sh.check_replaced(&path, a.ino);
                let ino = sh.nodes.lock().entry_given(path, a, sent);
                reply.entry(&ttl, &file_attr(ino, &a), 0)
            }
            Err(libc::ENOENT) => reply.entry(&ttl, &file_attr(0, &Attr::default()), 0),
            Err(e) => reply.error(e),
        });
    }

    pub(super) fn make_node(
        &self,
        req_: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
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

    pub(super) fn make_dir(
        &self,
        req_: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        reply: ReplyEntry,
    ) {
        let path = join(&path_or!(self, parent, reply), name);
        let mut w = req(Op::Mkdir);
        w.bytes(&path).u32(mode).u32(req_.uid()).u32(req_.gid());
        self.entry(w, parent, path, true, None, reply);
    }

    pub(super) fn make_symlink(
        &self,
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

    pub(super) fn rename_entry(
        &self,
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
                n.change_answered(parent, epochs[0], from_change, from_attr, asked);
                n.change_answered(newparent, epochs[1], to_change, to_attr, asked);
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
                {
                    let mut n = sh.nodes.lock();
                    n.change_failed(parent, epochs[0], asked);
                    n.change_failed(newparent, epochs[1], asked);
                }
                reply.error(e)
            }
        });
    }

    pub(super) fn make_link(&self, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry) {
        let from = path_or!(self, ino, reply);
        let to = join(&path_or!(self, newparent, reply), newname);
        self.changed(&[ino]);
        let mut w = req(Op::Link);
        w.bytes(&from).bytes(&to);
        self.entry(w, newparent, to, false, Some(ino), reply);
    }

    pub(super) fn create_file(
        &self,
        req_: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let path = join(&path_or!(self, parent, reply), name);
        let (epoch, sent) = {
            let mut nodes = self.sh.nodes.lock();
            (nodes.change_sent(parent), nodes.path_epoch(&path))
        };
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
                        let ino = nodes.entry_given(path, a, sent);
                        nodes.change_answered(parent, epoch, change, parent_attr, asked);
                        nodes.set_xattr_absent(ino, CAPABILITY_XATTR, Instant::now() + attr_ttl);
                        ino
                    };
                    let fh = sh.add_handle(Handle::file(ino, flags, a.ino, server_fh, generation));
                    reply.created(&ttl, &file_attr(ino, &a), 0, fh, 0)
                }
                Err(e) => {
                    sh.nodes.lock().change_failed(parent, epoch, asked);
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

    /// An unlink or rmdir (`op`) of `name` in `parent`.
    pub(super) fn remove(&self, op: Op, parent: u64, name: &OsStr, reply: ReplyEmpty) {
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
                nodes.change_answered(parent, epoch, change, parent_attr, asked);
                reply.ok()
            }
            Err(e) => {
                sh.nodes.lock().change_failed(parent, epoch, asked);
                reply.error(e)
            }
        });
    }
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
    let answer = sh.conn.call(open_request(&path, flags), None, 0);
    match body(answer, |_, rd| opened(rd)) {
        Ok((server_fh, a)) => {
            sh.check_replaced(&path, a.ino);
            let ino = {
                let mut nodes = sh.nodes.lock();
                let ino = nodes.looked_up(path, &a);
                nodes.gave(ino, a, false);
                ino
            };
            let fh = sh.add_handle(Handle::file(ino, flags, a.ino, server_fh, generation));
            reply.created(&ttl, &file_attr(ino, &a), 0, fh, 0)
        }
        Err(e) => reply.error(e),
    }
}
