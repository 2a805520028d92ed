//! Fuzz target: the part path: a segment's part decoded from an index. `cargo +nightly fuzz run lossy_part` from the
//! crate root; the body and its invariants are `melforge::fuzzing::lossy_part`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/lossy_part/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::lossy_part(data)
});
