//! Fuzz target: tar archives as WebDataset shards and NeMo's tarred audio. `cargo +nightly fuzz run tar_index` from the
//! crate root; the body and its invariants are `melforge::fuzzing::tar_index`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/tar_index/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::tar_index(data)
});
