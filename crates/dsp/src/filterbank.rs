//! The mel filterbank, bit-for-bit as `librosa.filters.mel` (0.11) builds it.
//!
//! librosa computes every intermediate in float64 (`fft_frequencies`,
//! `mel_frequencies`, the triangular ramps), stores the triangles in a float32
//! array, then multiplies that float32 array in place by the float64 slaney
//! normalisation (numpy promotes to float64 and rounds back). We repeat exactly
//! those steps and roundings, so the weights are the same f32 values.
//!
//! For computation the bank is kept sparse: each band's non-zero weights are one
//! contiguous run of bins (a triangle), stored as `(first bin, weights)`.

use super::spec::{MelNorm, MelScale, Spec};

/// Slaney's linear region: 200/3 Hz per mel below 1 kHz.
const F_SP: f64 = 200.0 / 3.0;
const MIN_LOG_HZ: f64 = 1000.0;

fn min_log_mel() -> f64 {
    (MIN_LOG_HZ - 0.0) / F_SP
}

fn logstep() -> f64 {
    6.4f64.ln() / 27.0
}

/// `librosa.hz_to_mel(f, htk=…)` for one frequency.
pub fn hz_to_mel(f: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 2595.0 * (1.0 + f / 700.0).log10(),
        MelScale::Slaney => {
            if f >= MIN_LOG_HZ {
                min_log_mel() + (f / MIN_LOG_HZ).ln() / logstep()
            } else {
                (f - 0.0) / F_SP
            }
        }
    }
}

/// `librosa.mel_to_hz(m, htk=…)` for one mel value.
pub fn mel_to_hz(m: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 700.0 * (10f64.powf(m / 2595.0) - 1.0),
        MelScale::Slaney => {
            if m >= min_log_mel() {
                MIN_LOG_HZ * (logstep() * (m - min_log_mel())).exp()
            } else {
                0.0 + F_SP * m
            }
        }
    }
}

/// `numpy.linspace(start, stop, num)` (endpoint included), same arithmetic.
pub(crate) fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    if num == 0 {
        return Vec::new();
    }
    if num == 1 {
        return vec![start];
    }
    let step = (stop - start) / (num - 1) as f64;
    let mut y: Vec<f64> = (0..num).map(|i| i as f64 * step + start).collect();
    y[num - 1] = stop;
    y
}

/// `librosa.mel_frequencies(n, fmin, fmax, htk)`: n frequencies equally spaced in mel.
pub fn mel_frequencies(n: usize, fmin: f64, fmax: f64, scale: MelScale) -> Vec<f64> {
    linspace(hz_to_mel(fmin, scale), hz_to_mel(fmax, scale), n)
        .into_iter()
        .map(|m| mel_to_hz(m, scale))
        .collect()
}

/// `librosa.fft_frequencies(sr, n_fft)` = `numpy.fft.rfftfreq(n_fft, 1/sr)`.
pub fn fft_frequencies(sample_rate: u32, n_fft: usize) -> Vec<f64> {
    let val = 1.0 / (n_fft as f64 * (1.0 / f64::from(sample_rate)));
    (0..n_fft / 2 + 1).map(|k| k as f64 * val).collect()
}

/// Dense `[n_mels][n_bins]` weights, equal to `librosa.filters.mel(...)` (float32).
pub fn mel_filterbank(spec: &Spec) -> Vec<Vec<f32>> {
    let n_mels = spec.n_mels;
    let fftfreqs = fft_frequencies(spec.sample_rate, spec.n_fft);
    let mel_f = mel_frequencies(n_mels + 2, spec.fmin, spec.fmax, spec.mel_scale);
    let fdiff: Vec<f64> = mel_f.windows(2).map(|w| w[1] - w[0]).collect();
    (0..n_mels)
        .map(|i| {
            let enorm = match spec.norm {
                MelNorm::Slaney => Some(2.0 / (mel_f[i + 2] - mel_f[i])),
                MelNorm::None => None,
            };
            fftfreqs
                .iter()
                .map(|&f| {
                    let lower = -(mel_f[i] - f) / fdiff[i];
                    let upper = (mel_f[i + 2] - f) / fdiff[i + 1];
                    // np.maximum(0, np.minimum(lower, upper)) stored into float32.
                    let w = 0f64.max(lower.min(upper)) as f32;
                    match enorm {
                        Some(e) => (f64::from(w) * e) as f32,
                        None => w,
                    }
                })
                .collect()
        })
        .collect()
}

/// Weights per band are padded with zeros to a multiple of this, so the product
/// runs in whole vector-width chunks.
pub(crate) const LANES: usize = 8;

/// One band of the sparse bank: weights for bins `first .. first + weights.len()`
/// (the tail beyond the triangle is zero padding, `weights.len() % LANES == 0`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Band {
    pub first: usize,
    pub weights: Vec<f32>,
}

/// The filterbank with zero weights dropped (each band is one contiguous triangle).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SparseFilterbank {
    pub bands: Vec<Band>,
    n_bins: usize,
}

impl SparseFilterbank {
    pub fn new(spec: &Spec) -> SparseFilterbank {
        let bands = mel_filterbank(spec)
            .into_iter()
            .map(|row| match row.iter().position(|&w| w != 0.0) {
                None => Band {
                    first: 0,
                    weights: Vec::new(),
                },
                Some(first) => {
                    let last = row.iter().rposition(|&w| w != 0.0).unwrap_or(first);
                    let mut weights = row[first..=last].to_vec();
                    weights.resize(weights.len().next_multiple_of(LANES), 0.0);
                    Band { first, weights }
                }
            })
            .collect();
        SparseFilterbank {
            bands,
            n_bins: spec.n_bins(),
        }
    }

    /// Length the power buffer given to [`apply`](Self::apply) must have: `n_bins`
    /// values followed by zeros that the padded bands may read.
    pub fn power_len(&self) -> usize {
        self.n_bins + LANES
    }

    /// `out[m] = Σ_k weights[m][k] · power[k]` in f32 (as librosa's float32 einsum).
    ///
    /// `LANES` partial sums let the compiler vectorise; the order differs from
    /// BLAS's anyway, and all terms are non-negative, so the relative error stays
    /// at a few f32 ulps.
    #[inline(always)]
    pub fn apply(&self, power: &[f32], out: &mut [f32]) {
        assert!(power.len() >= self.power_len());
        for (band, o) in self.bands.iter().zip(out.iter_mut()) {
            let p = &power[band.first..band.first + band.weights.len()];
            let mut acc = [0f32; LANES];
            for (w8, p8) in band.weights.chunks_exact(LANES).zip(p.chunks_exact(LANES)) {
                for j in 0..LANES {
                    acc[j] += w8[j] * p8[j];
                }
            }
            *o = acc.iter().sum::<f32>();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn slaney_scale_matches_librosa_examples() {
        // librosa docs: hz_to_mel(60) = 0.9; mel_to_hz(3) = 200.
        assert!(close(hz_to_mel(60.0, MelScale::Slaney), 0.9, 1e-12));
        assert!(close(mel_to_hz(3.0, MelScale::Slaney), 200.0, 1e-12));
        // The log region is continuous at 1 kHz and round-trips.
        for f in [0.0, 440.0, 999.9, 1000.0, 1500.0, 8000.0] {
            for s in [MelScale::Slaney, MelScale::Htk] {
                assert!(close(mel_to_hz(hz_to_mel(f, s), s), f, 1e-12), "{f} {s:?}");
            }
        }
    }

    #[test]
    fn mel_frequencies_match_librosa_doc_example() {
        // librosa.mel_frequencies(n_mels=40) (fmax 11025), selected values.
        let f = mel_frequencies(40, 0.0, 11025.0, MelScale::Slaney);
        assert_eq!(f.len(), 40);
        assert_eq!(f[0], 0.0);
        assert!((f[1] - 85.317).abs() < 1e-3);
        assert!((f[12] - 1024.856).abs() < 1e-3);
        assert!((f[38] - 10096.408).abs() < 1e-3);
        assert_eq!(f[39], 11025.0);
    }

    #[test]
    fn slaney_norm_gives_unit_area_in_hz() {
        // A triangle of base (f[i+2] - f[i]) and height 2/(f[i+2]-f[i]) has area 1;
        // sampled on a fine grid the bins' sum · bin width approaches 1.
        let spec = Spec {
            sample_rate: 16000,
            n_fft: 8192,
            hop_length: 8192,
            win_length: 8192,
            fmin: 100.0,
            fmax: 8000.0,
            n_mels: 20,
            ..Spec::default()
        };
        let bin_hz = 16000.0 / 8192.0;
        for (m, row) in mel_filterbank(&spec).iter().enumerate() {
            let area: f64 = row.iter().map(|&w| f64::from(w) * bin_hz).sum();
            assert!((area - 1.0).abs() < 0.01, "band {m}: area {area}");
        }
    }

    #[test]
    fn unnormalised_triangles_peak_at_most_one_and_are_contiguous() {
        let spec = Spec {
            norm: MelNorm::None,
            ..Spec::default()
        };
        let dense = mel_filterbank(&spec);
        let sparse = SparseFilterbank::new(&spec);
        for (row, band) in dense.iter().zip(&sparse.bands) {
            assert!(row.iter().all(|&w| (0.0..=1.0).contains(&w)));
            let nz = row.iter().filter(|&&w| w != 0.0).count();
            assert!(
                band.weights[..nz].iter().all(|&w| w > 0.0),
                "holes inside a band"
            );
            assert!(band.weights[nz..].iter().all(|&w| w == 0.0));
            assert!(band.weights.len() - nz < LANES);
        }
    }

    /// Values printed by librosa 0.11 (float32, shown as their f64 expansions).
    #[test]
    fn weights_equal_librosa_values() {
        let dense = mel_filterbank(&Spec::default());
        assert_eq!((dense.len(), dense[0].len()), (32, 257));
        let want0: [f64; 12] = [
            0.003031905274838209,
            0.006063810549676418,
            0.009095716290175915,
            0.012127621099352837,
            0.015159526839852333,
            0.01819143258035183,
            0.017711898311972618,
            0.014679994434118271,
            0.011648088693618774,
            0.008616182953119278,
            0.005584277678281069,
            0.0025523726362735033,
        ];
        assert_eq!(dense[0][0], 0.0);
        for (k, w) in want0.iter().enumerate() {
            assert_eq!(dense[0][k + 1], *w as f32, "band 0 bin {}", k + 1);
        }
        assert_eq!(dense[0][13], 0.0);
        assert_eq!(dense[31][230], 0.0);
        assert_eq!(dense[31][231], 0.0005702012567780912f64 as f32);
        assert_eq!(dense[31][233], 0.0021211490966379642f64 as f32);

        let htk = Spec {
            sample_rate: 8000,
            n_fft: 400,
            hop_length: 160,
            win_length: 400,
            n_mels: 40,
            fmin: 20.0,
            fmax: 3800.0,
            mel_scale: MelScale::Htk,
            norm: MelNorm::None,
            ..Spec::default()
        };
        let dense = mel_filterbank(&htk);
        let want5 = [
            0.4784986674785614,
            0.9644777178764343,
            0.5692340731620789,
            0.10449858754873276,
        ];
        assert_eq!(dense[5][10], 0.0);
        for (k, w) in want5.iter().enumerate() {
            assert_eq!(dense[5][k + 11], *w as f32, "htk band 5 bin {}", k + 11);
        }
        assert_eq!(dense[5][15], 0.0);
    }

    #[test]
    fn sparse_apply_equals_dense_product() {
        let spec = Spec::default();
        let dense = mel_filterbank(&spec);
        let sparse = SparseFilterbank::new(&spec);
        let mut power: Vec<f32> = (0..257)
            .map(|k| (k as f32 * 0.1).sin().abs() + 0.5)
            .collect();
        power.resize(sparse.power_len(), 0.0);
        let mut out = vec![0f32; 32];
        sparse.apply(&power, &mut out);
        for (m, row) in dense.iter().enumerate() {
            let want: f64 = row
                .iter()
                .zip(&power)
                .map(|(&w, &p)| f64::from(w) * f64::from(p))
                .sum();
            assert!((f64::from(out[m]) - want).abs() <= 1e-6 * want, "band {m}");
        }
    }
}
