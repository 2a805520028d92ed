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
//!
//! Where `n_fft / 2` is a power of two ≥ 4, [`Plan::compute`] runs the batched
//! path (`batch` submodule: groups of 4 or 8 frames through `batch_fft`, at the
//! widest [`Level`] the CPU has), which differs from realfft in FFT rounding only
//! (bound in `batch_fft`). [`Plan::compute_reference`] keeps the per-frame path
//! (window, FFT + power in `spectrum`, mel, dB), bit-identical to realfft, for
//! every other size and as the reference the tests and the CUDA host double use;
//! it runs in an AVX2 build where the CPU has it (runtime check in [`Plan::new`]):
//! the same operations in the same order, so the same bits (a test compares both
//! builds).
//!
//! [`Plan::natural`] is the same definition over a whole recording of any length
//! (`librosa.feature.melspectrogram` + `power_to_db` of `y` as it is): the
//! segmentation off and the clip as long as the recording. It shares the
//! transform, window and filterbank with the plan it came from, so only the frame
//! layout (a few µs) is made per recording.

mod batch;

use std::sync::Arc;

use realfft::num_complex::Complex;

use self::batch::BatchScratch;
use super::batch_fft::{BatchFft, Level};
use super::filterbank::SparseFilterbank;
use super::layout::{FrameSource, Layout};
use super::spec::{Segmentation, Spec, SpecError};
use super::spectrum::{Input, Power, Spectrum, SpectrumScratch};
use super::window::window_f64;

/// 10 / ln(10): `10·log10(x) == ln(x) · DB_PER_NEPER`.
const DB_PER_NEPER: f64 = 4.342_944_819_032_518;

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
/// The parts that do not depend on the clip's length are shared with the plans
/// [`natural`](Self::natural) makes.
pub struct Plan {
    spec: Spec,
    spectrum: Arc<Spectrum>,
    window: Arc<[f64]>,
    bank: Arc<SparseFilterbank>,
    layout: Layout,
    gathers: Vec<Gather>,
    /// The CPU has AVX2: [`compute`](Self::compute) runs the AVX2 build.
    #[cfg(target_arch = "x86_64")]
    avx2: bool,
    /// The batched transform, where `n_fft` allows it.
    batch: Option<Arc<BatchFft>>,
    /// The build the batched path runs ([`Level::detect`]).
    level: Level,
    amin: f32,
    /// 10·log10(max(amin, ref)), subtracted from every value.
    ref_db: f64,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("spec", &self.spec)
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

/// One worker's buffers for [`Plan::compute`].
pub struct Scratch {
    spectrum: SpectrumScratch,
    /// `n_bins` powers then zeros (the padded filterbank bands read them).
    power: Vec<f32>,
    /// Mel power, then dB, per distinct frame: `[frame][mel]`.
    db: Vec<f32>,
    batch: BatchScratch,
}

impl Scratch {
    pub fn new(plan: &Plan) -> Scratch {
        Scratch {
            spectrum: plan.spectrum.make_scratch(),
            power: vec![0.0; plan.bank.power_len()],
            db: vec![0.0; plan.layout.frames.len() * plan.spec.n_mels],
            batch: BatchScratch::new(plan),
        }
    }

    /// Makes a scratch of `plan`'s family (the plan it was made for, or one
    /// [`Plan::natural`] made from it) fit `plan`'s clip length.
    pub fn fit(&mut self, plan: &Plan) {
        let len = plan.layout.frames.len() * plan.spec.n_mels;
        self.db.resize(len, 0.0);
    }
}

impl Plan {
    /// `spec` must be valid ([`Spec::validate`]); config guarantees that.
    pub fn new(spec: &Spec) -> Plan {
        debug_assert_eq!(spec.validate(), Ok(()));
        let window: Arc<[f64]> = window_f64(spec).into();
        let power = Power::new(spec.power);
        let layout = Layout::new(spec);
        Plan {
            spec: spec.clone(),
            spectrum: Arc::new(Spectrum::new(spec.n_fft, power)),
            gathers: gathers(&layout, &window),
            window,
            bank: Arc::new(SparseFilterbank::new(spec)),
            layout,
            #[cfg(target_arch = "x86_64")]
            avx2: std::arch::is_x86_feature_detected!("avx2"),
            batch: BatchFft::new(spec.n_fft, power).map(Arc::new),
            level: Level::detect(),
            amin: spec.amin as f32,
            ref_db: 10.0 * spec.amin.max(spec.ref_value).log10(),
        }
    }

    /// This plan's definition over a whole recording of `samples` samples:
    /// no segmentation and a clip of exactly `samples` (so no padding or
    /// trimming), as `librosa.feature.melspectrogram` analyses `y`. Its row
    /// is `[n_mels][n_frames]`. Only the frame layout is made; the transform,
    /// window and filterbank are this plan's. A [`Scratch`] of this plan
    /// serves it after [`Scratch::fit`].
    ///
    /// Errors where the recording is too short for one frame (under `n_fft`
    /// samples with `center = false`, which librosa refuses too) and for no
    /// samples. Centred, any length has frames: reflect padding bounces
    /// back and forth over a recording shorter than `n_fft / 2`, as numpy's
    /// does.
    pub fn natural(&self, samples: usize) -> Result<Plan, SpecError> {
        let spec = Spec {
            clip_seconds: samples as f64 / f64::from(self.spec.sample_rate),
            segmentation: Segmentation {
                enabled: false,
                ..self.spec.segmentation
            },
            ..self.spec.clone()
        };
        spec.validate()?;
        // (s / rate) · rate rounds back to s for any length below 2^50.
        assert_eq!(spec.clip_samples(), samples, "clip length round trip");
        let layout = Layout::new(&spec);
        Ok(Plan {
            spec,
            spectrum: Arc::clone(&self.spectrum),
            gathers: gathers(&layout, &self.window),
            window: Arc::clone(&self.window),
            bank: Arc::clone(&self.bank),
            layout,
            #[cfg(target_arch = "x86_64")]
            avx2: self.avx2,
            batch: self.batch.clone(),
            level: self.level,
            amin: self.amin,
            ref_db: self.ref_db,
        })
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

    /// The build [`compute`](Self::compute) runs the batched path in, or `None`
    /// where `n_fft` takes the per-frame path.
    pub fn batch_level(&self) -> Option<Level> {
        self.batch.as_ref().map(|_| self.level)
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
        self.check(clip, scratch, out);
        if self.batch.is_some() {
            self.frames_batched(self.level, clip, scratch);
            self.scatter(&scratch.db, out);
        } else {
            self.compute_reference(clip, scratch, out);
        }
    }

    /// [`compute`](Self::compute) through the per-frame path whatever `n_fft`:
    /// realfft's transform bit for bit (the reference for the batched path, and
    /// what the CUDA host double, which runs realfft, is compared with).
    pub fn compute_reference(&self, clip: &[f32], scratch: &mut Scratch, out: &mut [f32]) {
        self.check(clip, scratch, out);
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is true only where the CPU reported AVX2 (Plan::new).
            unsafe { self.frames_avx2(clip, scratch) }
        } else {
            self.frames(clip, scratch);
        }
        #[cfg(not(target_arch = "x86_64"))]
        self.frames(clip, scratch);
        self.scatter(&scratch.db, out);
    }

    fn check(&self, clip: &[f32], scratch: &Scratch, out: &[f32]) {
        let spec = &self.spec;
        assert_eq!(clip.len(), spec.clip_samples(), "clip length");
        assert_eq!(out.len(), spec.row_len(), "output length");
        assert_eq!(
            scratch.db.len(),
            self.layout.frames.len() * spec.n_mels,
            "scratch"
        );
    }

    /// [`frames`](Self::frames) compiled for AVX2: the same operations in the
    /// same order (no FMA contraction; Rust never contracts), so the same bits,
    /// in 256-bit vectors.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn frames_avx2(&self, clip: &[f32], scratch: &mut Scratch) {
        self.frames(clip, scratch);
    }

    /// Every distinct frame: window, power spectrum, mel, then dB.
    #[inline(always)]
    fn frames(&self, clip: &[f32], scratch: &mut Scratch) {
        let Scratch {
            spectrum,
            power,
            db,
            ..
        } = scratch;
        let n_mels = self.spec.n_mels;
        for (src, cell) in self.layout.frames.iter().zip(db.chunks_exact_mut(n_mels)) {
            self.fill_frame(clip, *src, spectrum.input());
            self.spectrum.power(spectrum, power);
            self.bank.apply(power, cell);
        }
        self.to_db(db);
    }

    /// Window one frame into the transform's input (f64, as librosa's `float64
    /// window * float32 y`).
    #[inline(always)]
    fn fill_frame(&self, clip: &[f32], src: FrameSource, input: Input<'_>) {
        let n_fft = self.spec.n_fft;
        match src {
            FrameSource::Clip { start } => {
                let x = &clip[start..start + n_fft];
                match input {
                    Input::Pairs(pairs) => {
                        // Blocks of 8 samples so the products stay in vector order.
                        let blocks = pairs.chunks_exact_mut(4);
                        let (w, x) = (self.window.chunks_exact(8), x.chunks_exact(8));
                        for (o, (w, x)) in blocks.zip(w.zip(x)) {
                            let v: [f64; 8] = std::array::from_fn(|j| w[j] * f64::from(x[j]));
                            for (o, v) in o.iter_mut().zip(v.chunks_exact(2)) {
                                *o = Complex::new(v[0], v[1]);
                            }
                        }
                        let done = n_fft / 8 * 8;
                        let (w, x) = (&self.window[done..], &clip[start + done..start + n_fft]);
                        let (w, x) = (w.chunks_exact(2), x.chunks_exact(2));
                        for (o, (w, x)) in pairs[done / 2..].iter_mut().zip(w.zip(x)) {
                            *o = Complex::new(w[0] * f64::from(x[0]), w[1] * f64::from(x[1]));
                        }
                    }
                    Input::Flat(frame) => {
                        for ((o, &w), &s) in frame.iter_mut().zip(self.window.iter()).zip(x) {
                            *o = w * f64::from(s);
                        }
                    }
                }
            }
            FrameSource::Padded { seg_start, pattern } => {
                let seg = &clip[seg_start..seg_start + self.spec.segment_samples()];
                let g = &self.gathers[pattern as usize];
                match input {
                    Input::Pairs(pairs) => {
                        let (w, i) = (g.weight.chunks_exact(2), g.index.chunks_exact(2));
                        for (o, (w, i)) in pairs.iter_mut().zip(w.zip(i)) {
                            o.re = w[0] * f64::from(seg[i[0] as usize]);
                            o.im = w[1] * f64::from(seg[i[1] as usize]);
                        }
                    }
                    Input::Flat(frame) => {
                        for ((o, &w), &i) in frame.iter_mut().zip(&g.weight).zip(&g.index) {
                            *o = w * f64::from(seg[i as usize]);
                        }
                    }
                }
            }
        }
    }

    /// Mel power → dB in place, then the whole-clip `top_db` clamp.
    #[inline(always)]
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

/// Each padded frame position's gather: the window where a sample is read, 0
/// where the padding is zeros.
fn gathers(layout: &Layout, window: &[f64]) -> Vec<Gather> {
    let gather = |pattern: &Vec<Option<u32>>| Gather {
        index: pattern.iter().map(|i| i.unwrap_or(0)).collect(),
        weight: pattern
            .iter()
            .zip(window)
            .map(|(i, &w)| if i.is_some() { w } else { 0.0 })
            .collect(),
    };
    layout.patterns.iter().map(gather).collect()
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

    /// The AVX2 build must give the baseline build's bits (no FMA, same order).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_and_baseline_builds_agree_bit_for_bit() {
        use super::{Plan, Scratch, Spec};
        use crate::PadMode;
        let specs = [
            Spec::default(),
            Spec {
                center: true,
                pad_mode: PadMode::Reflect,
                power: 1.5,
                top_db: Some(60.0),
                ..Spec::default()
            },
            Spec {
                n_fft: 401,
                win_length: 300,
                center: true,
                ..Spec::default()
            },
        ];
        for spec in specs {
            spec.validate().unwrap();
            let mut plan = Plan::new(&spec);
            if !plan.avx2 {
                eprintln!("skipped: this CPU has no AVX2");
                return;
            }
            let mut state = 7u32;
            let clip: Vec<f32> = (0..spec.clip_samples())
                .map(|_| {
                    state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (state >> 8) as f32 / (1 << 24) as f32 - 0.5
                })
                .collect();
            let mut scratch = Scratch::new(&plan);
            let mut fast = vec![0.0; spec.row_len()];
            plan.compute_reference(&clip, &mut scratch, &mut fast);
            plan.avx2 = false;
            let mut base = vec![0.0; spec.row_len()];
            plan.compute_reference(&clip, &mut scratch, &mut base);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(&fast) == bits(&base), "{spec:?}");
        }
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
