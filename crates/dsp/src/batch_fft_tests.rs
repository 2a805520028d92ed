//! The batched transform against realfft within the module's stated bound, on
//! random and adversarial frames, at every level this CPU has; and the levels
//! against each other bit for bit.

use realfft::RealFftPlanner;

use super::{BatchFft, Level};
#[cfg(target_arch = "x86_64")]
use crate::lanes::{Avx2, Avx512};
use crate::lanes::{Lanes, Portable};
use crate::spectrum::Power;

/// The module doc's constant `C`.
const C: f64 = 24.0;

/// `X[k]` for `k = 0 ..= m` of each frame (≤ `V::L` frames) through the
/// batched path in lanes `V`.
#[inline(always)]
fn spectra<V: Lanes>(fft: &BatchFft, frames: &[Vec<f64>]) -> Vec<Vec<(f64, f64)>> {
    let (m, l) = (fft.m(), V::L);
    let mut re = vec![0.0; m * l];
    let mut im = vec![0.0; m * l];
    for (lane, x) in frames.iter().enumerate() {
        for (j, &s) in fft.slots().iter().enumerate() {
            re[s as usize * l + lane] = x[2 * j];
            im[s as usize * l + lane] = x[2 * j + 1];
        }
    }
    fft.transform::<V>(&mut re, &mut im);
    let mut out = vec![vec![(f64::NAN, f64::NAN); m + 1]; frames.len()];
    let mut seen = vec![0usize; m + 1];
    fft.split::<V>(&re, &im, |k, xr, xi| {
        let (mut r, mut i) = ([0.0; 8], [0.0; 8]);
        // SAFETY: 8 ≥ L slots each.
        unsafe {
            xr.store(r.as_mut_ptr());
            xi.store(i.as_mut_ptr());
        }
        seen[k] += 1;
        for (lane, o) in out.iter_mut().enumerate() {
            o[k] = (r[lane], i[lane]);
        }
    });
    assert!(
        seen.iter().all(|&n| n == 1),
        "every bin exactly once: {seen:?}"
    );
    out
}

/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn spectra_avx2(fft: &BatchFft, frames: &[Vec<f64>]) -> Vec<Vec<(f64, f64)>> {
    spectra::<Avx2>(fft, frames)
}

/// # Safety
/// The CPU must have AVX-512F and AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn spectra_avx512(fft: &BatchFft, frames: &[Vec<f64>]) -> Vec<Vec<(f64, f64)>> {
    spectra::<Avx512>(fft, frames)
}

/// `frames` (any count) through `level`, in groups of its lane count.
fn run(level: Level, fft: &BatchFft, frames: &[Vec<f64>]) -> Vec<Vec<(f64, f64)>> {
    let lanes = if level == Level::Avx512 { 8 } else { 4 };
    frames
        .chunks(lanes)
        .flat_map(|group| match level {
            Level::Portable => spectra::<Portable>(fft, group),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: callers only pass levels this CPU has (`Level::available`).
            Level::Avx2 => unsafe { spectra_avx2(fft, group) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Level::Avx512 => unsafe { spectra_avx512(fft, group) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!(),
        })
        .collect()
}

/// The levels this CPU has; prints the ones skipped.
fn levels() -> Vec<Level> {
    [Level::Portable, Level::Avx2, Level::Avx512]
        .into_iter()
        .filter(|&l| {
            let ok = l.available();
            if !ok {
                eprintln!("skipped {l:?}: this CPU lacks it");
            }
            ok
        })
        .collect()
}

/// Random frames and adversarial ones: zeros, DC, impulses, pure tones on and
/// off a bin, alternating signs, and huge and tiny magnitudes.
fn frames(n: usize, seed: u64) -> Vec<Vec<f64>> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    let tone = |f: f64| -> Vec<f64> {
        (0..n)
            .map(|j| (2.0 * std::f64::consts::PI * f * j as f64 / n as f64).cos())
            .collect()
    };
    let mut out = vec![
        vec![0.0; n],
        vec![1.0; n],
        (0..n).map(|j| if j == 0 { 1.0 } else { 0.0 }).collect(),
        (0..n)
            .map(|j| if j == n / 2 + 1 { -3.5 } else { 0.0 })
            .collect(),
        (0..n)
            .map(|j| if j % 2 == 0 { 1.0 } else { -1.0 })
            .collect(),
        tone(1.0),
        tone((n / 4) as f64),
        tone(3.3),
        tone(n as f64 / 2.0 - 0.7),
    ];
    for scale in [1.0, 1e150, 1e-150, 32768.0] {
        for _ in 0..4 {
            out.push((0..n).map(|_| next() * scale).collect());
        }
    }
    // A loud tone over a tiny noise floor.
    let loud = tone(5.0);
    out.push(loud.iter().map(|&v| v * 1e4 + next() * 1e-9).collect());
    out
}

#[test]
fn batched_fft_is_within_the_stated_bound_of_realfft_at_every_level() {
    let eps = f64::EPSILON / 2.0;
    let mut worst = 0f64;
    for n in (3..=12).map(|p| 1usize << p) {
        let fft = BatchFft::new(n, Power::Two).expect("power of two");
        let plan = RealFftPlanner::<f64>::new().plan_fft_forward(n);
        let frames = frames(n, n as u64);
        let mut by_level = Vec::new();
        for level in levels() {
            let got = run(level, &fft, &frames);
            for (x, got) in frames.iter().zip(&got) {
                let mut input = x.clone();
                let mut want = plan.make_output_vec();
                plan.process(&mut input, &mut want).unwrap();
                let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
                let bound = C * eps * (n as f64).log2() * (n as f64).sqrt() * norm;
                for (k, (&(r, i), w)) in got.iter().zip(&want).enumerate() {
                    let err = (r - w.re).hypot(i - w.im);
                    assert!(
                        err <= bound,
                        "{level:?} n {n} bin {k}: |ΔX| {err:e} > bound {bound:e}"
                    );
                    if bound > 0.0 {
                        worst = worst.max(err / bound);
                    }
                }
            }
            by_level.push((level, got));
        }
        // Same operations in every lane at every width: the same bits.
        let bits = |v: &Vec<Vec<(f64, f64)>>| -> Vec<u64> {
            v.iter()
                .flatten()
                .flat_map(|&(r, i)| [r.to_bits(), i.to_bits()])
                .collect()
        };
        for (level, got) in &by_level[1..] {
            assert!(
                bits(got) == bits(&by_level[0].1),
                "{level:?} differs from {:?} at n {n}",
                by_level[0].0
            );
        }
    }
    eprintln!("worst |ΔX| / bound: {worst:.3e}");
}

#[test]
fn only_power_of_two_halves_of_at_least_four_are_batched() {
    for n in [2, 4, 6, 12, 100, 400, 401, 1000] {
        assert!(BatchFft::new(n, Power::Two).is_none(), "{n}");
    }
    for n in [8, 16, 512, 1024, 1 << 16] {
        assert_eq!(BatchFft::new(n, Power::Two).unwrap().m(), n / 2);
    }
}
