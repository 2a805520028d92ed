//! Fuzz target: MP3 frame headers, the LAME/Xing tag and the MP3 index. `cargo +nightly fuzz run mp3_frames` from the
//! crate root; the body and its invariants are `melforge::fuzzing::mp3_frames`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/mp3_frames/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::mp3_frames(data)
});
