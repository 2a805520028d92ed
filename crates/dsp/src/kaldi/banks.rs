//! The tables a [`super::KaldiPlan`] precomputes: the analysis window, the mel
//! triangles (Kaldi's `MelBanks`) and the MFCC DCT + lifter.
//!
//! All are computed in float64 from Kaldi's formulas and stored as the plan's
//! working precision. Mel triangles are built in Kaldi's mel space,
//! mel(f) = 1127·ln(1 + f/700): bin b spans [lo + b·Δ, lo + (b+2)·Δ] in mel,
//! Δ = (mel(high) − mel(low)) / (num_mel_bins + 1), and FFT bin i (frequency
//! i·sample_frequency/padded, i < padded/2: the Nyquist bin is never used) weighs
//! (mel(f_i) − left)/(centre − left) on the rising side and
//! (right − mel(f_i))/(right − centre) on the falling one, 0 outside (open
//! interval). No normalisation (Kaldi's banks are unnormalised).

use super::options::{KaldiOptions, KaldiWindow};

/// Kaldi's mel scale.
pub fn mel_scale(freq_hz: f64) -> f64 {
    1127.0 * (1.0 + freq_hz / 700.0).ln()
}

/// The window of `opts.window_size()` points (Kaldi's `FeatureWindowFunction`).
pub fn window(opts: &KaldiOptions) -> Vec<f64> {
    let n = opts.window_size();
    let a = 2.0 * std::f64::consts::PI / (n as f64 - 1.0);
    (0..n)
        .map(|i| {
            let c = (a * i as f64).cos();
            match opts.window_type {
                KaldiWindow::Hanning => 0.5 - 0.5 * c,
                KaldiWindow::Hamming => 0.54 - 0.46 * c,
                KaldiWindow::Povey => (0.5 - 0.5 * c).powf(0.85),
                KaldiWindow::Rectangular => 1.0,
                KaldiWindow::Blackman => {
                    opts.blackman_coeff - 0.5 * c
                        + (0.5 - opts.blackman_coeff) * (2.0 * a * i as f64).cos()
                }
            }
        })
        .collect()
}

/// One mel triangle: its weights over FFT bins `first .. first + weights.len()`.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    pub first: usize,
    pub weights: Vec<f32>,
}

/// The `num_mel_bins` triangles over the `padded / 2` FFT bins below Nyquist.
pub fn mel_banks(opts: &KaldiOptions) -> Vec<Band> {
    let padded = opts.padded_window_size();
    let num_fft_bins = padded / 2;
    let bin_width_hz = opts.sample_frequency / padded as f64;
    let mel_low = mel_scale(opts.low_freq);
    let mel_high = mel_scale(opts.high_freq_hz());
    let delta = (mel_high - mel_low) / (opts.num_mel_bins as f64 + 1.0);
    (0..opts.num_mel_bins)
        .map(|b| {
            let left = mel_low + b as f64 * delta;
            let centre = mel_low + (b as f64 + 1.0) * delta;
            let right = mel_low + (b as f64 + 2.0) * delta;
            let mut first = None;
            let mut weights = Vec::new();
            for i in 0..num_fft_bins {
                let mel = mel_scale(bin_width_hz * i as f64);
                if mel > left && mel < right {
                    let w = if mel <= centre {
                        (mel - left) / (centre - left)
                    } else {
                        (right - mel) / (right - centre)
                    };
                    first.get_or_insert(i);
                    weights.push(w as f32);
                }
            }
            Band {
                first: first.unwrap_or(0),
                weights,
            }
        })
        .collect()
}

/// The MFCC matrix, row k = cepstrum k (k < num_ceps), column j = mel bin j:
/// the orthonormal DCT-II (Kaldi's `ComputeDctMatrix`, torchaudio's
/// `create_dct(norm="ortho")`), each row times the lifter
/// 1 + Q/2·sin(πk/Q) when Q = cepstral_lifter > 0.
pub fn dct_lifted(opts: &KaldiOptions) -> Vec<f32> {
    let n = opts.num_mel_bins;
    let mut m = Vec::with_capacity(opts.num_ceps * n);
    for k in 0..opts.num_ceps {
        let lifter = if opts.cepstral_lifter > 0.0 {
            let q = opts.cepstral_lifter;
            1.0 + 0.5 * q * (std::f64::consts::PI * k as f64 / q).sin()
        } else {
            1.0
        };
        for j in 0..n {
            let v = if k == 0 {
                (1.0 / n as f64).sqrt()
            } else {
                (2.0 / n as f64).sqrt()
                    * (std::f64::consts::PI / n as f64 * (j as f64 + 0.5) * k as f64).cos()
            };
            m.push((v * lifter) as f32);
        }
    }
    m
}
