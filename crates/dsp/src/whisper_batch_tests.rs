//! The float32 batched path's parts: its FFT and power against a float64
//! DFT (every level, frames read in place and through the edge), its log10
//! against the float64 one. The whole recipe against the float64 path, and
//! the levels against each other, are in `whisper_tests.rs`.

use super::*;

/// Deterministic noise in [-1, 1).
fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn levels() -> Vec<Level> {
    [Level::Portable, Level::Avx2, Level::Avx512]
        .into_iter()
        .filter(|l| l.available())
        .collect()
}

/// A plan with the identity window and unit filters on bins `lo .. lo + 128`
/// (one per bin, weight 1), so that `log_mel` returns log10 of the power.
fn power_probe(level: Level, lo: usize) -> WhisperBatch {
    let window = vec![1.0; N_FFT];
    let ones = vec![1.0f64];
    let filters = (lo..lo + MAX_MELS).map(|k| (k, ones.as_slice()));
    WhisperBatch::new(&window, filters, level)
}

#[test]
fn the_fft_power_matches_a_float64_dft() {
    for level in levels() {
        // Two full batches and a partial one at 8 lanes, one and a partial at 16.
        let frames = 2 * 8 + 3;
        let mut audio = noise(HOP * (frames - 1) + N_FFT - 300, 7);
        // A pure tone frame and an impulse frame among the noise.
        for k in 0..N_FFT {
            audio[HOP + k] = (2.0 * std::f64::consts::PI * 37.0 * k as f64 / 400.0).cos() as f32;
            audio[3 * HOP + k] = 0.0;
        }
        audio[3 * HOP] = 1.0;
        // The padded signal: 200 zeros (`edge`), the audio, zeros.
        let at = |p: usize| {
            p.checked_sub(200)
                .and_then(|j| audio.get(j))
                .copied()
                .unwrap_or(0.0)
        };
        let edge = |_: usize| 0.0;
        for lo in [0, BINS - MAX_MELS] {
            let b = power_probe(level, lo);
            let mut out = Vec::new();
            b.log_mel(&audio, frames, &edge, &mut b.buffers(), &mut out);
            assert_eq!(out.len(), frames * MAX_MELS);
            for t in 0..frames {
                let x: Vec<f32> = (0..N_FFT).map(|k| at(HOP * t + k)).collect();
                check_frame(
                    &x,
                    lo,
                    &out[t * MAX_MELS..(t + 1) * MAX_MELS],
                    &format!("{level:?} frame {t}"),
                );
            }
        }
    }
}

/// `got[i]` = log10 |X[lo + i]|² of the frame `x`, within float32 FFT rounding.
fn check_frame(x: &[f32], lo: usize, got: &[f32], what: &str) {
    let energy: f64 = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() * N_FFT as f64;
    for (i, &g) in got.iter().enumerate() {
        let k = lo + i;
        let (mut re, mut im) = (0f64, 0f64);
        for (j, &v) in x.iter().enumerate() {
            let a = -2.0 * std::f64::consts::PI * ((j * k) % N_FFT) as f64 / N_FFT as f64;
            re += f64::from(v) * a.cos();
            im += f64::from(v) * a.sin();
        }
        let want = re * re + im * im;
        let got = 10f64.powf(f64::from(g));
        // FFT rounding: |X̂ − X| ≲ 8 ε log2(n) ‖X‖ per bin in float32.
        let err = (got.max(1e-10).sqrt() - want.max(1e-10).sqrt()).abs();
        let bound = 8.0 * f64::from(f32::EPSILON) * 9.0 * energy.sqrt() + 1e-5;
        assert!(err <= bound, "{what} bin {k}: {got} vs {want}");
    }
}

#[test]
fn log10_is_within_two_ulp_and_exact_at_the_floor() {
    assert_eq!(log10_floored(0.0), -10.0);
    assert_eq!(log10_floored(1e-10), -10.0);
    assert_eq!(log10_floored(1e-30), -10.0);
    assert_eq!(log10_floored(1.0), 0.0);
    let mut x = 1.000_001e-10f32;
    while x < 1e12 {
        let want = f64::from(x).log10();
        let got = f64::from(log10_floored(x));
        let ulp = f64::from(f32::EPSILON) * want.abs().max(0.25);
        assert!(
            (got - want).abs() <= 2.0 * ulp,
            "log10({x}) = {got}, want {want}"
        );
        x *= 1.000_37;
    }
}

/// The transposing pack gives the values of a pack that gathers each
/// sample of each frame (`src[2j + 160 l]`, `src[2j + 1 + 160 l]` times
/// the window), bit for bit.
#[test]
fn packing_through_transposed_blocks_equals_gathering_every_sample() {
    type V = super::Portable32;
    let l = <V as crate::vector::Vector>::L;
    let window: Vec<f64> = (0..N_FFT).map(|k| 0.25 + (k as f64 * 0.37).sin()).collect();
    let ones = vec![1.0f64];
    let filters = (0..MAX_MELS).map(|k| (k, ones.as_slice()));
    let b = WhisperBatch::new(&window, filters, Level::Portable);
    let src = noise(HOP * (l - 1) + N_FFT, 11);
    let mut bufs = b.buffers();
    let (mut want_re, mut want_im) = (vec![0f32; M * l], vec![0f32; M * l]);
    for j in 0..M {
        for lane in 0..l {
            want_re[j * l + lane] = src[2 * j + HOP * lane] * window[2 * j] as f32;
            want_im[j * l + lane] = src[2 * j + 1 + HOP * lane] * window[2 * j + 1] as f32;
        }
    }
    let (re, im) = (&mut bufs.re[0], &mut bufs.im[0]);
    b.pack::<V>(&src, &mut bufs.block, re, im);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&re[..M * l]), bits(&want_re));
    assert_eq!(bits(&im[..M * l]), bits(&want_im));
}
