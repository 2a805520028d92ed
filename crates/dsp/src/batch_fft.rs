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
//! * an in-place decimation-in-time complex FFT of `m`: one radix-2 pass when
//!   `log2 m` is odd, then radix-4 passes (three twiddle products and sixteen
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

/// One radix-4 pass combining four DFTs of size `h`. `tw[j]` is
/// `W_{4h}^j`, `W_{4h}^{2j}`, `W_{4h}^{3j}` as `(re, im)` pairs, `W_N = e^{−2πi/N}`.
struct Pass {
    h: usize,
    tw: Vec<[f64; 6]>,
}

/// Precomputed tables of the batched transform for one `n_fft`. `Send + Sync`.
pub(crate) struct BatchFft {
    m: usize,
    /// `log2 m` is odd: a radix-2 pass (span 1) runs first.
    radix2_first: bool,
    passes: Vec<Pass>,
    /// `rev[j]`: where packed value `j` goes (bit reversal of `log2 m` bits).
    rev: Vec<u32>,
    /// realfft's split twiddles for `k = 1 ..= m/2 − 1`, as in `spectrum`.
    tw_re: Vec<f64>,
    tw_im: Vec<f64>,
    power: Power,
}

/// `e^{−2πi·j/n}` as `(re, im)`.
fn twiddle(j: usize, n: usize) -> (f64, f64) {
    let angle = -2.0 * std::f64::consts::PI * j as f64 / n as f64;
    (angle.cos(), angle.sin())
}

impl BatchFft {
    /// `None` unless `n_fft = 2m` with `m` a power of two ≥ 4.
    pub fn new(n_fft: usize, power: Power) -> Option<BatchFft> {
        let m = n_fft / 2;
        if !n_fft.is_multiple_of(2) || m < 4 || !m.is_power_of_two() {
            return None;
        }
        let bits = m.trailing_zeros();
        let radix2_first = bits % 2 == 1;
        let mut passes = Vec::new();
        let mut h = if radix2_first { 2 } else { 1 };
        while h < m {
            let tw = (0..h)
                .map(|j| {
                    let (w1r, w1i) = twiddle(j, 4 * h);
                    let (w2r, w2i) = twiddle(2 * j, 4 * h);
                    let (w3r, w3i) = twiddle(3 * j, 4 * h);
                    [w1r, w1i, w2r, w2i, w3r, w3i]
                })
                .collect();
            passes.push(Pass { h, tw });
            h *= 4;
        }
        let rev = (0..m as u32)
            .map(|j| j.reverse_bits() >> (32 - bits))
            .collect();
        // realfft's `compute_twiddle(k, n) * 0.5` (the `spectrum` module's tables).
        let constant = -2f64 * std::f64::consts::PI / n_fft as f64;
        let (tw_re, tw_im) = (1..m / 2)
            .map(|k| {
                let angle = constant * k as f64;
                (angle.cos() * 0.5, angle.sin() * 0.5)
            })
            .unzip();
        Some(BatchFft {
            m,
            radix2_first,
            passes,
            rev,
            tw_re,
            tw_im,
            power,
        })
    }

    /// Complex length `m = n_fft / 2`.
    pub fn m(&self) -> usize {
        self.m
    }

    /// `slots()[j]`: where packed value `j` (samples `2j`, `2j + 1`) is stored
    /// (bit reversal of `j`).
    pub fn slots(&self) -> &[u32] {
        &self.rev
    }

    /// In-place complex FFT of `V::L` lanes (`re`, `im`: `m · L` values, index
    /// `k`'s lanes at `k·L ..`); input in bit-reversed order ([`slots`](Self::slots)),
    /// output in natural order.
    #[inline(always)]
    pub fn transform<V: Lanes>(&self, re: &mut [f64], im: &mut [f64]) {
        let (m, l) = (self.m, V::L);
        assert!(re.len() == m * l && im.len() == m * l);
        let (re, im) = (re.as_mut_ptr(), im.as_mut_ptr());
        if self.radix2_first {
            for b in (0..m).step_by(2) {
                // SAFETY: b + 1 < m, so every access is inside the m·L values.
                unsafe {
                    let (r0, r1) = (V::load(re.add(b * l)), V::load(re.add((b + 1) * l)));
                    let (i0, i1) = (V::load(im.add(b * l)), V::load(im.add((b + 1) * l)));
                    r0.add(r1).store(re.add(b * l));
                    r0.sub(r1).store(re.add((b + 1) * l));
                    i0.add(i1).store(im.add(b * l));
                    i0.sub(i1).store(im.add((b + 1) * l));
                }
            }
        }
        for pass in &self.passes {
            // SAFETY: `re`, `im` hold m·L values and 4·h divides m.
            unsafe {
                if pass.h == 1 {
                    radix4_first::<V>(re, im, m);
                } else {
                    radix4::<V>(re, im, m, pass.h, &pass.tw);
                }
            }
        }
    }

    /// realfft's split step on the transformed lanes, then `|X[k]|^power` in f32
    /// into `power[k·L ..]` for `k = 0 ..= m` (`power.len() ≥ (m + 1) · L`).
    #[inline(always)]
    pub fn power<V: Lanes>(&self, re: &[f64], im: &[f64], power: &mut [f32]) {
        let l = V::L;
        assert!(power.len() >= (self.m + 1) * l);
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
        let (m, l) = (self.m, V::L);
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

/// The radix-4 butterfly both passes share, on complex values `(re, im)`:
/// with `s0 = A + B`, `s1 = A − B`, `s2 = C + D`, `s3 = C − D`, the outputs
/// `[s0 + s2, s1 − i·s3, s0 − s2, s1 + i·s3]` (`−i·s3 = s3.im − i·s3.re`).
#[inline(always)]
fn butterfly4<V: Lanes>(a: (V, V), b: (V, V), c: (V, V), d: (V, V)) -> [(V, V); 4] {
    let (s0r, s0i) = (a.0.add(b.0), a.1.add(b.1));
    let (s1r, s1i) = (a.0.sub(b.0), a.1.sub(b.1));
    let (s2r, s2i) = (c.0.add(d.0), c.1.add(d.1));
    let (s3r, s3i) = (c.0.sub(d.0), c.1.sub(d.1));
    [
        (s0r.add(s2r), s0i.add(s2i)),
        (s1r.add(s3i), s1i.sub(s3r)),
        (s0r.sub(s2r), s0i.sub(s2i)),
        (s1r.sub(s3i), s1i.add(s3r)),
    ]
}

/// The first radix-4 pass (spans 1 and 2): every twiddle is 1 or `−i`, so it
/// only adds.
///
/// # Safety
/// `re`, `im`: `m · V::L` values each, `4 | m`.
#[inline(always)]
unsafe fn radix4_first<V: Lanes>(re: *mut f64, im: *mut f64, m: usize) {
    let l = V::L;
    for b in (0..m).step_by(4) {
        // SAFETY: b + 3 < m (caller: 4 | m).
        unsafe {
            let ld = |p: *mut f64, q: usize| V::load(p.add((b + q) * l));
            let st = |v: V, p: *mut f64, q: usize| v.store(p.add((b + q) * l));
            let out = butterfly4(
                (ld(re, 0), ld(im, 0)),
                (ld(re, 1), ld(im, 1)),
                (ld(re, 2), ld(im, 2)),
                (ld(re, 3), ld(im, 3)),
            );
            for (q, (r, i)) in out.into_iter().enumerate() {
                st(r, re, q);
                st(i, im, q);
            }
        }
    }
}

/// One radix-4 pass (> the first): blocks of `4h` whose quarters hold the
/// size-`h` DFTs of the residues 0, 2, 1, 3 (mod 4) of the block's inputs (the
/// bit-reversed order); with `N = 4h`, `A = Q0[j]`, `B = W_N^{2j}·Q1[j]`,
/// `C = W_N^j·Q2[j]`, `D = W_N^{3j}·Q3[j]`, the outputs are
/// `X[j] = (A + B) + (C + D)`, `X[j + h] = (A − B) − i(C − D)`,
/// `X[j + 2h] = (A + B) − (C + D)`, `X[j + 3h] = (A − B) + i(C − D)`.
///
/// # Safety
/// `re`, `im`: `m · V::L` values each, `4h | m`, `tw.len() ≥ h`.
#[inline(always)]
unsafe fn radix4<V: Lanes>(re: *mut f64, im: *mut f64, m: usize, h: usize, tw: &[[f64; 6]]) {
    let l = V::L;
    let tw = &tw[..h];
    #[inline(always)]
    fn cmul<V: Lanes>(xr: V, xi: V, wr: V, wi: V) -> (V, V) {
        (xr.mul(wr).sub(xi.mul(wi)), xr.mul(wi).add(xi.mul(wr)))
    }
    for b in (0..m).step_by(4 * h) {
        for (j, t) in tw.iter().enumerate() {
            let t = t.map(V::splat);
            // SAFETY: b + j + 3h < b + 4h ≤ m (caller: 4h | m, j < h).
            unsafe {
                let at = |q: usize| (b + j + q * h) * l;
                let ld = |p: *mut f64, q: usize| V::load(p.add(at(q)));
                let (ar, ai) = (ld(re, 0), ld(im, 0));
                let (br, bi) = cmul(ld(re, 1), ld(im, 1), t[2], t[3]);
                let (cr, ci) = cmul(ld(re, 2), ld(im, 2), t[0], t[1]);
                let (dr, di) = cmul(ld(re, 3), ld(im, 3), t[4], t[5]);
                let st = |v: V, p: *mut f64, q: usize| v.store(p.add(at(q)));
                let out = butterfly4((ar, ai), (br, bi), (cr, ci), (dr, di));
                for (q, (r, i)) in out.into_iter().enumerate() {
                    st(r, re, q);
                    st(i, im, q);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "batch_fft_tests.rs"]
mod tests;
