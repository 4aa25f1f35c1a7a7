//! Engine micro-benchmark: messages through encode + engine + decode on the simulated
//! link (zero latency, immediate copies), both directions' engines on one core.
//! Each iteration moves 16 messages. `cargo bench -p omx-sim --bench engine`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use omx_proto::{EngineConfig, StatusCode};
use omx_sim::{LinkConfig, World};
use omx_wire::WireConfig;

fn setup(len: usize, checksum: bool) -> (World, omx_proto::PartnerId, Vec<u8>) {
    let link = LinkConfig {
        latency: 0,
        ..Default::default()
    };
    let wire = WireConfig::native_checksummed(9000, checksum);
    let mut w = World::new(2, 1, EngineConfig::new(wire), link, 1);
    let to = w.connect(0, 0, 1, 0);
    (w, to, vec![7u8; len])
}

/// One message: post receive, send, run until the receive completes.
fn one_message(w: &mut World, to: omx_proto::PartnerId, data: &[u8]) {
    let (r, h) = w.recv(1, 0, 1, u64::MAX, data.len(), &[]);
    let s = w.send(0, 0, to, 1, data.to_vec(), false);
    let st = w.wait(1, 0, r, u64::MAX).expect("delivered");
    assert_eq!(st.code, StatusCode::Success);
    w.wait(0, 0, s, u64::MAX).expect("send done");
    w.hosts[1].mem.release(h);
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.sample_size(20)
        .measurement_time(std::time::Duration::from_secs(3));
    // `_checksum`: with OMX_CHECKSUM's CRC32C trailer on every frame (computed as the
    // frame is assembled, verified as it is decoded).
    let cases = [8usize, 8 << 10, 1 << 20]
        .into_iter()
        .flat_map(|len| [(len, false), (len, true)]);
    for (len, checksum) in cases {
        g.throughput(Throughput::Bytes(16 * len as u64));
        let suffix = if checksum { "_checksum" } else { "" };
        g.bench_function(format!("message_{len}B{suffix}"), |b| {
            b.iter_batched_ref(
                || setup(len, checksum),
                |(w, to, data)| {
                    for _ in 0..16 {
                        one_message(w, *to, data)
                    }
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
