//! Entry changes (mkdir, mknod, symlink, unlink, rmdir, rename, link): each reply ends
//! with the parent's stamps before and after the change (`proto::Stamp`), then the
//! parent's attributes right after it (a rename: both parents'), which the client
//! keeps for the kernel's `GETATTR` of the directory that follows every change. The
//! parent is opened once for both its stamps and the change (`Export::in_dir`).

use super::*;

impl Server {
    pub(super) fn entry_op(&self, call: Call, r: &mut Reader) -> Result<Writer, Dispatch> {
        let Call { op, s, .. } = call;
        let ex = &self.exports[s.export];
        let mut w = Writer::default();
        match op {
            Op::Mkdir => {
                let path = r.path()?;
                let (mode, uid, gid) = (r.u32()?, r.u32()?, r.u32()?);
                let (a, before, after, parent) =
                    ex.in_dir_attr(path, |e| ex.mkdir(e, mode, uid, gid))?;
                a.encode(&mut w);
                before.encode(&mut w);
                after.encode(&mut w);
                parent.encode(&mut w);
                if let Some(own) = ex.new_dir_stamp(path, &a) {
                    own.encode(&mut w);
                }
            }
            Op::Mknod => {
                let path = r.path()?;
                let (mode, rdev, uid, gid) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
                let made = ex.in_dir_attr(path, |e| ex.mknod(e, mode, rdev, uid, gid))?;
                encode_made(made, &mut w)
            }
            Op::Symlink => {
                let path = r.path()?;
                let target = r.path()?;
                let (uid, gid) = (r.u32()?, r.u32()?);
                let made = ex.in_dir_attr(path, |e| ex.symlink(e, target, uid, gid))?;
                encode_made(made, &mut w)
            }
            Op::Unlink => {
                let path = r.path()?;
                encode_made(ex.in_dir_attr(path, |e| ex.unlink(e))?, &mut w)
            }
            Op::Rmdir => {
                let path = r.path()?;
                encode_made(ex.in_dir_attr(path, |e| ex.rmdir(e))?, &mut w)
            }
            Op::Rename => {
                let (from, to, flags) = (r.path()?, r.path()?, r.u32()?);
                // The source's parent's stamps, then the target's (the same directory:
                // two changes in a row).
                let ((), [(from_before, from_after), (to_before, to_after)], parents) =
                    ex.in_dirs_attrs([from, to], |[f, t]| ex.rename(f, t, flags))?;
                for st in [from_before, from_after, to_before, to_after] {
                    st.encode(&mut w);
                }
                for a in parents {
                    a.encode(&mut w);
                }
            }
            Op::Link => {
                let (from, to) = (r.path()?, r.path()?);
                encode_made(ex.in_dir_attr(to, |t| ex.link(from, t))?, &mut w)
            }
            _ => unreachable!("dispatched by family"),
        }
        Ok(w)
    }
}

/// The reply to an entry change: what it returns (attributes, or nothing), then the
/// parent's stamps and attributes.
fn encode_made<T: EncodeMade>((v, before, after, parent): (T, Stamp, Stamp, Attr), w: &mut Writer) {
    v.encode_made(w);
    before.encode(w);
    after.encode(w);
    parent.encode(w);
}

trait EncodeMade {
    fn encode_made(&self, w: &mut Writer);
}

impl EncodeMade for () {
    fn encode_made(&self, _: &mut Writer) {}
}

impl EncodeMade for Attr {
    fn encode_made(&self, w: &mut Writer) {
        self.encode(w)
    }
}
