//! [`Spectrum`]: windowed real frame → `|X[k]|^power` (f32) for `k = 0 ..= n_fft/2`,
//! bit-identical to `realfft` (which `compute::cuda`'s host shim uses for cuFFT's
//! D2Z, and whose rounding the golden tests were measured with).
//!
//! For even `n_fft` this is realfft's own algorithm written out so it can be fused:
//! the frame is packed as `n_fft/2` complex values `z[j] = x[2j] + i·x[2j+1]` (the
//! window is applied while packing), one complex FFT of `n_fft/2` (the same
//! rustfft plan realfft builds: same planner, same length, out of place), then
//! realfft's split step for each mirrored pair `(k, m − k)` with its twiddles and
//! its exact sequence of f64 operations, squared straight into the power buffer
//! instead of being stored as complex output. Rust never contracts `a·b + c` into
//! an FMA, so the same expression gives the same bits. Odd `n_fft` (rare) calls
//! realfft directly.
//!
//! Invariant (tested below against realfft): for every even and odd `n_fft`,
//! [`Spectrum::power`] equals `realfft` + `|X|^power` bit for bit.

use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};
use rustfft::{Fft, FftPlanner};

/// How `|X|` becomes the power value (librosa's `np.abs(S) ** power` in f32).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Power {
    /// |X|²: the sum of squares, rounded once.
    Two,
    /// |X|.
    One,
    /// |X| rounded to f32, then raised to the exponent.
    Other(f64),
}

impl Power {
    pub fn new(power: f64) -> Power {
        if power == 2.0 {
            Power::Two
        } else if power == 1.0 {
            Power::One
        } else {
            Power::Other(power)
        }
    }
}

#[inline(always)]
fn power_two(re: f64, im: f64) -> f32 {
    (re * re + im * im) as f32
}

#[inline(always)]
fn power_one(re: f64, im: f64) -> f32 {
    (re * re + im * im).sqrt() as f32
}

enum Transform {
    /// Even `n_fft`: complex FFT of `n_fft / 2` plus realfft's split step.
    /// `tw_re[i] + i·tw_im[i]` is realfft's twiddle for the pair `k = i + 1`:
    /// `e^{−2πik/n_fft} / 2`, computed with realfft's expression.
    Even {
        fft: Arc<dyn Fft<f64>>,
        tw_re: Vec<f64>,
        tw_im: Vec<f64>,
    },
    Odd(Arc<dyn RealToComplex<f64>>),
}

/// The per-frame transform for one `n_fft` and power. `Send + Sync`.
pub(crate) struct Spectrum {
    n_fft: usize,
    power: Power,
    transform: Transform,
}

/// One worker's buffers for [`Spectrum::power`]; fill [`input`](Self::input)
/// with the windowed frame first.
pub(crate) struct SpectrumScratch {
    /// Even `n_fft`: the frame packed as pairs (`n_fft / 2`); empty otherwise.
    pairs: Vec<Complex<f64>>,
    /// Odd `n_fft`: the frame (`n_fft`); empty otherwise.
    flat: Vec<f64>,
    /// FFT output (`n_fft / 2` for even, `n_fft / 2 + 1` for odd).
    out: Vec<Complex<f64>>,
    fft_scratch: Vec<Complex<f64>>,
}

/// Where the windowed frame goes: sample `2j` to `pairs[j].re`, `2j + 1` to
/// `pairs[j].im` (even `n_fft`), or sample `j` to `flat[j]` (odd).
pub(crate) enum Input<'a> {
    Pairs(&'a mut [Complex<f64>]),
    Flat(&'a mut [f64]),
}

impl SpectrumScratch {
    pub fn input(&mut self) -> Input<'_> {
        if self.flat.is_empty() {
            Input::Pairs(&mut self.pairs)
        } else {
            Input::Flat(&mut self.flat)
        }
    }
}

impl Spectrum {
    pub fn new(n_fft: usize, power: Power) -> Spectrum {
        let transform = if n_fft.is_multiple_of(2) {
            let m = n_fft / 2;
            let fft = FftPlanner::<f64>::new().plan_fft_forward(m);
            // realfft's `compute_twiddle(k, n) * 0.5` for k = 1 ..= (m − 1) / 2.
            let constant = -2f64 * std::f64::consts::PI / n_fft as f64;
            let (tw_re, tw_im) = (1..=(m.max(1) - 1) / 2)
                .map(|k| {
                    let angle = constant * k as f64;
                    (angle.cos() * 0.5, angle.sin() * 0.5)
                })
                .unzip();
            Transform::Even { fft, tw_re, tw_im }
        } else {
            Transform::Odd(RealFftPlanner::<f64>::new().plan_fft_forward(n_fft))
        };
        Spectrum {
            n_fft,
            power,
            transform,
        }
    }

    pub fn make_scratch(&self) -> SpectrumScratch {
        match &self.transform {
            Transform::Even { fft, .. } => SpectrumScratch {
                pairs: vec![Complex::default(); self.n_fft / 2],
                flat: Vec::new(),
                out: vec![Complex::default(); self.n_fft / 2],
                fft_scratch: vec![Complex::default(); fft.get_outofplace_scratch_len()],
            },
            Transform::Odd(fft) => SpectrumScratch {
                pairs: Vec::new(),
                flat: fft.make_input_vec(),
                out: fft.make_output_vec(),
                fft_scratch: fft.make_scratch_vec(),
            },
        }
    }

    /// `n_fft / 2 + 1` power values of the frame in `scratch`'s input (which this
    /// overwrites) into `power[..n_fft / 2 + 1]`.
    #[inline(always)]
    pub fn power(&self, scratch: &mut SpectrumScratch, power: &mut [f32]) {
        let n_bins = self.n_fft / 2 + 1;
        let power = &mut power[..n_bins];
        match &self.transform {
            Transform::Even { fft, tw_re, tw_im } => {
                let SpectrumScratch {
                    pairs,
                    out,
                    fft_scratch,
                    ..
                } = scratch;
                fft.process_outofplace_with_scratch(pairs, out, fft_scratch);
                match self.power {
                    Power::Two => split(out, tw_re, tw_im, power, power_two),
                    Power::One => split(out, tw_re, tw_im, power, power_one),
                    Power::Other(e) => split(out, tw_re, tw_im, power, |re, im| {
                        f64::from(power_one(re, im)).powf(e) as f32
                    }),
                }
            }
            Transform::Odd(fft) => {
                fft.process_with_scratch(
                    &mut scratch.flat,
                    &mut scratch.out,
                    &mut scratch.fft_scratch,
                )
                .expect("buffer sizes come from the plan");
                let pairs = power.iter_mut().zip(&scratch.out);
                match self.power {
                    Power::Two => pairs.for_each(|(p, x)| *p = power_two(x.re, x.im)),
                    Power::One => pairs.for_each(|(p, x)| *p = power_one(x.re, x.im)),
                    Power::Other(e) => pairs
                        .for_each(|(p, x)| *p = f64::from(power_one(x.re, x.im)).powf(e) as f32),
                }
            }
        }
    }
}

/// realfft's even-length split step on `z` (the complex FFT of the packed frame,
/// `m` values), each output bin passed through `pow` into `power` (`m + 1`).
#[inline(always)]
fn split(
    z: &[Complex<f64>],
    tw_re: &[f64],
    tw_im: &[f64],
    power: &mut [f32],
    pow: impl Fn(f64, f64) -> f32,
) {
    let m = z.len();
    assert_eq!(power.len(), m + 1);
    // Bins 0 and m: sum and difference of z[0]'s parts, imaginary part zero.
    let z0 = z[0];
    power[0] = pow(z0.re + z0.im, 0.0);
    power[m] = pow(z0.re - z0.im, 0.0);
    // Pairs (k, m − k) for k = 1 ..= h: `lo[i]` is bin i + 1, `hi[h − 1 − i]`
    // bin m − 1 − i.
    let h = (m.max(1) - 1) / 2;
    let (lo, hi) = (&z[1..=h], &z[m - h..m]);
    let (tw_re, tw_im) = (&tw_re[..h], &tw_im[..h]);
    let (p_lo, p_rest) = power[1..].split_at_mut(h);
    // p_rest holds bins h + 1 ..= m.
    let p_hi = &mut p_rest[m - 2 * h - 1..m - h - 1];
    // Blocks of LANES pairs (lane j: pair i0 + j, mirrored by the block taken
    // from the end), so each step is one vector operation; then the leftovers.
    if h < LANES {
        for i in 0..h {
            let (re, im, re_r, im_r) = pair(lo[i], hi[h - 1 - i], tw_re[i], tw_im[i]);
            p_lo[i] = pow(re, im);
            p_hi[h - 1 - i] = pow(re_r, im_r);
        }
    } else {
        // Whole blocks, the last one overlapping its predecessor where LANES
        // does not divide h (those pairs are computed twice, identically).
        let mut next = 0;
        while next < h {
            let i0 = next.min(h - LANES);
            next = i0 + LANES;
            let r0 = h - LANES - i0;
            let lo: &[Complex<f64>; LANES] = lo[i0..i0 + LANES].try_into().unwrap();
            let hi: &[Complex<f64>; LANES] = hi[r0..r0 + LANES].try_into().unwrap();
            let tr: &[f64; LANES] = tw_re[i0..i0 + LANES].try_into().unwrap();
            let ti: &[f64; LANES] = tw_im[i0..i0 + LANES].try_into().unwrap();
            let mut p_k = [0f32; LANES];
            let mut p_r = [0f32; LANES];
            for j in 0..LANES {
                let (re, im, re_r, im_r) = pair(lo[j], hi[LANES - 1 - j], tr[j], ti[j]);
                p_k[j] = pow(re, im);
                p_r[LANES - 1 - j] = pow(re_r, im_r);
            }
            p_lo[i0..i0 + LANES].copy_from_slice(&p_k);
            p_hi[r0..r0 + LANES].copy_from_slice(&p_r);
        }
    }
    // Even m: the centre bin m/2 is z[m/2] conjugated.
    if m.is_multiple_of(2) && m > 0 {
        let c = z[m / 2];
        power[m / 2] = pow(c.re, -c.im);
    }
}

/// Pairs per block in [`split`].
const LANES: usize = 8;

/// realfft 3.5 `RealToComplexEven::process_with_scratch` for one pair, term by
/// term: `out = z[k]`, `out_rev = z[m − k]`, twiddle `tr + i·ti`; returns
/// `(X[k].re, X[k].im, X[m − k].re, X[m − k].im)`.
#[inline(always)]
fn pair(out: Complex<f64>, out_rev: Complex<f64>, tr: f64, ti: f64) -> (f64, f64, f64, f64) {
    let sum_re = out.re + out_rev.re;
    let sum_im = out.im + out_rev.im;
    let diff_re = out.re - out_rev.re;
    let diff_im = out.im - out_rev.im;
    let half_sum_re = 0.5 * sum_re;
    let half_diff_im = 0.5 * diff_im;
    let twiddled_real = sum_im * tr + diff_re * ti;
    let twiddled_im = sum_im * ti - diff_re * tr;
    (
        half_sum_re + twiddled_real,
        half_diff_im + twiddled_im,
        half_sum_re - twiddled_real,
        twiddled_im - half_diff_im,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// realfft + the power step as the plan computed it before this module.
    fn reference(n_fft: usize, frame: &[f64], power: Power) -> Vec<f32> {
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(n_fft);
        let mut input = frame.to_vec();
        let mut out = fft.make_output_vec();
        fft.process(&mut input, &mut out).unwrap();
        out.iter()
            .map(|x| {
                let mag2 = x.re * x.re + x.im * x.im;
                match power {
                    Power::Two => mag2 as f32,
                    Power::One => mag2.sqrt() as f32,
                    Power::Other(e) => f64::from(mag2.sqrt() as f32).powf(e) as f32,
                }
            })
            .collect()
    }

    #[test]
    fn power_is_bit_identical_to_realfft() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        let sizes = [
            2, 3, 4, 6, 8, 10, 12, 30, 64, 100, 257, 400, 402, 512, 1000, 2048,
        ];
        for n_fft in sizes {
            for power in [Power::Two, Power::One, Power::Other(1.5)] {
                let spectrum = Spectrum::new(n_fft, power);
                let mut scratch = spectrum.make_scratch();
                for _ in 0..3 {
                    let frame: Vec<f64> = (0..n_fft).map(|_| next()).collect();
                    match scratch.input() {
                        Input::Pairs(p) => {
                            for (c, x) in p.iter_mut().zip(frame.chunks_exact(2)) {
                                *c = Complex::new(x[0], x[1]);
                            }
                        }
                        Input::Flat(f) => f.copy_from_slice(&frame),
                    }
                    let mut got = vec![f32::NAN; n_fft / 2 + 1];
                    spectrum.power(&mut scratch, &mut got);
                    let want = reference(n_fft, &frame, power);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "n_fft {n_fft} {power:?}");
                }
            }
        }
    }
}
