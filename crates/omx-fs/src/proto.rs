//! The omxfs protocol: requests from a mount (`omxfs`) to the server (`omxfsd`) and
//! their replies, as omx messages.
//!
//! Every message starts with a fixed header (magic, version, op, session, request id);
//! a reply carries the errno of the operation (0 on success) and echoes the id, so a
//! client keeps many requests in flight and matches each reply by its id.
//!
//! Large data never rides in a header: a write's data travels as its own message
//! ([`Kind::WriteData`], posted right after the header) and a read's as
//! [`Kind::ReadData`] (sent before the reply header), so either end may place it
//! straight into a file range or a FUSE buffer.
//!
//! Match information: bits 60..63 the [`Kind`], bits 40..59 the session, bits 0..39 the
//! request id.

use std::fmt;

pub const MAGIC: u16 = 0x4f46; // "OF"
pub const VERSION: u8 = 1;

/// The flags byte of a `READDIRPLUS` entry: its attributes follow (none for `.`, `..`
/// and a name gone before its `lstat`), and it has no extended attributes at all.
pub const ENTRY_ATTR: u8 = 1;
pub const ENTRY_NO_XATTRS: u8 = 2;
/// Application key of omxfs endpoints (server and clients).
pub const KEY: u32 = 0x4f4d_5846;
/// The server's default endpoint index.
pub const SERVER_ENDPOINT: u8 = 7;
/// Largest request or reply header (paths, names, xattr values, directory pages).
pub const MAX_HEADER: usize = 68 * 1024;
/// Writes up to this size ride inside the request header (one message); larger ones as
/// a separate data message.
pub const INLINE_WRITE: usize = 16 * 1024;
/// Largest read or write one request moves.
pub const MAX_IO: u32 = 1 << 20;
/// Longest relative path a request may name.
pub const MAX_PATH: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Kind {
    Request = 1,
    WriteData = 2,
    Reply = 3,
    ReadData = 4,
}

pub const KIND_MASK: u64 = 0xf << 60;
const SESSION_BITS: u32 = 20;
const ID_BITS: u32 = 40;
pub const ID_MASK: u64 = (1 << ID_BITS) - 1;
pub const SESSION_MASK: u32 = (1 << SESSION_BITS) - 1;

pub fn match_info(kind: Kind, session: u32, id: u64) -> u64 {
    ((kind as u64) << 60) | (((session & SESSION_MASK) as u64) << ID_BITS) | (id & ID_MASK)
}

pub fn kind_bits(kind: Kind) -> u64 {
    (kind as u64) << 60
}

macro_rules! ops {
    ($($name:ident = $v:expr),* $(,)?) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        pub enum Op { $($name = $v),* }
        impl Op {
            pub fn from_u8(v: u8) -> Option<Op> {
                match v { $($v => Some(Op::$name),)* _ => None }
            }
        }
    };
}

ops! {
    Hello = 1, Ping = 2, Lookup = 3, Getattr = 4, Setattr = 5, Readlink = 6, Mkdir = 7,
    Unlink = 8, Rmdir = 9, Symlink = 10, Rename = 11, Link = 12, Open = 13, Create = 14,
    Read = 15, Write = 16, Flush = 17, Fsync = 18, Release = 19, Opendir = 20,
    Readdir = 21, Releasedir = 22, Statfs = 23, Setxattr = 24, Getxattr = 25,
    Listxattr = 26, Removexattr = 27, Getlk = 28, Setlk = 29, Fallocate = 30, Mknod = 31,
    CancelLockWait = 32, Readdirplus = 33, Lseek = 34,
}

impl Op {
    /// Operations that change the exported tree (refused by a read-only export).
    pub fn mutates(self) -> bool {
        use Op::*;
        matches!(
            self,
            Setattr
                | Mkdir
                | Unlink
                | Rmdir
                | Symlink
                | Rename
                | Link
                | Create
                | Write
                | Setxattr
                | Removexattr
                | Fallocate
                | Mknod
        )
    }
}

/// A request or reply header that does not decode.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed message: {}", self.0)
    }
}

/// Little-endian encoder.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn request(op: Op, session: u32, id: u64) -> Writer {
        let mut w = Writer(Vec::with_capacity(128));
        w.u16(MAGIC).u8(VERSION).u8(op as u8).u32(session).u64(id);
        w
    }
    pub fn reply(op: u8, errno: i32, id: u64) -> Writer {
        let mut w = Writer(Vec::with_capacity(128));
        w.u16(MAGIC).u8(VERSION).u8(op).u32(errno as u32).u64(id);
        w
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.u64(v as u64)
    }
    /// Length-prefixed bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self
    }
}

/// Little-endian decoder; every read checks the length.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Whether everything was read.
    pub fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(Malformed("truncated"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, Malformed> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    pub fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(self.u64()? as i64)
    }
    pub fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A relative path: no NUL, bounded length.
    pub fn path(&mut self) -> Result<&'a [u8], Malformed> {
        let p = self.bytes()?;
        if p.len() > MAX_PATH || p.contains(&0) {
            return Err(Malformed("bad path"));
        }
        Ok(p)
    }
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }
}

/// The fixed part of every message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub op: u8,
    /// Session (requests) or errno (replies).
    pub word: u32,
    pub id: u64,
}

pub fn decode_header(r: &mut Reader) -> Result<Header, Malformed> {
    if r.u16()? != MAGIC {
        return Err(Malformed("bad magic"));
    }
    if r.u8()? != VERSION {
        return Err(Malformed("unsupported version"));
    }
    Ok(Header {
        op: r.u8()?,
        word: r.u32()?,
        id: r.u64()?,
    })
}

/// A file's identity on the server: its inode number mixed with its device's, so
/// files of two file systems mounted within one export never compare equal.
pub fn file_id(st: &libc::stat) -> u64 {
    st.st_ino ^ st.st_dev.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Bytes of an encoded [`Attr`].
pub const ATTR_SIZE: usize = 3 * 8 + 3 * 12 + 6 * 4;

/// File attributes as the server's `lstat` gives them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    /// The server's identity of the file ([`file_id`]), compared by the client (hard
    /// links, replaced files), never shown: the kernel's `st_ino` is the client's node.
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
}

impl Attr {
    pub fn from_stat(st: &libc::stat) -> Attr {
        Attr {
            ino: file_id(st),
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            atime: (st.st_atime, st.st_atime_nsec as u32),
            mtime: (st.st_mtime, st.st_mtime_nsec as u32),
            ctime: (st.st_ctime, st.st_ctime_nsec as u32),
            mode: st.st_mode,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev as u32,
            blksize: st.st_blksize as u32,
        }
    }
    pub fn encode(&self, w: &mut Writer) {
        w.u64(self.ino).u64(self.size).u64(self.blocks);
        for (s, ns) in [self.atime, self.mtime, self.ctime] {
            w.i64(s).u32(ns);
        }
        w.u32(self.mode).u32(self.nlink).u32(self.uid).u32(self.gid);
        w.u32(self.rdev).u32(self.blksize);
    }
    pub fn decode(r: &mut Reader) -> Result<Attr, Malformed> {
        let (ino, size, blocks) = (r.u64()?, r.u64()?, r.u64()?);
        let mut t = [(0i64, 0u32); 3];
        for x in &mut t {
            *x = (r.i64()?, r.u32()?);
        }
        Ok(Attr {
            ino,
            size,
            blocks,
            atime: t[0],
            mtime: t[1],
            ctime: t[2],
            mode: r.u32()?,
            nlink: r.u32()?,
            uid: r.u32()?,
            gid: r.u32()?,
            rdev: r.u32()?,
            blksize: r.u32()?,
        })
    }
}

/// A directory's change stamp: the count omxfsd keeps of the entry changes it made
/// there (exact between its clients) and the directory's mtime (changes made beside
/// omxfsd, to the file system's timestamp granularity). A reply to an entry change
/// brings the parent's stamp from just before and just after it: a client whose last
/// stamp equals the one before knows nobody else changed the directory meanwhile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamp {
    pub count: u64,
    pub mtime_ns: i64,
}

impl Stamp {
    pub fn encode(&self, w: &mut Writer) {
        w.u64(self.count).i64(self.mtime_ns);
    }
    pub fn decode(r: &mut Reader) -> Result<Stamp, Malformed> {
        Ok(Stamp {
            count: r.u64()?,
            mtime_ns: r.i64()?,
        })
    }
    /// The (before, after) pair ending a reply, if the server sent one.
    pub fn decode_change(r: &mut Reader) -> Option<(Stamp, Stamp)> {
        Some((Stamp::decode(r).ok()?, Stamp::decode(r).ok()?))
    }
}

/// Setattr fields present (bit set) in a request.
pub mod set {
    pub const MODE: u32 = 1;
    pub const UID: u32 = 2;
    pub const GID: u32 = 4;
    pub const SIZE: u32 = 8;
    pub const ATIME: u32 = 16;
    pub const ATIME_NOW: u32 = 32;
    pub const MTIME: u32 = 64;
    pub const MTIME_NOW: u32 = 128;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_truncation() {
        let mut w = Writer::request(Op::Lookup, 5, 77);
        w.bytes(b"a/b");
        let mut r = Reader::new(&w.0);
        let h = decode_header(&mut r).unwrap();
        assert_eq!((h.op, h.word, h.id), (Op::Lookup as u8, 5, 77));
        assert_eq!(r.path().unwrap(), b"a/b");
        for cut in 0..w.0.len() {
            let mut r = Reader::new(&w.0[..cut]);
            let ok = decode_header(&mut r).and_then(|_| r.path().map(|_| ()));
            assert!(ok.is_err(), "cut at {cut} decoded");
        }
    }

    #[test]
    fn match_info_fields_do_not_overlap() {
        let m = match_info(Kind::WriteData, SESSION_MASK, ID_MASK);
        assert_eq!(m & KIND_MASK, kind_bits(Kind::WriteData));
        assert_eq!(m & ID_MASK, ID_MASK);
        assert_eq!(match_info(Kind::Reply, 1, ID_MASK + 1) & ID_MASK, 0);
    }

    #[test]
    fn attr_round_trip() {
        let a = Attr {
            ino: 1,
            size: 2,
            blocks: 3,
            atime: (-4, 5),
            mtime: (6, 7),
            ctime: (8, 9),
            mode: 0o100644,
            nlink: 1,
            uid: 10,
            gid: 11,
            rdev: 0,
            blksize: 4096,
        };
        let mut w = Writer::default();
        a.encode(&mut w);
        assert_eq!(w.0.len(), ATTR_SIZE);
        assert_eq!(Attr::decode(&mut Reader::new(&w.0)).unwrap(), a);
    }
}
