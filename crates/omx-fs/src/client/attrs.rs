//! Attributes: the protocol's attributes and entry types as FUSE takes them, and
//! `getattr`/`setattr`, which go through an open handle of a node whose name is gone
//! and answer from attributes a reply brought within `attr_timeout` (kept in the
//! nodes, `Nodes::keep_attr`/`fresh_attr`, dropped whenever the node may change).

use super::conn::Reply;
use super::request::{body, path_or, req, stale};
use super::shared::Shared;
use super::OmxFs;
use crate::proto::{set, Attr, Op};
use fuser::{FileAttr, FileType, ReplyAttr, TimeOrNow};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn time(t: (i64, u32)) -> SystemTime {
    if t.0 >= 0 {
        UNIX_EPOCH + Duration::new(t.0 as u64, t.1)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.0.unsigned_abs()) + Duration::from_nanos(t.1 as u64)
    }
}

/// The inverse of [`time`]: seconds (negative before 1970) and nanoseconds (always
/// forward). A time before the epoch was set as the epoch itself (`touch -d @-1000000`).
fn unix_time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (s, n) = (d.as_secs() as i64, d.subsec_nanos());
            if n == 0 {
                (-s, 0)
            } else {
                (-s - 1, 1_000_000_000 - n)
            }
        }
    }
}

/// What a `setattr` changes (`None`: left as it is).
pub struct AttrChanges {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
}

pub fn file_attr(ino: u64, a: &Attr) -> FileAttr {
    let kind = match a.mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    };
    FileAttr {
        ino,
        size: a.size,
        blocks: a.blocks,
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind,
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

pub fn dtype(t: u8) -> FileType {
    match t {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

impl OmxFs {
    /// The handle a `getattr`/`setattr` of `ino` goes through: the one the kernel gave,
    /// else, when the node's name was removed through this client, any handle of it
    /// still open (none: the path is used, and the server says it is gone).
    /// (`GETATTR` also takes a directory's handle: a directory removed while open.)
    pub(super) fn file_handle(&self, ino: u64, given: Option<u64>, dirs: bool) -> Option<u64> {
        if given.is_some() || !self.sh.nodes.lock().detached(ino) {
            return given;
        }
        let hs = self.sh.handles.lock();
        hs.map
            .iter()
            .find(|(_, h)| h.node == ino && (dirs || !h.dir))
            .map(|(&fh, _)| fh)
    }

    pub(super) fn get_attr(&self, ino: u64, fh: Option<u64>, reply: ReplyAttr) {
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
                        sh.nodes.lock().keep_attr_given(ino, epoch, a, asked);
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
            self.sh.nodes.lock().gave(ino, a, true);
            return reply.attr(&left, &file_attr(ino, &a));
        }
        let mut w = req(Op::Getattr);
        w.bytes(&path);
        let (sh, asked) = (self.sh.clone(), Instant::now());
        self.send(w, move |r| {
            answer_attr(&sh, ino, (epoch, asked), ttl, r, reply)
        });
    }

    /// A `setattr` of `ino` (through handle `fh` when the kernel names one).
    pub(super) fn set_attr(&self, ino: u64, fh: Option<u64>, ch: AttrChanges, reply: ReplyAttr) {
        let AttrChanges {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        } = ch;
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
                Some(TimeOrNow::SpecificTime(t)) => (at, unix_time(t)),
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
        let epoch = self.data_changing(ino);
        let (sh, asked) = (self.sh.clone(), Instant::now());
        // As for `getattr` (the change reached what is at the path now, as any change
        // of a name another client replaced does: nodes are paths).
        let done = move |r| answer_attr(&sh, ino, (epoch, asked), ttl, r, reply);
        self.sh
            .request(Box::new(build), None, 0, Box::new(done), true);
    }
}

/// Answers a path's GETATTR or SETATTR reply: the attributes, kept as given to the
/// kernel (`asked`: when the request left, under data epoch `epoch`). Another type at
/// the path (the name replaced by someone else) gives `ESTALE`, so the kernel looks it
/// up again (a new inode) instead of failing the call with `EIO` and marking its inode
/// bad.
fn answer_attr(
    sh: &Arc<Shared>,
    ino: u64,
    (epoch, asked): (u64, Instant),
    ttl: Duration,
    r: Result<Reply, i32>,
    reply: ReplyAttr,
) {
    match body(r, |_, rd| Attr::decode(rd)) {
        Ok(a) if sh.nodes.lock().other_kind(ino, &a) => reply.error(stale(sh, ino, libc::ENOENT)),
        Ok(a) => {
            sh.nodes.lock().keep_attr_given(ino, epoch, a, asked);
            reply.attr(&ttl, &file_attr(ino, &a))
        }
        Err(e) => reply.error(stale(sh, ino, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_and_after_the_epoch_round_trip() {
        for t in [
            (0, 0),
            (1, 5),
            (1_700_000_000, 999_999_999),
            (-1, 0),
            (-1, 1),
            (-1_000_000, 0),
            (-2, 500_000_000),
            (-4_000_000_000, 123),
        ] {
            assert_eq!(unix_time(time(t)), t, "{t:?}");
        }
    }
}
