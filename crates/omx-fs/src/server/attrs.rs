//! Lookup, getattr, setattr, readlink, statfs and extended attributes: requests on a path
//! that change no entry.

use super::*;

impl Server {
    pub(super) fn attr_op(&self, call: Call, r: &mut Reader) -> Result<Writer, Dispatch> {
        let Call { op, s, .. } = call;
        let ex = &self.exports[s.export];
        let mut w = Writer::default();
        match op {
            Op::Lookup => ex.lstat(r.path()?)?.encode(&mut w),
            Op::Getattr => {
                let path = r.path()?;
                // An open file's handle may follow (its attributes, whatever its name is
                // now: unlinked, or renamed over while open).
                let fh = trailing_fh(r)?;
                if fh != 0 {
                    let st = match self.file(s, fh) {
                        Ok(f) => fstat(f.fd.as_raw_fd())?,
                        // An open directory's handle (one removed while open).
                        Err(_) => {
                            let d = s.dirs.lock().get(&fh).cloned().ok_or(libc::EBADF)?;
                            let d = d.lock();
                            fstat(d.fd())?
                        }
                    };
                    Attr::from_stat(&st).encode(&mut w)
                } else {
                    ex.lstat(path)?.encode(&mut w)
                }
            }
            Op::Setattr => {
                let path = r.path()?;
                let fh = r.u64()?;
                let (valid, mode, uid, gid) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
                let size = r.u64()?;
                let atime = (r.i64()?, r.u32()?);
                let mtime = (r.i64()?, r.u32()?);
                let file = if fh != 0 {
                    Some(self.file(s, fh)?)
                } else {
                    None
                };
                let fd = file.as_ref().map(|f| f.fd.as_raw_fd());
                ex.setattr(path, fd, valid, mode, uid, gid, size, atime, mtime)?
                    .encode(&mut w)
            }
            Op::Readlink => {
                let t = ex.readlink(r.path()?)?;
                w.bytes(&t);
            }
            // Entry changes end their reply with the parent's stamps (proto::Stamp).
            Op::Statfs => {
                let st = ex.statfs()?;
                w.u64(st.f_blocks).u64(st.f_bfree).u64(st.f_bavail);
                w.u64(st.f_files).u64(st.f_ffree).u32(st.f_bsize as u32);
                w.u32(st.f_namemax as u32).u32(st.f_frsize as u32);
            }
            Op::Setxattr => {
                let (path, name, value, flags) = (r.path()?, r.path()?, r.bytes()?, r.u32()?);
                let name = std::ffi::CString::new(name).map_err(|_| libc::EINVAL)?;
                let fh = trailing_fh(r)?;
                self.xattr(s, fh, path, Err(libc::EPERM), |p| {
                    // SAFETY: valid strings and value buffer.
                    check_fd(unsafe {
                        libc::setxattr(
                            p,
                            name.as_ptr(),
                            value.as_ptr() as *const libc::c_void,
                            value.len(),
                            flags as i32,
                        )
                    })
                    .map(|_| ())
                })?
            }
            Op::Getxattr | Op::Listxattr => {
                let path = r.path()?;
                let name = if op == Op::Getxattr {
                    Some(std::ffi::CString::new(r.path()?).map_err(|_| libc::EINVAL)?)
                } else {
                    None
                };
                let size = (r.u32()? as usize).min(MAX_HEADER - 64);
                let fh = trailing_fh(r)?;
                let mut buf = vec![0u8; size];
                let empty = if name.is_some() {
                    Err(libc::ENODATA)
                } else {
                    Ok(0)
                };
                let n = self.xattr(s, fh, path, empty, |p| {
                    let (ptr, len) = (buf.as_mut_ptr() as *mut libc::c_void, buf.len());
                    // SAFETY: valid strings and a buffer of len bytes (0 = size query).
                    sized(unsafe {
                        match &name {
                            Some(n) => libc::getxattr(p, n.as_ptr(), ptr, len),
                            None => libc::listxattr(p, ptr as *mut libc::c_char, len),
                        }
                    })
                })?;
                w.u32(n as u32);
                if size > 0 {
                    w.0.extend_from_slice(&buf[..n]);
                }
            }
            Op::Removexattr => {
                let (path, name) = (r.path()?, r.path()?);
                let name = std::ffi::CString::new(name).map_err(|_| libc::EINVAL)?;
                let fh = trailing_fh(r)?;
                self.xattr(s, fh, path, Err(libc::EPERM), |p| {
                    // SAFETY: valid strings.
                    check_fd(unsafe { libc::removexattr(p, name.as_ptr()) }).map(|_| ())
                })?
            }
            _ => unreachable!("dispatched by family"),
        }
        Ok(w)
    }
}

/// The open handle an attribute request may end with (0: none, the path is used).
fn trailing_fh(r: &mut Reader) -> Result<u64, crate::proto::Malformed> {
    if r.at_end() {
        Ok(0)
    } else {
        r.u64()
    }
}

impl Server {
    /// An extended attribute call on `path`, or on open handle `fh` when given (an
    /// open file or directory whose name is gone: through its descriptor's /proc link).
    fn xattr<T>(
        &self,
        s: &Session,
        fh: u64,
        path: &[u8],
        on_symlink: R<T>,
        f: impl FnOnce(*const libc::c_char) -> R<T>,
    ) -> R<T> {
        if fh == 0 {
            return self.exports[s.export].xattr(path, on_symlink, f);
        }
        // The descriptor stays open while its handle (`file`, `d`) is held, through the call.
        if let Ok(file) = self.file(s, fh) {
            return f(f_proc(file.fd.as_raw_fd()).as_ptr());
        }
        let d = s.dirs.lock().get(&fh).cloned().ok_or(libc::EBADF)?;
        let d = d.lock();
        f(f_proc(d.fd()).as_ptr())
    }
}

fn f_proc(fd: i32) -> std::ffi::CString {
    std::ffi::CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL")
}
