//! User memory lent to the engine: each request's buffer is a list of segments (raw
//! pointers, as the MX API passes them). The caller guarantees, as with MX, that a
//! buffer stays valid and is not touched by the application until its request completes.

use omx_proto::slab::{Key, Slab};
use omx_proto::MemHandle;

/// One contiguous piece of a request's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub ptr: *mut u8,
    pub len: usize,
}

// Segments are plain addresses handed over by the application; moving them between the
// application thread and the progress thread is what MX does with its buffers.
unsafe impl Send for Segment {}

/// Most segments one request may name (MX limit).
pub const MAX_SEGMENTS: usize = 256;

/// Handles are slab keys: no hashing on the per-message path, and a stale handle
/// (generation mismatch) never reaches a newer buffer.
#[derive(Default)]
pub struct MemRegistry {
    buffers: Slab<Segments>,
}

/// Segments kept inline: one, or two for the libfabric provider's header and payload.
const INLINE_SEGMENTS: usize = 2;

/// A request's segments, with the common cases kept inline (no heap allocation per
/// message).
enum Segments {
    Few([Segment; INLINE_SEGMENTS], u8),
    Many(Vec<Segment>),
}

impl Segments {
    fn as_slice(&self) -> &[Segment] {
        match self {
            Segments::Few(a, n) => &a[..*n as usize],
            Segments::Many(v) => v,
        }
    }
}

impl MemRegistry {
    pub fn register(&mut self, segments: &[Segment]) -> MemHandle {
        let s = if segments.len() <= INLINE_SEGMENTS {
            let empty = Segment {
                ptr: std::ptr::null_mut(),
                len: 0,
            };
            let mut a = [empty; INLINE_SEGMENTS];
            a[..segments.len()].copy_from_slice(segments);
            Segments::Few(a, segments.len() as u8)
        } else {
            Segments::Many(segments.to_vec())
        };
        MemHandle(self.buffers.insert(s).0)
    }

    #[inline]
    pub fn release(&mut self, h: MemHandle) {
        // Dropped in place: nothing needs the segments any more.
        self.buffers.discard(Key(h.0));
    }

    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// Visits the parts of `[offset, offset + len)` of a buffer segment by segment:
    /// `f(segment pointer at the part, part length, offset of the part in the range)`.
    fn for_range(
        &self,
        h: MemHandle,
        offset: usize,
        len: usize,
        mut f: impl FnMut(*mut u8, usize, usize),
    ) {
        let Some(segs) = self.buffers.get(Key(h.0)).map(Segments::as_slice) else {
            return;
        };
        let end = offset + len;
        let mut seg_start = 0usize;
        for s in segs {
            let seg_end = seg_start + s.len;
            let a = offset.max(seg_start);
            let b = end.min(seg_end);
            if a < b {
                // SAFETY: a - seg_start < s.len, within the segment the caller lent us.
                f(unsafe { s.ptr.add(a - seg_start) }, b - a, a - offset);
            }
            seg_start = seg_end;
            if seg_start >= end {
                break;
            }
        }
    }

    /// The address ranges of `[offset, offset + len)` of a buffer, in order.
    pub fn ranges(&self, h: MemHandle, offset: usize, len: usize) -> Vec<(*mut u8, usize)> {
        let mut v = Vec::new();
        self.for_range(h, offset, len, |p, n, _| v.push((p, n)));
        v
    }

    /// The parts of `[offset, offset + len)` of a buffer as slices, in order, into
    /// `out`; returns how many, or `None` if the buffer is unknown, the range is not
    /// entirely inside it, or it spans more than `out.len()` segments.
    pub fn gather<'a>(
        &'a self,
        h: MemHandle,
        offset: usize,
        len: usize,
        out: &mut [&'a [u8]],
    ) -> Option<usize> {
        // SAFETY: each part lies inside a segment lent to us, which stays valid (and
        // unwritten by the application) while its request holds the handle, at least
        // as long as `&self`.
        self.parts(h, offset, len, out, |p, n| unsafe {
            std::slice::from_raw_parts(p, n)
        })
    }

    /// The parts of `[offset, offset + len)` of a buffer, each made into an item by
    /// `item(address, length)`, into `out`; returns how many, or `None` if the range
    /// is not entirely inside a known buffer or spans more than `out.len()` segments.
    fn parts<T>(
        &self,
        h: MemHandle,
        offset: usize,
        len: usize,
        out: &mut [T],
        item: impl Fn(*mut u8, usize) -> T,
    ) -> Option<usize> {
        let (mut n, mut covered, mut fits) = (0, 0, true);
        self.for_range(h, offset, len, |p, part, _| {
            if n == out.len() {
                fits = false;
                return;
            }
            out[n] = item(p, part);
            n += 1;
            covered += part;
        });
        (fits && covered == len).then_some(n)
    }

    /// The parts of `[offset, offset + len)` of a buffer as (address, length), in
    /// order, into `out`, for the kernel to write into (a directly received pull
    /// reply); `None` under the same conditions as [`MemRegistry::gather`].
    pub fn scatter(
        &self,
        h: MemHandle,
        offset: usize,
        len: usize,
        out: &mut [(*mut u8, usize)],
    ) -> Option<usize> {
        self.parts(h, offset, len, out, |p, n| (p, n))
    }

    /// Copies `len` bytes between two buffers of this process (a message to oneself);
    /// the application may have lent overlapping memory, so this is a move.
    pub fn copy(
        &self,
        src: MemHandle,
        src_offset: usize,
        dst: MemHandle,
        dst_offset: usize,
        len: usize,
    ) {
        self.for_range(src, src_offset, len, |p, n, at| {
            self.for_range(dst, dst_offset + at, n, |q, m, at2| {
                // SAFETY: both ranges lie inside segments lent to us; memmove semantics.
                unsafe { std::ptr::copy(p.add(at2), q, m) }
            });
        });
    }

    /// Copies `data` into the buffer at `offset` (a receive's copy action).
    pub fn write(&self, h: MemHandle, offset: usize, data: &[u8]) {
        self.for_range(h, offset, data.len(), |p, n, at| {
            // SAFETY: p..p+n lies inside a lent segment; data[at..at+n] is in bounds.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().add(at), p, n) }
        });
    }

    /// Reads from the buffer at `offset` into `out` (building a pull reply).
    pub fn read(&self, h: MemHandle, offset: usize, out: &mut [u8]) {
        self.for_range(h, offset, out.len(), |p, n, at| {
            // SAFETY: as in `write`, reversed.
            unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr().add(at), n) }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reads_across_segments() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 5];
        let mut m = MemRegistry::default();
        let h = m.register(&[
            Segment {
                ptr: a.as_mut_ptr(),
                len: 3,
            },
            Segment {
                ptr: std::ptr::null_mut(),
                len: 0,
            },
            Segment {
                ptr: b.as_mut_ptr(),
                len: 5,
            },
        ]);
        m.write(h, 1, &[1, 2, 3, 4]);
        let mut out = [0u8; 6];
        m.read(h, 0, &mut out);
        assert_eq!(out, [0, 1, 2, 3, 4, 0]);
        assert_eq!(a, [0, 1, 2]);
        assert_eq!(&b[..2], &[3, 4]);
    }
}
