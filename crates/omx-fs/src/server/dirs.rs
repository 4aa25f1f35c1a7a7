//! Directory handles and listings (READDIRPLUS pages with every entry's attributes).

use super::*;

pub(super) struct Dir {
    stream: *mut libc::DIR,
}
impl Dir {
    /// The stream's descriptor.
    pub(super) fn fd(&self) -> i32 {
        // SAFETY: the stream is valid while `self` lives.
        unsafe { libc::dirfd(self.stream) }
    }
}

// SAFETY: a DIR stream is used under its Mutex by one thread at a time.
unsafe impl Send for Dir {}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: the stream was opened by fdopendir and is closed once.
        unsafe { libc::closedir(self.stream) };
    }
}

impl Server {
    pub(super) fn dir_op(&self, call: Call, r: &mut Reader) -> Result<Writer, Dispatch> {
        let Call { op, s, .. } = call;
        let ex = &self.exports[s.export];
        let mut w = Writer::default();
        match op {
            Op::Opendir => {
                let fd = ex.open_beneath(r.path()?, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
                let raw = fd.as_raw_fd();
                // SAFETY: fdopendir takes ownership of the descriptor on success.
                let stream = unsafe { libc::fdopendir(raw) };
                if stream.is_null() {
                    return Err(Dispatch::Errno(libc::EIO));
                }
                std::mem::forget(fd);
                let dir = Dir { stream };
                // A client that asks for it gets the first READDIRPLUS page with the
                // handle: listing a directory then takes one round trip, not two.
                let first_page = r.rest().get(..4).map(|b| {
                    let max = u32::from_le_bytes(b.try_into().expect("4 bytes"));
                    let mut page = Writer::default();
                    read_dir_page(&dir, 0, max as usize, true, &mut page);
                    page
                });
                let fh = s.next_fh.fetch_add(1, Ordering::Relaxed);
                s.dirs.lock().insert(fh, Arc::new(Mutex::new(dir)));
                w.u64(fh);
                if let Some(mut page) = first_page {
                    w.0.append(&mut page.0);
                }
            }
            Op::Readdir | Op::Readdirplus => {
                let (fh, off, max) = (r.u64()?, r.i64()?, r.u32()?);
                let d = s.dirs.lock().get(&fh).cloned().ok_or(libc::EBADF)?;
                read_dir_page(&d.lock(), off, max as usize, op == Op::Readdirplus, &mut w);
            }
            Op::Releasedir => {
                s.dirs.lock().remove(&r.u64()?).ok_or(libc::EBADF)?;
            }
            _ => unreachable!("dispatched by family"),
        }
        Ok(w)
    }
}

/// Directory entries from offset `off` on, as many as fit in `max` bytes of the
/// client kernel's buffer: each is (ino, offset of the next, d_type, name) and, with
/// `plus` (READDIRPLUS), a flag and the entry's attributes (`lstat` beneath the
/// directory: the name is one component, never followed), so that a listing brings
/// what a `stat` of every entry would ask for. `.` and `..` carry none (the kernel
/// does not look them up; `..` of the export's root is outside it).
fn read_dir_page(d: &Dir, off: i64, max: usize, plus: bool, w: &mut Writer) {
    // SAFETY: the stream is valid while `d` is held.
    unsafe {
        if off == 0 {
            libc::rewinddir(d.stream);
        } else {
            libc::seekdir(d.stream, off as libc::c_long);
        }
    }
    // What an entry takes in the kernel's buffer (struct fuse_dirent[plus]).
    let kernel_size = |name: usize| {
        let dirent = (24 + name + 7) & !7;
        if plus {
            128 + dirent
        } else {
            dirent
        }
    };
    let mut entries = Vec::new();
    let (mut used, mut ours) = (0usize, 0usize);
    let end = loop {
        // SAFETY: as above.
        let pos = unsafe { libc::telldir(d.stream) };
        // SAFETY: as above; the entry stays valid until the next readdir.
        let e = unsafe { libc::readdir(d.stream) };
        if e.is_null() {
            break true;
        }
        // SAFETY: a non-null entry from readdir.
        let (ino, typ, name) = unsafe {
            let e = &*e;
            let name = std::ffi::CStr::from_ptr(e.d_name.as_ptr());
            (e.d_ino, e.d_type, name.to_owned())
        };
        let len = name.to_bytes().len();
        ours += 8 + 8 + 1 + 4 + len + if plus { 1 + ATTR_SIZE } else { 0 };
        used += kernel_size(len);
        if used > max || ours > MAX_HEADER - 64 {
            // SAFETY: as above.
            unsafe { libc::seekdir(d.stream, pos) };
            break false;
        }
        // SAFETY: as above.
        let next = unsafe { libc::telldir(d.stream) };
        entries.push((ino, next as i64, typ, name));
    };
    let stats = if plus {
        lstat_entries(d, &entries)
    } else {
        Vec::new()
    };
    w.u32(entries.len() as u32);
    for (i, (ino, next, typ, name)) in entries.iter().enumerate() {
        w.u64(*ino).i64(*next).u8(*typ).bytes(name.to_bytes());
        if plus {
            match &stats[i] {
                Some((st, bare)) => {
                    w.u8(ENTRY_ATTR | if *bare { ENTRY_NO_XATTRS } else { 0 });
                    Attr::from_stat(st).encode(w);
                }
                None => {
                    w.u8(0);
                }
            }
        }
    }
    // The listing ends here: the client answers the kernel's next page itself.
    w.u8(end as u8);
}

/// Entries a page's `lstat`s fan out to once one of them was slow (the inodes are
/// not cached: each is a disk read, and the disk serves several at once).
const STAT_THREADS: usize = 8;
const SLOW_STAT: Duration = Duration::from_micros(200);

/// The attributes of a listing's entries (None for `.`, `..` and entries gone
/// meanwhile), each with whether it has no extended attributes at all, in parallel
/// when the first one shows they come from the disk.
fn lstat_entries(
    d: &Dir,
    entries: &[(u64, i64, u8, std::ffi::CString)],
) -> Vec<Option<(libc::stat, bool)>> {
    // SAFETY: the stream is valid while `d` is held (until this returns).
    let fd = unsafe { libc::dirfd(d.stream) };
    let is_dot = |name: &std::ffi::CString| matches!(name.to_bytes(), b"." | b"..");
    let stat = |name: &std::ffi::CString| {
        (!is_dot(name))
            .then(|| lstat_at(fd, name).map(|st| (st, no_xattrs_at(fd, name))))
            .flatten()
    };
    let mut out: Vec<Option<(libc::stat, bool)>> = Vec::with_capacity(entries.len());
    let t0 = Instant::now();
    // Time the first real entry's lstat.
    while out.len() < entries.len() {
        let name = &entries[out.len()].3;
        out.push(stat(name));
        if !is_dot(name) {
            break;
        }
    }
    let rest = &entries[out.len()..];
    if t0.elapsed() < SLOW_STAT || rest.len() < 2 {
        out.extend(rest.iter().map(|e| stat(&e.3)));
        return out;
    }
    let chunk = rest.len().div_ceil(STAT_THREADS);
    std::thread::scope(|sc| {
        let parts: Vec<_> = rest
            .chunks(chunk)
            .map(|part| sc.spawn(move || part.iter().map(|e| stat(&e.3)).collect::<Vec<_>>()))
            .collect();
        for p in parts {
            out.extend(p.join().expect("lstat thread"));
        }
    });
    out
}

/// Whether an entry of a directory has no extended attributes at all (`llistxattr`
/// finds no name; false when it cannot tell). The client then answers the kernel's
/// `getxattr`s of it (two per file for `ls -l`: ACL and security label) without
/// asking, for the attribute timeout.
fn no_xattrs_at(dirfd: i32, name: &std::ffi::CStr) -> bool {
    let mut path = format!("/proc/self/fd/{dirfd}/").into_bytes();
    path.extend_from_slice(name.to_bytes_with_nul());
    // SAFETY: a NUL-terminated path; a null buffer of size 0 asks for the size only;
    // the last component (one name from the listing) is not followed.
    unsafe { libc::llistxattr(path.as_ptr().cast(), std::ptr::null_mut(), 0) == 0 }
}

/// `lstat` of one entry of a directory (None if it went away meanwhile).
fn lstat_at(dirfd: i32, name: &std::ffi::CStr) -> Option<libc::stat> {
    // SAFETY: zeroed stat is a valid out-parameter; the descriptor and the name are
    // valid; the name is one component and is not followed.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstatat(dirfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0).then_some(st)
    }
}
