//! Fuzz target for the FLAC and clip path: `cargo fuzz run -O flac_clip`
//! (from the crate root). `-O` builds without overflow checks, as melforge
//! ships: symphonia's FLAC predictor wraps on corrupt residuals, which aborts
//! a build with overflow checks under libFuzzer (its panic hook aborts before
//! the decoder's `catch_unwind` can turn the panic into a rejection; see
//! `tests/data/flac_predictor_overflow.flac` and its regression test in
//! tests/it/input.rs).
//!
//! Any input must yield a clip or a typed `clip::Error`, never a panic (the
//! decoder itself turns a panic inside symphonia into a rejection, so this
//! target also checks that nothing escapes it). The first byte picks the
//! policy (resampling on or off, channel policy) and the clip length; the rest
//! is taken both as it is and behind a `fLaC` marker, so the FLAC parser sees
//! every input. An accepted FLAC header must be self-consistent, and every
//! decoded sample is finite and within [-1, 1] (integer PCM scaled down).
#![no_main]

use libfuzzer_sys::fuzz_target;
use melforge::decode::clip::{Channels, ClipDecoder, Policy, Resample};
use melforge::decode::flac;

fuzz_target!(|data: &[u8]| {
    let (pick, bytes) = match data.split_first() {
        Some((&b, rest)) => (b, rest),
        None => (0, data),
    };
    let policy = Policy {
        resample: if pick & 1 == 0 { Resample::Off } else { Resample::SoxrHq },
        channels: match (pick >> 1) % 3 {
            0 => Channels::Mean,
            1 => Channels::First,
            _ => Channels::Reject,
        },
    };
    let mut clip = vec![f32::NAN; usize::from(pick >> 3) * 64];
    let mut dec = ClipDecoder::new(4096, policy);
    let mut flac_bytes = flac::MAGIC.to_vec();
    flac_bytes.extend_from_slice(bytes);
    for input in [bytes, &flac_bytes[..]] {
        if let Ok(info) = flac::stream_info(input) {
            assert!(info.sample_rate >= 1 && info.channels >= 1);
            assert!([8, 16, 24].contains(&info.bits));
            assert!(info.min_block >= 16 && info.max_block >= info.min_block);
            let mut out = Vec::new();
            if flac::decode(input, Channels::Mean, 1 << 16, &mut out).is_ok() {
                assert!(!out.is_empty());
                assert!(out.iter().all(|x| x.is_finite() && x.abs() <= 1.0));
            }
        }
        // A clip or a typed error; IEEE-float WAVs may carry any value.
        let _ = dec.decode(input, &mut clip);
    }
});
