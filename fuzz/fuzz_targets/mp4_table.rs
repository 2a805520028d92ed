//! Fuzz target: the MP4 box walk, sample table and AAC index. `cargo +nightly fuzz run mp4_table` from the
//! crate root; the body and its invariants are `melforge::fuzzing::mp4_table`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/mp4_table/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::mp4_table(data)
});
