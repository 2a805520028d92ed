//! [`BatchFft`]: the real FFT of `L` frames at once, "vertically": every value is
//! a [`Lanes`] value (one vector register, or a `[f64; 4]` in the portable
//! build) holding the same index of `L` different frames (lane `l` = frame `l`),
//! so every butterfly is plain lane-wise arithmetic with no shuffles (`L` = 8 in
//! AVX-512, 4 in AVX2 and portable).
//!
//! Algorithm, for `n_fft = 2m` with `m` a power of two ≥ 4 (other sizes keep the
//! per-frame `spectrum` path):
//! * the caller packs each frame as `z[j] = x[2j] + i·x[2j+1]` straight into
//!   bit-reversed position [`BatchFft::slots`]`()[j]` (window applied while packing);
//! * `lane_fft`'s in-place decimation-in-time complex FFT of `m` in f64 (the
//!   transform the Kaldi recipes run in f32): one radix-2 pass when `log2 m`
//!   is odd, then radix-4 passes (three twiddle products and sixteen
//!   additions per four values; the first pass has no products);
//! * realfft's even-length split step for each mirrored pair `(k, m − k)` with
//!   realfft's own twiddles and expression, then `|X|^power` in f32.
//!
//! Every lane runs the same operations in the same order and Rust never contracts
//! `a·b + c` into an FMA, so the result of a frame does not depend on `L` nor on
//! the instruction set: the AVX-512, AVX2 and portable builds give the same bits
//! (tested). They differ from realfft's (rustfft's mixed-radix AVX kernels) in
//! rounding only.
//!
//! Error bound (tested against realfft on random and adversarial frames): for a
//! frame `x` of `n = n_fft` samples,
//! `max_k |X̂[k] − X_realfft[k]| ≤ C · ε · log2(n) · √n · ‖x‖₂` with `C = 24`,
//! `ε = 2⁻⁵³`. Why: a radix-2 FFT of `m` points with twiddles accurate to `μ ≈ ε`
//! has `‖Ẑ − Z‖₂ ≤ log2(m) · (μ + γ₄(√2 + μ)) · ‖Z‖₂ ≈ 6.7 ε log2(m) ‖Z‖₂`
//! (Higham, *Accuracy and Stability of Numerical Algorithms*, thm. 24.2), with
//! `‖Z‖₂ = √m ‖x‖₂` (a radix-4 pass rounds no more than the two radix-2 stages
//! it replaces: one twiddle product and two levels of sums); the split step
//! combines two outputs with weights of modulus ≤ 1 (factor ≤ 2) and adds ≤ 4
//! roundings of values ≤ `‖Z‖₂`; both transforms
//! (ours and realfft's) carry such an error, so their difference is at most
//! `2 · (2 · 6.7 + 4) ε log2(m) √m ‖x‖₂ < 24 ε log2(n) √n ‖x‖₂`.

use super::lane_fft::LaneFft;
use super::lanes::Lanes;
use super::spectrum::Power;

/// Widest lane count any level uses (AVX-512: 8 f64).
pub(crate) const MAX_LANES: usize = 8;

/// Which build of the batched path runs: chosen once per plan from the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// No target features assumed; 4 lanes (the compiler's baseline SIMD).
    Portable,
    /// AVX2, 4 lanes of f64 per 256-bit vector.
    Avx2,
    /// AVX-512F (and AVX2 for its gathers), 8 lanes of f64 per 512-bit vector.
    Avx512,
}

impl Level {
    /// The best level this CPU runs.
    pub fn detect() -> Level {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx2")
            {
                return Level::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Level::Avx2;
            }
        }
        Level::Portable
    }

    /// Whether this CPU can run `self`.
    pub fn available(self) -> bool {
        match self {
            Level::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx2")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// Precomputed tables of the batched transform for one `n_fft`. `Send + Sync`.
pub(crate) struct BatchFft {
    /// The complex transform of `m = n_fft / 2` points.
    fft: LaneFft<f64>,
    /// realfft's split twiddles for `k = 1 ..= m/2 − 1`, as in `spectrum`.
    tw_re: Vec<f64>,
    tw_im: Vec<f64>,
    power: Power,
}

impl BatchFft {
    /// `None` unless `n_fft = 2m` with `m` a power of two ≥ 4.
    pub fn new(n_fft: usize, power: Power) -> Option<BatchFft> {
        let m = n_fft / 2;
        if !n_fft.is_multiple_of(2) || m < 4 {
            return None;
        }
        let fft = LaneFft::new(m)?;
        // realfft's `compute_twiddle(k, n) * 0.5` (the `spectrum` module's tables).
        let constant = -2f64 * std::f64::consts::PI / n_fft as f64;
        let (tw_re, tw_im) = (1..m / 2)
            .map(|k| {
                let angle = constant * k as f64;
                (angle.cos() * 0.5, angle.sin() * 0.5)
            })
            .unzip();
        Some(BatchFft {
            fft,
            tw_re,
            tw_im,
            power,
        })
    }

    /// Complex length `m = n_fft / 2`.
    pub fn m(&self) -> usize {
        self.fft.m()
    }

    /// `slots()[j]`: where packed value `j` (samples `2j`, `2j + 1`) is stored
    /// (bit reversal of `j`).
    pub fn slots(&self) -> &[u32] {
        self.fft.slots()
    }

    /// In-place complex FFT of `V::L` lanes (`re`, `im`: `m · L` values, index
    /// `k`'s lanes at `k·L ..`); input in bit-reversed order ([`slots`](Self::slots)),
    /// output in natural order.
    #[inline(always)]
    pub fn transform<V: Lanes>(&self, re: &mut [f64], im: &mut [f64]) {
        self.fft.run::<V>(re, im);
    }

    /// realfft's split step on the transformed lanes, then `|X[k]|^power` in f32
    /// into `power[k·L ..]` for `k = 0 ..= m` (`power.len() ≥ (m + 1) · L`).
    #[inline(always)]
    pub fn power<V: Lanes>(&self, re: &[f64], im: &[f64], power: &mut [f32]) {
        let l = V::L;
        assert!(power.len() >= (self.m() + 1) * l);
        let p = power.as_mut_ptr();
        match self.power {
            // SAFETY (all three): k ≤ m, so k·L + L ≤ power.len().
            Power::Two => self.split::<V>(re, im, |k, xr, xi| unsafe {
                xr.mul(xr).add(xi.mul(xi)).store_f32(p.add(k * l));
            }),
            Power::One => self.split::<V>(re, im, |k, xr, xi| unsafe {
                xr.mul(xr).add(xi.mul(xi)).sqrt().store_f32(p.add(k * l));
            }),
            Power::Other(e) => self.split::<V>(re, im, |k, xr, xi| unsafe {
                let mut mag = [0f32; MAX_LANES];
                xr.mul(xr)
                    .add(xi.mul(xi))
                    .sqrt()
                    .store_f32(mag.as_mut_ptr());
                for (j, mag) in mag[..l].iter().enumerate() {
                    *p.add(k * l + j) = f64::from(*mag).powf(e) as f32;
                }
            }),
        }
    }

    /// realfft's even-length split step: calls `out(k, X[k].re, X[k].im)` once
    /// for every `k = 0 ..= m` (lane-wise), in no particular order.
    #[inline(always)]
    pub fn split<V: Lanes>(&self, re: &[f64], im: &[f64], mut out: impl FnMut(usize, V, V)) {
        let (m, l) = (self.m(), V::L);
        assert!(re.len() == m * l && im.len() == m * l);
        let (re, im) = (re.as_ptr(), im.as_ptr());
        // SAFETY: every index below is < m, so inside the m·L values.
        let at = |p: *const f64, k: usize| unsafe { V::load(p.add(k * l)) };
        let (z0r, z0i) = (at(re, 0), at(im, 0));
        let zero = V::splat(0.0);
        out(0, z0r.add(z0i), zero);
        out(m, z0r.sub(z0i), zero);
        // The centre bin is z[m/2] conjugated (0 − x = −x, except for the sign of
        // a zero, which the power does not see).
        out(m / 2, at(re, m / 2), zero.sub(at(im, m / 2)));
        let half = V::splat(0.5);
        for k in 1..m / 2 {
            let (tr, ti) = (V::splat(self.tw_re[k - 1]), V::splat(self.tw_im[k - 1]));
            let (ar, ai, br, bi) = (at(re, k), at(im, k), at(re, m - k), at(im, m - k));
            // realfft 3.5 RealToComplexEven, term by term (see `spectrum::pair`).
            let sum_re = ar.add(br);
            let sum_im = ai.add(bi);
            let diff_re = ar.sub(br);
            let diff_im = ai.sub(bi);
            let half_sum_re = half.mul(sum_re);
            let half_diff_im = half.mul(diff_im);
            let twiddled_real = sum_im.mul(tr).add(diff_re.mul(ti));
            let twiddled_im = sum_im.mul(ti).sub(diff_re.mul(tr));
            out(
                k,
                half_sum_re.add(twiddled_real),
                half_diff_im.add(twiddled_im),
            );
            out(
                m - k,
                half_sum_re.sub(twiddled_real),
                twiddled_im.sub(half_diff_im),
            );
        }
    }
}

#[cfg(test)]
#[path = "batch_fft_tests.rs"]
mod tests;
