//! Decodes arbitrary bytes in every reference configuration; whatever decodes must
//! re-encode without error and decode back to the same value
//! (omx_sim::hostile::decode_roundtrip, replayed on the corpus by `make test`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| omx_sim::hostile::decode_roundtrip(data));
