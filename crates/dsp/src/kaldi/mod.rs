//! Kaldi's filterbank and MFCC features, as `torchaudio.compliance.kaldi.fbank`
//! / `.mfcc` and kaldi-native-fbank compute them, on the CPU.
//!
//! * `options`: [`KaldiOptions`] (torchaudio's keyword names and defaults, plus
//!   `sample_scale`), [`Kind`], [`KaldiWindow`], [`KaldiError`].
//! * `banks`: the window, Kaldi's mel triangles (mel = 1127·ln(1 + f/700)) and
//!   the MFCC DCT with its lifter.
//! * `plan`: [`KaldiPlan`] (shared) and [`KaldiScratch`] (per worker);
//!   [`KaldiPlan::compute`] gives torchaudio's `(num_frames, num_bins)` float32
//!   matrix, row-major; per frame (realfft) or, for the usual FFT lengths,
//!   through `batch`: 16, 8 or 4 frames at a time in float32 SIMD lanes.
//!
//! Agreement with kaldi-native-fbank (scripts/parity_recipes.py): both compute
//! in float32, so values differ by float32 rounding of the FFT and sums; see
//! docs/FORMAT.md for the stated tolerance.
mod banks;
mod batch;
mod options;
mod plan;

#[cfg(test)]
mod tests;

pub use banks::mel_scale;
pub use options::{KaldiError, KaldiOptions, KaldiWindow, Kind, OptionValue, SetError};
pub use plan::{KaldiPlan, KaldiScratch, Piece, TooShort};
