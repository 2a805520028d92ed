//! Fuzz target: serve's sidecar `.json` parsing. `cargo +nightly fuzz run sidecar` from the
//! crate root; the body and its invariants are `melforge::app::serve::sidecar::fuzz_sidecar`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/sidecar/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::app::serve::sidecar::fuzz_sidecar(data)
});
