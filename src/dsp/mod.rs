//! Log-mel spectrograms identical to librosa 0.11 (docs/DESIGN.md "Mel definition").
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
//!
//! The CPU path computes everything in the precision librosa uses (float64 window
//! and FFT, float32 spectrum, mel product and dB), so results agree with librosa to
//! about 1e-5 dB; `tests/it/golden.rs` checks this against committed fixtures.
mod batch_fft;
pub mod f16;
pub mod filterbank;
mod lanes;
mod layout;
pub mod plan;
pub mod spec;
mod spectrum;
pub mod window;

#[cfg(test)]
mod tests;

pub use batch_fft::Level;
pub use filterbank::mel_filterbank;
pub use plan::{Plan, Scratch};
pub use spec::{MelNorm, MelScale, PadMode, Segmentation, Spec, SpecError, Window};
pub use window::window;
