//! Open files: open/create, read, write (large reads straight from the file through
//! file-range segments, large writes through a buffer), flush, fsync, release, fallocate.

use super::*;

thread_local! {
    /// A large write's data, received before it is written (one per serving thread).
    static WRITE_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Held while an append finds the file's end and writes there.
static APPENDS: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// The open flags a client's `OPEN` or `CREATE` passes on to the server's `openat2`.
const OPEN_FLAGS_KEPT: i32 =
    libc::O_ACCMODE | libc::O_TRUNC | libc::O_NONBLOCK | libc::O_SYNC | libc::O_DSYNC;

impl Server {
    pub(super) fn file_op(&self, call: Call, r: &mut Reader) -> Result<Writer, Dispatch> {
        let Call { op, h, s, to } = call;
        let ex = &self.exports[s.export];
        let mut w = Writer::default();
        match op {
            Op::Open | Op::Create => {
                let path = r.path()?;
                let flags = r.u32()? as i32;
                let (mode, uid, gid) = (r.u32()?, r.u32()?, r.u32()?);
                // Only the flags that mean something here are kept: `openat2` refuses
                // any bit it does not know with `EINVAL` (where `open` ignores them), and
                // the kernel's flags carry its own (`__FMODE_EXEC` for an `execve`,
                // `__FMODE_NONOTIFY`), so every `execve` of a file on a mount failed. The
                // client's kernel picks write offsets (append included) and handles
                // O_TRUNC through setattr. O_DIRECT stays on the client (its kernel sends
                // the I/O uncached): the server's buffers are not aligned for it.
                let append = flags & libc::O_APPEND != 0;
                let mut flags = flags & OPEN_FLAGS_KEPT;
                if op == Op::Create {
                    flags |= libc::O_CREAT | libc::O_EXCL;
                }
                if op == Op::Open {
                    let (fh, attr) = self.add_file(s, ex.open_file(path, flags)?, append)?;
                    w.u64(fh);
                    attr.encode(&mut w);
                } else {
                    let (fd, before, after, parent) =
                        ex.in_dir_attr(path, |e| ex.create_in(e, flags, mode))?;
                    if crate::export::server_is_root() {
                        // A set-group-ID directory's group stays (as a local create).
                        let gid = if parent.mode & libc::S_ISGID != 0 {
                            u32::MAX
                        } else {
                            gid
                        };
                        // The file has set-user-ID or set-group-ID bits only if asked
                        // for (a regular file gets none from its directory).
                        let setid = mode & (libc::S_ISUID | libc::S_ISGID) != 0;
                        let made = if setid {
                            Some(fstat(fd.as_raw_fd())?)
                        } else {
                            None
                        };
                        // SAFETY: fchown on an owned fd.
                        unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) };
                        // The chown dropped the set-user-ID and set-group-ID bits a local
                        // create keeps: given back.
                        if let Some(made) = made {
                            // SAFETY: fchmod on an owned fd.
                            unsafe { libc::fchmod(fd.as_raw_fd(), made.st_mode & 0o7777) };
                        }
                    }
                    let (fh, attr) = self.add_file(s, fd, append)?;
                    w.u64(fh);
                    attr.encode(&mut w);
                    before.encode(&mut w);
                    after.encode(&mut w);
                    parent.encode(&mut w);
                }
            }
            Op::Read => {
                let (fh, off, size) = (r.u64()?, r.u64()?, r.u32()?);
                if size > MAX_IO {
                    return Err(Dispatch::Errno(libc::EINVAL));
                }
                let f = self.file(s, fh)?;
                let data = match_info(Kind::ReadData, 0, h.id);
                let st = fstat(f.fd.as_raw_fd())?;
                let regular = st.st_mode & libc::S_IFMT == libc::S_IFREG;
                if size as usize > INLINE_WRITE && regular {
                    // Large reads of regular files go straight from the file's pages
                    // into the frames (a file-range segment): no buffer here.
                    // The reply goes right behind the data, not once the client has
                    // pulled it: the client finishes the read when both are in (one
                    // wake-up and one way across less per read).
                    let n = (st.st_size as u64).saturating_sub(off).min(size as u64) as usize;
                    f.read_ahead(off, n as u64, st.st_size as u64);
                    w.u32(n as u32);
                    let seg = if n == 0 {
                        Segment::memory(std::ptr::null_mut(), 0)
                    } else {
                        Segment::file(f.fd.as_raw_fd(), off, n)
                    };
                    let sent = self.post_lent(to, seg, data).ok_or(libc::EIO)?;
                    self.reply(to, h.op, h.id, Ok(w));
                    self.finish_lent(sent, f.clone());
                    return Err(Dispatch::Deferred);
                } else {
                    let mut buf = vec![0u8; size as usize];
                    // SAFETY: buf has `size` bytes.
                    let n = sized(unsafe {
                        libc::pread(
                            f.fd.as_raw_fd(),
                            buf.as_mut_ptr() as *mut libc::c_void,
                            buf.len(),
                            off as i64,
                        )
                    })?;
                    w.u32(n as u32);
                    buf.truncate(n);
                    if size as usize <= INLINE_WRITE {
                        w.0.extend_from_slice(&buf);
                    } else {
                        self.send(to, buf, data);
                    }
                }
            }
            Op::Write => {
                let (fh, mut off, len) = (r.u64()?, r.u64()?, r.u32()?);
                let f = match self.file(s, fh) {
                    Ok(f) if len <= MAX_IO => f,
                    Ok(_) => return Err(Dispatch::Errno(libc::EINVAL)),
                    Err(e) => {
                        self.discard_write_data(h, len);
                        return Err(e);
                    }
                };
                // A handle opened with O_APPEND writes at the file's end as the server
                // finds it, not at the offset the client's kernel chose (its cached
                // size: another client's appends since were overwritten, 301 lines of
                // 600 from two clients kept), one append at a time among the server's
                // threads; the reply says where (the client drops its pages of the
                // file when it differs). The write offset of any other handle is kept.
                let _appending = if f.append {
                    let guard = APPENDS.lock();
                    off = match fstat(f.fd.as_raw_fd()) {
                        Ok(st) => st.st_size as u64,
                        Err(e) => {
                            self.discard_write_data(h, len);
                            return Err(Dispatch::Errno(e));
                        }
                    };
                    Some(guard)
                } else {
                    None
                };
                if len as usize <= INLINE_WRITE {
                    let d = r.rest();
                    if d.len() != len as usize {
                        return Err(Dispatch::Malformed);
                    }
                    // SAFETY: d has d.len() bytes.
                    let n = sized(unsafe {
                        libc::pwrite(
                            f.fd.as_raw_fd(),
                            d.as_ptr() as *const libc::c_void,
                            d.len(),
                            off as i64,
                        )
                    })?;
                    w.u32(n as u32);
                } else {
                    self.recv_into_file(h, &f, off, len)?;
                    w.u32(len);
                }
                if f.append {
                    w.u64(off);
                }
            }
            Op::Flush => {
                let (fh, owner) = (r.u64()?, r.u64()?);
                let f = self.file(s, fh)?;
                self.locks.lock().release_owner(f.key, (h.word, owner));
                self.grant_waiters();
            }
            Op::Fsync => {
                let (fh, datasync) = (r.u64()?, r.u32()?);
                let f = self.file(s, fh)?;
                let fd = f.fd.as_raw_fd();
                // SAFETY: plain syscalls on a descriptor.
                check_fd(unsafe {
                    if datasync != 0 {
                        libc::fdatasync(fd)
                    } else {
                        libc::fsync(fd)
                    }
                })?;
            }
            Op::Release => {
                // One handle, or a client's batch of handles it closed (each released
                // even if another is unknown: EBADF then).
                let mut unknown = false;
                loop {
                    let (fh, owner, has_owner) = (r.u64()?, r.u64()?, r.u32()?);
                    let Some(f) = s.files.lock().remove(&fh) else {
                        unknown = true;
                        if r.at_end() {
                            break;
                        }
                        continue;
                    };
                    if has_owner != 0 {
                        self.locks.lock().release_owner(f.key, (h.word, owner));
                        self.grant_waiters();
                    }
                    if r.at_end() {
                        break;
                    }
                }
                if unknown {
                    return Err(Dispatch::Errno(libc::EBADF));
                }
            }
            Op::Fallocate => {
                let (fh, off, len, mode) = (r.u64()?, r.u64()?, r.u64()?, r.u32()?);
                let f = self.file(s, fh)?;
                // SAFETY: plain syscall on a descriptor.
                check_fd(unsafe {
                    libc::fallocate(f.fd.as_raw_fd(), mode as i32, off as i64, len as i64)
                })?;
            }
            Op::Lseek => {
                // SEEK_DATA / SEEK_HOLE (the kernel answers the other whences itself): the
                // server's file system knows the holes. Reads and writes are positional,
                // so the descriptor's own offset moving is harmless.
                let (fh, off, whence) = (r.u64()?, r.i64()?, r.u32()?);
                if whence != libc::SEEK_DATA as u32 && whence != libc::SEEK_HOLE as u32 {
                    return Err(Dispatch::Errno(libc::EINVAL));
                }
                let f = self.file(s, fh)?;
                // SAFETY: plain syscall on a descriptor.
                let at = unsafe { libc::lseek(f.fd.as_raw_fd(), off, whence as i32) };
                w.i64(crate::export::sized(at as isize)? as i64);
            }
            _ => unreachable!("dispatched by family"),
        }
        Ok(w)
    }

    fn add_file(&self, s: &Session, fd: OwnedFd, append: bool) -> R<(u64, crate::proto::Attr)> {
        let st = fstat(fd.as_raw_fd())?;
        let fh = s.next_fh.fetch_add(1, Ordering::Relaxed);
        let key = (st.st_dev, st.st_ino);
        s.files.lock().insert(
            fh,
            Arc::new(OpenFile {
                fd,
                key,
                append,
                read_end: AtomicU64::new(0),
                advised_end: AtomicU64::new(0),
            }),
        );
        Ok((fh, crate::proto::Attr::from_stat(&st)))
    }

    /// The data message of a large write, received into this thread's buffer and
    /// written to the file with one `pwrite`: a file-range segment writes each frame's
    /// payload into the file as it arrives, one small write per frame for the server's
    /// file system, which made a sequential 1 MiB writer 1.3-1.7x slower (FILES.md).
    fn recv_into_file(
        &self,
        h: Header,
        f: &Arc<OpenFile>,
        off: u64,
        len: u32,
    ) -> Result<(), Dispatch> {
        WRITE_BUF.with(|b| {
            let mut buf = b.borrow_mut();
            if buf.len() < len as usize {
                buf.resize(len as usize, 0);
            }
            let seg = Segment::memory(buf.as_mut_ptr(), len as usize);
            let m = match_info(Kind::WriteData, h.word, h.id);
            // SAFETY: the buffer stays alive until the receive completes, or forever
            // (leaked) if the receive is still lent when given up.
            let req = unsafe { self.ep.irecv(&[seg], m, u64::MAX, 0) }
                .map_err(|_| Dispatch::Errno(libc::EIO))?;
            match self.ep.wait(req, Some(DATA_TIMEOUT)) {
                Some(c) if c.status.code == StatusCode::Success && c.status.msg_length == len => {}
                Some(c) if c.status.code == StatusCode::Success => return Err(Dispatch::Malformed),
                Some(_) => return Err(Dispatch::Errno(libc::EIO)),
                None => {
                    if !matches!(self.ep.cancel(req), Ok(true)) {
                        std::mem::forget(std::mem::take(&mut *buf));
                        self.ep.forget(req);
                    }
                    return Err(Dispatch::Errno(libc::EIO));
                }
            }
            let mut done = 0;
            while done < len as usize {
                // SAFETY: the buffer holds len bytes.
                let n = sized(unsafe {
                    libc::pwrite(
                        f.fd.as_raw_fd(),
                        buf[done..].as_ptr() as *const libc::c_void,
                        len as usize - done,
                        (off + done as u64) as i64,
                    )
                })?;
                if n == 0 {
                    return Err(Dispatch::Errno(libc::EIO));
                }
                done += n;
            }
            Ok(())
        })
    }
}

/// How far past a sequential reader's request the server asks the disk to read: the
/// client's kernel asks one 1 MiB read at a time, each sent frame by frame with `pread`
/// from the file's pages, so without this a cold file is read from the disk in the
/// kernel's small read-ahead steps while the link waits.
const READ_AHEAD: u64 = 8 * MAX_IO as u64;

impl OpenFile {
    /// Asks the kernel (`POSIX_FADV_WILLNEED`, which starts the reads and does not wait
    /// for them) for the part of the next `READ_AHEAD` bytes not asked for yet, when
    /// this read starts where the previous one ended; random readers get nothing extra.
    fn read_ahead(&self, off: u64, n: u64, size: u64) {
        let end = off + n;
        if self.read_end.swap(end, Ordering::Relaxed) != off {
            return;
        }
        let want = (end + READ_AHEAD).min(size);
        let from = self.advised_end.fetch_max(want, Ordering::Relaxed).max(off);
        if want > from {
            // SAFETY: advice on an owned descriptor; it reads nothing into our memory.
            unsafe {
                libc::posix_fadvise(
                    self.fd.as_raw_fd(),
                    from as i64,
                    (want - from) as i64,
                    libc::POSIX_FADV_WILLNEED,
                )
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_file() -> OpenFile {
        let fd = std::fs::File::open("/dev/null").unwrap().into();
        OpenFile {
            fd,
            key: (0, 0),
            append: false,
            read_end: AtomicU64::new(0),
            advised_end: AtomicU64::new(0),
        }
    }

    #[test]
    fn only_a_sequential_reader_is_read_ahead_once_per_byte() {
        let f = open_file();
        let mib = MAX_IO as u64;
        let size = 100 * mib;
        f.read_ahead(0, mib, size);
        assert_eq!(f.advised_end.load(Ordering::Relaxed), mib + READ_AHEAD);
        f.read_ahead(mib, mib, size);
        assert_eq!(f.advised_end.load(Ordering::Relaxed), 2 * mib + READ_AHEAD);
        // A jump: nothing more asked, and the reader starting again from there is
        // sequential again.
        f.read_ahead(50 * mib, mib, size);
        assert_eq!(f.advised_end.load(Ordering::Relaxed), 2 * mib + READ_AHEAD);
        f.read_ahead(51 * mib, mib, size);
        assert_eq!(f.advised_end.load(Ordering::Relaxed), 52 * mib + READ_AHEAD);
        // Never past the file's end.
        f.read_ahead(52 * mib, mib, 53 * mib);
        assert_eq!(f.advised_end.load(Ordering::Relaxed), 52 * mib + READ_AHEAD);
    }
}
