//! Fuzz target: the AAC section data reader (perceptual noise bands). `cargo +nightly fuzz run mp4_sections` from the
//! crate root; the body and its invariants are `melforge::fuzzing::mp4_sections`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/mp4_sections/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::mp4_sections(data)
});
