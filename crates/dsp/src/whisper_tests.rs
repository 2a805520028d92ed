//! Properties of the Whisper recipe: the covering-frame rule, and that the
//! computed frames plus the pad constant equal the full 3000-frame computation
//! the extractor does (same operations, every frame), bit for bit, in both
//! precisions (the float32 path's own tests are in `whisper_batch_tests.rs`).

use super::*;

fn speechy(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let t = i as f64 / 16000.0;
            ((2.0 * std::f64::consts::PI * 220.0 * t).sin() * 0.3
                + (2.0 * std::f64::consts::PI * 1375.0 * t).sin() * 0.05) as f32
        })
        .collect()
}

/// All 3000 frames, as the extractor does them (no covering shortcut), in
/// the float64 path's precision (`f64`) or the float32 path's.
fn full(plan: &WhisperPlan, x: &[f32], f64: bool) -> Vec<f32> {
    let audio = &x[..x.len().min(N_SAMPLES)];
    let mut scratch = plan.scratch();
    let mut out = vec![0.0; N_FRAMES * plan.n_mels()];
    if f64 {
        for (t, row) in out.chunks_exact_mut(plan.n_mels()).enumerate() {
            plan.log_mel_frame(audio, t, &mut scratch, row);
        }
    } else {
        let edge = |p: usize| padded_sample(audio, p);
        out.clear();
        let mut buffers = plan.batch.buffers();
        plan.batch
            .log_mel(audio, N_FRAMES, &edge, &mut buffers, &mut out);
    }
    let max = out.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    out.iter_mut()
        .for_each(|v| *v = (v.max(max - 8.0) + 4.0) / 4.0);
    out
}

#[test]
fn only_80_and_128_mels() {
    assert!(WhisperPlan::new(80).is_ok() && WhisperPlan::new(128).is_ok());
    assert_eq!(WhisperPlan::new(81).unwrap_err().n_mels, 81);
}

#[test]
fn covering_frames() {
    let p = WhisperPlan::new(80).unwrap();
    let cases = [
        (0, 0),
        (1, 2),
        (121, 2),
        (122, 3),
        (160, 3),
        (281, 3),
        (282, 4),
    ];
    for (n, want) in cases {
        assert_eq!(p.num_frames_covering(n), want, "n = {n}");
    }
    assert_eq!(p.num_frames_covering(160_000), 1002);
    assert_eq!(p.num_frames_covering(N_SAMPLES), 3000);
    assert_eq!(p.num_frames_covering(10 * N_SAMPLES), 3000);
}

#[test]
fn stored_frames_and_pad_equal_the_full_computation() {
    let p = WhisperPlan::new(80).unwrap();
    for f64 in [true, false] {
        for n in [0, 1, 100, 399, 4321, 16000, 479_900, 500_000] {
            let x = speechy(n);
            let mut out = Vec::new();
            let row = if f64 {
                p.compute_f64(&x, &mut p.scratch(), &mut out)
            } else {
                p.compute(&x, &mut p.scratch(), &mut out)
            };
            let want = full(&p, &x, f64);
            let what = format!("n = {n}, f64 = {f64}");
            assert_eq!(row.frames, p.num_frames_covering(n));
            assert_eq!(out[..], want[..out.len()], "{what}");
            assert!(
                want[out.len()..].iter().all(|&v| v == row.pad_value),
                "{what}"
            );
            let row_max = out.iter().copied().fold(-1.5f32, f32::max);
            let derived = (-1.5f32).max(row_max - 2.0);
            assert!(
                (derived - row.pad_value).abs() <= 2.5e-7,
                "{what}: {derived} vs {}",
                row.pad_value
            );
        }
    }
}

#[test]
fn the_frame_after_the_covering_ones_differs_from_the_pad() {
    // The rule is tight: the last covering frame holds audio (here a full-scale
    // last sample), so it is not the pad value.
    let p = WhisperPlan::new(80).unwrap();
    for n in [161, 1000, 33333] {
        let mut x = vec![0.0f32; n];
        x[n - 1] = 1.0;
        let mut out = Vec::new();
        let row = p.compute(&x, &mut p.scratch(), &mut out);
        let last = &out[(row.frames - 1) * 80..];
        assert!(last.iter().any(|&v| v != row.pad_value), "n = {n}");
    }
}

#[test]
fn silence_is_the_floor_everywhere() {
    let p = WhisperPlan::new(128).unwrap();
    let mut out = Vec::new();
    let row = p.compute(&[0.0; 5000], &mut p.scratch(), &mut out);
    assert_eq!(row.pad_value, -1.5);
    assert!(out.iter().all(|&v| v == -1.5));
}

/// Regression: `mel_to_hz` used the inverse log step (27/ln 6.4 instead of
/// ln 6.4/27), so every filter above 1 kHz (mel 15) fell past Nyquist and the
/// bins from 25 up were silent; the parity run against the extractor caught
/// it. The two scales must invert each other on both sides of 1 kHz.
#[test]
fn the_slaney_scale_round_trips_on_both_sides_of_one_khz() {
    for hz in [0.0, 200.0, 999.0, 1000.0, 1500.0, 4000.0, 8000.0] {
        let back = mel_to_hz(hz_to_mel(hz));
        assert!(
            (back - hz).abs() < 1e-9 * hz.max(1.0),
            "{hz} Hz came back as {back}"
        );
    }
    // Every one of the 80 filters has weight below Nyquist.
    for (m, f) in slaney_filters(80).iter().enumerate() {
        assert!(f.weights.iter().any(|&w| w > 0.0), "filter {m} is empty");
    }
}

fn levels() -> Vec<Level> {
    [Level::Portable, Level::Avx2, Level::Avx512]
        .into_iter()
        .filter(|l| l.available())
        .collect()
}

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
