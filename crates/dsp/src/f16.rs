//! float16 ⇄ float32 for whole rows, with the bits of `half`'s scalar
//! conversions (round to nearest even one way, exact the other).
//!
//! Where the CPU has F16C, one loop converts 8 values per instruction
//! (`vcvtps2ph` / `vcvtph2ps`). `half`'s own slice conversions call their F16C
//! kernel once per 8 values through a function that cannot be inlined, and
//! its scalar ones once per value: widening a float16 row of the reference
//! shape value by value took 12.6 µs on the dev VM, against 2.2 µs for
//! `half`'s slice call, which at the GPU box's rate would fill the CUDA stage
//! thread. `half` converts what is left after the groups of 8, and everything
//! on other CPUs.

use half::f16;
use half::slice::HalfFloatSliceExt;

/// `src` as float16 into `dst` (same length), rounded to nearest even: the
/// bits of `f16::from_f32` for every value.
pub fn narrow(dst: &mut [f16], src: &[f32]) {
    assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    if f16c() {
        // SAFETY: both features the function is compiled for were detected.
        let done = unsafe { narrow_f16c(dst, src) };
        dst[done..].convert_from_f32_slice(&src[done..]);
        return;
    }
    dst.convert_from_f32_slice(src);
}

/// `src` on the grid of `2^tick_power` ([`on_grid`]), then as float16 into
/// `dst` (same length): compact storage's values. A grid value below
/// `2^(11 + tick_power)` in magnitude is exact in float16, so up to there
/// the stored value is within half a tick of `src`'s.
pub fn narrow_ticked(dst: &mut [f16], src: &[f32], tick_power: i8) {
    assert_eq!(dst.len(), src.len());
    let mut block = [0.0f32; 256];
    for (d, s) in dst.chunks_mut(block.len()).zip(src.chunks(block.len())) {
        let b = &mut block[..s.len()];
        on_grid(b, s, tick_power);
        narrow(d, b);
    }
}

/// Each value of `src` rounded to the nearest multiple of `2^tick_power`
/// (ties to even) into `dst`. Scaling by a power of two is exact; adding
/// and taking away 1.5 × 2^23 rounds a float32 below 2^22 in magnitude to
/// an integer in the default rounding mode, in lanes on any x86-64 (larger
/// values are integers already).
pub fn on_grid(dst: &mut [f32], src: &[f32], tick_power: i8) {
    const ROUNDER: f32 = 12_582_912.0;
    const INTEGRAL: f32 = 4_194_304.0;
    let p = i32::from(tick_power);
    let (up, down) = (2.0f32.powi(-p), 2.0f32.powi(p));
    for (d, &v) in dst.iter_mut().zip(src) {
        let x = v * up;
        let r = if x.abs() < INTEGRAL {
            (x + ROUNDER) - ROUNDER
        } else {
            x
        };
        *d = r * down;
    }
}

/// The float16 values in `bytes` (native byte order, two per value; any
/// alignment) widened to f32 and appended to `out`: the bits of
/// `f16::to_f32` for every value (the widening is exact).
pub fn widen_bytes(bytes: &[u8], out: &mut Vec<f32>) {
    let n = bytes.len() / 2;
    let start = out.len();
    out.resize(start + n, 0.0);
    let dst = &mut out[start..];
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if f16c() {
        // SAFETY: both features the function is compiled for were detected.
        done = unsafe { widen_f16c(dst, &bytes[..2 * n]) };
    }
    for (d, c) in dst[done..]
        .iter_mut()
        .zip(bytes[2 * done..].chunks_exact(2))
    {
        *d = f16::from_bits(u16::from_ne_bytes([c[0], c[1]])).to_f32();
    }
}

#[cfg(target_arch = "x86_64")]
fn f16c() -> bool {
    std::arch::is_x86_feature_detected!("avx") && std::arch::is_x86_feature_detected!("f16c")
}

/// Converts the whole groups of 8 of `src` into `dst` (`vcvtps2ph`, round to
/// nearest even, not the MXCSR mode); returns how many values it converted.
///
/// # Safety
/// The CPU must have AVX and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn narrow_f16c(dst: &mut [f16], src: &[f32]) -> usize {
    use std::arch::x86_64::{
        _MM_FROUND_TO_NEAREST_INT, _mm_storeu_si128, _mm256_cvtps_ph, _mm256_loadu_ps,
    };
    let n = src.len().min(dst.len()) / 8 * 8;
    let (from, to) = (src.as_ptr(), dst.as_mut_ptr());
    for i in (0..n).step_by(8) {
        // SAFETY: `i + 8 <= n`, within both slices; the load and the store
        // are unaligned ones; `f16` is a transparent `u16`, so 8 of them are
        // the 16 bytes the store writes.
        unsafe {
            let v = _mm256_loadu_ps(from.add(i));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm_storeu_si128(to.add(i).cast(), h);
        }
    }
    n
}

/// Widens the whole groups of 8 values of `bytes` into `dst` (`vcvtph2ps`);
/// returns how many values it converted.
///
/// # Safety
/// The CPU must have AVX and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn widen_f16c(dst: &mut [f32], bytes: &[u8]) -> usize {
    use std::arch::x86_64::{_mm_loadu_si128, _mm256_cvtph_ps, _mm256_storeu_ps};
    let n = (bytes.len() / 2).min(dst.len()) / 8 * 8;
    let (from, to) = (bytes.as_ptr(), dst.as_mut_ptr());
    for i in (0..n).step_by(8) {
        // SAFETY: `i + 8 <= n`: the 16 bytes at `2i` are inside `bytes` and
        // the 8 f32 at `i` inside `dst`; both accesses are unaligned ones.
        unsafe {
            let h = _mm_loadu_si128(from.add(2 * i).cast());
            _mm256_storeu_ps(to.add(i), _mm256_cvtph_ps(h));
        }
    }
    n
}

/// float32 values where the rounding to float16 is decided at an edge:
/// zero, the largest finite value and the first that overflows, infinities,
/// NaN, subnormals and ties (the tests of every float16 conversion use them:
/// this crate's and the CUDA stage's host kernels).
pub const EDGES: [f32; 19] = [
    0.0,
    -0.0,
    1.0,
    65504.0,
    65519.99,
    65520.0,
    -65520.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    f32::MIN_POSITIVE,
    5.960_464_5e-8, // 2^-24, smallest f16 subnormal
    2.980_232_2e-8, // 2^-25: tie, rounds to even (0)
    2.980_232_5e-8, // just above: rounds up to 2^-24
    8.940_697e-8,   // 1.5 · 2^-24: tie, rounds to 2 · 2^-24
    6.097_555e-5,   // largest f16 subnormal
    6.103_515_6e-5, // smallest f16 normal
    1.000_488_3,    // 1 + 2^-11: tie, to even (1.0)
    1.001_464_8,    // 1 + 3·2^-11: tie, to even (1 + 2^-9)
];

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `narrow` gives the bits `half` gives, value by value (NaNs: a NaN);
    /// `widen_bytes` of those bits gives `to_f32` of each, from an odd byte
    /// offset too.
    fn check(values: &[f32]) {
        let mut got = vec![f16::ZERO; values.len()];
        narrow(&mut got, values);
        for (g, v) in got.iter().zip(values) {
            if v.is_nan() {
                assert!(g.is_nan(), "{v}");
            } else {
                let want = f16::from_f32(*v);
                assert_eq!(g.to_bits(), want.to_bits(), "{v:e} ({:#010x})", v.to_bits());
            }
        }
        let mut bytes = vec![0xAB];
        bytes.extend(got.iter().flat_map(|h| h.to_bits().to_ne_bytes()));
        let mut wide = vec![7.0];
        widen_bytes(&bytes[1..], &mut wide);
        assert_eq!(wide.len(), 1 + got.len());
        assert_eq!(wide[0], 7.0, "appended, not overwritten");
        for (w, h) in wide[1..].iter().zip(&got) {
            assert_eq!(w.to_bits(), h.to_f32().to_bits(), "{h}");
        }
    }

    #[test]
    fn edges_convert_as_half_does() {
        let mut v: Vec<f32> = EDGES.iter().flat_map(|&x| [x, -x]).collect();
        v.extend([1.0e-9, -80.0, -79.96, 1.000_976_6, f32::MAX]);
        // Lengths that leave a remainder for `half` after the groups of 8.
        for n in [0, 1, 7, 8, 9, 23, v.len()] {
            check(&v[..n.min(v.len())]);
        }
        v.reverse();
        check(&v);
    }

    #[test]
    fn on_grid_rounds_to_the_nearest_tick_ties_to_even() {
        let src = [
            0.0, 0.01, 0.015_625, 0.046_875, -0.046_875, 3.1, -15.94, 1.0e9, -0.0,
        ];
        let mut got = [0.0f32; 9];
        on_grid(&mut got, &src, -5);
        for (&v, &g) in src.iter().zip(&got) {
            // The reference: f64's own ties-to-even rounding.
            let want = ((f64::from(v) * 32.0).round_ties_even() / 32.0) as f32;
            assert_eq!(g, want, "{v}");
        }
        let mut h = [f16::ZERO; 9];
        narrow_ticked(&mut h, &src, -5);
        for (&g, &h) in got.iter().zip(&h).take(8) {
            if g.abs() < 64.0 {
                assert_eq!(h.to_f32(), g, "a grid value below 2^6 is exact in float16");
            }
        }
    }

    proptest! {
        #[test]
        fn any_bits_convert_as_half_does(bits in proptest::collection::vec(any::<u32>(), 0..200)) {
            let values: Vec<f32> = bits.into_iter().map(f32::from_bits).collect();
            check(&values);
        }

        #[test]
        fn ticked_values_are_within_half_a_tick(
            values in proptest::collection::vec(-60.0f32..60.0, 0..600),
            p in -10i8..-2,
        ) {
            let mut h = vec![f16::ZERO; values.len()];
            narrow_ticked(&mut h, &values, p);
            let half_tick = 2.0f32.powi(i32::from(p) - 1);
            let limit = 2.0f32.powi(11 + i32::from(p));
            for (&v, &h) in values.iter().zip(&h) {
                if v.abs() < limit - half_tick {
                    prop_assert!((h.to_f32() - v).abs() <= half_tick, "{} -> {}", v, h);
                }
            }
        }
    }
}
