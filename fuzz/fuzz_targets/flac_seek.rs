//! Fuzz target: FLAC seek planning: SEEKTABLE extents and the frame search without one. `cargo +nightly fuzz run flac_seek` from the
//! crate root; the body and its invariants are `melforge::fuzzing::flac_seek`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/flac_seek/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::flac_seek(data)
});
