//! Memory lent to the engine: each request's buffer is a list of segments (raw
//! pointers, as the MX API passes them, or file ranges and other processes' memory,
//! see [`Segment`]); every copy into or out of a request's buffer goes through here. The caller guarantees, as with MX, that a
//! buffer stays valid and is not touched by the application until its request completes.

use bytes::Bytes;
use omx_proto::slab::{Key, Slab};
use omx_proto::{AtomicJob, MemHandle};
use std::cell::Cell;
use std::sync::Mutex;

mod segment;

pub use segment::{Access, Segment, SegmentError};

/// Most segments one request may name (MX limit).
pub const MAX_SEGMENTS: usize = 256;

/// Handles are slab keys: no hashing on the per-message path, and a stale handle
/// (generation mismatch) never reaches a newer buffer.
#[derive(Default)]
pub struct MemRegistry {
    buffers: Slab<Buffer>,
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

/// A lent buffer: its segments, whether they are all this process's memory (the
/// paths that hand addresses to the kernel or another thread need that), and the
/// first copy that failed on a file or process segment, which fails the request
/// when it completes (see [`MemRegistry::release`]).
struct Buffer {
    segs: Segments,
    plain: bool,
    failure: Cell<Option<SegmentError>>,
}

/// Whether every segment is memory of this process.
pub fn all_memory(segs: &[Segment]) -> bool {
    segs.iter().all(|s| matches!(s, Segment::Memory { .. }))
}

/// The one copy from segments into a contiguous buffer (eager sends captured or
/// written into a partner's ring): `out` takes the segments' bytes in order.
pub fn read_segments(segs: &[Segment], out: &mut [u8]) -> Result<(), SegmentError> {
    let mut at = 0;
    for s in segs.iter().filter(|s| !s.is_empty()) {
        let n = s.len();
        // SAFETY: the caller lent these segments for the call; `out` holds their sum.
        unsafe { s.read_at(0, &mut out[at..at + n])? };
        at += n;
    }
    Ok(())
}

impl MemRegistry {
    pub fn register(&mut self, segments: &[Segment]) -> MemHandle {
        let segs = if segments.len() <= INLINE_SEGMENTS {
            let mut a = [Segment::EMPTY; INLINE_SEGMENTS];
            a[..segments.len()].copy_from_slice(segments);
            Segments::Few(a, segments.len() as u8)
        } else {
            Segments::Many(segments.to_vec())
        };
        let b = Buffer {
            segs,
            plain: all_memory(segments),
            failure: Cell::new(None),
        };
        MemHandle(self.buffers.insert(b).0)
    }

    /// Forgets a buffer; the first copy that failed on one of its file or process
    /// segments, if any (the request it was lent to then fails).
    #[inline]
    pub fn release(&mut self, h: MemHandle) -> Option<SegmentError> {
        let failure = self.buffers.get(Key(h.0)).and_then(|b| b.failure.get());
        // Dropped in place: nothing needs the segments any more.
        self.buffers.discard(Key(h.0));
        failure
    }

    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// Whether a buffer is all this process's memory (unknown buffers are not).
    pub fn is_plain(&self, h: MemHandle) -> bool {
        self.buffers.get(Key(h.0)).is_some_and(|b| b.plain)
    }

    /// Visits the parts of `[offset, offset + len)` of a buffer segment by segment:
    /// `f(segment, offset of the part in the segment, part length, offset of the
    /// part in the range)`.
    fn for_range(
        &self,
        h: MemHandle,
        offset: usize,
        len: usize,
        mut f: impl FnMut(&Segment, usize, usize, usize),
    ) {
        let Some(segs) = self.buffers.get(Key(h.0)).map(|b| b.segs.as_slice()) else {
            return;
        };
        let end = offset + len;
        let mut seg_start = 0usize;
        for s in segs {
            let seg_end = seg_start + s.len();
            let a = offset.max(seg_start);
            let b = end.min(seg_end);
            if a < b {
                f(s, a - seg_start, b - a, a - offset);
            }
            seg_start = seg_end;
            if seg_start >= end {
                break;
            }
        }
    }

    /// The address of `[offset, offset + len)` when the buffer is one memory segment
    /// holding that range: the common case (every small message), copied without
    /// walking the segments or dispatching on their kind.
    #[inline]
    fn single_memory(&self, h: MemHandle, offset: usize, len: usize) -> Option<*mut u8> {
        match self.buffers.get(Key(h.0))?.segs.as_slice() {
            [Segment::Memory { ptr, len: seg_len }]
                if offset.checked_add(len).is_some_and(|end| end <= *seg_len) =>
            {
                Some(ptr.wrapping_add(offset))
            }
            _ => None,
        }
    }

    /// Records the first failed copy of a buffer.
    fn note(&self, h: MemHandle, r: Result<(), SegmentError>) {
        if let (Err(e), Some(b)) = (r, self.buffers.get(Key(h.0))) {
            if b.failure.get().is_none() {
                b.failure.set(Some(e));
            }
        }
    }

    /// The address ranges of `[offset, offset + len)` of a buffer, in order; `None`
    /// when the buffer is not all memory of this process (file and process segments
    /// have no address here: callers take a path that copies through
    /// [`MemRegistry::read`] and [`MemRegistry::write`]).
    pub fn ranges(&self, h: MemHandle, offset: usize, len: usize) -> Option<Vec<(*mut u8, usize)>> {
        if !self.is_plain(h) {
            return None;
        }
        let mut v = Vec::new();
        self.for_range(h, offset, len, |s, at, n, _| {
            v.extend(s.memory_at(at).map(|p| (p, n)))
        });
        Some(v)
    }

    /// The parts of `[offset, offset + len)` of a buffer as slices, in order, into
    /// `out`; returns how many, or `None` if the buffer is unknown or not all memory,
    /// the range is not entirely inside it, or it spans more than `out.len()`
    /// segments.
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
    /// is not entirely inside a known buffer of memory segments or spans more than
    /// `out.len()` segments.
    fn parts<T>(
        &self,
        h: MemHandle,
        offset: usize,
        len: usize,
        out: &mut [T],
        item: impl Fn(*mut u8, usize) -> T,
    ) -> Option<usize> {
        if !self.is_plain(h) {
            return None;
        }
        let (mut n, mut covered, mut fits) = (0, 0, true);
        self.for_range(h, offset, len, |s, at, part, _| {
            let Some(p) = s.memory_at(at) else {
                return;
            };
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
    /// the application may have lent overlapping memory, so this is a move. A part
    /// with a file or process segment on either side goes through a bounce buffer.
    pub fn copy(
        &self,
        src: MemHandle,
        src_offset: usize,
        dst: MemHandle,
        dst_offset: usize,
        len: usize,
    ) {
        if !(self.is_plain(src) && self.is_plain(dst)) {
            let mut bounce = vec![0u8; len];
            self.read(src, src_offset, &mut bounce);
            self.write(dst, dst_offset, &bounce);
            return;
        }
        self.for_range(src, src_offset, len, |s, at, n, rel| {
            let p = s.memory_at(at).expect("plain buffer");
            self.for_range(dst, dst_offset + rel, n, |d, at2, m, rel2| {
                let q = d.memory_at(at2).expect("plain buffer");
                // SAFETY: both ranges lie inside segments lent to us; memmove semantics.
                unsafe { std::ptr::copy(p.add(rel2), q, m) }
            });
        });
    }

    /// Copies `data` into the buffer at `offset` (a receive's copy action).
    pub fn write(&self, h: MemHandle, offset: usize, data: &[u8]) {
        if let Some(p) = self.single_memory(h, offset, data.len()) {
            // SAFETY: the range lies inside the one memory segment lent for `h`.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
            return;
        }
        let mut r = Ok(());
        self.for_range(h, offset, data.len(), |s, at, n, rel| {
            // SAFETY: the part lies inside a lent segment; data[rel..rel+n] is in bounds.
            let done = unsafe { s.write_at(at, &data[rel..rel + n]) };
            r = r.and(done);
        });
        self.note(h, r);
    }

    /// Applies a remote atomic to exposed memory; returns the old values. One at a
    /// time in the whole process: a region may be exposed on several endpoints, each
    /// with its own progress. Not atomic against the application's own stores.
    pub fn apply_atomic(&self, job: &AtomicJob) -> Bytes {
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let mut target = vec![0u8; job.len as usize];
        self.read(job.handle, job.offset as usize, &mut target);
        let old = Bytes::copy_from_slice(&target);
        if job.apply(&mut target) {
            self.write(job.handle, job.offset as usize, &target);
        }
        old
    }

    /// Reads from the buffer at `offset` into `out` (building a pull reply or a
    /// frame). A failed file or process read leaves zeros and fails the request.
    pub fn read(&self, h: MemHandle, offset: usize, out: &mut [u8]) {
        if let Some(p) = self.single_memory(h, offset, out.len()) {
            // SAFETY: the range lies inside the one memory segment lent for `h`.
            unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
            return;
        }
        let mut r = Ok(());
        self.for_range(h, offset, out.len(), |s, at, n, rel| {
            let part = &mut out[rel..rel + n];
            // SAFETY: the part lies inside a lent segment.
            let done = unsafe { s.read_at(at, part) };
            if done.is_err() {
                part.fill(0);
            }
            r = r.and(done);
        });
        self.note(h, r);
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
            Segment::memory(a.as_mut_ptr(), 3),
            Segment::EMPTY,
            Segment::memory(b.as_mut_ptr(), 5),
        ]);
        m.write(h, 1, &[1, 2, 3, 4]);
        let mut out = [0u8; 6];
        m.read(h, 0, &mut out);
        assert_eq!(out, [0, 1, 2, 3, 4, 0]);
        assert_eq!(a, [0, 1, 2]);
        assert_eq!(&b[..2], &[3, 4]);
    }

    /// One memory segment (the direct copy) and a range past its end (the segment
    /// walk, which keeps what lies inside).
    #[test]
    fn one_segment_copies_inside_and_clips_past_the_end() {
        let mut a = [0u8; 8];
        let mut m = MemRegistry::default();
        let h = m.register(&[Segment::memory(a.as_mut_ptr(), 8)]);
        m.write(h, 2, &[1, 2, 3]);
        m.write(h, 6, &[4, 5, 6, 7]);
        let mut out = [9u8; 4];
        m.read(h, 1, &mut out);
        assert_eq!(out, [0, 1, 2, 3]);
        assert_eq!(a, [0, 0, 1, 2, 3, 0, 4, 5]);
        assert!(m.release(h).is_none());
    }

    /// File ranges at offsets that are not page-aligned, mixed with memory: written,
    /// read back, copied between buffers (a message to oneself); a file cut short
    /// after the post fails the buffer's request instead of giving wrong bytes.
    #[test]
    fn file_segments_copy_and_fail_when_cut_short() {
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join(format!("omx-mem-test-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        let fd = f.as_raw_fd();
        let mut a = [0u8; 4];
        let mut b = [0u8; 10];
        let mut m = MemRegistry::default();
        let src = m.register(&[
            Segment::memory(a.as_mut_ptr(), 4),
            Segment::file(fd, 4097, 6),
        ]);
        let dst = m.register(&[
            Segment::file(fd, 9001, 3),
            Segment::memory(b.as_mut_ptr(), 7),
        ]);
        assert!(!m.is_plain(src) && m.ranges(src, 0, 10).is_none());
        m.write(src, 0, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(a, [1, 2, 3, 4]);
        m.copy(src, 1, dst, 0, 9);
        let mut out = [0u8; 10];
        m.read(dst, 0, &mut out);
        assert_eq!(out, [2, 3, 4, 5, 6, 7, 8, 9, 10, 0]);
        assert_eq!(m.release(dst), None);
        f.set_len(4099).unwrap();
        let mut out = [0u8; 10];
        m.read(src, 0, &mut out);
        assert_eq!(out, [1, 2, 3, 4, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(m.release(src), Some(SegmentError::File { .. })));
        assert_eq!(
            Segment::file(fd, 4000, 100).check(Access::Read),
            Err(SegmentError::ShortFile {
                size: 4099,
                end: 4100
            })
        );
        assert_eq!(Segment::file(fd, 4000, 100).check(Access::Write), Ok(()));
    }
}
