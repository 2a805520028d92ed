//! Fuzz target: NeMo and lhotse manifest files, gzipped or not. `cargo +nightly fuzz run manifest` from the
//! crate root; the body and its invariants are `melforge::fuzzing::manifest`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/manifest/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::manifest(data)
});
