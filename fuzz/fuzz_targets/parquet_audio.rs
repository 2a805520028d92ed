//! Fuzz target: Hugging Face parquet files' audio column. `cargo +nightly fuzz run parquet_audio` from the
//! crate root; the body and its invariants are `melforge::fuzzing::parquet_audio`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/parquet_audio/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::parquet_audio(data)
});
