//! User memory as the runtime sees it: buffers made of segments (MX allows up to 256
//! per request), addressed by a flat byte offset.

use omx_proto::MemHandle;
use std::collections::HashMap;

/// Most segments one MX request may name.
pub const MAX_SEGMENTS: usize = 256;

#[derive(Clone, Debug, Default)]
pub struct Buffer {
    pub segments: Vec<Vec<u8>>,
}

impl Buffer {
    pub fn contiguous(data: Vec<u8>) -> Self {
        Buffer {
            segments: vec![data],
        }
    }

    /// Splits `len` bytes into segments of the given sizes (the last takes the rest).
    pub fn zeroed(len: usize, segment_sizes: &[usize]) -> Self {
        let mut segments = Vec::new();
        let mut left = len;
        for &s in segment_sizes {
            let n = s.min(left);
            segments.push(vec![0; n]);
            left -= n;
        }
        if left > 0 || segments.is_empty() {
            segments.push(vec![0; left]);
        }
        Buffer { segments }
    }

    pub fn len(&self) -> usize {
        self.segments.iter().map(|s| s.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.segments.concat()
    }

    /// Calls `f(segment, start_in_segment, range_start_in_request, len)` for the part of
    /// each segment that overlaps `[offset, offset + len)`.
    fn for_range(&self, offset: usize, len: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
        let mut seg_start = 0;
        let end = offset + len;
        for (i, s) in self.segments.iter().enumerate() {
            let seg_end = seg_start + s.len();
            let a = offset.max(seg_start);
            let b = end.min(seg_end);
            if a < b {
                f(i, a - seg_start, a - offset, b - a);
            }
            seg_start = seg_end;
            if seg_start >= end {
                break;
            }
        }
    }

    /// Writes `data` at `offset`; bytes beyond the buffer are an engine bug.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) {
        assert!(
            offset + data.len() <= self.len(),
            "copy beyond the receive buffer"
        );
        let mut parts = Vec::new();
        self.for_range(offset, data.len(), |i, s, r, n| parts.push((i, s, r, n)));
        for (i, s, r, n) in parts {
            self.segments[i][s..s + n].copy_from_slice(&data[r..r + n]);
        }
    }

    pub fn read_at(&self, offset: usize, out: &mut [u8]) {
        assert!(
            offset + out.len() <= self.len(),
            "read beyond the send buffer"
        );
        self.for_range(offset, out.len(), |i, s, r, n| {
            out[r..r + n].copy_from_slice(&self.segments[i][s..s + n])
        });
    }
}

/// The buffers a host has lent to its engine.
#[derive(Default)]
pub struct Memory {
    buffers: HashMap<u64, Buffer>,
    next: u64,
}

impl Memory {
    pub fn register(&mut self, buf: Buffer) -> MemHandle {
        self.next += 1;
        self.buffers.insert(self.next, buf);
        MemHandle(self.next)
    }

    pub fn get(&self, h: MemHandle) -> &Buffer {
        &self.buffers[&h.0]
    }

    pub fn get_mut(&mut self, h: MemHandle) -> &mut Buffer {
        self.buffers.get_mut(&h.0).expect("registered handle")
    }

    pub fn release(&mut self, h: MemHandle) -> Option<Buffer> {
        self.buffers.remove(&h.0)
    }

    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segmented_write_read_roundtrip() {
        let mut b = Buffer::zeroed(10, &[3, 0, 4]);
        assert_eq!(b.segments.len(), 4);
        b.write_at(2, &[1, 2, 3, 4, 5, 6]);
        assert_eq!(b.to_vec(), vec![0, 0, 1, 2, 3, 4, 5, 6, 0, 0]);
        let mut out = [0u8; 4];
        b.read_at(1, &mut out);
        assert_eq!(out, [0, 1, 2, 3]);
    }
}
