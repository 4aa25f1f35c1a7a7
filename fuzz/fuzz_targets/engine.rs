//! Arbitrary frames into connected engines: no input may panic, hang or grow state
//! without bound, and traffic must still flow afterwards
//! (omx_sim::hostile::engine_frames, replayed on the corpus by `make test`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| omx_sim::hostile::engine_frames(data));
