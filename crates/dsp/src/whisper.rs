//! Whisper's log-mel spectrogram, equal to transformers'
//! `WhisperFeatureExtractor(feature_size=n_mels)(audio, sampling_rate=16000)
//! ["input_features"][0]` (its numpy path), stored without the padding.
//!
//! The extractor: audio (float32, 16 kHz) truncated or zero-padded to 30 s
//! (480 000 samples); reflect-padded by 200 at both ends; 3001 frames of 400
//! samples every 160, times the periodic Hann window, FFT in float64 whose
//! result is stored as complex64; |X|² in float64; the slaney mel filters
//! (`mel_filter_bank(201, n_mels, 0, 8000, 16000, norm="slaney",
//! mel_scale="slaney")`, float64); log10(max(1e-10, ·)), cast to float32; the
//! last frame dropped; then, in float32, x = max(x, M − 8) with M the maximum
//! over all 3000 frames, and (x + 4) / 4.
//!
//! Here only the frames whose window touches a real sample are computed
//! ([`WhisperPlan::num_frames_covering`]); every later frame's input is all
//! zeros, so its log-mel is log10(1e-10) = −10 in every bin, it enters M only
//! as −10, and after the clamp and scaling it is the constant
//! [`WhisperRow::pad_value`] = (max(−10, M − 8) + 4) / 4, computed with the
//! extractor's float32 operations (bit-identical to its padded frames). A reader
//! can also derive it from the stored row as max(−1.5, row max − 2), which
//! agrees to within one float32 rounding (not always bit for bit).
//!
//! Precision: [`WhisperPlan::compute`] (what the recipe stores) runs in
//! float32, 16, 8 or 4 frames at a time in SIMD lanes (`whisper_batch`): float32
//! window, FFT, power, mel and log10. The extractor's references compute in
//! float32 too (openai-whisper's torch path) or in float64 rounded to float32
//! (the numpy path); the float32 result is within docs/FORMAT.md's 1e-4 of the
//! latter on the extractor's scale. [`WhisperPlan::compute_f64`] keeps the
//! numpy path's precision (float64 window and FFT, rounded to complex64,
//! float64 power, mel and log10, float32 after), within a few float32 ulps of
//! the extractor's: the reference the float32 path is tested against, and what
//! the CUDA kernels' host double compares with.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex, num_complex::Complex};

use super::batch_fft::Level;
use super::filterbank::linspace;
use super::whisper_batch::{BatchBuffers, WhisperBatch};

/// Whisper's sample rate (Hz); other rates are resampled to it first.
pub const SAMPLE_RATE: u32 = 16_000;
/// Samples in the 30 s the extractor pads or truncates to.
pub const N_SAMPLES: usize = 480_000;
/// Frames the extractor returns (3001 computed, the last dropped).
pub const N_FRAMES: usize = 3_000;
/// FFT and window length.
pub const N_FFT: usize = 400;
/// Hop between frames.
pub const HOP_LENGTH: usize = 160;

/// log10 of the extractor's mel floor (1e-10): every bin of an all-zero frame.
fn floor_log() -> f32 {
    1e-10f64.log10() as f32
}

/// Whether [`WhisperPlan::new`] takes `n_mels` (80 or 128), without
/// building the plan (what a configuration's validation asks).
pub fn check_n_mels(n_mels: usize) -> Result<(), WhisperError> {
    match n_mels {
        80 | 128 => Ok(()),
        _ => Err(WhisperError { n_mels }),
    }
}

/// An n_mels transformers does not ship a Whisper model for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("n_mels = {n_mels}: expected 80 or 128 (Whisper's feature sizes)")]
pub struct WhisperError {
    pub n_mels: usize,
}

/// What [`WhisperPlan::compute`] wrote and what stands for the rest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WhisperRow {
    /// Frames written (the covering frames, ≤ 3000).
    pub frames: usize,
    /// The value of every feature of frames `frames .. 3000` in the extractor's
    /// output: (max(−10, M − 8) + 4) / 4.
    pub pad_value: f32,
}

/// One slaney mel filter's nonzero weights over FFT bins `first ..`.
#[derive(Debug, Clone)]
struct Filter {
    first: usize,
    weights: Vec<f64>,
}

/// The precomputed window, FFT and filters; shared by workers.
pub struct WhisperPlan {
    n_mels: usize,
    window: Vec<f64>,
    filters: Vec<Filter>,
    fft: Arc<dyn RealToComplex<f64>>,
    batch: WhisperBatch,
}

impl std::fmt::Debug for WhisperPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhisperPlan")
            .field("n_mels", &self.n_mels)
            .finish_non_exhaustive()
    }
}

/// Per-worker buffers.
pub struct WhisperScratch {
    frame: Vec<f64>,
    spectrum: Vec<Complex<f64>>,
    fft_scratch: Vec<Complex<f64>>,
    power: Vec<f64>,
    batch: BatchBuffers,
}

impl WhisperPlan {
    pub fn new(n_mels: usize) -> Result<WhisperPlan, WhisperError> {
        WhisperPlan::with_level(n_mels, Level::detect())
    }

    /// [`new`](Self::new) with the float32 path built for `level` (which this
    /// CPU must have: [`Level::available`]); every level gives the same bits.
    pub fn with_level(n_mels: usize, level: Level) -> Result<WhisperPlan, WhisperError> {
        check_n_mels(n_mels)?;
        // window_function(400, "hann"): np.hanning(401)[:-1].
        let window: Vec<f64> = (0..N_FFT)
            .map(|i| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / N_FFT as f64).cos())
            .collect();
        let filters = slaney_filters(n_mels);
        let batch = WhisperBatch::new(
            &window,
            filters.iter().map(|f| (f.first, f.weights.as_slice())),
            level,
        );
        Ok(WhisperPlan {
            n_mels,
            window,
            filters,
            fft: RealFftPlanner::<f64>::new().plan_fft_forward(N_FFT),
            batch,
        })
    }

    /// The build the float32 path runs.
    pub fn level(&self) -> Level {
        self.batch.level()
    }

    pub fn n_mels(&self) -> usize {
        self.n_mels
    }

    /// Frames whose window touches a real sample, for a waveform of
    /// `n_samples` (truncated at 30 s): frame t covers padded samples
    /// [160t, 160t + 400), i.e. audio samples 160t − 200 ..; the Hann window's
    /// first point is 0, so it touches audio iff 160t − 199 < n, giving
    /// ⌈(n + 199) / 160⌉ frames, at most 3000; 0 for an empty waveform.
    pub fn num_frames_covering(&self, n_samples: usize) -> usize {
        let n = n_samples.min(N_SAMPLES);
        if n == 0 {
            return 0;
        }
        (n + 199).div_ceil(HOP_LENGTH).min(N_FRAMES)
    }

    pub fn scratch(&self) -> WhisperScratch {
        WhisperScratch {
            frame: vec![0.0; N_FFT],
            spectrum: self.fft.make_output_vec(),
            fft_scratch: self.fft.make_scratch_vec(),
            power: vec![0.0; N_FFT / 2 + 1],
            batch: self.batch.buffers(),
        }
    }

    /// Replaces `out` with the covering frames of the extractor's features,
    /// (frames, n_mels) row-major float32 (the extractor's output transposed
    /// and cut); `samples` are mono at 16 kHz. Float32 SIMD (see the module
    /// doc): within 1e-4 of [`compute_f64`](Self::compute_f64).
    pub fn compute(
        &self,
        samples: &[f32],
        scratch: &mut WhisperScratch,
        out: &mut Vec<f32>,
    ) -> WhisperRow {
        let n = samples.len().min(N_SAMPLES);
        let audio = &samples[..n];
        let frames = self.num_frames_covering(n);
        out.clear();
        let edge = |p: usize| padded_sample(audio, p);
        self.batch
            .log_mel(audio, frames, &edge, &mut scratch.batch, out);
        finish(out, frames)
    }

    /// [`compute`](Self::compute) in the extractor's numpy precision, frame by
    /// frame (float64 FFT rounded to complex64, float64 power, mel and log10):
    /// within a few float32 ulps of the extractor.
    pub fn compute_f64(
        &self,
        samples: &[f32],
        scratch: &mut WhisperScratch,
        out: &mut Vec<f32>,
    ) -> WhisperRow {
        let n = samples.len().min(N_SAMPLES);
        let audio = &samples[..n];
        let frames = self.num_frames_covering(n);
        out.clear();
        out.resize(frames * self.n_mels, 0.0);
        for (t, row) in out.chunks_exact_mut(self.n_mels).enumerate() {
            self.log_mel_frame(audio, t, scratch, row);
        }
        finish(out, frames)
    }

    /// log10(max(1e-10, mel)) of frame `t`, cast to float32, into `row`.
    fn log_mel_frame(
        &self,
        audio: &[f32],
        t: usize,
        scratch: &mut WhisperScratch,
        row: &mut [f32],
    ) {
        let WhisperScratch {
            frame,
            spectrum,
            fft_scratch,
            power,
            ..
        } = scratch;
        let start = t * HOP_LENGTH;
        for (k, (x, w)) in frame.iter_mut().zip(&self.window).enumerate() {
            *x = padded_sample(audio, start + k) as f64 * w;
        }
        self.fft
            .process_with_scratch(frame, spectrum, fft_scratch)
            .expect("buffers come from this plan's FFT");
        for (p, c) in power.iter_mut().zip(spectrum.iter()) {
            // The extractor stores the FFT as complex64, then squares in float64.
            let (re, im) = (c.re as f32 as f64, c.im as f32 as f64);
            *p = re * re + im * im;
        }
        for (r, f) in row.iter_mut().zip(&self.filters) {
            let span = &power[f.first..f.first + f.weights.len()];
            let mel: f64 = span.iter().zip(&f.weights).map(|(p, w)| p * w).sum();
            *r = mel.max(1e-10).log10() as f32;
        }
    }
}

/// The precomputed tables, for the CUDA kernels (`compute::cuda::recipe_tables`),
/// which must use exactly these values to equal [`WhisperPlan::compute`].
impl WhisperPlan {
    /// The periodic Hann window (400 points, float64).
    pub fn window(&self) -> &[f64] {
        &self.window
    }

    /// Each slaney mel filter as (first FFT bin, its float64 weights).
    pub fn filters(&self) -> impl ExactSizeIterator<Item = (usize, &[f64])> + '_ {
        self.filters.iter().map(|f| (f.first, f.weights.as_slice()))
    }

    /// log10(1e-10) as float32: every bin of an all-zero frame.
    pub fn floor_log(&self) -> f32 {
        floor_log()
    }
}

/// The extractor's clamp and scaling of `out` (the `frames` covering frames'
/// log-mel), in its float32 operations; M is the maximum over all 3000 frames,
/// the uncovered ones being all −10.
fn finish(out: &mut [f32], frames: usize) -> WhisperRow {
    let mut max = max_of(out);
    if frames < N_FRAMES {
        max = max.max(floor_log());
    }
    // numpy: float32 array max, minus the Python float 8.0, stays float32.
    let clamp = max - 8.0;
    out.iter_mut().for_each(|x| *x = (x.max(clamp) + 4.0) / 4.0);
    WhisperRow {
        frames,
        pad_value: (floor_log().max(clamp) + 4.0) / 4.0,
    }
}

/// The largest value of `x` (−∞ when empty), in 16 independent running
/// maxima that the compiler vectorizes (the maximum does not depend on order).
fn max_of(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = a.max(v);
        }
    }
    let rest = chunks.remainder().iter().copied();
    acc.into_iter()
        .chain(rest)
        .fold(f32::NEG_INFINITY, f32::max)
}

/// Sample `p` of the extractor's reflect-padded 30 s signal (audio, then zeros
/// to 480 000, reflected by 200 at each end).
fn padded_sample(audio: &[f32], p: usize) -> f32 {
    const PAD: usize = N_FFT / 2;
    let j = if p < PAD {
        PAD - p
    } else if p - PAD < N_SAMPLES {
        p - PAD
    } else {
        2 * (N_SAMPLES - 1) - (p - PAD)
    };
    audio.get(j).copied().unwrap_or(0.0)
}

/// transformers' `hertz_to_mel(mel_scale="slaney")`.
fn hz_to_mel(hz: f64) -> f64 {
    let logstep = 27.0 / 6.4f64.ln();
    if hz >= 1000.0 {
        15.0 + (hz / 1000.0).ln() * logstep
    } else {
        3.0 * hz / 200.0
    }
}

/// transformers' `mel_to_hertz(mel_scale="slaney")`.
fn mel_to_hz(mel: f64) -> f64 {
    // The inverse of `hz_to_mel`'s log part: its step per mel is ln(6.4)/27.
    let logstep = 6.4f64.ln() / 27.0;
    if mel >= 15.0 {
        1000.0 * (logstep * (mel - 15.0)).exp()
    } else {
        200.0 * mel / 3.0
    }
}

/// `mel_filter_bank(201, n_mels, 0.0, 8000.0, 16000, norm="slaney",
/// mel_scale="slaney")`, triangles in Hz, each kept as its nonzero span.
fn slaney_filters(n_mels: usize) -> Vec<Filter> {
    let mels = linspace(hz_to_mel(0.0), hz_to_mel(8000.0), n_mels + 2);
    let ff: Vec<f64> = mels.into_iter().map(mel_to_hz).collect();
    let fft_freqs = linspace(0.0, 8000.0, N_FFT / 2 + 1);
    (0..n_mels)
        .map(|m| {
            let enorm = 2.0 / (ff[m + 2] - ff[m]);
            let mut first = None;
            let mut weights = Vec::new();
            for (i, &f) in fft_freqs.iter().enumerate() {
                let down = -(ff[m] - f) / (ff[m + 1] - ff[m]);
                let up = (ff[m + 2] - f) / (ff[m + 2] - ff[m + 1]);
                let w = 0f64.max(down.min(up)) * enorm;
                if w > 0.0 {
                    first.get_or_insert(i);
                }
                if first.is_some() {
                    weights.push(w);
                }
            }
            while weights.last() == Some(&0.0) {
                weights.pop();
            }
            Filter {
                first: first.unwrap_or(0),
                weights,
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "whisper_tests.rs"]
mod tests;
