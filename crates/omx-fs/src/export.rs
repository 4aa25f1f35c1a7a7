//! An exported directory and the file operations on it. Every path a client names is
//! relative to the export and resolved by `openat2` beneath the export's directory
//! descriptor with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`: `..`,
//! absolute or relative symlinks and renames racing with a lookup can never reach
//! outside it (a client's kernel follows symlinks itself, so a path from a well-behaved
//! client never crosses one). The last component is then acted on with the `*at` calls
//! that do not follow it; `O_PATH` opens (chmod, xattrs) fail with ELOOP on a symlink.

use crate::proto::{set, Attr, Stamp};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// An errno.
pub type Errno = i32;
pub type R<T> = Result<T, Errno>;

fn errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn check(r: libc::c_int) -> R<libc::c_int> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

fn cstr(b: &[u8]) -> R<CString> {
    CString::new(b).map_err(|_| libc::EINVAL)
}

/// A path component a client may name: not empty, `.`, `..`, and without `/`. Its
/// length is the server's file system's to refuse (`ENAMETOOLONG`, as locally).
fn valid_name(n: &[u8]) -> bool {
    !n.is_empty() && n != b"." && n != b".." && !n.contains(&b'/')
}

/// Checks every component of a relative path (empty = the export's root).
pub fn valid_path(p: &[u8]) -> bool {
    p.is_empty() || p.split(|&c| c == b'/').all(valid_name)
}

pub struct Export {
    pub name: String,
    root: OwnedFd,
    /// The change count of each directory (device, inode) omxfsd changed: the last
    /// value of [`NEXT_COUNT`] it was given.
    counts: Mutex<HashMap<(u64, u64), u64>>,
    /// Entry changes in one directory are made one at a time, each counted before the
    /// next starts (a stripe of locks by directory): the count a change returns then
    /// names the directory's contents, however many threads serve it at once.
    dir_locks: Vec<Mutex<()>>,
}

/// A name in a directory opened beneath the export's root: what an entry change acts
/// on, the directory opened once for the change and its stamps ([`Export::in_dir`]).
pub struct Entry {
    dir: OwnedFd,
    name: CString,
}

impl Entry {
    /// Runs an `*at` call on the directory and the name.
    fn at(&self, f: impl FnOnce(RawFd, *const libc::c_char) -> libc::c_int) -> R<()> {
        check(f(self.dir.as_raw_fd(), self.name.as_ptr())).map(|_| ())
    }

    /// The attributes of what the name names (a symlink's own).
    fn lstat(&self) -> R<Attr> {
        lstat_at(self.dir.as_raw_fd(), &self.name).map(|st| Attr::from_stat(&st))
    }
}

/// Stripes of [`Export::dir_locks`] (directories sharing one just wait for each other).
const DIR_LOCKS: usize = 64;

fn dir_key(st: &libc::stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// Change counts are unique across directories and restarts of the table (0 = not
/// counted), so a count never comes back to match a client's old one.
static NEXT_COUNT: AtomicU64 = AtomicU64::new(1);

/// Directories whose counts are kept; past it the table starts again (a client's count
/// then no longer matches: it asks the server again, nothing is wrong).
const COUNTS_MAX: usize = 1 << 16;

fn mtime_ns(st: &libc::stat) -> i64 {
    st.st_mtime
        .saturating_mul(1_000_000_000)
        .saturating_add(st.st_mtime_nsec)
}

/// The server runs as root (then it gives each new object to its requester): asked
/// once, not at every create (the effective uid of omxfsd never changes).
pub fn server_is_root() -> bool {
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: geteuid has no preconditions.
    *ROOT.get_or_init(|| unsafe { libc::geteuid() } == 0)
}

/// `fstat` of a descriptor.
pub fn fstat(fd: RawFd) -> R<libc::stat> {
    // SAFETY: zeroed stat is a valid out-parameter for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid stat buffer.
    check(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

/// `openat2` of `path` under `dir`, never leaving it nor crossing a symlink.
fn open_under(dir: RawFd, path: &CString, flags: i32, mode: u32) -> R<OwnedFd> {
    // SAFETY: open_how is plain data; zero is its "no options" value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    if flags & libc::O_CREAT != 0 {
        how.mode = mode as u64 & 0o7777;
    }
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2 with a valid dirfd, C string and open_how of the given size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a new descriptor owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn proc_path(fd: &OwnedFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL")
}

impl Export {
    pub fn open(dir: &str) -> Result<Export, String> {
        let path = std::path::Path::new(dir)
            .canonicalize()
            .map_err(|e| format!("{dir}: {e}"))?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or(format!("{dir}: no base name"))?
            .to_string();
        let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: c is a valid C string.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(format!("{dir}: {}", std::io::Error::last_os_error()));
        }
        Ok(Export {
            name,
            // SAFETY: fd was just opened and is owned here.
            root: unsafe { OwnedFd::from_raw_fd(fd) },
            counts: Mutex::default(),
            dir_locks: (0..DIR_LOCKS).map(|_| Mutex::new(())).collect(),
        })
    }

    /// Opens `rel` beneath the root (never crossing a symlink); `flags` as open(2).
    pub fn open_beneath(&self, rel: &[u8], flags: i32, mode: u32) -> R<OwnedFd> {
        if !valid_path(rel) {
            return Err(libc::EINVAL);
        }
        let path = cstr(if rel.is_empty() { b"." } else { rel })?;
        open_under(self.root.as_raw_fd(), &path, flags, mode)
    }

    /// Opens the regular file `rel` beneath the root for reading or writing (`flags`
    /// as open(2), without `O_CREAT`). Anything else is refused without being opened:
    /// an open of a FIFO can block the serving thread, one of a device node reaches
    /// the server's device (a client's kernel opens special files itself and never
    /// asks; only another peer would). Resolved once with `O_PATH` (which never acts
    /// on the file), checked, then reopened through its `/proc` link: the same inode.
    pub fn open_file(&self, rel: &[u8], flags: i32) -> R<OwnedFd> {
        let fd = self.open_beneath(rel, libc::O_PATH, 0)?;
        match fstat(fd.as_raw_fd())?.st_mode & libc::S_IFMT {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Err(libc::EISDIR),
            _ => return Err(libc::ENXIO),
        }
        let p = proc_path(&fd);
        // SAFETY: valid C string; flags as open(2) takes them.
        let again = unsafe { libc::open(p.as_ptr(), (flags & !libc::O_CREAT) | libc::O_CLOEXEC) };
        if again < 0 {
            return Err(errno());
        }
        // SAFETY: a new descriptor owned here.
        Ok(unsafe { OwnedFd::from_raw_fd(again) })
    }

    /// Creates (or opens, as `flags` say) the file an entry change names in its
    /// parent, opened for the change: the path is not walked again.
    pub fn create_in(&self, e: &Entry, flags: i32, mode: u32) -> R<OwnedFd> {
        open_under(e.dir.as_raw_fd(), &e.name, flags, mode)
    }

    /// A new change count for directory `key`, with the one it had (0: none known).
    fn count_change(&self, key: (u64, u64)) -> (u64, u64) {
        let mut counts = self.counts.lock();
        if counts.len() >= COUNTS_MAX && !counts.contains_key(&key) {
            counts.clear();
        }
        let new = NEXT_COUNT.fetch_add(1, Ordering::Relaxed);
        (counts.insert(key, new).unwrap_or(0), new)
    }

    fn dir_lock(&self, key: (u64, u64)) -> &Mutex<()> {
        let h = (key.0.rotate_left(32) ^ key.1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        &self.dir_locks[(h >> 58) as usize % DIR_LOCKS]
    }

    /// Runs `change`, an entry change of the name `rel` in its parent directory, and
    /// returns its result with the parent's stamps from before and after it.
    pub fn in_dir<T>(
        &self,
        rel: &[u8],
        change: impl FnOnce(&Entry) -> R<T>,
    ) -> R<(T, Stamp, Stamp)> {
        let (v, before, after, _) = self.in_dir_attr(rel, change)?;
        Ok((v, before, after))
    }

    /// [`Export::in_dir`], with the parent's attributes right after the change (from
    /// the `fstat` that made the stamp after: no extra call).
    pub fn in_dir_attr<T>(
        &self,
        rel: &[u8],
        change: impl FnOnce(&Entry) -> R<T>,
    ) -> R<(T, Stamp, Stamp, Attr)> {
        let (v, [(before, after)], [parent]) =
            self.in_dirs_attrs([rel], |[e]: &[Entry; 1]| change(e))?;
        Ok((v, before, after, parent))
    }

    /// [`Export::in_dirs_attrs`] without the attributes.
    pub fn in_dirs<T, const N: usize>(
        &self,
        rels: [&[u8]; N],
        change: impl FnOnce(&[Entry; N]) -> R<T>,
    ) -> R<(T, [(Stamp, Stamp); N])> {
        let (v, stamps, _) = self.in_dirs_attrs(rels, change)?;
        Ok((v, stamps))
    }

    /// Runs `change`, an entry change of the names `rels` in their parent directories
    /// (a rename's source and target), and returns its result with each parent's
    /// stamps from before and after it (one directory twice: two changes in a row).
    /// Each parent is opened once, here: the change acts on the directory whose stamps
    /// it gets (through the [`Entry`] it is given), never on a path walked again. The
    /// directories' locks are taken in one order (by address), so renames between two
    /// directories in opposite directions never wait for each other forever.
    /// The parents' attributes after the change come third.
    #[allow(clippy::type_complexity)]
    pub fn in_dirs_attrs<T, const N: usize>(
        &self,
        rels: [&[u8]; N],
        change: impl FnOnce(&[Entry; N]) -> R<T>,
    ) -> R<(T, [(Stamp, Stamp); N], [Attr; N])> {
        let mut entries = Vec::with_capacity(N);
        let mut locks = Vec::with_capacity(N);
        for rel in rels {
            let e = self.parent(rel)?;
            locks.push(self.dir_lock(dir_key(&fstat(e.dir.as_raw_fd())?)));
            entries.push(e);
        }
        let entries: [Entry; N] = entries.try_into().map_err(|_| libc::EIO)?;
        locks.sort_by_key(|l| *l as *const Mutex<()>);
        locks.dedup_by_key(|l| *l as *const Mutex<()>);
        let _held: Vec<_> = locks.iter().map(|l| l.lock()).collect();
        let mut before = Vec::with_capacity(N);
        for e in &entries {
            before.push(fstat(e.dir.as_raw_fd())?);
        }
        let v = change(&entries)?;
        let stamp = |count, st: &libc::stat| Stamp {
            count,
            mtime_ns: mtime_ns(st),
        };
        let mut stamps = [(Stamp::default(), Stamp::default()); N];
        let mut attrs = [Attr::default(); N];
        for (i, e) in entries.iter().enumerate() {
            let after = fstat(e.dir.as_raw_fd())?;
            let (old, new) = self.count_change(dir_key(&after));
            stamps[i] = (stamp(old, &before[i]), stamp(new, &after));
            attrs[i] = Attr::from_stat(&after);
        }
        Ok((v, stamps, attrs))
    }

    /// The first stamp of directory `rel` this server just made, unless something
    /// changed in it already (then none).
    pub fn new_dir_stamp(&self, rel: &[u8], attr: &Attr) -> Option<Stamp> {
        let fd = self
            .open_beneath(rel, libc::O_PATH | libc::O_DIRECTORY, 0)
            .ok()?;
        let st = fstat(fd.as_raw_fd()).ok()?;
        let _held = self.dir_lock(dir_key(&st)).lock();
        let st = fstat(fd.as_raw_fd()).ok()?;
        let (old, new) = self.count_change(dir_key(&st));
        (old == 0 && crate::proto::file_id(&st) == attr.ino && mtime_ns(&st) == attr_mtime_ns(attr))
            .then_some(Stamp {
                count: new,
                mtime_ns: mtime_ns(&st),
            })
    }

    /// The parent directory of `rel` (opened beneath the root) and the last component.
    fn parent(&self, rel: &[u8]) -> R<Entry> {
        let (dir, name) = match rel.iter().rposition(|&c| c == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (&rel[..0], rel),
        };
        if !valid_name(name) {
            return Err(libc::EINVAL);
        }
        let dir = self.open_beneath(dir, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        Ok(Entry {
            dir,
            name: cstr(name)?,
        })
    }

    pub fn lstat(&self, rel: &[u8]) -> R<Attr> {
        if rel.is_empty() {
            return Ok(Attr::from_stat(&fstat(self.root.as_raw_fd())?));
        }
        self.parent(rel)?.lstat()
    }

    #[allow(clippy::too_many_arguments)]
    pub fn setattr(
        &self,
        rel: &[u8],
        file: Option<RawFd>,
        valid: u32,
        mode: u32,
        uid: u32,
        gid: u32,
        size: u64,
        atime: (i64, u32),
        mtime: (i64, u32),
    ) -> R<Attr> {
        if let Some(fd) = file {
            // Through the open file: it may have no name any more (unlinked, or renamed
            // over while open), as a local fchmod/ftruncate/futimens acts on the inode.
            return self.setattr_fd(fd, valid, mode, uid, gid, size, atime, mtime);
        }
        if valid & set::MODE != 0 {
            // chmod through the descriptor's /proc link: the path is resolved beneath
            // the export, and a symlink (ELOOP) has no mode to change.
            let fd = self.open_beneath(rel, libc::O_PATH, 0)?;
            let p = proc_path(&fd);
            // SAFETY: valid C string.
            check(unsafe { libc::chmod(p.as_ptr(), mode & 0o7777) })?;
        }
        if valid & (set::UID | set::GID) != 0 {
            let u = if valid & set::UID != 0 { uid } else { u32::MAX };
            let g = if valid & set::GID != 0 { gid } else { u32::MAX };
            self.at(rel, |d, n| {
                // SAFETY: valid dirfd and name.
                unsafe { libc::fchownat(d, n, u, g, libc::AT_SYMLINK_NOFOLLOW) }
            })?;
        }
        if valid & set::SIZE != 0 {
            let owned;
            let fd = match file {
                Some(fd) => fd,
                None => {
                    owned = self.open_file(rel, libc::O_WRONLY)?;
                    owned.as_raw_fd()
                }
            };
            // SAFETY: plain syscall on a descriptor.
            check(unsafe { libc::ftruncate(fd, size as i64) })?;
        }
        if valid & (set::ATIME | set::ATIME_NOW | set::MTIME | set::MTIME_NOW) != 0 {
            let times = [
                times_of(valid & set::ATIME != 0, valid & set::ATIME_NOW != 0, atime),
                times_of(valid & set::MTIME != 0, valid & set::MTIME_NOW != 0, mtime),
            ];
            if rel.is_empty() {
                // SAFETY: valid descriptor and times.
                check(unsafe { libc::futimens(self.root.as_raw_fd(), times.as_ptr()) }).or_else(
                    |_| {
                        let p = proc_path(&self.root);
                        // SAFETY: valid C string and times.
                        check(unsafe {
                            libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), 0)
                        })
                    },
                )?;
            } else {
                self.at(rel, |d, n| {
                    // SAFETY: valid dirfd, name and times.
                    unsafe { libc::utimensat(d, n, times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) }
                })?;
            }
        }
        self.lstat(rel)
    }

    /// [`Export::setattr`] on an open file's descriptor.
    #[allow(clippy::too_many_arguments)]
    fn setattr_fd(
        &self,
        fd: RawFd,
        valid: u32,
        mode: u32,
        uid: u32,
        gid: u32,
        size: u64,
        atime: (i64, u32),
        mtime: (i64, u32),
    ) -> R<Attr> {
        if valid & set::MODE != 0 {
            // SAFETY: plain syscall on a descriptor.
            check(unsafe { libc::fchmod(fd, mode & 0o7777) })?;
        }
        if valid & (set::UID | set::GID) != 0 {
            let u = if valid & set::UID != 0 { uid } else { u32::MAX };
            let g = if valid & set::GID != 0 { gid } else { u32::MAX };
            // SAFETY: plain syscall on a descriptor.
            check(unsafe { libc::fchown(fd, u, g) })?;
        }
        if valid & set::SIZE != 0 {
            // SAFETY: plain syscall on a descriptor.
            check(unsafe { libc::ftruncate(fd, size as i64) })?;
        }
        if valid & (set::ATIME | set::ATIME_NOW | set::MTIME | set::MTIME_NOW) != 0 {
            let times = [
                times_of(valid & set::ATIME != 0, valid & set::ATIME_NOW != 0, atime),
                times_of(valid & set::MTIME != 0, valid & set::MTIME_NOW != 0, mtime),
            ];
            // SAFETY: valid descriptor and times.
            check(unsafe { libc::futimens(fd, times.as_ptr()) })?;
        }
        Ok(Attr::from_stat(&fstat(fd)?))
    }

    /// Runs an `*at` call on the parent of `rel` and its last component.
    fn at(&self, rel: &[u8], f: impl FnOnce(RawFd, *const libc::c_char) -> libc::c_int) -> R<()> {
        self.parent(rel)?.at(f)
    }

    pub fn readlink(&self, rel: &[u8]) -> R<Vec<u8>> {
        let e = self.parent(rel)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: valid dirfd, name and buffer of the given length.
        let n = unsafe {
            libc::readlinkat(
                e.dir.as_raw_fd(),
                e.name.as_ptr(),
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
            )
        };
        if n < 0 {
            return Err(errno());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    /// Gives a new object to the requester when the server runs as root (see the
    /// identity model in docs/FILES.md).
    fn own(&self, e: &Entry, uid: u32, gid: u32) {
        if server_is_root() {
            let _ = e.at(|d, n| {
                // In a set-group-ID directory the new object keeps the directory's group
                // (the server's kernel gave it), as a local create does.
                let gid = match fstat(d) {
                    Ok(st) if st.st_mode & libc::S_ISGID != 0 => u32::MAX,
                    _ => gid,
                };
                // SAFETY: zeroed stat is a valid out-parameter; valid dirfd and name.
                let made = unsafe {
                    let mut st: libc::stat = std::mem::zeroed();
                    (libc::fstatat(d, n, &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0).then_some(st)
                };
                // SAFETY: valid dirfd and name.
                let r = unsafe { libc::fchownat(d, n, uid, gid, libc::AT_SYMLINK_NOFOLLOW) };
                // The chown dropped a regular file's set-user-ID and set-group-ID bits,
                // which a local mknod keeps: given back.
                if let Some(st) = made.filter(|st| {
                    st.st_mode & libc::S_IFMT == libc::S_IFREG
                        && st.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0
                }) {
                    // SAFETY: valid dirfd and name.
                    unsafe { libc::fchmodat(d, n, st.st_mode & 0o7777, 0) };
                }
                r
            });
        }
    }

    // The entry changes below act on the parent [`Export::in_dir`] opened (the
    // `Entry` it gives the change).

    pub fn mkdir(&self, e: &Entry, mode: u32, uid: u32, gid: u32) -> R<Attr> {
        // SAFETY: valid dirfd and name.
        e.at(|d, n| unsafe { libc::mkdirat(d, n, mode & 0o7777) })?;
        self.own(e, uid, gid);
        e.lstat()
    }

    /// Files, FIFOs, sockets and device nodes (a server without `CAP_MKNOD` gets
    /// `EPERM` for those, as locally). The server never opens a special file
    /// ([`Export::open_file`]): a device node made here is the client's device on the
    /// client, as on NFS, and only a name on the server.
    pub fn mknod(&self, e: &Entry, mode: u32, rdev: u32, uid: u32, gid: u32) -> R<Attr> {
        // SAFETY: valid dirfd and name.
        e.at(|d, n| unsafe { libc::mknodat(d, n, mode, rdev as libc::dev_t) })?;
        self.own(e, uid, gid);
        e.lstat()
    }

    pub fn symlink(&self, e: &Entry, target: &[u8], uid: u32, gid: u32) -> R<Attr> {
        let t = cstr(target)?;
        // SAFETY: valid strings and dirfd.
        e.at(|d, n| unsafe { libc::symlinkat(t.as_ptr(), d, n) })?;
        self.own(e, uid, gid);
        e.lstat()
    }

    pub fn unlink(&self, e: &Entry) -> R<()> {
        // SAFETY: valid dirfd and name.
        e.at(|d, n| unsafe { libc::unlinkat(d, n, 0) })
    }

    pub fn rmdir(&self, e: &Entry) -> R<()> {
        // Its change count goes with it (a directory made later may get its inode).
        let key = lstat_at(e.dir.as_raw_fd(), &e.name)
            .ok()
            .map(|st| (st.st_dev, st.st_ino));
        // SAFETY: valid dirfd and name.
        e.at(|d, n| unsafe { libc::unlinkat(d, n, libc::AT_REMOVEDIR) })?;
        if let Some(key) = key {
            self.counts.lock().remove(&key);
        }
        Ok(())
    }

    pub fn rename(&self, from: &Entry, to: &Entry, flags: u32) -> R<()> {
        // SAFETY: valid dirfds and names.
        check(unsafe {
            libc::renameat2(
                from.dir.as_raw_fd(),
                from.name.as_ptr(),
                to.dir.as_raw_fd(),
                to.name.as_ptr(),
                flags,
            )
        })
        .map(|_| ())
    }

    /// A new name `to` for the object at `from` (resolved beneath the root here: only
    /// `to`'s directory changes).
    pub fn link(&self, from: &[u8], to: &Entry) -> R<Attr> {
        let from = self.parent(from)?;
        // SAFETY: valid dirfds and names; 0 = never follow a symlink.
        check(unsafe {
            libc::linkat(
                from.dir.as_raw_fd(),
                from.name.as_ptr(),
                to.dir.as_raw_fd(),
                to.name.as_ptr(),
                0,
            )
        })?;
        to.lstat()
    }

    pub fn statfs(&self) -> R<libc::statvfs> {
        // SAFETY: zeroed statvfs is a valid out-parameter.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and buffer.
        check(unsafe { libc::fstatvfs(self.root.as_raw_fd(), &mut s) })?;
        Ok(s)
    }

    /// An extended-attribute call on `rel` through its /proc link. A symlink (ELOOP
    /// beneath the export) carries no user attributes: `on_symlink` answers for it.
    pub fn xattr<T>(
        &self,
        rel: &[u8],
        on_symlink: R<T>,
        f: impl FnOnce(*const libc::c_char) -> R<T>,
    ) -> R<T> {
        match self.open_beneath(rel, libc::O_PATH, 0) {
            Ok(fd) => f(proc_path(&fd).as_ptr()),
            Err(libc::ELOOP) => on_symlink,
            Err(e) => Err(e),
        }
    }
}

/// Result of a size-returning libc call.
/// A `utimensat` time: given, now, or left as it is.
fn times_of(given: bool, now: bool, t: (i64, u32)) -> libc::timespec {
    libc::timespec {
        tv_sec: t.0,
        tv_nsec: if now {
            libc::UTIME_NOW
        } else if given {
            t.1 as i64
        } else {
            libc::UTIME_OMIT
        },
    }
}

fn lstat_at(dir: RawFd, name: &CString) -> R<libc::stat> {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid dirfd, name and buffer.
    check(unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

fn attr_mtime_ns(a: &Attr) -> i64 {
    a.mtime
        .0
        .saturating_mul(1_000_000_000)
        .saturating_add(a.mtime.1 as i64)
}

pub fn sized(n: isize) -> R<usize> {
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as usize)
    }
}

pub fn check_fd(r: libc::c_int) -> R<libc::c_int> {
    check(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_with_dot_dot_or_empty_components_are_invalid() {
        for bad in [&b".."[..], b"a/../b", b"/etc", b"a//b", b"a/", b"./a"] {
            assert!(!valid_path(bad), "{:?}", String::from_utf8_lossy(bad));
        }
        for good in [&b""[..], b"a", b"a/b/c", b"...", b".hidden"] {
            assert!(valid_path(good));
        }
    }

    #[test]
    fn symlinks_and_parents_never_leave_the_export() {
        let base = std::env::temp_dir().join(format!("omxfs-export-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let ex = base.join("ex");
        std::fs::create_dir_all(ex.join("d")).unwrap();
        std::fs::write(base.join("secret"), b"no").unwrap();
        std::os::unix::fs::symlink("/etc", ex.join("abs")).unwrap();
        std::os::unix::fs::symlink("../..", ex.join("d/up")).unwrap();
        std::os::unix::fs::symlink("d", ex.join("rel")).unwrap();
        let e = Export::open(ex.to_str().unwrap()).unwrap();
        assert_eq!(e.name, "ex");
        assert!(e.open_beneath(b"../secret", libc::O_RDONLY, 0).is_err());
        assert_eq!(e.lstat(b"abs/passwd"), Err(libc::ELOOP));
        assert_eq!(e.lstat(b"d/up/secret"), Err(libc::ELOOP));
        assert_eq!(e.lstat(b"rel/up"), Err(libc::ELOOP));
        assert!(e.lstat(b"abs").is_ok(), "the link itself is visible");
        let rename = e.in_dirs([b"d", b"../moved"], |[f, t]| e.rename(f, t, 0));
        assert_eq!(rename.map(|_| ()), Err(libc::EINVAL));
        let link = e.in_dir(b"stolen", |t| e.link(b"../secret", t));
        assert_eq!(link.map(|_| ()), Err(libc::EINVAL));
        let made = e.in_dir(b"d/../x", |t| {
            e.create_in(t, libc::O_CREAT | libc::O_WRONLY, 0o644)
        });
        assert_eq!(made.map(|_| ()), Err(libc::EINVAL));
        let made = e.in_dir(b"abs/x", |t| {
            e.create_in(t, libc::O_CREAT | libc::O_WRONLY, 0o644)
        });
        assert_eq!(made.map(|_| ()), Err(libc::ELOOP));
        // A created name that is a symlink is never followed.
        let made = e.in_dir(b"abs", |t| {
            e.create_in(t, libc::O_CREAT | libc::O_WRONLY, 0o644)
        });
        assert_eq!(made.map(|_| ()), Err(libc::ELOOP));
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// A change acts on the directory its stamps are of, opened once: the parent
    /// renamed between the stamps before and the change does not send the change
    /// elsewhere (nor fail it), and the stamp after counts that directory's change.
    #[test]
    fn a_change_acts_on_the_directory_it_stamps() {
        let base = std::env::temp_dir().join(format!("omxfs-entry-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("ex/a")).unwrap();
        std::fs::write(base.join("ex/a/x"), b"x").unwrap();
        let e = Export::open(base.join("ex").to_str().unwrap()).unwrap();
        let (_, before, after) = e
            .in_dir(b"a/x", |entry| {
                std::fs::rename(base.join("ex/a"), base.join("ex/b")).unwrap();
                e.unlink(entry)
            })
            .unwrap();
        assert!(
            !base.join("ex/b/x").exists(),
            "removed from the directory it named"
        );
        assert!(after.count > before.count);
        // The next change there, through its new path, follows the one counted.
        let (_, next, _) = e
            .in_dir(b"b/y", |entry| {
                e.create_in(entry, libc::O_CREAT | libc::O_WRONLY, 0o644)
            })
            .unwrap();
        assert_eq!(next.count, after.count);
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// Creates made at once by several threads in one directory: the count each
    /// change returns names the directory's contents (the entries listed right after
    /// a change are those of the changes counted up to it); renames between two
    /// directories both ways at once all finish (the directories' locks).
    #[test]
    fn a_change_count_names_the_directory_contents() {
        let base = std::env::temp_dir().join(format!("omxfs-stamps-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        for d in ["a", "b", "c"] {
            std::fs::create_dir_all(base.join("ex").join(d)).unwrap();
        }
        let e = Export::open(base.join("ex").to_str().unwrap()).unwrap();
        let seen = Mutex::new(Vec::new());
        std::thread::scope(|sc| {
            for t in 0..4 {
                let (e, seen, base) = (&e, &seen, &base);
                sc.spawn(move || {
                    for i in 0..40 {
                        let name = format!("t{t}-{i}");
                        let rel = format!("a/{name}");
                        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
                        let (listed, _, after) = e
                            .in_dir(rel.as_bytes(), |entry| {
                                e.create_in(entry, flags, 0o644)?;
                                let list = std::fs::read_dir(base.join("ex/a")).unwrap();
                                Ok(list.map(|d| d.unwrap().file_name()).collect::<Vec<_>>())
                            })
                            .unwrap();
                        seen.lock().push((after.count, name, listed));
                        let (from, to) = (format!("b/r{t}-{i}"), format!("c/r{t}-{i}"));
                        let (from, to) = if t % 2 == 0 { (from, to) } else { (to, from) };
                        std::fs::write(base.join("ex").join(&from), b"x").unwrap();
                        let rename = |[f, t]: &[Entry; 2]| e.rename(f, t, 0);
                        e.in_dirs([from.as_bytes(), to.as_bytes()], rename).unwrap();
                    }
                });
            }
        });
        let mut seen = seen.into_inner();
        seen.sort_by_key(|s| s.0);
        let mut made = std::collections::BTreeSet::new();
        for (count, name, listed) in seen {
            made.insert(std::ffi::OsString::from(name));
            let listed: std::collections::BTreeSet<_> = listed.into_iter().collect();
            assert_eq!(listed, made, "after the change counted {count}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
