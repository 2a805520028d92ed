//! Fuzz target: the WAV parser and decoder. `cargo +nightly fuzz run wav_parse` from the
//! crate root; the body and its invariants are `melforge::fuzzing::wav_parse`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/wav_parse/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::wav_parse(data)
});
