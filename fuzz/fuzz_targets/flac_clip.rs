//! Fuzz target: the FLAC decoder and the clip path of every container. `cargo +nightly fuzz run flac_clip` from the
//! crate root; the body and its invariants are `melforge::fuzzing::flac_clip`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/flac_clip/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::flac_clip(data)
});
