//! Classic pcap files (the format tcpdump and Wireshark read and write): a 24-byte
//! global header, then per frame a 16-byte record header and the frame's bytes.
//! Ethernet link type only; microsecond or nanosecond timestamps, either byte order,
//! on reading.

use std::io::{self, Read, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
const LINKTYPE_ETHERNET: u32 = 1;
const SNAPLEN: u32 = 262_144;
/// Records longer than this are refused as corrupt (no Ethernet frame is).
const RECORD_MAX: u32 = 1 << 20;

/// Writes frames to a pcap stream (microsecond timestamps, native byte order).
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the global header.
    pub fn new(mut out: W) -> io::Result<PcapWriter<W>> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_US.to_ne_bytes());
        h.extend_from_slice(&2u16.to_ne_bytes());
        h.extend_from_slice(&4u16.to_ne_bytes());
        h.extend_from_slice(&0i32.to_ne_bytes()); // time zone: UTC
        h.extend_from_slice(&0u32.to_ne_bytes()); // timestamp accuracy
        h.extend_from_slice(&SNAPLEN.to_ne_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_ne_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Appends one frame captured at `ts`.
    pub fn write(&mut self, ts: SystemTime, frame: &[u8]) -> io::Result<()> {
        let t = ts.duration_since(UNIX_EPOCH).unwrap_or_default();
        let len = u32::try_from(frame.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too long"))?;
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&(t.as_secs() as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&t.subsec_micros().to_ne_bytes());
        h[8..12].copy_from_slice(&len.to_ne_bytes());
        h[12..16].copy_from_slice(&len.to_ne_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(frame)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Reads frames from a pcap stream.
pub struct PcapReader<R: Read> {
    input: R,
    swapped: bool,
    nanos: bool,
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not a pcap file: {what}"),
    )
}

impl<R: Read> PcapReader<R> {
    /// Reads and checks the global header: a pcap (not pcapng) file of Ethernet frames.
    pub fn new(mut input: R) -> io::Result<PcapReader<R>> {
        let mut h = [0u8; 24];
        input
            .read_exact(&mut h)
            .map_err(|_| bad("shorter than its header"))?;
        let magic = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (swapped, nanos) = match magic {
            MAGIC_US => (cfg!(target_endian = "big"), false),
            MAGIC_NS => (cfg!(target_endian = "big"), true),
            m if m.swap_bytes() == MAGIC_US => (cfg!(target_endian = "little"), false),
            m if m.swap_bytes() == MAGIC_NS => (cfg!(target_endian = "little"), true),
            _ => {
                return Err(bad(
                    "unknown magic number (pcapng is not read; tshark -F pcap converts)",
                ))
            }
        };
        let r = PcapReader {
            input,
            swapped,
            nanos,
        };
        let linktype = r.u32_at(&h, 20);
        if linktype & 0xFFFF != LINKTYPE_ETHERNET {
            return Err(bad(&format!("link type {linktype}, not Ethernet")));
        }
        Ok(r)
    }

    fn u32_at(&self, b: &[u8], at: usize) -> u32 {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        // Stored in the writer's byte order: `swapped` says whether it differs from ours.
        let le = cfg!(target_endian = "little") != self.swapped;
        if le {
            u32::from_le_bytes(v)
        } else {
            u32::from_be_bytes(v)
        }
    }

    /// The next frame and its timestamp; `None` at the end of the file.
    pub fn next_frame(&mut self) -> io::Result<Option<(SystemTime, Vec<u8>)>> {
        let mut h = [0u8; 16];
        match read_full(&mut self.input, &mut h)? {
            0 => return Ok(None),
            16 => {}
            _ => return Err(bad("truncated record header")),
        }
        let (secs, frac, caplen) = (self.u32_at(&h, 0), self.u32_at(&h, 4), self.u32_at(&h, 8));
        if caplen > RECORD_MAX {
            return Err(bad(&format!("record of {caplen} bytes")));
        }
        let mut frame = vec![0u8; caplen as usize];
        self.input
            .read_exact(&mut frame)
            .map_err(|_| bad("truncated record"))?;
        let sub = if self.nanos {
            Duration::from_nanos(frac.into())
        } else {
            Duration::from_micros(frac.into())
        };
        Ok(Some((
            UNIX_EPOCH + Duration::from_secs(secs.into()) + sub,
            frame,
        )))
    }
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_input() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        w.write(t, &[1, 2, 3]).unwrap();
        w.write(t, &[4; 60]).unwrap();
        let bytes = w.out;
        let mut r = PcapReader::new(&bytes[..]).unwrap();
        assert_eq!(r.next_frame().unwrap(), Some((t, vec![1, 2, 3])));
        assert_eq!(r.next_frame().unwrap().unwrap().1, vec![4; 60]);
        assert!(r.next_frame().unwrap().is_none());
        // A cut anywhere is an error (or a clean end between records), never a panic.
        for cut in 0..bytes.len() {
            let mut n = 0;
            match PcapReader::new(&bytes[..cut]) {
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::InvalidData),
                Ok(mut r) => {
                    while let Ok(Some(_)) = r.next_frame() {
                        n += 1;
                    }
                }
            }
            assert!(n <= 2);
        }
        assert!(PcapReader::new(&[0u8; 24][..]).is_err());
        // The other byte order and nanoseconds read the same.
        let mut swapped = bytes.clone();
        for (at, len) in [
            (0, 4),
            (4, 2),
            (6, 2),
            (16, 4),
            (20, 4),
            (24, 4),
            (28, 4),
            (32, 4),
            (36, 4),
        ] {
            swapped[at..at + len].reverse();
        }
        swapped[28..32].copy_from_slice(&123_456_000_u32.to_be_bytes());
        swapped[0..4].copy_from_slice(&MAGIC_NS.to_be_bytes());
        let mut r = PcapReader::new(&swapped[..]).unwrap();
        let (ts, f) = r.next_frame().unwrap().unwrap();
        assert_eq!((ts, f), (t, vec![1, 2, 3]));
    }
}
