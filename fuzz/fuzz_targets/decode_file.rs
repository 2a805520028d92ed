//! Fuzz target: the whole-file decode of MP3, Ogg and MP4 streams. `cargo +nightly fuzz run decode_file` from the
//! crate root; the body and its invariants are `melforge::fuzzing::decode_file`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/decode_file/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::decode_file(data)
});
