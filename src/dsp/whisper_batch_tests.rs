//! The float32 batched path: its FFT and power against a float64 DFT, its
//! log10 against the float64 one, every level giving the same bits, and the
//! whole recipe within the stated tolerance of the float64 (extractor
//! precision) path on speech-like, clipped, quiet and wide-range signals.

use super::*;
use crate::dsp::whisper::{N_SAMPLES, WhisperPlan};

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

/// A plan with the identity window and unit filters (one per bin, weight 1),
/// so that `log_mel` returns log10 of the power spectrum.
fn power_probe(level: Level) -> WhisperBatch {
    let window = vec![1.0; N_FFT];
    let ones = vec![1.0f64];
    WhisperBatch::new(&window, (0..BINS).map(|k| (k, ones.as_slice())), level)
}

#[test]
fn the_fft_power_matches_a_float64_dft() {
    for level in levels() {
        let b = power_probe(level);
        let l = b.lanes();
        let frames = 2 * l + 3;
        let mut padded = noise(HOP * (frames.div_ceil(l) * l - 1) + N_FFT, 7);
        // One pure tone frame and one impulse frame among the noise.
        for k in 0..N_FFT {
            padded[HOP + k] = (2.0 * std::f64::consts::PI * 37.0 * k as f64 / 400.0).cos() as f32;
            padded[2 * HOP + k] = 0.0;
        }
        padded[2 * HOP] = 1.0;
        let mut out = vec![0.0; frames * BINS];
        b.log_mel(&padded, frames, &mut b.buffers(), &mut out);
        for t in 0..frames {
            let x = &padded[t * HOP..t * HOP + N_FFT];
            let energy: f64 = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() * N_FFT as f64;
            for k in 0..BINS {
                let (mut re, mut im) = (0f64, 0f64);
                for (j, &v) in x.iter().enumerate() {
                    let a = -2.0 * std::f64::consts::PI * ((j * k) % N_FFT) as f64 / N_FFT as f64;
                    re += f64::from(v) * a.cos();
                    im += f64::from(v) * a.sin();
                }
                let want = re * re + im * im;
                let got = 10f64.powf(f64::from(out[t * BINS + k]));
                // FFT rounding: |X̂ − X| ≲ 8 ε log2(n) ‖X‖ per bin in float32.
                let err = (got.max(1e-10).sqrt() - want.max(1e-10).sqrt()).abs();
                let bound = 8.0 * f64::from(f32::EPSILON) * 9.0 * energy.sqrt() + 1e-5;
                assert!(err <= bound, "{level:?} frame {t} bin {k}: {got} vs {want}");
            }
        }
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

fn signals() -> Vec<(&'static str, Vec<f32>)> {
    let speechy = |n: usize, gain: f32| -> Vec<f32> {
        let buzz = noise(n, 3);
        (0..n)
            .map(|i| {
                let t = i as f64 / 16000.0;
                let env = (2.0 * std::f64::consts::PI * 3.0 * t).sin().abs() as f32;
                let v = (2.0 * std::f64::consts::PI * 140.0 * t).sin() * 0.4
                    + (2.0 * std::f64::consts::PI * 2210.0 * t).sin() * 0.01;
                gain * (env * v as f32 + 1e-4 * buzz[i])
            })
            .collect()
    };
    let mut clipped = speechy(40_000, 8.0);
    clipped.iter_mut().for_each(|v| *v = v.clamp(-1.0, 1.0));
    // A loud tone next to near-silence: the widest range the clamp keeps.
    let mut wide: Vec<f32> = (0..48_000)
        .map(|i| (2.0 * std::f64::consts::PI * 500.0 * i as f64 / 16000.0).sin() as f32)
        .collect();
    wide[16_000..]
        .iter_mut()
        .zip(noise(32_000, 9))
        .for_each(|(v, n)| *v = 1e-4 * n);
    vec![
        ("short", speechy(1234, 0.5)),
        ("speech", speechy(16_000 * 7 + 37, 0.5)),
        ("quiet", speechy(20_000, 1e-4)),
        ("clipped", clipped),
        ("wide range", wide),
        ("noise", noise(N_SAMPLES + 999, 5)),
        ("silence", vec![0.0; 3000]),
    ]
}

#[test]
fn float32_path_is_within_the_stated_tolerance_of_the_float64_path() {
    for n_mels in [80, 128] {
        let plan = WhisperPlan::new(n_mels).unwrap();
        let mut scratch = plan.scratch();
        for (name, x) in signals() {
            let (mut got, mut want) = (Vec::new(), Vec::new());
            let a = plan.compute(&x, &mut scratch, &mut got);
            let b = plan.compute_f64(&x, &mut scratch, &mut want);
            assert_eq!(a.frames, b.frames, "{name}");
            assert_eq!(got.len(), want.len(), "{name}");
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold((a.pad_value - b.pad_value).abs(), f32::max);
            eprintln!("{n_mels} mels, {name}: worst {worst:e}");
            // docs/FORMAT.md states 1e-4; the float32 path keeps a margin.
            assert!(worst <= 5e-5, "{n_mels} mels, {name}: differs by {worst}");
        }
    }
}

#[test]
fn every_level_gives_the_same_bits() {
    let x = &signals()[1].1;
    let mut base: Option<(Vec<f32>, f32)> = None;
    for level in levels() {
        let plan = WhisperPlan::with_level(80, level).unwrap();
        let mut out = Vec::new();
        let row = plan.compute(x, &mut plan.scratch(), &mut out);
        match &base {
            None => base = Some((out, row.pad_value)),
            Some((b, pad)) => {
                assert!(
                    out.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{level:?}"
                );
                assert_eq!(row.pad_value.to_bits(), pad.to_bits(), "{level:?}");
            }
        }
    }
}
