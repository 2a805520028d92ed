//! The batched path of `Plan::compute` against the per-frame reference path
//! (`Plan::compute_reference`, realfft bit for bit) and its levels against each
//! other.

use crate::batch_fft::Level;
use crate::{PadMode, Plan, Scratch, Spec, Window};

/// Largest |batched − reference| in dB allowed on a row. The transforms differ
/// by at most `24 ε log2(n) √n ‖x‖₂` per bin (`batch_fft`), far below an f32
/// ulp of any power that matters, so the two paths differ by an occasional
/// f32 rounding flip of a power, mel or dB value: a few ulp of a dB value of at
/// most ~200 in magnitude (f32 ulp there 1.5e-5).
const PATHS_DB: f64 = 1e-4;

fn specs() -> Vec<Spec> {
    vec![
        Spec::default(),
        Spec {
            center: true,
            pad_mode: PadMode::Reflect,
            power: 1.5,
            top_db: Some(60.0),
            ..Spec::default()
        },
        Spec {
            center: true,
            power: 1.0,
            window: Window::Hamming,
            ..Spec::default()
        },
        // log2(m) odd: the radix-2 pass runs.
        Spec {
            n_fft: 256,
            win_length: 200,
            hop_length: 128,
            ..Spec::default()
        },
        Spec {
            n_fft: 1024,
            hop_length: 512,
            center: true,
            n_mels: 64,
            ref_value: 3.0,
            ..Spec::default()
        },
    ]
}

/// Deterministic test clips: white noise, a pure tone, silence with one click.
fn clips(spec: &Spec) -> Vec<Vec<f32>> {
    let n = spec.clip_samples();
    let mut state = 7u32;
    let noise = (0..n)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 8) as f32 / (1 << 24) as f32 - 0.5
        })
        .collect();
    let tone = (0..n).map(|i| (i as f32 * 0.37).sin() * 0.8).collect();
    let mut click = vec![0f32; n];
    click[n / 3] = 1.0;
    vec![noise, tone, click]
}

fn row(plan: &Plan, clip: &[f32], reference: bool) -> Vec<f32> {
    let mut scratch = Scratch::new(plan);
    let mut out = vec![f32::NAN; plan.spec().row_len()];
    if reference {
        plan.compute_reference(clip, &mut scratch, &mut out);
    } else {
        plan.compute(clip, &mut scratch, &mut out);
    }
    out
}

#[test]
fn batched_path_is_within_its_bound_of_the_reference_path() {
    let mut worst = 0f64;
    for spec in specs() {
        spec.validate().unwrap();
        let plan = Plan::new(&spec);
        assert!(plan.batch_level().is_some(), "{spec:?} is batched");
        for clip in clips(&spec) {
            let (got, want) = (row(&plan, &clip, false), row(&plan, &clip, true));
            for (g, w) in got.iter().zip(&want) {
                let d = (f64::from(*g) - f64::from(*w)).abs();
                assert!(d <= PATHS_DB, "{spec:?}: {g} vs {w}");
                worst = worst.max(d);
            }
        }
    }
    eprintln!("worst |batched − reference|: {worst:e} dB");
}

#[test]
fn batched_levels_agree_bit_for_bit() {
    for spec in specs() {
        let mut plan = Plan::new(&spec);
        let clip = &clips(&spec)[0];
        plan.level = Level::Portable;
        let portable = row(&plan, clip, false);
        for level in [Level::Avx2, Level::Avx512] {
            if !level.available() {
                eprintln!("skipped {level:?}: this CPU lacks it");
                continue;
            }
            plan.level = level;
            let got = row(&plan, clip, false);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(&got) == bits(&portable), "{level:?}: {spec:?}");
        }
    }
}

#[test]
fn sizes_without_a_batched_transform_take_the_reference_path() {
    let spec = Spec {
        n_fft: 400,
        win_length: 400,
        hop_length: 160,
        ..Spec::default()
    };
    let plan = Plan::new(&spec);
    assert_eq!(plan.batch_level(), None);
    let clip = &clips(&spec)[0];
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&row(&plan, clip, false)),
        bits(&row(&plan, clip, true))
    );
}
