//! [`WhisperBatch`]: Whisper's log-mel of `L` frames at once in float32,
//! "vertically" (every value a [`Lanes32`] holding the same index of `L`
//! frames, lane `l` = frame `t0 + l`; `L` = 16 in AVX-512, 8 in AVX2, 4
//! portable), so every step is lane-wise arithmetic with no shuffles.
//!
//! Per batch of frames:
//! * pack: frame `t` is `padded[160 t .. 160 t + 400]` times the periodic Hann
//!   window (float32), packed as `z[j] = x[2j] + i·x[2j+1]`, `j < 200`;
//! * a complex FFT of 200 = 5·5·4·2 points, Stockham's autosort
//!   ([`Stockham32`], shared with `kaldi::batch`);
//! * the real-FFT split step (`X[k] = E[k] + W_400^k O[k]`), then `|X[k]|²`
//!   for the 201 bins below and at Nyquist; both are carried at twice `X`
//!   (no halving), and the mel weights are stored divided by 4: scaling by
//!   powers of two is exact, so the mel energies are the same bits;
//! * the sparse slaney filters, then `log10(max(1e-10, ·))` with a float32
//!   polynomial logarithm (cephes' `logf`, within 2 ulp), exactly −10 at or
//!   below the floor (an all-zero frame gives the pad's value bit for bit).
//!
//! The extractor computes the FFT, power, mel and log in float64 (`whisper`
//! keeps that path as [`WhisperPlan::compute_f64`](super::whisper::WhisperPlan::compute_f64));
//! float32 FFT rounding is about 1e-7 of the frame's energy, and the clamp at
//! `M − 8` drops everything more than 8 decades below the loudest band, so the
//! result stays within docs/FORMAT.md's 1e-4 on the extractor's scale (tested
//! against the float64 path; measured against the extractor by
//! scripts/parity_recipes.py). Only lane-wise IEEE operations in one order, so
//! every build ([`Level`]) and lane count gives the same bits (tested).

use super::batch_fft::Level;
use super::lane_fft::twiddle;
#[cfg(target_arch = "x86_64")]
use super::lanes32::{Avx2x8, Avx512x16};
use super::lanes32::{Lanes32, Portable32};
use super::logf32;
use super::real32;
use super::stockham32::Stockham32;

/// Widest lane count any level uses (AVX-512: 16 f32).
pub(crate) const MAX_LANES: usize = 16;
/// The most mel bands (Whisper's 128).
const MAX_MELS: usize = 128;
/// Samples per frame.
const N_FFT: usize = 400;
/// Samples between frames.
const HOP: usize = 160;
/// Complex FFT length.
const M: usize = N_FFT / 2;
/// Power bins (0 ..= Nyquist).
const BINS: usize = M + 1;
/// The stages of the complex FFT, first to last (product 200).
const RADICES: [usize; 4] = [5, 5, 4, 2];
/// The extractor's mel floor, as float32.
const FLOOR: f32 = 1e-10;
/// log10 of the floor, as the extractor's float32 (`1e-10f64.log10() as f32`).
const FLOOR_LOG: f32 = -10.0;

/// The float32 tables of the batched path; `Send + Sync`, shared by workers.
pub(crate) struct WhisperBatch {
    level: Level,
    window: Vec<f32>,
    fft: Stockham32,
    /// `W_400^k` for `k = 1 .. 100`.
    split: Vec<[f32; 2]>,
    /// Each filter's first bin and its weights / 4.
    filters: Vec<(usize, Vec<f32>)>,
}

/// Per-worker buffers of the batched path.
pub(crate) struct BatchBuffers {
    re: [Vec<f32>; 2],
    im: [Vec<f32>; 2],
    power: Vec<f32>,
    mel: Vec<f32>,
    /// The padded signal of a batch that reaches past the audio.
    edge: Vec<f32>,
    /// One `L × L` block of frames, transposed (`pack`).
    block: Vec<f32>,
}

impl WhisperBatch {
    /// The tables for `window` (400 points) and the filters (first bin,
    /// float64 weights), run at `level` (which this CPU must have).
    pub fn new<'a>(
        window: &[f64],
        filters: impl Iterator<Item = (usize, &'a [f64])>,
        level: Level,
    ) -> WhisperBatch {
        assert!(level.available(), "{level:?} on a CPU without it");
        assert_eq!(window.len(), N_FFT);
        let filters = filters
            .map(|(first, w)| (first, w.iter().map(|&w| (w * 0.25) as f32).collect()))
            .collect::<Vec<(usize, Vec<f32>)>>();
        assert!(filters.iter().all(|(f, w)| f + w.len() <= BINS));
        // The output gathers whole vectors of mels.
        assert!(filters.len() <= MAX_MELS && filters.len().is_multiple_of(MAX_LANES));
        WhisperBatch {
            level,
            window: window.iter().map(|&w| w as f32).collect(),
            fft: Stockham32::with_radices(&RADICES),
            split: (1..M / 2).map(|k| twiddle(k, N_FFT)).collect(),
            filters,
        }
    }

    pub fn level(&self) -> Level {
        self.level
    }

    pub fn buffers(&self) -> BatchBuffers {
        let v = |n: usize| vec![0f32; n * MAX_LANES];
        BatchBuffers {
            re: [v(M), v(M)],
            im: [v(M), v(M)],
            power: v(BINS),
            mel: v(self.filters.len()),
            edge: vec![0.0; HOP * (MAX_LANES - 1) + N_FFT],
            block: v(MAX_LANES),
        }
    }

    /// Appends `log10(max(1e-10, mel))` of frames `0 .. frames` to `out`
    /// (`frames × n_mels`, frame-major). Frame `t` is samples
    /// `160 t .. 160 t + 400` of the padded signal, whose sample `p` is
    /// `audio[p − 200]` for `200 ≤ p < 200 + audio.len()` and `edge(p)`
    /// elsewhere (the extractor's reflection and zeros). Batches whose frames
    /// all lie inside `audio` read it in place; the others are copied through
    /// `edge` (lanes past the last frame are computed and dropped).
    pub fn log_mel(
        &self,
        audio: &[f32],
        frames: usize,
        edge: &dyn Fn(usize) -> f32,
        b: &mut BatchBuffers,
        out: &mut Vec<f32>,
    ) {
        out.reserve(frames * self.filters.len());
        match self.level {
            Level::Portable => self.run::<Portable32>(audio, frames, edge, b, out),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `new` checked `level.available()`: the CPU has AVX-512F.
            Level::Avx512 => unsafe { self.run_avx512(audio, frames, edge, b, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `new` checked `level.available()`: the CPU has AVX2.
            Level::Avx2 => unsafe { self.run_avx2(audio, frames, edge, b, out) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("only x86_64 has the AVX levels"),
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn run_avx512(
        &self,
        audio: &[f32],
        frames: usize,
        edge: &dyn Fn(usize) -> f32,
        b: &mut BatchBuffers,
        out: &mut Vec<f32>,
    ) {
        self.run::<Avx512x16>(audio, frames, edge, b, out);
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_avx2(
        &self,
        audio: &[f32],
        frames: usize,
        edge: &dyn Fn(usize) -> f32,
        b: &mut BatchBuffers,
        out: &mut Vec<f32>,
    ) {
        self.run::<Avx2x8>(audio, frames, edge, b, out);
    }

    /// Every batch of `V::L` frames.
    #[inline(always)]
    fn run<V: Lanes32>(
        &self,
        audio: &[f32],
        frames: usize,
        edge: &dyn Fn(usize) -> f32,
        b: &mut BatchBuffers,
        out: &mut Vec<f32>,
    ) {
        const PAD: usize = N_FFT / 2;
        let (l, n_mels) = (V::L, self.filters.len());
        let span = HOP * (l - 1) + N_FFT;
        for t0 in (0..frames).step_by(l) {
            let start = HOP * t0;
            let src = if start >= PAD && start + span <= PAD + audio.len() {
                &audio[start - PAD..start - PAD + span]
            } else {
                for (i, v) in b.edge[..span].iter_mut().enumerate() {
                    let p = start + i;
                    *v = match p.checked_sub(PAD) {
                        Some(j) if j < audio.len() => audio[j],
                        _ => edge(p),
                    };
                }
                &b.edge[..span]
            };
            self.pack::<V>(src, &mut b.block, &mut b.re[0], &mut b.im[0]);
            let done = self.fft.run::<V>(
                b.re.each_mut().map(|v| &mut v[..]),
                b.im.each_mut().map(|v| &mut v[..]),
            );
            let [re, im] = [&b.re[done][..M * l], &b.im[done][..M * l]];
            self.power::<V>(re, im, &mut b.power[..BINS * l]);
            let mel = &mut b.mel[..n_mels * l];
            self.mel::<V>(&b.power[..BINS * l], mel);
            mel.iter_mut().for_each(|v| *v = log10_floored(*v));
            let mut row = [0f32; MAX_MELS];
            for lane in 0..(frames - t0).min(l) {
                for f0 in (0..n_mels).step_by(l) {
                    // SAFETY: lane + (f0 + j)·L < n_mels·L for j < L
                    // (L | n_mels, checked in `new`); row holds n_mels ≥ f0 + L.
                    unsafe {
                        V::gather(mel.as_ptr().add(f0 * l + lane), l)
                            .store(row.as_mut_ptr().add(f0))
                    };
                }
                out.extend_from_slice(&row[..n_mels]);
            }
        }
    }

    /// Frames `0 .. L` of `src` (frame `l` at `160 l`, `src` holding
    /// `160 (L − 1) + 400` samples), windowed, into `re`/`im` as `z[j]`.
    ///
    /// The frames are transposed in `L × L` blocks through `t` (`L` divides
    /// 400 for every level), not gathered sample by sample: on the AMD EPYC
    /// dev VM the two gathers per `j` were a third of the recipe's time
    /// (docs/BENCHMARKS.md, "Issue 50, item 5"). Only moves before the one
    /// multiply, so the values are the gathers' to the bit.
    #[inline(always)]
    fn pack<V: Lanes32>(&self, src: &[f32], t: &mut [f32], re: &mut [f32], im: &mut [f32]) {
        let l = V::L;
        assert!(src.len() >= HOP * (l - 1) + N_FFT && re.len() >= M * l && im.len() >= M * l);
        assert!(N_FFT.is_multiple_of(l) && t.len() >= l * l);
        for k0 in (0..N_FFT).step_by(l) {
            // SAFETY: lane r reads src[k0 + 160 r .. + L] with k0 + L ≤ 400
            // and r < L (asserted above); `t` holds L·L values and does not
            // overlap `src`.
            unsafe { V::transpose(src.as_ptr().add(k0), HOP, t.as_mut_ptr(), l) };
            for (i, w) in self.window[k0..k0 + l].chunks_exact(2).enumerate() {
                let j = k0 / 2 + i;
                // SAFETY: 2i + 1 < L rows of L in `t`; j·L + L ≤ M·L
                // (asserted above).
                unsafe {
                    let (xr, xi) = (
                        V::load(t.as_ptr().add(2 * i * l)),
                        V::load(t.as_ptr().add((2 * i + 1) * l)),
                    );
                    xr.mul(V::splat(w[0])).store(re.as_mut_ptr().add(j * l));
                    xi.mul(V::splat(w[1])).store(im.as_mut_ptr().add(j * l));
                }
            }
        }
    }

    /// The split step and `|2X[k]|²` for `k = 0 ..= 200` into `power[k·L ..]`.
    #[inline(always)]
    fn power<V: Lanes32>(&self, re: &[f32], im: &[f32], power: &mut [f32]) {
        debug_assert_eq!(re.len(), M * V::L);
        real32::split_power::<V>(&self.split, true, re, im, power);
    }

    /// The sparse filters over `power` into `mel[f·L ..]`.
    #[inline(always)]
    fn mel<V: Lanes32>(&self, power: &[f32], mel: &mut [f32]) {
        real32::sparse_mel::<V>(&self.filters, 0.0, power, mel);
    }
}

/// `log10(max(1e-10, x))` in float32; exactly −10 at or below the floor.
/// cephes' `logf` ([`logf32::ln`]) times log10(e): within 2 ulp.
#[inline(always)]
pub(crate) fn log10_floored(x: f32) -> f32 {
    let v = x.max(FLOOR);
    let log10 = logf32::ln(v) * std::f32::consts::LOG10_E;
    if x <= FLOOR { FLOOR_LOG } else { log10 }
}

#[cfg(test)]
#[path = "whisper_batch_tests.rs"]
mod tests;
