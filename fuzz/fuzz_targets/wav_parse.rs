//! Fuzz target for the WAV parser: `cargo fuzz run wav_parse` (from the crate root).
//!
//! Any input must yield `Ok` or a `wav::Error`, never a panic; an accepted header
//! must satisfy the invariants documented in `melforge::decode::wav`, and decoding must
//! write exactly the promised samples (integer formats land in [-1, 1]) and zero
//! the rest of the output.
#![no_main]

use libfuzzer_sys::fuzz_target;
use melforge::decode::wav::{self, SampleFormat};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the output length so padding and trimming both run.
    let (out_len, bytes) = match data.split_first() {
        Some((&n, rest)) => (usize::from(n) * 17, rest),
        None => (0, data),
    };
    let mut out = vec![f32::NAN; out_len];
    let Ok(info) = wav::parse(bytes) else {
        assert!(wav::decode(bytes, 4096, &mut out).is_err());
        return;
    };
    assert!(info.channels >= 1 && info.sample_rate >= 1 && info.frames >= 1);
    let block_align = usize::from(info.block_align);
    assert_eq!(
        block_align,
        usize::from(info.channels) * info.format.bytes_per_sample()
    );
    assert!(info.data_offset + info.frames * block_align <= bytes.len());

    let decoded = wav::decode(bytes, info.sample_rate, &mut out).expect("parse accepted it");
    assert_eq!(decoded, info);
    let n = info.frames.min(out_len);
    assert!(out[n..].iter().all(|&x| x == 0.0));
    if !matches!(info.format, SampleFormat::F32 | SampleFormat::F64) {
        assert!(out[..n].iter().all(|&x| (-1.0..=1.0).contains(&x)));
    }
});
