//! Remote atomics (one-sided, native wire): results, refusals that touch nothing, and
//! exactly-once application over a lossy, duplicating, reordering link.

mod common;
use common::*;
use omx_proto::onesided::{EXPOSE_READ, EXPOSE_WRITE};
use omx_proto::*;
use omx_sim::{Buffer, LinkConfig, World};
use omx_wire::WireConfig;

const WINDOW: u64 = 0x4000;

fn u64s(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn read_u64s(b: &[u8]) -> Vec<u64> {
    b.chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// Host `owner` exposes 8 u64 counters (values `init`) with `flags` at `WINDOW`.
fn expose(w: &mut World, owner: usize, init: &[u64], flags: u32) -> MemHandle {
    let h = w.hosts[owner].mem.register(Buffer::contiguous(u64s(init)));
    let len = init.len() as u64 * 8;
    w.engine(owner, 0).expose(7, WINDOW, len, h, flags).unwrap();
    h
}

/// Posts one atomic from `host` and waits for it: its status and the fetched bytes.
#[allow(clippy::too_many_arguments)]
fn atomic(
    w: &mut World,
    host: usize,
    to: PartnerId,
    addr: u64,
    what: (AtomicOp, AtomicType, AtomicKind),
    count: u32,
    operands: &[u8],
) -> (Status, Vec<u8>) {
    let fetch_len = if what.2 == AtomicKind::Plain {
        0
    } else {
        count as usize * what.1.size()
    };
    let result = w.hosts[host].mem.register(Buffer::zeroed(fetch_len, &[]));
    let now = w.now;
    let r = w
        .engine(host, 0)
        .iatomic(now, to, addr, what, count, operands, result, 0)
        .unwrap();
    let s = w
        .wait(host, 0, r, w.now + 60 * SEC)
        .expect("atomic completes");
    (s, w.hosts[host].mem.get(result).to_vec())
}

#[test]
fn atomics_compute_fetch_and_compare() {
    let mut w = world(WireConfig::native_9000(), LinkConfig::default(), 3);
    let to = w.connect(0, 0, 1, 0);
    let mem = expose(&mut w, 1, &[10, 20, 30, 40], EXPOSE_READ | EXPOSE_WRITE);
    use AtomicKind::*;
    use AtomicOp::*;
    let t = AtomicType::U64;
    // Vector sum, not fetched.
    let (s, _) = atomic(&mut w, 0, to, WINDOW, (Sum, t, Plain), 2, &u64s(&[1, 2]));
    assert_eq!(s.code, StatusCode::Success);
    // Fetched max on the third counter: old value back.
    let (s, old) = atomic(&mut w, 0, to, WINDOW + 16, (Max, t, Fetch), 1, &u64s(&[99]));
    assert_eq!((s.code, read_u64s(&old)), (StatusCode::Success, vec![30]));
    // Read fetches without operands.
    let (_, old) = atomic(&mut w, 0, to, WINDOW, (Read, t, Fetch), 4, &[]);
    assert_eq!(read_u64s(&old), [11, 22, 99, 40]);
    // Compare and swap: equal swaps, unequal leaves.
    let ops = [u64s(&[7]), u64s(&[40])].concat();
    let (_, old) = atomic(&mut w, 0, to, WINDOW + 24, (Cswap, t, Compare), 1, &ops);
    assert_eq!(read_u64s(&old), [40]);
    let ops = [u64s(&[8]), u64s(&[40])].concat();
    let (_, old) = atomic(&mut w, 0, to, WINDOW + 24, (Cswap, t, Compare), 1, &ops);
    assert_eq!(read_u64s(&old), [7]);
    assert_eq!(
        read_u64s(&w.hosts[1].mem.get(mem).to_vec()),
        [11, 22, 99, 7]
    );
    // A float sum on the owner's bytes.
    let f = w.hosts[1]
        .mem
        .register(Buffer::contiguous(2.5f64.to_ne_bytes().to_vec()));
    w.engine(1, 0)
        .expose(8, 0x9000, 8, f, EXPOSE_READ | EXPOSE_WRITE)
        .unwrap();
    let (_, old) = atomic(
        &mut w,
        0,
        to,
        0x9000,
        (Sum, AtomicType::F64, Fetch),
        1,
        &0.25f64.to_ne_bytes(),
    );
    assert_eq!(old, 2.5f64.to_ne_bytes());
    assert_eq!(w.hosts[1].mem.get(f).to_vec(), 2.75f64.to_ne_bytes());
}

#[test]
fn refused_atomics_touch_nothing() {
    let mut w = world(WireConfig::native_9000(), LinkConfig::default(), 4);
    let to = w.connect(0, 0, 1, 0);
    let init = [5u64, 6, 7, 8];
    let mem = expose(&mut w, 1, &init, EXPOSE_WRITE);
    let t = AtomicType::U64;
    use AtomicKind::*;
    use AtomicOp::*;
    let one = u64s(&[1]);
    for (addr, what) in [
        (WINDOW + 32, (Sum, t, Plain)), // right after the end
        (WINDOW + 25, (Sum, t, Plain)), // straddles the end
        (WINDOW - 8, (Sum, t, Plain)),  // before the start
        (0, (Sum, t, Plain)),           // no window at all
        (WINDOW, (Sum, t, Fetch)),      // fetch needs read permission
        (WINDOW, (Read, t, Fetch)),     // so does a read
    ] {
        let ops = if what.0 == Read { vec![] } else { one.clone() };
        let (s, _) = atomic(&mut w, 0, to, addr, what, 1, &ops);
        assert_eq!(s.code, StatusCode::BadRdmaWin, "{addr:#x} {what:?}");
    }
    assert_eq!(read_u64s(&w.hosts[1].mem.get(mem).to_vec()), init);
    // Refused at the call: no such operation for the kind or type, bad counts.
    let r = w.hosts[0].mem.register(Buffer::zeroed(64, &[]));
    let now = w.now;
    let e = w.engine(0, 0);
    let bad = [
        ((Read, t, Plain), 1, vec![]),
        ((Cswap, t, Fetch), 1, one.clone()),
        ((Bor, AtomicType::F32, Plain), 1, vec![0; 4]),
        ((Sum, t, Plain), 0, vec![]),
        ((Sum, t, Plain), 2, one.clone()),
        ((Sum, t, Plain), 7, vec![0; 56]),
    ];
    for (what, count, ops) in bad {
        assert_eq!(
            e.iatomic(now, to, WINDOW, what, count, &ops, r, 0).err(),
            Some(EngineError::BadAtomic),
            "{what:?} x{count}"
        );
    }
    // A peer without the one-sided extension is never sent one.
    let mut mx = world(WireConfig::mx_compat(), LinkConfig::default(), 5);
    let to = mx.connect(0, 0, 1, 0);
    let now = mx.now;
    let r = mx.hosts[0].mem.register(Buffer::zeroed(0, &[]));
    assert_eq!(
        mx.engine(0, 0)
            .iatomic(now, to, WINDOW, (Sum, t, Plain), 1, &one, r, 0)
            .err(),
        Some(EngineError::NeedsNativeWire)
    );
}

/// Two initiators increment one counter over a link that loses, duplicates and
/// reorders frames: every increment is applied exactly once, and the fetched old
/// values are exactly 0..total (each seen once).
#[test]
fn concurrent_fetch_adds_apply_exactly_once_over_a_faulty_link() {
    for seed in [1u64, 2, 3] {
        let cfg = EngineConfig::new(WireConfig::native_1500());
        let link = LinkConfig::faulty(0.05, 0.05, 0.05);
        let mut w = World::new(3, 1, cfg, link, seed);
        let to = [w.connect(0, 0, 1, 0), PartnerId(0), w.connect(2, 0, 1, 0)];
        let counter = expose(&mut w, 1, &[0], EXPOSE_READ | EXPOSE_WRITE);
        let per = 150u64;
        let what = (AtomicOp::Sum, AtomicType::U64, AtomicKind::Fetch);
        let mut pending = Vec::new();
        for _ in 0..per {
            for host in [0usize, 2] {
                let result = w.hosts[host].mem.register(Buffer::zeroed(8, &[]));
                let now = w.now;
                let r = w
                    .engine(host, 0)
                    .iatomic(now, to[host], WINDOW, what, 1, &u64s(&[1]), result, 0)
                    .unwrap();
                pending.push((host, r, result));
            }
        }
        let mut seen = Vec::new();
        for (host, r, result) in pending {
            let s = w
                .wait(host, 0, r, w.now + 600 * SEC)
                .unwrap_or_else(|| panic!("seed {seed}: an atomic never completed"));
            assert_eq!(s.code, StatusCode::Success);
            seen.extend(read_u64s(&w.hosts[host].mem.get(result).to_vec()));
        }
        let total = read_u64s(&w.hosts[1].mem.get(counter).to_vec())[0];
        assert_eq!(total, 2 * per, "seed {seed}");
        seen.sort_unstable();
        assert_eq!(seen, (0..2 * per).collect::<Vec<_>>(), "seed {seed}");
        assert!(
            w.stats.lost > 0 && w.stats.duplicated > 0,
            "the link was faulty"
        );
    }
}
