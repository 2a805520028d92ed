//! The feature recipes: log-mel spectrograms identical to librosa 0.11
//! (docs/DESIGN.md "Mel definition"; everything below but the last three
//! items), Kaldi fbank/MFCC and Whisper's log-mel.
//!
//! * [`spec`]: the validated definition ([`Spec`]) and the shapes it implies.
//! * [`window`](mod@window): scipy/librosa analysis windows, centred-padded to `n_fft`.
//! * [`filterbank`]: `librosa.filters.mel`, dense for tests and sparse for compute.
//! * `layout`: the distinct STFT frames of a clip and where each lands in the
//!   output (overlapping segments share frames).
//! * `spectrum`: windowed frame → power spectrum, realfft's algorithm fused with
//!   the power step (bit-identical to realfft, which the CUDA host shim uses).
//! * `batch_fft`: the same spectrum for 4 or 8 frames at once, lane-wise
//!   ("vertical" SIMD), within a stated bound of realfft ([`Level`] picks the build).
//! * [`plan`]: [`Plan`] (precomputed, shared by workers) and [`Scratch`] (per
//!   worker); [`Plan::compute`] turns one clip into one output row.
//! * [`f16`](mod@f16): float16 rows to and from f32, with `half`'s bits (the
//!   writer's float16 output, the CUDA stage's float16 rows).
//! * [`kaldi`]: `torchaudio.compliance.kaldi.fbank`/`.mfcc` (kaldi-native-fbank's
//!   numbers), variable length: [`kaldi::KaldiPlan`].
//! * [`whisper`]: transformers' `WhisperFeatureExtractor`, stored without its
//!   padding to 30 s: [`whisper::WhisperPlan`].
//! * `whisper_batch` (over `lanes32`): Whisper's log-mel of 16, 8 or 4 frames
//!   at once in float32 SIMD lanes, the recipe's CPU path; `stockham32` (the
//!   lanes' complex FFT) and `logf32` (cephes' float32 `logf`) are shared
//!   with the Kaldi recipes' batched path (`kaldi::batch`).
//! * `vector` (the lane operations both precisions share) and `lane_fft`
//!   (the in-place power-of-two FFT over them, written once: f64 for
//!   `batch_fft`, f32 for `kaldi::batch`); `real32`: the split step with the
//!   power spectrum and the sparse mel product, shared by the two float32
//!   recipes.
//! * [`params`]: [`ParamValue`], a recipe parameter as a dataset records it.
//!
//! The librosa path computes everything in the precision librosa uses (float64 window
//! and FFT, float32 spectrum, mel product and dB), so results agree with librosa to
//! about 1e-5 dB; `tests/it/golden.rs` checks this against committed fixtures.
mod batch_fft;
pub mod f16;
pub mod filterbank;
pub mod kaldi;
mod lane_fft;
mod lanes;
mod lanes32;
mod layout;
mod logf32;
pub mod params;
pub mod plan;
mod real32;
pub mod spec;
mod spectrum;
mod stockham32;
mod vector;
pub mod whisper;
mod whisper_batch;
pub mod window;

#[cfg(test)]
mod tests;

pub use batch_fft::Level;
pub use filterbank::mel_filterbank;
pub use params::ParamValue;
pub use plan::{Plan, Scratch};
pub use spec::{MelNorm, MelScale, PadMode, Segmentation, Spec, SpecError, Window};
pub use window::window;
