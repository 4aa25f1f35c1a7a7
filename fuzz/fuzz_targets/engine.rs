//! Arbitrary frames into connected engines: no input may panic, hang or grow state
//! without bound, and traffic must still flow afterwards when the input could not have
//! been a valid frame of the session.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use omx_proto::{EngineConfig, StatusCode};
use omx_sim::{LinkConfig, World};
use omx_wire::WireConfig;

fuzz_target!(|data: &[u8]| {
    let mut w = World::new(2, 1, EngineConfig::new(WireConfig::native_9000()), LinkConfig::default(), 1);
    let to = w.connect(0, 0, 1, 0);
    let back = w.connect(1, 0, 0, 0);
    // A valid header prefix (addresses, EtherType, peer index) makes the engine look past
    // the first checks; the fuzzer supplies everything after it, split into frames.
    let (dst, src) = (w.hosts[1].nic_id, w.hosts[0].nic_id);
    let mut prefix = Vec::new();
    prefix.extend_from_slice(&dst.to_be_bytes()[2..]);
    prefix.extend_from_slice(&src.to_be_bytes()[2..]);
    prefix.extend_from_slice(&0x86DFu16.to_be_bytes());
    prefix.extend_from_slice(&0u16.to_be_bytes());
    let now = w.now;
    for chunk in data.split(|&b| b == 0xA5).take(64) {
        let mut f = prefix.clone();
        f.extend_from_slice(chunk);
        w.engine(1, 0).handle_frame(now, Bytes::from(f));
        w.engine(0, 0).handle_frame(now, Bytes::from(chunk.to_vec()));
    }
    w.run_idle(w.now + 2_000_000_000);
    for h in 0..2 {
        let s = w.engine(h, 0).stats();
        assert!(s.unexpected_bytes <= 64 * 70_000 && s.early_bytes <= 64 * 70_000);
    }
    // Real traffic afterwards: requests complete (with some status), nothing hangs.
    let (r, _) = w.recv(0, 0, 7, u64::MAX, 100, &[]);
    w.send(1, 0, back, 7, vec![1; 100], false);
    let _ = w.wait(0, 0, r, w.now + 600_000_000_000);
    let _ = to;
    let _ = StatusCode::Success;
});
