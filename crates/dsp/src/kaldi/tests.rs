//! Properties of the Kaldi recipes: frame counts, torchaudio's defaults, and
//! agreement with a direct float64 evaluation of the definition (an O(N²) DFT,
//! no shared code with the plan's FFT path beyond the tables).

use super::banks::{dct_lifted, mel_banks, window};
use super::*;

fn speechy(n: usize, seed: u64) -> Vec<f32> {
    // Harmonics with a slow vibrato and a little deterministic noise.
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|i| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let noise = ((state >> 33) as f64 / (1u64 << 31) as f64 - 0.5) * 0.01;
            let t = i as f64 / 16000.0;
            let f0 = 140.0 + 20.0 * (2.0 * std::f64::consts::PI * 3.0 * t).sin();
            let v: f64 = (1..8)
                .map(|h| (2.0 * std::f64::consts::PI * f0 * h as f64 * t).sin() / h as f64)
                .sum();
            (0.3 * v + noise) as f32
        })
        .collect()
}

/// The definition evaluated directly in float64 (DFT by summation).
fn reference(opts: &KaldiOptions, kind: Kind, x: &[f32]) -> Vec<Vec<f64>> {
    let plan = KaldiPlan::new(opts, kind).unwrap();
    let (ws, shift, padded) = (
        opts.window_size(),
        opts.window_shift(),
        opts.padded_window_size(),
    );
    let win = window(opts);
    let banks = mel_banks(opts);
    let dct = dct_lifted(opts);
    let n = x.len() as i64;
    (0..plan.num_frames(x.len()))
        .map(|f| {
            let start = if opts.snip_edges {
                (f * shift) as i64
            } else {
                (f * shift + shift / 2) as i64 - (ws / 2) as i64
            };
            let mut fr: Vec<f64> = (0..ws as i64)
                .map(|k| {
                    let mut s = start + k;
                    while s < 0 || s >= n {
                        s = if s < 0 { -s - 1 } else { 2 * n - 1 - s };
                    }
                    x[s as usize] as f64 * opts.sample_scale
                })
                .collect();
            if opts.remove_dc_offset {
                let m = fr.iter().sum::<f64>() / ws as f64;
                fr.iter_mut().for_each(|v| *v -= m);
            }
            let energy_of = |v: &[f64]| {
                v.iter()
                    .map(|a| a * a)
                    .sum::<f64>()
                    .max(f32::EPSILON as f64)
                    .ln()
            };
            let mut energy = energy_of(&fr);
            let p = opts.preemphasis_coefficient;
            for i in (1..ws).rev() {
                fr[i] -= p * fr[i - 1];
            }
            fr[0] -= p * fr[0];
            fr.iter_mut().zip(&win).for_each(|(v, w)| *v *= w);
            if !opts.raw_energy {
                energy = energy_of(&fr);
            }
            if opts.energy_floor > 0.0 {
                energy = energy.max(opts.energy_floor.ln());
            }
            let spec: Vec<f64> = (0..padded / 2)
                .map(|k| {
                    let (mut re, mut im) = (0.0, 0.0);
                    for (i, v) in fr.iter().enumerate() {
                        let a = -2.0 * std::f64::consts::PI * (k * i) as f64 / padded as f64;
                        re += v * a.cos();
                        im += v * a.sin();
                    }
                    let p2 = re * re + im * im;
                    if opts.use_power { p2 } else { p2.sqrt() }
                })
                .collect();
            let mel: Vec<f64> = banks
                .iter()
                .map(|b| {
                    let m: f64 = b
                        .weights
                        .iter()
                        .enumerate()
                        .map(|(j, &w)| w as f64 * spec[b.first + j])
                        .sum();
                    if opts.use_log_fbank {
                        m.max(f32::EPSILON as f64).ln()
                    } else {
                        m
                    }
                })
                .collect();
            match kind {
                Kind::Fbank => {
                    let mut row = if opts.use_energy {
                        vec![energy]
                    } else {
                        vec![]
                    };
                    row.extend(mel);
                    row
                }
                Kind::Mfcc => {
                    let mut row: Vec<f64> = dct
                        .chunks_exact(mel.len())
                        .map(|d| d.iter().zip(&mel).map(|(a, b)| *a as f64 * b).sum())
                        .collect();
                    if opts.use_energy {
                        row[0] = energy;
                    }
                    row
                }
            }
        })
        .collect()
}

fn compute(opts: &KaldiOptions, kind: Kind, x: &[f32]) -> (usize, Vec<f32>) {
    let plan = KaldiPlan::new(opts, kind).unwrap();
    let mut scratch = plan.scratch();
    let mut out = Vec::new();
    let frames = plan.compute(x, &mut scratch, &mut out);
    assert_eq!(out.len(), frames * plan.num_bins());
    (frames, out)
}

fn assert_close(opts: &KaldiOptions, kind: Kind, x: &[f32], tol: f64) {
    let (frames, out) = compute(opts, kind, x);
    let want = reference(opts, kind, x);
    assert_eq!(frames, want.len(), "{opts:?}");
    let bins = out.len() / frames.max(1);
    for (f, row) in want.iter().enumerate() {
        for (b, &w) in row.iter().enumerate() {
            let got = out[f * bins + b] as f64;
            let scale = if kind == Kind::Mfcc || !opts.use_log_fbank {
                w.abs().max(1.0)
            } else {
                1.0
            };
            assert!(
                (got - w).abs() <= tol * scale,
                "frame {f} bin {b}: {got} vs {w} ({opts:?})"
            );
        }
    }
}

#[test]
fn defaults_are_torchaudios() {
    let o = KaldiOptions::default();
    assert_eq!(
        (o.sample_frequency, o.frame_length, o.frame_shift, o.dither),
        (16000.0, 25.0, 10.0, 0.0)
    );
    assert_eq!(
        (o.preemphasis_coefficient, o.blackman_coeff, o.energy_floor),
        (0.97, 0.42, 1.0)
    );
    assert!(o.remove_dc_offset && o.round_to_power_of_two && o.snip_edges && o.raw_energy);
    assert!(o.use_log_fbank && o.use_power && !o.use_energy);
    assert_eq!(o.window_type, KaldiWindow::Povey);
    assert_eq!((o.num_mel_bins, o.low_freq, o.high_freq), (23, 20.0, 0.0));
    assert_eq!(
        (o.num_ceps, o.cepstral_lifter, o.sample_scale),
        (13, 22.0, 1.0)
    );
    assert_eq!(
        (o.window_size(), o.window_shift(), o.padded_window_size()),
        (400, 160, 512)
    );
}

#[test]
fn frame_counts_follow_kaldi() {
    let mut o = KaldiOptions::default();
    let plan = KaldiPlan::new(&o, Kind::Fbank).unwrap();
    assert_eq!(plan.num_frames(399), 0);
    assert_eq!(plan.num_frames(400), 1);
    assert_eq!(plan.num_frames(559), 1);
    assert_eq!(plan.num_frames(560), 2);
    assert_eq!(plan.num_frames(160_000), 998);
    let e = plan.check_length(399).unwrap_err();
    assert!(e.to_string().contains("shorter than one frame"), "{e}");
    o.snip_edges = false;
    let plan = KaldiPlan::new(&o, Kind::Fbank).unwrap();
    assert_eq!(plan.num_frames(0), 0);
    assert_eq!(plan.num_frames(79), 0);
    assert_eq!(plan.num_frames(80), 1);
    assert_eq!(plan.num_frames(160_000), 1000);
    assert_eq!(plan.check_length(79).unwrap_err().min_samples, 80);
    assert_eq!(plan.check_length(80), Ok(1));
}

#[test]
fn fbank_matches_the_definition_in_f64() {
    let x = speechy(16000, 1);
    let mut o = KaldiOptions {
        num_mel_bins: 80,
        use_energy: true,
        ..Default::default()
    };
    assert_close(&o, Kind::Fbank, &x, 1e-3);
    o.sample_scale = 32768.0;
    o.raw_energy = false;
    o.window_type = KaldiWindow::Hamming;
    o.snip_edges = false;
    assert_close(&o, Kind::Fbank, &x, 1e-3);
}

#[test]
fn every_window_and_option_matches_the_definition() {
    let x = speechy(6000, 2);
    for (i, &(_, w)) in KaldiWindow::ALL.iter().enumerate() {
        let o = KaldiOptions {
            window_type: w,
            blackman_coeff: 0.40,
            round_to_power_of_two: i % 2 == 0,
            remove_dc_offset: i % 3 != 0,
            preemphasis_coefficient: 0.1 * i as f64,
            low_freq: 60.0,
            high_freq: -400.0,
            snip_edges: i % 2 == 1,
            use_power: i != 2,
            use_log_fbank: i != 4,
            sample_frequency: if i == 3 { 8000.0 } else { 16000.0 },
            ..Default::default()
        };
        assert_close(&o, Kind::Fbank, &x, 1e-3);
    }
}

#[test]
fn mfcc_matches_the_definition_in_f64() {
    let x = speechy(8000, 3);
    let mut o = KaldiOptions::default();
    assert_close(&o, Kind::Mfcc, &x, 1e-4);
    o.use_energy = true;
    o.num_mel_bins = 40;
    o.num_ceps = 40;
    o.cepstral_lifter = 0.0;
    assert_close(&o, Kind::Mfcc, &x, 1e-4);
}

#[test]
fn sample_scale_is_the_same_as_scaling_the_waveform() {
    let x = speechy(4000, 4);
    let scaled: Vec<f32> = x.iter().map(|v| v * 32768.0).collect();
    let o = KaldiOptions {
        sample_scale: 32768.0,
        ..Default::default()
    };
    assert_eq!(
        compute(&o, Kind::Fbank, &x),
        compute(&KaldiOptions::default(), Kind::Fbank, &scaled)
    );
}

#[test]
fn silence_gives_the_log_floor() {
    let o = KaldiOptions {
        use_energy: true,
        ..Default::default()
    };
    let (frames, out) = compute(&o, Kind::Fbank, &[0.0; 1000]);
    assert_eq!(frames, 4);
    let floor = f32::EPSILON.ln();
    for row in out.chunks_exact(24) {
        assert_eq!(row[0], 0.0, "energy floored at ln(energy_floor = 1)");
        assert!(row[1..].iter().all(|&v| v == floor), "{row:?}");
    }
}

#[test]
fn a_tone_peaks_in_the_band_around_it() {
    let o = KaldiOptions {
        num_mel_bins: 40,
        ..Default::default()
    };
    let x: Vec<f32> = (0..4000)
        .map(|i| (2.0 * std::f64::consts::PI * 1000.0 * i as f64 / 16000.0).sin() as f32 * 0.5)
        .collect();
    let (_, out) = compute(&o, Kind::Fbank, &x);
    let row = &out[..40];
    let peak = (0..40).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
    let delta = (mel_scale(8000.0) - mel_scale(20.0)) / 41.0;
    let centre_hz =
        |b: usize| 700.0 * (((mel_scale(20.0) + (b as f64 + 1.0) * delta) / 1127.0).exp() - 1.0);
    assert!(
        (centre_hz(peak) - 1000.0).abs() < 120.0,
        "peak band {peak} at {} Hz",
        centre_hz(peak)
    );
}

#[test]
fn dither_is_seeded_and_deterministic() {
    let x = speechy(2000, 5);
    let o = KaldiOptions {
        dither: 1.0,
        sample_scale: 32768.0,
        ..Default::default()
    };
    let plan = KaldiPlan::new(&o, Kind::Fbank).unwrap();
    let run = |seed| {
        let mut s = plan.scratch();
        s.seed(seed);
        let mut out = Vec::new();
        plan.compute(&x, &mut s, &mut out);
        out
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
    assert_ne!(
        run(7),
        compute(
            &KaldiOptions {
                dither: 0.0,
                ..o.clone()
            },
            Kind::Fbank,
            &x
        )
        .1
    );
}

#[test]
fn invalid_options_name_torchaudios_key() {
    let cases: Vec<(KaldiOptions, Kind, &str)> = vec![
        (
            KaldiOptions {
                num_ceps: 30,
                ..Default::default()
            },
            Kind::Mfcc,
            "num_ceps",
        ),
        (
            KaldiOptions {
                use_power: false,
                ..Default::default()
            },
            Kind::Mfcc,
            "use_power",
        ),
        (
            KaldiOptions {
                high_freq: 9000.0,
                ..Default::default()
            },
            Kind::Fbank,
            "high_freq",
        ),
        (
            KaldiOptions {
                low_freq: 8000.0,
                ..Default::default()
            },
            Kind::Fbank,
            "low_freq",
        ),
        (
            KaldiOptions {
                frame_shift: 0.0,
                ..Default::default()
            },
            Kind::Fbank,
            "frame_shift",
        ),
        (
            KaldiOptions {
                dither: -1.0,
                ..Default::default()
            },
            Kind::Fbank,
            "dither",
        ),
        (
            KaldiOptions {
                sample_scale: 0.0,
                ..Default::default()
            },
            Kind::Fbank,
            "sample_scale",
        ),
    ];
    for (o, kind, key) in cases {
        let e = KaldiPlan::new(&o, kind).unwrap_err();
        assert_eq!(e.key, key, "{e}");
    }
    // mfcc's own keys are fine for fbank, which ignores them.
    assert!(
        KaldiPlan::new(
            &KaldiOptions {
                num_ceps: 30,
                ..Default::default()
            },
            Kind::Fbank
        )
        .is_ok()
    );
}

#[test]
fn banks_are_triangles_below_nyquist() {
    let o = KaldiOptions {
        num_mel_bins: 80,
        ..Default::default()
    };
    for b in mel_banks(&o) {
        assert!(!b.weights.is_empty());
        assert!(b.first + b.weights.len() <= 256);
        assert!(b.weights.iter().all(|&w| w > 0.0 && w <= 1.0), "{b:?}");
    }
}

/// The foundation of computing a recording longer than memory in pieces:
/// a frame reads only its own window (snip_edges) or reflects within half a
/// window of the edges (snip_edges = false), and nothing is normalised over
/// the whole waveform, so the rows of [`KaldiPlan::pieces`] computed one
/// piece at a time from only the samples each reads are the one-piece
/// rows, bit for bit: fbank and mfcc, both edge modes, piece sizes from one
/// frame to more than the waveform, and a non-zero dither drawn in order
/// with one scratch.
#[test]
fn pieces_of_a_waveform_give_the_one_piece_rows_bit_for_bit() {
    let x = speechy(16_000 * 3 + 123, 7);
    for kind in [Kind::Fbank, Kind::Mfcc] {
        for snip_edges in [true, false] {
            for dither in [0.0, 1e-3] {
                let opts = KaldiOptions {
                    snip_edges,
                    dither,
                    ..KaldiOptions::default()
                };
                let plan = KaldiPlan::new(&opts, kind).unwrap();
                let mut whole = Vec::new();
                let frames = plan.compute(&x, &mut plan.scratch(), &mut whole);
                assert!(frames > 250, "{frames}");
                for per_piece in [1, 7, 100, 299, frames, frames + 5] {
                    let mut scratch = plan.scratch();
                    let (mut got, mut rows, mut pieces) = (Vec::new(), Vec::new(), 0);
                    for (piece, range) in plan.pieces(x.len(), per_piece) {
                        assert!(
                            range.len() <= per_piece * plan.window_shift() + plan.window_size(),
                            "{range:?}"
                        );
                        plan.compute_piece(&x[range], &piece, &mut scratch, &mut rows);
                        got.extend_from_slice(&rows);
                        pieces += 1;
                    }
                    assert_eq!(pieces, frames.div_ceil(per_piece));
                    let same = got.len() == whole.len()
                        && got
                            .iter()
                            .zip(&whole)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{kind:?} snip_edges={snip_edges} dither={dither} per_piece={per_piece}"
                    );
                }
            }
        }
    }
}

/// Every keyword `params` records can be set by name to another value of
/// its type and reads back as that value; a keyword of the other function,
/// an unknown one and a value of the wrong type are refused by name.
#[test]
fn every_recorded_keyword_sets_by_name_and_wrong_ones_are_refused() {
    use super::{OptionValue, SetError};
    use crate::ParamValue;
    for kind in [Kind::Fbank, Kind::Mfcc] {
        let defaults = KaldiOptions::default();
        for (key, value) in defaults.params(kind) {
            let (given, want) = match value {
                ParamValue::Int(v) => (OptionValue::Int(v + 1), ParamValue::Int(v + 1)),
                ParamValue::Real(v) => (OptionValue::Real(v + 0.5), ParamValue::Real(v + 0.5)),
                ParamValue::Bool(v) => (OptionValue::Bool(!v), ParamValue::Bool(!v)),
                ParamValue::Text(_) => (OptionValue::Text("hamming"), ParamValue::Text("hamming")),
            };
            let mut o = KaldiOptions::default();
            o.set(kind, key, given).unwrap();
            let got = o.params(kind).into_iter().find(|(k, _)| *k == key).unwrap();
            assert_eq!(got.1, want, "{kind:?} {key}");
            let changed = o
                .params(kind)
                .iter()
                .zip(defaults.params(kind))
                .filter(|(a, b)| **a != *b)
                .count();
            assert_eq!(changed, 1, "{kind:?} {key} changed another option too");
        }
        let other = if kind == Kind::Fbank {
            "num_ceps"
        } else {
            "use_power"
        };
        let mut o = KaldiOptions::default();
        assert!(matches!(
            o.set(kind, other, OptionValue::Int(3)),
            Err(SetError::Unknown { .. })
        ));
        assert!(matches!(
            o.set(kind, "nmels", OptionValue::Int(3)),
            Err(SetError::Unknown { .. })
        ));
        let e = o.set(kind, "snip_edges", OptionValue::Int(1)).unwrap_err();
        assert_eq!(
            e,
            SetError::Type {
                key: "snip_edges",
                expected: "True or False"
            }
        );
        let e = o
            .set(kind, "window_type", OptionValue::Text("hann"))
            .unwrap_err();
        assert!(
            matches!(
                e,
                SetError::Type {
                    key: "window_type",
                    ..
                }
            ),
            "{e}"
        );
        let e = o
            .set(kind, "num_mel_bins", OptionValue::Int(-2))
            .unwrap_err();
        assert!(
            matches!(
                e,
                SetError::Type {
                    key: "num_mel_bins",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            o,
            KaldiOptions::default(),
            "a refused keyword changed nothing"
        );
    }
}
