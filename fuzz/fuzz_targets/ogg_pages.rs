//! Fuzz target: the Ogg page walker, its CRC check, packets and the Ogg index. `cargo +nightly fuzz run ogg_pages` from the
//! crate root; the body and its invariants are `melforge::fuzzing::ogg_pages`, which
//! tests/it/fuzz_replay.rs also runs over `fuzz/corpus/ogg_pages/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: melforge::fuzzing::init(), |data: &[u8]| {
    melforge::fuzzing::ogg_pages(data)
});
