//! Records of the intra-node channel: what one endpoint writes into the shared-memory
//! ring of another endpoint of the same host. Host byte order is irrelevant between
//! processes of one host, but the layout is fixed little-endian so that it is defined.
//!
//! Every record starts with its kind; lengths are checked against the record so that
//! a scribbled ring yields a [`LocalError`], never a panic or an out-of-bounds read.
//!
//! | kind | layout (bytes) |
//! |---|---|
//! | EAGER | kind, flags, 0, 0, len u32, match u64, data\[len\] |
//! | RNDV | kind, flags, region, use, len u32, match u64, memory (pid u32, count u32, count x (addr u64, len u64)) |
//! | NOTIFY | kind, flags, region, use, xfer u32 |
//! | PULL_REQ | kind, 0, region, use, offset u32, len u32, 0 u32, cookie u64 |
//! | CHUNK | kind, 0, 0, 0, len u32, cookie u64, offset u32, 0 u32, data\[len\] |

const EAGER: u8 = 1;
const RNDV: u8 = 2;
const NOTIFY: u8 = 3;
const PULL_REQ: u8 = 4;
const CHUNK: u8 = 5;

pub const LOCAL_EAGER_HEADER: usize = 16;
pub const LOCAL_RNDV_HEADER: usize = 16;
pub const LOCAL_NOTIFY_LEN: usize = 8;
pub const LOCAL_PULL_REQ_LEN: usize = 24;
pub const LOCAL_CHUNK_HEADER: usize = 24;
/// Memory description: pid, count, then (address, length) pairs.
pub const REMOTE_MEM_HEADER: usize = 8;
pub const REMOTE_IOV_LEN: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalError {
    Truncated,
    UnknownKind(u8),
    BadLength,
}

/// A decoded record; payloads borrow the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalRecord<'a> {
    Eager {
        flags: u8,
        match_info: u64,
        data: &'a [u8],
    },
    Rndv {
        flags: u8,
        region: u8,
        use_seq: u8,
        len: u32,
        match_info: u64,
        /// A [`RemoteMem`] encoding (validated).
        memory: &'a [u8],
    },
    Notify {
        flags: u8,
        region: u8,
        use_seq: u8,
        xfer: u32,
    },
    PullReq {
        region: u8,
        use_seq: u8,
        offset: u32,
        len: u32,
        cookie: u64,
    },
    Chunk {
        cookie: u64,
        offset: u32,
        data: &'a [u8],
    },
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

pub fn decode_local(b: &[u8]) -> Result<LocalRecord<'_>, LocalError> {
    let kind = *b.first().ok_or(LocalError::Truncated)?;
    let need = match kind {
        EAGER => LOCAL_EAGER_HEADER,
        RNDV => LOCAL_RNDV_HEADER + REMOTE_MEM_HEADER,
        NOTIFY => LOCAL_NOTIFY_LEN,
        PULL_REQ => LOCAL_PULL_REQ_LEN,
        CHUNK => LOCAL_CHUNK_HEADER,
        k => return Err(LocalError::UnknownKind(k)),
    };
    if b.len() < need {
        return Err(LocalError::Truncated);
    }
    let len = u32_at(b, 4);
    Ok(match kind {
        EAGER => LocalRecord::Eager {
            flags: b[1],
            match_info: u64_at(b, 8),
            data: b
                .get(LOCAL_EAGER_HEADER..LOCAL_EAGER_HEADER + len as usize)
                .ok_or(LocalError::BadLength)?,
        },
        RNDV => {
            let memory = &b[LOCAL_RNDV_HEADER..];
            RemoteMem::parse(memory).ok_or(LocalError::BadLength)?;
            LocalRecord::Rndv {
                flags: b[1],
                region: b[2],
                use_seq: b[3],
                len,
                match_info: u64_at(b, 8),
                memory,
            }
        }
        NOTIFY => LocalRecord::Notify {
            flags: b[1],
            region: b[2],
            use_seq: b[3],
            xfer: len,
        },
        PULL_REQ => LocalRecord::PullReq {
            region: b[2],
            use_seq: b[3],
            offset: len,
            len: u32_at(b, 8),
            cookie: u64_at(b, 16),
        },
        _ => LocalRecord::Chunk {
            cookie: u64_at(b, 8),
            offset: u32_at(b, 16),
            data: b
                .get(LOCAL_CHUNK_HEADER..LOCAL_CHUNK_HEADER + len as usize)
                .ok_or(LocalError::BadLength)?,
        },
    })
}

fn head(out: &mut [u8], kind: u8, a: u8, b: u8, c: u8, len: u32) {
    out[..4].copy_from_slice(&[kind, a, b, c]);
    out[4..8].copy_from_slice(&len.to_le_bytes());
}

/// Writes an EAGER header into `out[..16]`; the data follows it.
pub fn encode_local_eager(out: &mut [u8], flags: u8, match_info: u64, len: u32) {
    head(out, EAGER, flags, 0, 0, len);
    out[8..16].copy_from_slice(&match_info.to_le_bytes());
}

/// Writes a RNDV header into `out[..16]`; a [`RemoteMem`] encoding follows it.
pub fn encode_local_rndv(
    out: &mut [u8],
    flags: u8,
    region: u8,
    use_seq: u8,
    len: u32,
    match_info: u64,
) {
    head(out, RNDV, flags, region, use_seq, len);
    out[8..16].copy_from_slice(&match_info.to_le_bytes());
}

pub fn encode_local_notify(out: &mut [u8], flags: u8, region: u8, use_seq: u8, xfer: u32) {
    head(out, NOTIFY, flags, region, use_seq, xfer);
}

pub fn encode_local_pull_req(
    out: &mut [u8],
    region: u8,
    use_seq: u8,
    offset: u32,
    len: u32,
    cookie: u64,
) {
    head(out, PULL_REQ, 0, region, use_seq, offset);
    out[8..12].copy_from_slice(&len.to_le_bytes());
    out[12..16].fill(0);
    out[16..24].copy_from_slice(&cookie.to_le_bytes());
}

/// Writes a CHUNK header into `out[..24]`; the data follows it.
pub fn encode_local_chunk(out: &mut [u8], cookie: u64, offset: u32, len: u32) {
    head(out, CHUNK, 0, 0, 0, len);
    out[8..16].copy_from_slice(&cookie.to_le_bytes());
    out[16..20].copy_from_slice(&offset.to_le_bytes());
    out[20..24].fill(0);
}

/// A process's memory as its rendezvous describes it: pid and address ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteMem<'a> {
    pub pid: u32,
    raw: &'a [u8],
}

impl<'a> RemoteMem<'a> {
    /// The pid of a description naming no memory: the sender's buffer has parts no
    /// cross-process copy reaches (file ranges, another process's memory), so the
    /// receiver asks for the message to be pushed through the ring instead.
    pub const UNREACHABLE: u32 = 0;

    /// Bytes needed to describe `count` ranges.
    pub fn encoded_len(count: usize) -> usize {
        REMOTE_MEM_HEADER + count * REMOTE_IOV_LEN
    }

    /// Writes the description of `ranges` of process `pid` into `out`.
    pub fn encode(out: &mut [u8], pid: u32, ranges: impl ExactSizeIterator<Item = (u64, u64)>) {
        out[..4].copy_from_slice(&pid.to_le_bytes());
        out[4..8].copy_from_slice(&(ranges.len() as u32).to_le_bytes());
        for (i, (addr, len)) in ranges.enumerate() {
            let at = REMOTE_MEM_HEADER + i * REMOTE_IOV_LEN;
            out[at..at + 8].copy_from_slice(&addr.to_le_bytes());
            out[at + 8..at + 16].copy_from_slice(&len.to_le_bytes());
        }
    }

    /// Validates a description (count within the bytes, at most 65536 ranges).
    pub fn parse(b: &'a [u8]) -> Option<RemoteMem<'a>> {
        if b.len() < REMOTE_MEM_HEADER {
            return None;
        }
        let count = u32_at(b, 4) as usize;
        if count > 65536 || b.len() < Self::encoded_len(count) {
            return None;
        }
        Some(RemoteMem {
            pid: u32_at(b, 0),
            raw: &b[REMOTE_MEM_HEADER..Self::encoded_len(count)],
        })
    }

    /// The (address, length) ranges.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        let raw = self.raw;
        raw.chunks_exact(REMOTE_IOV_LEN)
            .map(|c| (u64_at(c, 0), u64_at(c, 8)))
    }

    pub fn total_len(&self) -> u64 {
        self.ranges().fold(0u64, |a, (_, l)| a.saturating_add(l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_round_trips() {
        let mut b = vec![0u8; 64];
        encode_local_eager(&mut b, 3, 0x1122_3344_5566_7788, 5);
        b[16..21].copy_from_slice(b"hello");
        assert_eq!(
            decode_local(&b[..21]),
            Ok(LocalRecord::Eager {
                flags: 3,
                match_info: 0x1122_3344_5566_7788,
                data: b"hello"
            })
        );
        assert_eq!(decode_local(&b[..20]), Err(LocalError::BadLength));

        let mut r = vec![0u8; LOCAL_RNDV_HEADER + RemoteMem::encoded_len(2)];
        encode_local_rndv(&mut r, 0, 7, 9, 100_000, 42);
        RemoteMem::encode(
            &mut r[LOCAL_RNDV_HEADER..],
            1234,
            [(0x1000u64, 60_000u64), (0x9000, 40_000)].into_iter(),
        );
        let LocalRecord::Rndv {
            region,
            use_seq,
            len,
            match_info,
            memory,
            ..
        } = decode_local(&r).unwrap()
        else {
            panic!("not a rndv")
        };
        assert_eq!((region, use_seq, len, match_info), (7, 9, 100_000, 42));
        let m = RemoteMem::parse(memory).unwrap();
        assert_eq!(m.pid, 1234);
        assert_eq!(m.total_len(), 100_000);
        assert_eq!(
            m.ranges().collect::<Vec<_>>(),
            vec![(0x1000, 60_000), (0x9000, 40_000)]
        );
        assert_eq!(decode_local(&r[..r.len() - 1]), Err(LocalError::BadLength));

        let mut n = [0u8; 8];
        encode_local_notify(&mut n, 1, 2, 3, 4);
        assert_eq!(
            decode_local(&n),
            Ok(LocalRecord::Notify {
                flags: 1,
                region: 2,
                use_seq: 3,
                xfer: 4
            })
        );
        let mut p = [0u8; 24];
        encode_local_pull_req(&mut p, 5, 6, 7, 8, 9);
        assert_eq!(
            decode_local(&p),
            Ok(LocalRecord::PullReq {
                region: 5,
                use_seq: 6,
                offset: 7,
                len: 8,
                cookie: 9
            })
        );
        let mut c = vec![0u8; 27];
        encode_local_chunk(&mut c, 77, 1000, 3);
        c[24..].copy_from_slice(b"abc");
        assert_eq!(
            decode_local(&c),
            Ok(LocalRecord::Chunk {
                cookie: 77,
                offset: 1000,
                data: b"abc"
            })
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(decode_local(&[]), Err(LocalError::Truncated));
        assert_eq!(decode_local(&[9, 0, 0]), Err(LocalError::UnknownKind(9)));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..2000usize {
            let len = n % 80;
            let b: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 6) as u8
                })
                .collect();
            let _ = decode_local(&b);
        }
        // A count larger than the bytes.
        let mut r = vec![0u8; LOCAL_RNDV_HEADER + 8];
        encode_local_rndv(&mut r, 0, 0, 0, 0, 0);
        r[LOCAL_RNDV_HEADER + 4] = 3;
        assert_eq!(decode_local(&r), Err(LocalError::BadLength));
    }
}
