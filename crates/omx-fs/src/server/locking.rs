//! POSIX byte-range locks kept in the server's [`LockTable`]; a blocked `F_SETLKW` is
//! answered when granted.

use super::*;

/// A blocked F_SETLKW, granted when a lock is released.
pub(super) struct Waiter {
    pub(super) reply_to: PartnerId,
    pub(super) id: u64,
    pub(super) file: locks::FileKey,
    pub(super) lock: Lock,
}

impl Server {
    pub(super) fn lock_op(&self, call: Call, r: &mut Reader) -> Result<Writer, Dispatch> {
        let Call { op, h, s, to } = call;
        let mut w = Writer::default();
        match op {
            Op::Getlk | Op::Setlk => {
                let (fh, owner, start, end) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                let (typ, pid, sleep) = (r.u32()? as i32, r.u32()?, r.u32()?);
                if ![locks::F_RDLCK, locks::F_WRLCK, locks::F_UNLCK].contains(&typ) || start > end {
                    return Err(Dispatch::Errno(libc::EINVAL));
                }
                let f = self.file(s, fh)?;
                let lock = Lock {
                    owner: (h.word, owner),
                    start,
                    end,
                    typ,
                    pid,
                };
                if op == Op::Getlk {
                    let c = self.locks.lock().conflict(f.key, &lock);
                    let c = c.unwrap_or(Lock {
                        typ: locks::F_UNLCK,
                        ..lock
                    });
                    w.u64(c.start).u64(c.end).u32(c.typ as u32).u32(c.pid);
                } else {
                    let res = self.locks.lock().set(f.key, lock);
                    match res {
                        Ok(()) if typ == locks::F_UNLCK => self.grant_waiters(),
                        Ok(()) => {}
                        Err(_) if sleep != 0 => {
                            self.waiters.lock().push(Waiter {
                                reply_to: to,
                                id: h.id,
                                file: f.key,
                                lock,
                            });
                            // A release between the try and the queueing is not lost.
                            self.grant_waiters();
                            return Err(Dispatch::Deferred);
                        }
                        Err(_) => return Err(Dispatch::Errno(libc::EAGAIN)),
                    }
                }
            }
            Op::CancelLockWait => {
                // The waiter's F_SETLKW was interrupted on the client: it is withdrawn
                // and answered EINTR; ENOENT when it was already granted (its reply
                // is on the way).
                let target = r.u64()?;
                let mut waiters = self.waiters.lock();
                let at = waiters
                    .iter()
                    .position(|w| w.lock.owner.0 == h.word && w.id == target)
                    .ok_or(libc::ENOENT)?;
                let w = waiters.remove(at);
                drop(waiters);
                self.reply(w.reply_to, Op::Setlk as u8, w.id, Err(libc::EINTR));
            }
            _ => unreachable!("dispatched by family"),
        }
        Ok(w)
    }

    /// Grants every blocked lock that no longer conflicts.
    pub(super) fn grant_waiters(&self) {
        let mut granted = Vec::new();
        {
            let mut table = self.locks.lock();
            let mut waiters = self.waiters.lock();
            waiters.retain(|w| {
                if table.set(w.file, w.lock).is_ok() {
                    granted.push((w.reply_to, w.id));
                    false
                } else {
                    true
                }
            });
        }
        for (to, id) in granted {
            self.reply(to, Op::Setlk as u8, id, Ok(Writer::default()));
        }
    }
}
