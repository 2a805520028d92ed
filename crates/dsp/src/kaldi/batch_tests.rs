//! The batched path against the per-frame path (seeded random option sets
//! and signals, every level), the levels against each other and pieces
//! against the whole waveform (bit for bit), which option sets it takes, and
//! its logarithm. Its agreement with the float64 definition is in `tests.rs`
//! (whose plans run the batched path), with kaldi-native-fbank in
//! scripts/parity_recipes.py.

use super::super::{KaldiOptions, KaldiPlan, KaldiWindow, Kind};
use super::*;

/// xorshift64*: deterministic draws for option sets and signals.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[(self.next() % xs.len() as u64) as usize]
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

fn levels() -> Vec<Level> {
    [Level::Portable, Level::Avx2, Level::Avx512]
        .into_iter()
        .filter(|l| l.available())
        .collect()
}

/// Speech-like audio at `rate`: harmonics of a gliding pitch under a
/// syllable envelope, noise 50 dB down, a stretch of digital silence and a
/// clipped burst.
fn signal(n: usize, rate: f64, seed: u64) -> Vec<f32> {
    let mut d = Draw(seed | 1);
    let tau = std::f64::consts::TAU;
    let mut phase = 0.0f64;
    (0..n)
        .map(|i| {
            let t = i as f64 / rate;
            let f0 = 150.0 + 60.0 * (tau * 0.9 * t + seed as f64).sin();
            phase += tau * f0 / rate;
            let voiced: f64 = (1..12).map(|h| (h as f64 * phase).sin() / h as f64).sum();
            let env = (tau * 3.0 * t).sin().abs();
            let x = 0.3 * env * voiced + 0.003 * d.unit();
            match (i * 7 / n.max(1), i % 3000 < 200) {
                (3, _) => 0.0,
                (5, true) => x.signum() as f32,
                _ => x as f32,
            }
        })
        .collect()
}

/// A seeded random option set for `kind` (every field torchaudio has).
fn options(d: &mut Draw, kind: Kind) -> KaldiOptions {
    let mut o = KaldiOptions {
        sample_frequency: d.pick(&[8000.0, 16000.0, 16000.0, 22050.0, 44100.0, 48000.0]),
        frame_length: d.pick(&[25.0, 25.0, 20.0, 32.0, 12.5]),
        frame_shift: d.pick(&[10.0, 10.0, 7.3, 12.5, 40.0]),
        dither: d.pick(&[0.0, 0.0, 0.0, 1e-3]),
        preemphasis_coefficient: d.pick(&[0.97, 0.0, 0.5]),
        remove_dc_offset: d.pick(&[true, true, false]),
        window_type: d.pick(&KaldiWindow::ALL).1,
        blackman_coeff: d.pick(&[0.42, 0.40]),
        round_to_power_of_two: d.pick(&[true, true, false]),
        snip_edges: d.pick(&[true, false]),
        num_mel_bins: d.pick(&[23, 40, 80]),
        low_freq: d.pick(&[20.0, 64.0, 0.0]),
        high_freq: d.pick(&[0.0, -400.0, 3000.0]),
        use_energy: d.pick(&[true, false]),
        raw_energy: d.pick(&[true, false]),
        energy_floor: d.pick(&[1.0, 0.0, 0.5]),
        use_log_fbank: d.pick(&[true, true, false]),
        use_power: d.pick(&[true, true, false]),
        num_ceps: d.pick(&[13, 20]),
        cepstral_lifter: d.pick(&[22.0, 0.0]),
        sample_scale: d.pick(&[1.0, 32768.0]),
    };
    if kind == Kind::Mfcc {
        (o.use_log_fbank, o.use_power) = (true, true);
    }
    o
}

/// `plan.compute` per level (all equal bits) and `compute_per_frame`.
fn both_paths(o: &KaldiOptions, kind: Kind, x: &[f32], seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut batched: Option<Vec<f32>> = None;
    for level in levels() {
        let plan = KaldiPlan::with_level(o, kind, level).unwrap();
        assert_eq!(plan.batched(), Some(level));
        let (mut s, mut out) = (plan.scratch(), Vec::new());
        s.seed(seed);
        plan.compute(x, &mut s, &mut out);
        match &batched {
            None => batched = Some(out),
            Some(b) => assert!(same_bits(b, &out), "{level:?} differs: {o:?}"),
        }
    }
    let plan = KaldiPlan::new(o, kind).unwrap();
    let (mut s, mut out) = (plan.scratch(), Vec::new());
    s.seed(seed);
    plan.compute_per_frame(x, &mut s, &mut out);
    (batched.unwrap(), out)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The worst difference of `got` from `want` (rows of `bins`), by kind of
/// value: log mel bands within 1e3 of the row's loudest (in energy: ln 1e3 ≈
/// 6.9), within 1e6 (13.8), quieter ones; linear values relative to the
/// row's largest; the energy column.
fn worst(o: &KaldiOptions, kind: Kind, bins: usize, got: &[f32], want: &[f32]) -> [f64; 5] {
    let mut w = [0f64; 5];
    let e = usize::from(o.use_energy && kind == Kind::Fbank);
    let log = kind == Kind::Fbank && o.use_log_fbank;
    for (g, r) in got.chunks_exact(bins).zip(want.chunks_exact(bins)) {
        let bands = &r[e..];
        let loudest = bands.iter().fold(f64::MIN, |m, &v| m.max(f64::from(v)));
        let largest = bands.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
        for (b, (&g, &r)) in g.iter().zip(r).enumerate() {
            let d = f64::from(g - r).abs();
            let (k, d) = if o.use_energy && b == 0 {
                (4, d)
            } else if !log {
                (3, d / largest.max(1e-30))
            } else if f64::from(r) >= loudest - 6.9 {
                (0, d)
            } else if f64::from(r) >= loudest - 13.8 {
                (1, d)
            } else {
                (2, d)
            };
            w[k] = w[k].max(d);
        }
    }
    w
}

/// The batched path agrees with the per-frame path within float32 FFT and
/// logarithm rounding over 60 random option sets of both kinds (tail
/// batches, centred frames, dither, magnitude, linear fbank, FFT lengths
/// 2·2ᵏ, 400 and 1200), and every level gives the same bits.
///
/// Tolerance: an FFT in float32 rounds each bin by about ε·log2(n) of the
/// frame's energy (ε = 2⁻²⁴), so a band ρ times quieter than the loudest
/// carries a relative error of about 1e-6/√ρ: log fbank 1e-4 absolute
/// (natural log) in bands within 1e3 of the loudest, 1e-3 within 1e6 (as
/// docs/FORMAT.md states against kaldi-native-fbank), 0.5 in quieter ones
/// (rounding noise in both paths); linear fbank and MFCC 1e-4 of the row's
/// largest value; the energy 1e-5 (its sum is the same bits; only the
/// logarithms differ, by ≤ 2 ulp).
#[test]
fn batched_rows_are_the_per_frame_rows_within_rounding_at_every_level() {
    let mut d = Draw(0x005e_ed4b_41d1);
    let (mut batched, mut worst_all) = (0, [0f64; 5]);
    for i in 0..60 {
        let kind = if i % 3 == 2 { Kind::Mfcc } else { Kind::Fbank };
        let o = options(&mut d, kind);
        let plan = KaldiPlan::new(&o, kind).unwrap();
        if plan.batched().is_none() {
            continue;
        }
        batched += 1;
        let n = (o.sample_frequency * d.pick(&[0.031, 0.5, 1.3])) as usize + d.pick(&[0, 1, 77]);
        let x = signal(n, o.sample_frequency, i);
        let (got, want) = both_paths(&o, kind, &x, i);
        assert_eq!(got.len(), want.len(), "{o:?}");
        let w = worst(&o, kind, plan.num_bins(), &got, &want);
        for (all, w) in worst_all.iter_mut().zip(w) {
            *all = all.max(w);
        }
        let tol = [1e-4, 1e-3, 0.5, 1e-4, 1e-5];
        assert!(
            w.iter().zip(tol).all(|(w, t)| *w <= t),
            "{kind:?} {w:?}: {o:?}"
        );
    }
    eprintln!(
        "{batched} option sets batched; worst (log ≤ 1e3, ≤ 1e6, quieter; linear; energy) \
         {worst_all:?}"
    );
    assert!(batched >= 40, "{batched}");
}

/// Which FFT lengths the batched path takes: twice a product of 2, 3 and 5
/// from 4 on; the others (44.1 kHz without rounding: 1102 = 2·19·29) keep
/// the per-frame path.
#[test]
fn the_batched_path_takes_twice_a_product_of_two_three_and_five() {
    for (rate, length, round, batched) in [
        (16000.0, 25.0, true, true),
        (16000.0, 25.0, false, true),
        (48000.0, 25.0, false, true),
        (8000.0, 0.4, true, true),
        (8000.0, 0.3, true, false),
        (44100.0, 25.0, false, false),
        (16000.0, 25.1, false, false),
    ] {
        let o = KaldiOptions {
            sample_frequency: rate,
            frame_length: length,
            round_to_power_of_two: round,
            ..KaldiOptions::default()
        };
        let plan = KaldiPlan::new(&o, Kind::Fbank).unwrap();
        assert_eq!(plan.batched().is_some(), batched, "{rate} {length} {round}");
        // Either way the rows are the per-frame path's, within rounding.
        let x = signal(4000, rate, 3);
        let (got, want) = both_paths_or_per_frame(&o, &x);
        let w = worst(&o, Kind::Fbank, plan.num_bins(), &got, &want);
        assert!(
            w[0] <= 1e-4 && w[1] <= 1e-3,
            "{rate} {length} {round}: {w:?}"
        );
    }
}

fn both_paths_or_per_frame(o: &KaldiOptions, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let plan = KaldiPlan::new(o, Kind::Fbank).unwrap();
    if plan.batched().is_some() {
        return both_paths(o, Kind::Fbank, x, 0);
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    plan.compute(x, &mut plan.scratch(), &mut a);
    plan.compute_per_frame(x, &mut plan.scratch(), &mut b);
    assert!(same_bits(&a, &b));
    (a, b)
}

/// At every level, the rows of pieces of every size (one frame, fewer and
/// more than a batch, not a multiple of the lanes) are the one-piece rows
/// bit for bit, with dither drawn in order and reflection at both edges.
#[test]
fn pieces_give_the_one_piece_rows_bit_for_bit_at_every_level() {
    let x = signal(16_000 * 2 + 321, 16_000.0, 9);
    for level in levels() {
        for (kind, snip_edges, dither) in [
            (Kind::Fbank, true, 0.0),
            (Kind::Fbank, false, 1e-3),
            (Kind::Mfcc, false, 0.0),
            (Kind::Mfcc, true, 1e-3),
        ] {
            let o = KaldiOptions {
                snip_edges,
                dither,
                use_energy: true,
                num_mel_bins: 40,
                ..KaldiOptions::default()
            };
            let plan = KaldiPlan::with_level(&o, kind, level).unwrap();
            let mut whole = Vec::new();
            let mut s = plan.scratch();
            s.seed(5);
            let frames = plan.compute(&x, &mut s, &mut whole);
            for per_piece in [1, 3, 15, 16, 17, 61, frames] {
                let (mut s, mut got, mut rows) = (plan.scratch(), Vec::new(), Vec::new());
                s.seed(5);
                for (piece, range) in plan.pieces(x.len(), per_piece) {
                    plan.compute_piece(&x[range], &piece, &mut s, &mut rows);
                    got.extend_from_slice(&rows);
                }
                assert!(
                    same_bits(&got, &whole),
                    "{level:?} {kind:?} snip_edges={snip_edges} dither={dither} {per_piece}"
                );
            }
        }
    }
}

/// Silence gives the per-frame path's floor bits in every band.
#[test]
fn silence_gives_the_per_frame_floor_bit_for_bit() {
    let x = vec![0f32; 4000];
    for kind in [Kind::Fbank, Kind::Mfcc] {
        let o = KaldiOptions {
            use_energy: true,
            energy_floor: 0.0,
            ..KaldiOptions::default()
        };
        let (got, want) = both_paths(&o, kind, &x, 0);
        assert!(same_bits(&got, &want), "{kind:?}");
    }
}

#[test]
fn ln_is_within_two_ulp_and_exact_at_the_floor() {
    let floor = f32::EPSILON.ln();
    for x in [
        0.0,
        -1.0,
        f32::EPSILON,
        f32::EPSILON / 2.0,
        f32::MIN_POSITIVE,
    ] {
        assert_eq!(ln_floored(x, floor).to_bits(), floor.to_bits(), "{x}");
    }
    assert_eq!(ln_floored(1.0, floor), 0.0);
    let mut x = f32::EPSILON * 1.000_001;
    while x < 1e30 {
        let want = f64::from(x).ln();
        let got = f64::from(ln_floored(x, floor));
        let ulp = f64::from(f32::EPSILON) * want.abs().max(0.5);
        assert!(
            (got - want).abs() <= 2.0 * ulp,
            "ln({x}) = {got}, want {want}"
        );
        x *= 1.000_37;
    }
}
