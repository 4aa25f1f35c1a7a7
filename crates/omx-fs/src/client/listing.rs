//! Directory listings: READDIRPLUS pages into the kernel's buffer. A listing takes one
//! round trip for a small directory: its first page comes with the OPENDIR reply, and
//! the page after the last one is answered here (empty) instead of asked for.

use super::attrs::file_attr;
use super::nodes::join;
use super::shared::Shared;
use crate::proto::{Attr, Malformed, Reader};
use fuser::ReplyDirectoryPlus;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

/// The kernel's READDIRPLUS buffer: one page.
pub const DIR_PAGE: u32 = 4096;

#[derive(Default)]
pub struct Listing {
    /// The first page (a READDIRPLUS reply body), taken by the kernel's first read.
    pub first_page: Option<Vec<u8>>,
    /// The offset past the last entry, once a page reached it.
    pub end: Option<i64>,
}

/// Adds a page's entries to the kernel's buffer; the listing's end offset when the
/// page reached it and every entry fitted.
pub fn add_page(
    sh: &Arc<Shared>,
    dir: &[u8],
    offset: i64,
    ttl: Duration,
    rd: &mut Reader,
    reply: &mut ReplyDirectoryPlus,
) -> Result<Option<i64>, Malformed> {
    let n = rd.u32()?;
    let mut last = offset;
    for _ in 0..n {
        let (d_ino, next, _dtype) = (rd.u64()?, rd.i64()?, rd.u8()?);
        let name = OsStr::from_bytes(rd.bytes()?);
        let attr = match rd.u8()? {
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
                let node = nodes.looked_up(path);
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
            return Ok(None);
        }
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
