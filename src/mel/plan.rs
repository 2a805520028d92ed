//! [`Plan`]: everything precomputed for one [`Spec`] (FFT plan, window, sparse
//! filterbank, frame layout), shared read-only by all workers; [`Scratch`]: one
//! worker's buffers, so computing a clip allocates nothing.
//!
//! Numerics follow librosa 0.11 step by step:
//! * librosa multiplies the float32 frame by the float64 window and runs the FFT in
//!   float64, storing the result as complex64. We do the same (an f32 FFT is off by
//!   up to 0.01 dB in the leakage floor of pure tones, far outside the 1e-3 dB
//!   contract), then take |X|^power in f32 precision.
//! * The mel product is float32 (librosa's einsum on float32 arrays).
//! * dB = 10·log10(max(amin, M)) rounded to f32, minus 10·log10(max(amin, ref)).
//! * `top_db` clamps at the maximum over the whole clip (all segments) − top_db.
//!
//! Each distinct frame (see the `layout` module) is transformed and converted to dB
//! once; the columns are then scattered to every `(l, s, f)` that uses them.

use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};

use super::filterbank::SparseFilterbank;
use super::layout::{FrameSource, Layout};
use super::spec::Spec;
use super::window::window_f64;

/// 10 / ln(10): `10·log10(x) == ln(x) · DB_PER_NEPER`.
const DB_PER_NEPER: f64 = 4.342_944_819_032_518;

#[derive(Clone, Copy, Debug)]
enum Power {
    /// |X|²: the sum of squares, rounded once.
    Two,
    /// |X|.
    One,
    /// |X| rounded to f32, then raised to the exponent.
    Other(f64),
}

/// A padded frame position's gather: sample `j` is `seg[index[j]] · weight[j]`
/// (`weight` is the window, or 0 where the padding is zeros).
#[derive(Clone, Debug)]
struct Gather {
    index: Vec<u32>,
    weight: Vec<f64>,
}

/// The distinct frames of a clip as flat arrays ([`Plan::frame_gather`]).
///
/// Frame `d`'s sample `j` (before the window) is `clip[start[d] + j]` when
/// `pattern[d]` is `None`; otherwise, with `p = patterns[pattern[d]][j]`, it is
/// `clip[start[d] + p]` for `Some(p)` and zero for `None` (`start[d]` is then the
/// start of the segment whose centre padding the frame reaches into).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameGather {
    pub start: Vec<usize>,
    pub pattern: Vec<Option<u32>>,
    /// `n_fft` entries each: segment-relative sample index, `None` for a zero.
    pub patterns: Vec<Vec<Option<u32>>>,
}

/// Precomputed state for one [`Spec`]. `Send + Sync`; build once, share via `Arc`.
pub struct Plan {
    spec: Spec,
    fft: Arc<dyn RealToComplex<f64>>,
    window: Vec<f64>,
    bank: SparseFilterbank,
    layout: Layout,
    gathers: Vec<Gather>,
    power: Power,
    amin: f32,
    /// 10·log10(max(amin, ref)), subtracted from every value.
    ref_db: f64,
}

/// One worker's buffers for [`Plan::compute`].
pub struct Scratch {
    frame: Vec<f64>,
    spectrum: Vec<Complex<f64>>,
    fft_scratch: Vec<Complex<f64>>,
    /// `n_bins` powers then zeros (the padded filterbank bands read them).
    power: Vec<f32>,
    /// Mel power, then dB, per distinct frame: `[frame][mel]`.
    db: Vec<f32>,
}

impl Scratch {
    pub fn new(plan: &Plan) -> Scratch {
        Scratch {
            frame: plan.fft.make_input_vec(),
            spectrum: plan.fft.make_output_vec(),
            fft_scratch: plan.fft.make_scratch_vec(),
            power: vec![0.0; plan.bank.power_len()],
            db: vec![0.0; plan.layout.frames.len() * plan.spec.n_mels],
        }
    }
}

impl Plan {
    /// `spec` must be valid ([`Spec::validate`]); config guarantees that.
    pub fn new(spec: &Spec) -> Plan {
        debug_assert_eq!(spec.validate(), Ok(()));
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(spec.n_fft);
        let power = if spec.power == 2.0 {
            Power::Two
        } else if spec.power == 1.0 {
            Power::One
        } else {
            Power::Other(spec.power)
        };
        let window = window_f64(spec);
        let layout = Layout::new(spec);
        let gathers = layout
            .patterns
            .iter()
            .map(|pattern| Gather {
                index: pattern.iter().map(|i| i.unwrap_or(0)).collect(),
                weight: pattern
                    .iter()
                    .zip(&window)
                    .map(|(i, &w)| if i.is_some() { w } else { 0.0 })
                    .collect(),
            })
            .collect();
        Plan {
            spec: spec.clone(),
            fft,
            window,
            bank: SparseFilterbank::new(spec),
            layout,
            gathers,
            power,
            amin: spec.amin as f32,
            ref_db: 10.0 * spec.amin.max(spec.ref_value).log10(),
        }
    }

    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// How many distinct STFT frames one clip needs (after sharing).
    pub fn distinct_frames(&self) -> usize {
        self.layout.frames.len()
    }

    /// The analysis window as the STFT applies it (f64, length `n_fft`).
    pub fn window_f64(&self) -> &[f64] {
        &self.window
    }

    /// Where each distinct frame's samples come from, as flat arrays, for backends
    /// that gather frames elsewhere (the CUDA tables). See [`FrameGather`].
    pub fn frame_gather(&self) -> FrameGather {
        let mut gather = FrameGather {
            start: Vec::with_capacity(self.layout.frames.len()),
            pattern: Vec::with_capacity(self.layout.frames.len()),
            patterns: self.layout.patterns.clone(),
        };
        for src in &self.layout.frames {
            let (start, pattern) = match *src {
                FrameSource::Clip { start } => (start, None),
                FrameSource::Padded { seg_start, pattern } => (seg_start, Some(pattern)),
            };
            gather.start.push(start);
            gather.pattern.push(pattern);
        }
        gather
    }

    /// The scatter table: the distinct frame behind every output column, indexed
    /// by `(l · n_short + s) · n_frames + f`.
    pub fn columns(&self) -> &[u32] {
        &self.layout.column
    }

    /// The sparse filterbank, one `(first bin, weights)` per mel band, in the
    /// exact form [`compute`](Self::compute) uses: `weights.len()` is a multiple
    /// of 8 (zero padded past the triangle; bins past `n_bins` count as zero
    /// power) and the product is summed in 8 interleaved partial sums, lane `j`
    /// taking weights `j, j + 8, …`, then the lanes left to right.
    pub fn mel_bands(&self) -> impl Iterator<Item = (usize, &[f32])> + '_ {
        self.bank
            .bands
            .iter()
            .map(|b| (b.first, b.weights.as_slice()))
    }

    /// `10·log10(max(amin, ref))`, subtracted (in f64) from every dB value.
    pub fn ref_db(&self) -> f64 {
        self.ref_db
    }

    /// Log-mel of one clip.
    ///
    /// `clip`: exactly `spec.clip_samples()` mono samples (already padded/trimmed).
    /// `out`: exactly `spec.row_len()` values, `[n_long][n_short][n_mels][n_frames]`
    /// row-major, in dB.
    ///
    /// # Panics
    /// If either length is wrong or `scratch` was made for another plan's spec.
    pub fn compute(&self, clip: &[f32], scratch: &mut Scratch, out: &mut [f32]) {
        let spec = &self.spec;
        assert_eq!(clip.len(), spec.clip_samples(), "clip length");
        assert_eq!(out.len(), spec.row_len(), "output length");
        let n_mels = spec.n_mels;
        assert_eq!(
            scratch.db.len(),
            self.layout.frames.len() * n_mels,
            "scratch"
        );

        let Scratch {
            frame,
            spectrum,
            fft_scratch,
            power,
            db,
        } = scratch;
        for (src, cell) in self.layout.frames.iter().zip(db.chunks_exact_mut(n_mels)) {
            self.fill_frame(clip, *src, frame);
            self.fft
                .process_with_scratch(frame, spectrum, fft_scratch)
                .expect("buffer sizes come from the plan");
            self.power_spectrum(spectrum, power);
            self.bank.apply(power, cell);
        }
        self.to_db(db);
        self.scatter(db, out);
    }

    /// Window one frame into `frame` (f64, as librosa's `float64 window * float32 y`).
    #[inline]
    fn fill_frame(&self, clip: &[f32], src: FrameSource, frame: &mut [f64]) {
        match src {
            FrameSource::Clip { start } => {
                let x = &clip[start..start + self.spec.n_fft];
                for ((o, &w), &s) in frame.iter_mut().zip(&self.window).zip(x) {
                    *o = w * f64::from(s);
                }
            }
            FrameSource::Padded { seg_start, pattern } => {
                let seg = &clip[seg_start..seg_start + self.spec.segment_samples()];
                let g = &self.gathers[pattern as usize];
                for ((o, &w), &i) in frame.iter_mut().zip(&g.weight).zip(&g.index) {
                    *o = w * f64::from(seg[i as usize]);
                }
            }
        }
    }

    #[inline]
    fn power_spectrum(&self, spectrum: &[Complex<f64>], power: &mut [f32]) {
        let pairs = power.iter_mut().zip(spectrum);
        match self.power {
            Power::Two => pairs.for_each(|(p, x)| *p = (x.re * x.re + x.im * x.im) as f32),
            Power::One => pairs.for_each(|(p, x)| *p = (x.re * x.re + x.im * x.im).sqrt() as f32),
            Power::Other(e) => pairs.for_each(|(p, x)| {
                let mag = (x.re * x.re + x.im * x.im).sqrt() as f32;
                *p = f64::from(mag).powf(e) as f32;
            }),
        }
    }

    /// Mel power → dB in place, then the whole-clip `top_db` clamp.
    fn to_db(&self, db: &mut [f32]) {
        // As librosa: 10·log10(max(amin, M)) in float32, then − ref in float64.
        let amin = self.amin;
        if amin >= f32::MIN_POSITIVE {
            // Straight-line loop (no reductions, no branches) so it vectorises.
            for v in db.iter_mut() {
                *v = (ln_normal_f32(v.max(amin)) * DB_PER_NEPER) as f32;
            }
        } else {
            // A user amin below the normal range: subnormal inputs, use libm.
            for v in db.iter_mut() {
                *v = (f64::from(v.max(amin)).ln() * DB_PER_NEPER) as f32;
            }
        }
        if self.ref_db != 0.0 {
            for v in db.iter_mut() {
                *v = (f64::from(*v) - self.ref_db) as f32;
            }
        }
        if let Some(top_db) = self.spec.top_db {
            let max = db.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let floor = max - top_db as f32;
            for v in db.iter_mut() {
                *v = v.max(floor);
            }
        }
    }

    /// Copy each distinct frame's dB column to every output column that uses it.
    fn scatter(&self, db: &[f32], out: &mut [f32]) {
        let n_mels = self.spec.n_mels;
        let n_frames = self.spec.n_frames();
        let column = |c: u32| &db[c as usize * n_mels..(c as usize + 1) * n_mels];
        if n_frames == 1 {
            // [mel][1]: each segment is one contiguous column.
            for (seg, &c) in out.chunks_exact_mut(n_mels).zip(&self.layout.column) {
                seg.copy_from_slice(column(c));
            }
            return;
        }
        for (seg, cols) in out
            .chunks_exact_mut(n_mels * n_frames)
            .zip(self.layout.column.chunks_exact(n_frames))
        {
            for (f, &c) in cols.iter().enumerate() {
                for (m, &v) in column(c).iter().enumerate() {
                    seg[m * n_frames + f] = v;
                }
            }
        }
    }
}

/// Natural logarithm of a positive, finite, normal f32, in f64 with absolute error
/// < 1e-10 (the dB value is rounded to f32 anyway). Branch-free on 32-bit integers
/// so the dB loop vectorises; libm's `ln` costs more than the whole mel product.
#[inline]
pub(crate) fn ln_normal_f32(x: f32) -> f64 {
    let bits = x.to_bits();
    // x = 2^e · m with m in [1, 2), then folded to [√½, √2) so |s| ≤ 0.1716.
    let e = ((bits >> 23) & 0xff) as i32 - 127;
    let m = f64::from(f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000));
    let big = m > std::f64::consts::SQRT_2;
    let m = if big { m * 0.5 } else { m };
    let e = f64::from(e + i32::from(big));
    // ln m = 2·atanh(s), s = (m − 1)/(m + 1): odd series, truncation < 2e-11.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let series = 2.0
        + s2 * (2.0 / 3.0
            + s2 * (2.0 / 5.0 + s2 * (2.0 / 7.0 + s2 * (2.0 / 9.0 + s2 * (2.0 / 11.0)))));
    e * std::f64::consts::LN_2 + s * series
}

#[cfg(test)]
mod tests {
    #[test]
    fn fast_ln_is_accurate_over_the_normal_f32_range() {
        let mut x = f32::MIN_POSITIVE;
        while x.is_finite() {
            for k in 0..256 {
                let v = x * (1.0 + k as f32 / 256.0);
                if !v.is_finite() {
                    break;
                }
                let err = (super::ln_normal_f32(v) - f64::from(v).ln()).abs();
                assert!(err < 1e-10, "ln({v}) off by {err}");
            }
            x *= 2.0;
        }
        assert_eq!(super::ln_normal_f32(1.0), 0.0);
    }

    #[test]
    fn tiny_amin_takes_the_subnormal_path() {
        use super::{Plan, Scratch, Spec};
        let spec = Spec {
            amin: 1e-42,
            ..Spec::default()
        };
        let plan = Plan::new(&spec);
        let mut scratch = Scratch::new(&plan);
        let mut out = vec![0.0; spec.row_len()];
        plan.compute(&vec![0.0; spec.clip_samples()], &mut scratch, &mut out);
        let want = (10.0 * f64::from(1e-42f32).log10()) as f32;
        assert!(out.iter().all(|&v| v == want), "{} vs {want}", out[0]);
    }
}
