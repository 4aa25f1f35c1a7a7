//! The connect handshake under loss, duplication and corruption: it decides sessions and
//! sequence numbers, so a lost, late or damaged connect frame must neither block the
//! connection nor desynchronize the streams.

mod common;
use bytes::Bytes;
use common::*;
use omx_proto::{PartnerId, StatusCode, NS_PER_MS};
use omx_sim::{LinkConfig, World};
use omx_wire::{PacketType, WireConfig};
use std::cell::RefCell;
use std::rc::Rc;

/// Frame offset of a connect's `is_reply` byte.
const IS_REPLY: usize = 16 + 26;

fn is_connect(f: &[u8], reply: bool) -> bool {
    omx_wire::type_of(f[16]) == PacketType::Connect as u8 && f[IS_REPLY] == u8::from(reply)
}

/// Records every frame crossing the link, dropping those `drop` selects (with the
/// number of such frames seen before).
fn tap(
    w: &mut World,
    mut drop: impl FnMut(&[u8], usize) -> bool + 'static,
) -> Rc<RefCell<Vec<Vec<u8>>>> {
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    let mut selected = 0;
    w.filter = Some(Box::new(move |f: &[u8]| {
        l.borrow_mut().push(f.to_vec());
        if drop(f, selected) {
            selected += 1;
            return false;
        }
        true
    }));
    log
}

/// Sends `n` messages from host `from` to the other host, each received intact.
fn exchange(w: &mut World, from: usize, to: PartnerId, tag: u64, n: u64) {
    for i in 0..n {
        let (r, h) = w.recv(1 - from, 0, tag + i, u64::MAX, 64, &[]);
        w.send(from, 0, to, tag + i, pattern(64, tag + i), false);
        let s = w
            .wait(1 - from, 0, r, w.now + 10 * SEC)
            .expect("message arrives");
        assert_eq!(s.code, StatusCode::Success);
        assert_eq!(w.hosts[1 - from].mem.get(h).to_vec(), pattern(64, tag + i));
    }
}

/// Host 0 connected to host 1 and back; also returns host 0's connect request as sent,
/// host 0's partner for host 1 and host 1's for host 0.
fn connected_both_ways(wire: WireConfig, seed: u64) -> (World, Vec<u8>, PartnerId, PartnerId) {
    let mut w = world(wire, LinkConfig::default(), seed);
    let log = tap(&mut w, |_, _| false);
    let to_1 = w.connect(0, 0, 1, 0);
    w.filter = None;
    let request = log
        .borrow()
        .iter()
        .find(|f| is_connect(f, false))
        .expect("host 0's request")
        .clone();
    let to_0 = w.connect(1, 0, 0, 0);
    (w, request, to_1, to_0)
}

/// With checksums on, the receiver of a connect request agrees on them at once; the
/// requester only once the reply arrives. When that reply is lost, the resent request
/// still carries no checksum trailer, and must be answered (it used to be dropped as
/// unchecksummed until the connect timed out).
#[test]
fn lost_connect_reply_with_checksums_still_connects() {
    let mut w = world(
        WireConfig::native_checksummed(9000, true),
        LinkConfig::default(),
        1,
    );
    let log = tap(&mut w, |f, seen| is_connect(f, true) && seen == 0);
    let to = w.connect(0, 0, 1, 0);
    let replies = log.borrow().iter().filter(|f| is_connect(f, true)).count();
    assert_eq!(
        replies, 2,
        "the first reply was dropped, the second connected"
    );
    exchange(&mut w, 0, to, 0x100, 3);
    assert!(w.engine(1, 0).counters.recv_connect_request >= 2);
}

/// A late or duplicated copy of a connect request, arriving after the stream it set up
/// carried acked messages, must not rewind the receiver's next sequence number to the
/// value it announced: the messages sent after would be taken for duplicates and dropped.
#[test]
fn late_connect_request_does_not_rewind_the_stream() {
    for wire in wires() {
        let (mut w, request, to_1, to_0) = connected_both_ways(wire, 2);
        exchange(&mut w, 1, to_0, 0x200, 3);
        w.run_idle(w.now + 100 * NS_PER_MS);
        assert_eq!(w.engine(1, 0).stats().unacked, 0, "{wire:?}");
        let now = w.now;
        w.engine(1, 0).handle_frame(now, Bytes::from(request));
        exchange(&mut w, 1, to_0, 0x300, 3);
        exchange(&mut w, 0, to_1, 0x400, 3);
    }
}

/// A connect whose bits were flipped in flight is dropped on its seal, never believed:
/// a changed session would reset the partner, a changed sequence number desynchronize it.
#[test]
fn corrupted_connect_request_is_dropped_on_its_seal() {
    let (mut w, request, to_1, to_0) = connected_both_ways(WireConfig::native_9000(), 3);
    exchange(&mut w, 1, to_0, 0x500, 2);
    // Session id, sequence start, connect seqnum: each would matter if believed.
    for (byte, bit) in [
        (16 + 16, 0x01),
        (16 + 24, 0x40),
        (16 + 25, 0x01),
        (16 + 27, 0x02),
    ] {
        let mut f = request.clone();
        f[byte] ^= bit;
        let before = w.engine(1, 0).counters.drop_checksum;
        let now = w.now;
        w.engine(1, 0).handle_frame(now, Bytes::from(f));
        assert_eq!(
            w.engine(1, 0).counters.drop_checksum,
            before + 1,
            "byte {byte}"
        );
    }
    w.run_idle(w.now + 100 * NS_PER_MS);
    exchange(&mut w, 1, to_0, 0x600, 2);
    exchange(&mut w, 0, to_1, 0x700, 2);
}
