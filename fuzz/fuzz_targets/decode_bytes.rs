//! Fuzz target: the bytes entry point of the in-process extension
//! (`melforge.decode`): any container, mono, a part of it. `cargo +nightly
//! fuzz run decode_bytes` from the crate root; the body and its invariants
//! are `melforge::fuzzing::decode_bytes`, which tests/it/fuzz_replay.rs also
//! runs over `fuzz/corpus/decode_bytes/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::decode_bytes(data)
});
