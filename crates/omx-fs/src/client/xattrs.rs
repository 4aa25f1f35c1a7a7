//! Extended attributes: an attribute found absent is remembered for `attr_timeout`
//! (the kernel asks for `security.capability` before every write and chown).

use super::conn::Reply;
use super::request::{body, path_or, req, stale};
use super::OmxFs;
use crate::proto::*;
use fuser::{ReplyEmpty, ReplyXattr};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Instant;

impl OmxFs {
    pub(super) fn set_xattr(
        &self,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        reply: ReplyEmpty,
    ) {
        let path = path_or!(self, ino, reply);
        self.changed(&[ino]);
        self.sh.nodes.lock().xattrs_changed(ino);
        if value.len() > MAX_HEADER - 1024 {
            return reply.error(libc::E2BIG);
        }
        let mut w = req(Op::Setxattr);
        w.bytes(&path)
            .bytes(name.as_bytes())
            .bytes(value)
            .u32(flags as u32);
        self.empty_xattr(w, ino, reply);
    }

    pub(super) fn get_xattr(&self, ino: u64, name: &OsStr, size: u32, reply: ReplyXattr) {
        let path = path_or!(self, ino, reply);
        let name = name.as_bytes().to_vec();
        if self.sh.nodes.lock().xattr_absent(ino, &name) {
            return reply.error(libc::ENODATA);
        }
        let mut w = req(Op::Getxattr);
        w.bytes(&path).bytes(&name).u32(size);
        // An absent attribute is remembered for the attribute timeout.
        let (sh, ttl) = (self.sh.clone(), self.opts.attr_timeout);
        self.send_xattr(w, ino, move |r| {
            if matches!(r, Err(libc::ENODATA)) {
                let until = Instant::now() + ttl;
                sh.nodes.lock().set_xattr_absent(ino, &name, until);
            }
            xattr_answer(r.map_err(|e| stale(&sh, ino, e)), size, reply)
        });
    }

    pub(super) fn list_xattr(&self, ino: u64, size: u32, reply: ReplyXattr) {
        let path = path_or!(self, ino, reply);
        let mut w = req(Op::Listxattr);
        w.bytes(&path).u32(size);
        let sh = self.sh.clone();
        self.send_xattr(w, ino, move |r| {
            xattr_answer(r.map_err(|e| stale(&sh, ino, e)), size, reply)
        });
    }

    pub(super) fn remove_xattr(&self, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        let path = path_or!(self, ino, reply);
        self.changed(&[ino]);
        self.sh.nodes.lock().xattrs_changed(ino);
        let mut w = req(Op::Removexattr);
        w.bytes(&path).bytes(name.as_bytes());
        self.empty_xattr(w, ino, reply);
    }

    /// A request on `ino`'s path, or, when its name was removed through this client,
    /// on one of its open handles (appended: the server uses its descriptor).
    fn send_xattr(
        &self,
        w: Writer,
        ino: u64,
        done: impl FnOnce(Result<Reply, i32>) + Send + 'static,
    ) {
        match self.file_handle(ino, None, true) {
            Some(fh) => {
                let w = w.0;
                let build = move |server_fh| {
                    let mut w = Writer(w.clone());
                    w.u64(server_fh);
                    w
                };
                self.send_fh(fh, build, None, 0, done)
            }
            None => self.send(w, done),
        }
    }

    fn empty_xattr(&self, w: Writer, ino: u64, reply: ReplyEmpty) {
        if self.file_handle(ino, None, true).is_none() {
            return self.empty_node(w, ino, reply);
        }
        self.send_xattr(w, ino, move |r| match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        });
    }
}

/// A getxattr or listxattr reply: the size asked for, or the value.
fn xattr_answer(r: Result<Reply, i32>, size: u32, reply: ReplyXattr) {
    match body(r, |_, rd| Ok((rd.u32()?, rd.rest().to_vec()))) {
        Ok((n, _)) if size == 0 => reply.size(n),
        Ok((_, v)) => reply.data(&v),
        Err(e) => reply.error(e),
    }
}
