//! omxfs_hostile HOST EXPORT: a hostile omxfs peer. Sends garbage, truncated and
//! out-of-range requests to an `omxfsd` and checks that each one whose header decodes
//! gets an error reply, then that the server still serves a well-formed session.
//! Prints how many malformed messages it sent (the server's `malformed` counter must
//! grow by that much: tests/fs/run.sh checks it through `SIGUSR1`). Exit 1 on any
//! unexpected answer.

use omx_fs::proto::*;
use omx_proto::{PartnerId, StatusCode};
use omx_runtime::{Endpoint, Segment};
use std::time::Duration;

const WAIT: Option<Duration> = Some(Duration::from_secs(20));

struct Peer {
    ep: Endpoint,
    server: PartnerId,
    next_id: u64,
    failures: u32,
    malformed_sent: u32,
}

impl Peer {
    fn send(&self, bytes: &[u8], kind: Kind, session: u32, id: u64) {
        let seg = Segment::memory(bytes.as_ptr() as *mut u8, bytes.len());
        // SAFETY: `bytes` outlives the send, waited for here.
        let r = unsafe {
            self.ep
                .isend(&[seg], self.server, match_info(kind, session, id), 0, false)
        }
        .expect("isend");
        let c = self.ep.wait(r, WAIT).expect("send completes");
        // An oversized message is delivered truncated: the sender is told so.
        assert!(
            matches!(c.status.code, StatusCode::Success | StatusCode::Truncated),
            "send: {:?}",
            c.status.code
        );
    }

    /// Sends `msg` (its id field, if it has one, left as built) and returns the reply's
    /// (errno, body), or None without a reply expected.
    fn exchange(&mut self, msg: &[u8], id: u64, data: Option<&[u8]>) -> (i32, Vec<u8>) {
        let mut buf = vec![0u8; MAX_HEADER];
        let seg = Segment::memory(buf.as_mut_ptr(), buf.len());
        // SAFETY: buf outlives the receive, waited for below.
        let r = unsafe {
            self.ep
                .irecv(&[seg], match_info(Kind::Reply, 0, id), u64::MAX, 0)
        }
        .expect("irecv");
        self.send(msg, Kind::Request, 0, id);
        if let Some(d) = data {
            self.send(d, Kind::WriteData, session_of(msg), id);
        }
        let c = self.ep.wait(r, WAIT).expect("the server replies");
        let n = c.status.xfer_length as usize;
        let mut rd = Reader::new(&buf[..n]);
        let h = decode_header(&mut rd).expect("reply header");
        assert_eq!(h.id, id, "reply id");
        (h.word as i32, rd.rest().to_vec())
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A request whose reply must carry `want` (0 = success); returns the body.
    fn expect(
        &mut self,
        what: &str,
        w: Writer,
        want: i32,
        data: Option<&[u8]>,
        malformed: bool,
    ) -> Vec<u8> {
        let id = u64::from_le_bytes(w.0[8..16].try_into().unwrap());
        let (errno, body) = self.exchange(&w.0, id, data);
        let ok = errno == want;
        println!(
            "{} {what}: errno {errno} (want {want})",
            if ok { "ok  " } else { "FAIL" }
        );
        self.failures += !ok as u32;
        self.malformed_sent += malformed as u32;
        body
    }

    /// A message the server cannot answer (no readable id): counted there, no reply.
    fn unanswerable(&mut self, what: &str, bytes: &[u8]) {
        self.send(bytes, Kind::Request, 0, 0);
        println!("sent {what} (no reply expected)");
        self.malformed_sent += 1;
    }
}

fn session_of(msg: &[u8]) -> u32 {
    msg.get(4..8)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [host, export] = <[String; 2]>::try_from(args).unwrap_or_else(|_| {
        eprintln!("usage: omxfs_hostile HOST EXPORT");
        std::process::exit(2)
    });
    let ep = omx_fs::open_endpoint(0, None).expect("endpoint");
    let nic = omx_runtime::ipmap::resolve_node(ep.runtime(), &host, Duration::from_secs(10))
        .expect("host");
    let server = ep
        .connect(nic, SERVER_ENDPOINT, KEY, WAIT)
        .expect("connect")
        .expect("connect accepted");
    let mut p = Peer {
        ep,
        server,
        next_id: 1000,
        failures: 0,
        malformed_sent: 0,
    };

    // Messages with no decodable header: dropped and counted.
    p.unanswerable("an empty message", &[]);
    p.unanswerable("a bad magic", &[0xde; 40]);
    p.unanswerable(
        "a message larger than any request",
        &vec![0x4f; MAX_HEADER + 100],
    );
    let mut v = Writer::request(Op::Ping, 0, 1);
    v.0[2] = VERSION + 1;
    p.unanswerable("an unknown protocol version", &v.0);

    // Decodable headers with bad contents: an error reply each.
    let id = p.id();
    let mut w = Writer::request(Op::Ping, 0, id);
    w.0[3] = 200;
    p.expect("an unknown op", w, libc::EPROTO, None, true);
    let id = p.id();
    p.expect(
        "a hello without its export name",
        Writer::request(Op::Hello, 0, id),
        libc::EPROTO,
        None,
        true,
    );
    let id = p.id();
    let mut w = Writer::request(Op::Hello, 0, id);
    w.bytes(b"no-such-export");
    p.expect(
        "a hello for an unknown export",
        w,
        libc::ENOENT,
        None,
        false,
    );
    let id = p.id();
    let mut w = Writer::request(Op::Getattr, 0xabcde, id);
    w.bytes(b"");
    p.expect(
        "a request in an unknown session",
        w,
        libc::EBADR,
        None,
        false,
    );

    // A real session, then malformed requests inside it.
    let id = p.id();
    let mut w = Writer::request(Op::Hello, 0, id);
    w.bytes(export.as_bytes());
    let body = p.expect("a well-formed hello", w, 0, None, false);
    let session = Reader::new(&body).u32().expect("session");

    let id = p.id();
    let mut w = Writer::request(Op::Getattr, session, id);
    w.u32(1 << 30).0.extend_from_slice(b"short");
    p.expect(
        "a path longer than its message",
        w,
        libc::EPROTO,
        None,
        true,
    );
    let id = p.id();
    let mut w = Writer::request(Op::Lookup, session, id);
    w.bytes(b"a\0b");
    p.expect("a path with a NUL", w, libc::EPROTO, None, true);
    let id = p.id();
    let mut w = Writer::request(Op::Lookup, session, id);
    w.bytes(b"../../etc/passwd");
    let (errno, _) = p.exchange(&w.0, id, None);
    println!(
        "{} a path with '..': errno {errno}",
        if errno != 0 { "ok  " } else { "FAIL" }
    );
    p.failures += (errno == 0) as u32;
    let id = p.id();
    let mut w = Writer::request(Op::Setattr, session, id);
    w.bytes(b"").u64(0);
    p.expect("a setattr cut short", w, libc::EPROTO, None, true);
    let id = p.id();
    let mut w = Writer::request(Op::Lseek, session, id);
    w.u64(999_999).i64(0).u32(libc::SEEK_DATA as u32);
    p.expect(
        "an lseek of a handle never opened",
        w,
        libc::EBADF,
        None,
        false,
    );
    let id = p.id();
    let mut w = Writer::request(Op::Lseek, session, id);
    w.u64(999_999).i64(0).u32(7);
    p.expect("an lseek with a bad whence", w, libc::EINVAL, None, false);
    let id = p.id();
    let mut w = Writer::request(Op::Getattr, session, id);
    w.bytes(b"").u64(999_999);
    p.expect(
        "a getattr of a handle never opened",
        w,
        libc::EBADF,
        None,
        false,
    );
    let id = p.id();
    let mut w = Writer::request(Op::Readdir, session, id);
    w.u64(999_999).i64(0).u32(8192);
    p.expect(
        "a directory handle never opened",
        w,
        libc::EBADF,
        None,
        false,
    );

    let id = p.id();
    let mut w = Writer::request(Op::Create, session, id);
    let name = format!("hostile-probe-{}", std::process::id());
    w.bytes(name.as_bytes())
        .u32(libc::O_RDWR as u32)
        .u32(0o600)
        .u32(0)
        .u32(0);
    let body = p.expect("a well-formed create", w, 0, None, false);
    let fh = Reader::new(&body).u64().expect("fh");

    let id = p.id();
    let mut w = Writer::request(Op::Read, session, id);
    w.u64(fh).u64(0).u32(MAX_IO + 1);
    p.expect(
        "a read above the largest size",
        w,
        libc::EINVAL,
        None,
        false,
    );
    let id = p.id();
    let mut w = Writer::request(Op::Write, session, id);
    w.u64(fh).u64(0).u32(100).0.extend_from_slice(&[1; 10]);
    p.expect(
        "an inline write shorter than it says",
        w,
        libc::EPROTO,
        None,
        true,
    );
    let id = p.id();
    let mut w = Writer::request(Op::Write, session, id);
    w.u64(fh).u64(0).u32(INLINE_WRITE as u32 + 4096);
    p.expect(
        "a write whose data message is short",
        w,
        libc::EPROTO,
        Some(&[2; 100]),
        true,
    );
    for (what, typ, start, end) in [
        ("a lock of an unknown type", 99, 0, 10),
        ("a lock ending before it starts", 1, 10, 0),
    ] {
        let id = p.id();
        let mut w = Writer::request(Op::Setlk, session, id);
        w.u64(fh).u64(1).u64(start).u64(end).u32(typ).u32(1).u32(0);
        p.expect(what, w, libc::EINVAL, None, false);
    }

    // Special files are never opened by the server: a FIFO's open would block the
    // serving thread until a writer came, a device node's would reach the server's
    // device (made here as root: the server runs as root in the tests).
    for (what, kind, rdev, flags) in [
        ("an open of a FIFO", libc::S_IFIFO, 0, libc::O_RDONLY),
        (
            "an open of a device node",
            libc::S_IFCHR,
            (1 << 8) | 3,
            libc::O_RDWR,
        ),
    ] {
        let special = format!("{name}-special");
        let id = p.id();
        let mut w = Writer::request(Op::Mknod, session, id);
        w.bytes(special.as_bytes())
            .u32(kind | 0o666)
            .u32(rdev)
            .u32(0)
            .u32(0);
        p.expect("a mknod", w, 0, None, false);
        let id = p.id();
        let mut w = Writer::request(Op::Open, session, id);
        w.bytes(special.as_bytes())
            .u32(flags as u32)
            .u32(0)
            .u32(0)
            .u32(0);
        p.expect(what, w, libc::ENXIO, None, false);
        let id = p.id();
        let mut w = Writer::request(Op::Unlink, session, id);
        w.bytes(special.as_bytes());
        p.expect("its unlink", w, 0, None, false);
    }

    // Still serving: a write and read back, then the probe removed.
    let id = p.id();
    let mut w = Writer::request(Op::Write, session, id);
    w.u64(fh).u64(0).u32(5).0.extend_from_slice(b"alive");
    p.expect("a well-formed write after all that", w, 0, None, false);
    let id = p.id();
    let mut w = Writer::request(Op::Read, session, id);
    w.u64(fh).u64(0).u32(5);
    let body = p.expect("a well-formed read", w, 0, None, false);
    if body.get(4..) != Some(&b"alive"[..]) {
        println!("FAIL read back {:?}", body);
        p.failures += 1;
    }
    let id = p.id();
    let mut w = Writer::request(Op::Release, session, id);
    w.u64(fh).u64(0).u32(0);
    p.expect("release", w, 0, None, false);
    let id = p.id();
    let mut w = Writer::request(Op::Unlink, session, id);
    w.bytes(name.as_bytes());
    p.expect("unlink", w, 0, None, false);

    println!("malformed sent: {}", p.malformed_sent);
    std::process::exit((p.failures > 0) as i32)
}
