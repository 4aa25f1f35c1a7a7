//! Directory listings: opendir, readdir, READDIRPLUS pages into the kernel's buffer,
//! releasedir. A listing takes one round trip for a small directory: its first page
//! comes with the OPENDIR reply, and the page after the last one is answered here
//! (empty) instead of asked for. Each entry a page brings is a lookup for the kernel
//! (a node, its attributes).

use super::attrs::{dtype, file_attr};
use super::nodes::join;
use super::request::{body, path_or, req, stale};
use super::shared::{Handle, Shared};
use super::OmxFs;
use crate::proto::{Attr, Malformed, Op, Reader, ENTRY_ATTR, ENTRY_NO_XATTRS};
use fuser::{ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyOpen};
use parking_lot::Mutex;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The bounds of what a listing page asks the server for, in bytes of the kernel's
/// READDIRPLUS buffer: one memory page on older kernels, up to what `getdents64` was
/// given (32 KiB for glibc's `readdir`, `ls`, Python) on recent ones.
const DIR_PAGE_MIN: u32 = 4096;
const DIR_PAGE_MAX: u32 = 32768;

/// What the next listing page asks for. fuser does not say how large the kernel's
/// buffer is: a page it could not take whole makes the following ones ask for what it
/// took, for [`DIR_PAGE_SHRUNK`] (then the largest again: a program with a small
/// `getdents64` buffer does not shrink the mount's listings for good). With one-page
/// requests a listing of 20,000 entries took 833 round trips, 24 entries each.
static DIR_PAGE: Mutex<(u32, Option<Instant>)> = Mutex::new((DIR_PAGE_MAX, None));
const DIR_PAGE_SHRUNK: Duration = Duration::from_secs(10);

pub fn dir_page() -> u32 {
    match *DIR_PAGE.lock() {
        (page, Some(until)) if Instant::now() < until => page,
        _ => DIR_PAGE_MAX,
    }
}

/// What an entry takes in the kernel's buffer (struct fuse_direntplus).
fn kernel_size(name: usize) -> u32 {
    (128 + ((24 + name + 7) & !7)) as u32
}

#[derive(Default)]
pub struct Listing {
    /// The first page (a READDIRPLUS reply body), taken by the kernel's first read.
    pub first_page: Option<Vec<u8>>,
    /// The offset past the last entry, once a page reached it.
    pub end: Option<i64>,
    /// When the first page was asked for, with the count of extended attribute
    /// changes then ([`Asked`]).
    pub first_asked: Option<Asked>,
}

/// When a listing page was asked for and the count of extended attribute changes sent
/// through this client then: an entry it finds without any has none for the attribute
/// timeout from then, unless one changed since.
#[derive(Clone, Copy)]
pub struct Asked {
    pub at: Instant,
    pub xattr_changes: u64,
}

impl Asked {
    fn now(sh: &Shared) -> Asked {
        Asked {
            at: Instant::now(),
            xattr_changes: sh.nodes.lock().xattr_changes(),
        }
    }
}

/// Adds a page's entries to the kernel's buffer; the listing's end offset when the
/// page reached it and every entry fitted.
pub fn add_page(
    sh: &Arc<Shared>,
    dir: &[u8],
    offset: i64,
    ttl: Duration,
    asked: Option<Asked>,
    rd: &mut Reader,
    reply: &mut ReplyDirectoryPlus,
) -> Result<Option<i64>, Malformed> {
    let n = rd.u32()?;
    let (mut last, mut used) = (offset, 0u32);
    for _ in 0..n {
        let (d_ino, next, _dtype) = (rd.u64()?, rd.i64()?, rd.u8()?);
        let name = OsStr::from_bytes(rd.bytes()?);
        let size = kernel_size(name.len());
        let flags = rd.u8()?;
        let attr = match flags & ENTRY_ATTR {
            0 => None,
            _ => Some(Attr::decode(rd)?),
        };
        let full = match attr {
            // The kernel counts one lookup for each entry it takes (not `.` and `..`,
            // which come without attributes).
            Some(a) => {
                let path = join(dir, name);
                sh.check_replaced(&path, a.ino);
                let mut nodes = sh.nodes.lock();
                let node = nodes.looked_up(path, &a);
                nodes.gave(node, a, false);
                if let (Some(asked), true) = (asked, flags & ENTRY_NO_XATTRS != 0) {
                    nodes.no_xattrs(node, asked.at + ttl, asked.xattr_changes);
                }
                let full = reply.add(node, next, name, &ttl, &file_attr(node, &a), 0);
                if full {
                    nodes.forget(node, 1);
                }
                full
            }
            None if name == "." || name == ".." => {
                let dir = Attr {
                    mode: libc::S_IFDIR,
                    ..Attr::default()
                };
                let a = file_attr(d_ino.max(1), &dir);
                reply.add(0, next, name, &Duration::ZERO, &a, 0)
            }
            // Gone between the listing and its lstat on the server.
            None => false,
        };
        if full {
            // The kernel's buffer holds `used` bytes and not this entry's more.
            let fits = used
                .next_multiple_of(DIR_PAGE_MIN)
                .clamp(DIR_PAGE_MIN, DIR_PAGE_MAX);
            *DIR_PAGE.lock() = (fits, Some(Instant::now() + DIR_PAGE_SHRUNK));
            return Ok(None);
        }
        used += size;
        last = next;
    }
    // A server that does not say where the listing ends leaves the client asking.
    let end = rd.u8().unwrap_or(0) != 0;
    Ok(end.then_some(last))
}

/// Answers the kernel with the page added, remembering where the listing ends.
pub fn finish_page(
    sh: &Arc<Shared>,
    fh: u64,
    res: Result<Option<i64>, i32>,
    reply: ReplyDirectoryPlus,
) {
    match res {
        Ok(end) => {
            if let Some(h) = sh.handles.lock().map.get_mut(&fh) {
                h.listing.end = end;
            }
            reply.ok()
        }
        Err(e) => reply.error(e),
    }
}

impl OmxFs {
    pub(super) fn open_dir(&self, ino: u64, reply: ReplyOpen) {
        let path = path_or!(self, ino, reply);
        let mut w = req(Op::Opendir);
        // With the listing's first page (READDIRPLUS, the kernel's next request).
        w.bytes(&path).u32(dir_page());
        let (sh, generation) = (self.sh.clone(), self.sh.conn.generation());
        let asked = Asked::now(&sh);
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
                            first_asked: Some(asked),
                        },
                    });
                    reply.opened(fh, 0)
                }
                Err(e) => reply.error(stale(&sh, ino, e)),
            }
        });
    }

    pub(super) fn read_dir(&self, fh: u64, offset: i64, mut reply: ReplyDirectory) {
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

    pub(super) fn read_dir_plus(
        &self,
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
                _ if offset == 0 => {
                    let asked = h.listing.first_asked;
                    h.listing.first_page.take().map(|p| Some((p, asked)))
                }
                _ => None,
            })
        };
        let (sh, ttl) = (self.sh.clone(), self.opts.entry_timeout);
        match known {
            Some(None) => return reply.ok(),
            Some(Some((page, asked))) => {
                let mut rd = Reader::new(&page);
                let res = add_page(&sh, &dir, offset, ttl, asked, &mut rd, &mut reply)
                    .map_err(|_| libc::EIO);
                return finish_page(&sh, fh, res, reply);
            }
            None => {}
        }
        // The server sends what fits in the kernel's buffer (as far as known).
        let page = dir_page();
        let build = move |fh| {
            let mut w = req(Op::Readdirplus);
            w.u64(fh).i64(offset).u32(page);
            w
        };
        let asked = Some(Asked::now(&sh));
        self.send_fh(fh, build, None, 0, move |r| {
            let res = body(r, |_, rd| {
                add_page(&sh, &dir, offset, ttl, asked, rd, &mut reply)
            });
            finish_page(&sh, fh, res, reply);
        });
    }

    pub(super) fn release_dir(&self, fh: u64, reply: ReplyEmpty) {
        let Some((server_fh, _)) = self.sh.take_handle(fh) else {
            return reply.ok();
        };
        let mut w = req(Op::Releasedir);
        w.u64(server_fh);
        self.empty(w, reply);
    }
}
