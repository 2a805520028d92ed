//! The recipe kernels (`kernels/frames.cu`) on the host against the CPU
//! recipes (`dsp::kaldi::KaldiPlan::compute_per_frame`,
//! `dsp::whisper::WhisperPlan::compute_f64`: the per-frame paths the kernels
//! mirror; the batched float32 CPU paths differ from them by FFT rounding):
//! one batch of utterances of many lengths (empty, shorter than one frame, odd,
//! longer than Whisper's 30 s) of speech-like synthetic audio, every Kaldi
//! window type and the options that change the kernels' paths.
//!
//! Tolerance: none. The host build runs the same float operations in the same
//! order as the CPU code (explicit rounding, sequential sums, the same libm
//! `logf`/`log10`/`sqrtf`, the same realfft plan standing in for cuFFT), so
//! every value must be bit-identical; a difference means an indexing or
//! ordering bug. On a GPU the FFT (cuFFT) and `logf`/`log10` round differently
//! in the last bits: docs/GPU.md states the tolerance there.

use super::*;
use crate::compute::cuda::recipe_tables::RecipeTableError;
use crate::dsp::kaldi::{KaldiOptions, KaldiPlan, KaldiWindow, Kind};
use crate::dsp::whisper::WhisperPlan;

/// Speech-like test audio: a voiced buzz (harmonics of a gliding 90–260 Hz
/// pitch under two moving formant peaks), syllable-rate amplitude
/// envelope, noise 40 dB down, and a stretch of digital silence.
fn speech_like(n: usize, sample_rate: f64, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut noise = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let (mut phase, tau) = (0.0f64, std::f64::consts::TAU);
    (0..n)
        .map(|i| {
            let t = i as f64 / sample_rate;
            let f0 = 175.0 + 85.0 * (tau * 0.7 * t + seed as f64).sin();
            phase += tau * f0 / sample_rate;
            let formant = |h: f64, centre: f64| (-((h * f0 - centre) / 300.0).powi(2)).exp();
            let f1 = 500.0 + 300.0 * (tau * 2.0 * t).sin();
            let voiced: f64 = (1..30)
                .map(|h| {
                    let h = h as f64;
                    (formant(h, f1) + 0.5 * formant(h, 1700.0)) * (h * phase).sin()
                })
                .sum();
            let envelope = (tau * 4.0 * t).sin().abs();
            let silent = (i / 4000) % 5 == 4;
            let x = 0.3 * envelope * voiced + 0.003 * noise();
            if silent { 0.0 } else { x as f32 }
        })
        .collect()
}

/// Lengths of one batch: empty, shorter than a frame, exactly one, odd, long.
const LENGTHS: [usize; 10] = [0, 1, 99, 399, 400, 401, 1_601, 3_999, 16_007, 48_123];

/// The batch's samples back to back, and each utterance's.
fn corpus(lengths: &[usize], sample_rate: f64) -> (Vec<f32>, Vec<Vec<f32>>) {
    let utts: Vec<Vec<f32>> = lengths
        .iter()
        .enumerate()
        .map(|(k, &n)| speech_like(n, sample_rate, k as u64 + 1))
        .collect();
    (utts.concat(), utts)
}

/// Bit-identical or the first difference, with the largest |Δ|.
fn assert_bits(what: &str, host: &[f32], cpu: &[f32]) {
    assert_eq!(host.len(), cpu.len(), "{what}: lengths");
    let worst = host
        .iter()
        .zip(cpu)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    if let Some(k) = (0..host.len()).find(|&k| host[k].to_bits() != cpu[k].to_bits()) {
        panic!(
            "{what}: value {k}: host {} vs CPU {} (max |Δ| {worst:e})",
            host[k], cpu[k]
        );
    }
}

fn kaldi_cases() -> Vec<(&'static str, KaldiOptions, Kind)> {
    let d = KaldiOptions::default;
    let mut cases = vec![
        ("fbank default", d(), Kind::Fbank),
        ("mfcc default", d(), Kind::Mfcc),
    ];
    let mut o = d();
    (o.num_mel_bins, o.use_energy, o.sample_scale) = (80, true, 32768.0);
    cases.push(("fbank 80 + energy, int16 scale", o, Kind::Fbank));
    let mut o = d();
    (o.snip_edges, o.window_type, o.use_energy) = (false, KaldiWindow::Hamming, true);
    (o.raw_energy, o.energy_floor) = (false, 0.0);
    cases.push((
        "fbank centred hamming, windowed energy, no floor",
        o,
        Kind::Fbank,
    ));
    let mut o = d();
    (o.window_type, o.round_to_power_of_two, o.use_power) = (KaldiWindow::Hanning, false, false);
    (o.preemphasis_coefficient, o.remove_dc_offset) = (0.0, false);
    cases.push((
        "fbank hanning n_fft 400 magnitude, no dc/preemph",
        o,
        Kind::Fbank,
    ));
    let mut o = d();
    (o.window_type, o.use_log_fbank, o.sample_frequency) =
        (KaldiWindow::Rectangular, false, 8000.0);
    (o.low_freq, o.high_freq, o.num_mel_bins) = (64.0, -200.0, 15);
    cases.push(("fbank rectangular linear 8 kHz", o, Kind::Fbank));
    let mut o = d();
    (o.window_type, o.blackman_coeff, o.snip_edges) = (KaldiWindow::Blackman, 0.40, false);
    (o.frame_length, o.frame_shift, o.sample_frequency) = (20.0, 7.3, 44_100.0);
    cases.push(("fbank blackman odd shift 44.1 kHz centred", o, Kind::Fbank));
    let mut o = d();
    (o.num_mel_bins, o.num_ceps, o.use_energy) = (40, 20, true);
    (o.cepstral_lifter, o.snip_edges, o.energy_floor) = (0.0, false, 0.5);
    cases.push(("mfcc 40/20 + energy, no lifter, centred", o, Kind::Mfcc));
    cases
}

/// Every case: one batch of LENGTHS through the host kernels equals
/// `KaldiPlan::compute_per_frame` per utterance, bit for bit.
#[test]
fn kaldi_kernels_equal_the_cpu_recipe_bit_for_bit() {
    for (name, opts, kind) in kaldi_cases() {
        let plan = KaldiPlan::new(&opts, kind).unwrap();
        let (samples, utts) = corpus(&LENGTHS, opts.sample_frequency);
        let batch = KaldiTables::batch(&plan, &LENGTHS).unwrap();
        let host = KaldiHost::new(KaldiTables::new(&plan).unwrap());
        let rows = host.run(&samples, &batch).unwrap();
        let bins = plan.num_bins();
        let (mut scratch, mut cpu) = (plan.scratch(), Vec::new());
        for (u, audio) in utts.iter().enumerate() {
            let frames = plan.compute_per_frame(audio, &mut scratch, &mut cpu);
            let r = batch.rows(u);
            assert_eq!(frames, r.len(), "{name}: utterance {u} frames");
            let what = format!("{name}: utterance {u} ({} samples)", audio.len());
            assert_bits(&what, &rows[r.start * bins..r.end * bins], &cpu);
        }
        eprintln!("{name}: {} rows of {bins}, bit-identical", batch.n_rows);
    }
}

/// Whisper 80 and 128 mels over one batch (including 30 s and more) equal
/// `WhisperPlan::compute`, values and pad value, bit for bit.
#[test]
fn whisper_kernels_equal_the_cpu_recipe_bit_for_bit() {
    let lengths = [0, 1, 199, 200, 201, 401, 32_003, 479_999, 481_500];
    let (samples, utts) = corpus(&lengths, 16_000.0);
    for n_mels in [80, 128] {
        let plan = WhisperPlan::new(n_mels).unwrap();
        let batch = WhisperTables::batch(&plan, &lengths).unwrap();
        let host = WhisperHost::new(WhisperTables::new(&plan).unwrap());
        let out = host.run(&samples, &batch).unwrap();
        let (mut scratch, mut cpu) = (plan.scratch(), Vec::new());
        for (u, audio) in utts.iter().enumerate() {
            let row = plan.compute_f64(audio, &mut scratch, &mut cpu);
            let r = batch.rows(u);
            assert_eq!(row.frames, r.len(), "{n_mels} mels: utterance {u} frames");
            let what = format!("{n_mels} mels: utterance {u} ({} samples)", audio.len());
            let host_rows = &out.values[r.start * n_mels..r.end * n_mels];
            assert_bits(&what, host_rows, &cpu);
            assert_bits(&format!("{what}: pad"), &[out.pad[u]], &[row.pad_value]);
        }
    }
}

/// The kernels are grid-stride: odd launch shapes give the same bits.
#[test]
fn recipe_results_do_not_depend_on_the_launch_shape() {
    let (samples, _) = corpus(&LENGTHS, 16_000.0);
    for kind in [Kind::Fbank, Kind::Mfcc] {
        let o = KaldiOptions {
            use_energy: true,
            ..KaldiOptions::default()
        };
        let plan = KaldiPlan::new(&o, kind).unwrap();
        let batch = KaldiTables::batch(&plan, &LENGTHS).unwrap();
        let t = KaldiTables::new(&plan).unwrap();
        let base = KaldiHost::new(t.clone()).run(&samples, &batch).unwrap();
        for l in [Launch::new(1, 1), Launch::new(3, 7)] {
            let other = KaldiHost::new(t.clone())
                .with_launch(l)
                .run(&samples, &batch);
            assert_bits(&format!("{kind:?} {l:?}"), &other.unwrap(), &base);
        }
    }
    let plan = WhisperPlan::new(80).unwrap();
    let batch = WhisperTables::batch(&plan, &LENGTHS).unwrap();
    let t = WhisperTables::new(&plan).unwrap();
    let base = WhisperHost::new(t.clone()).run(&samples, &batch).unwrap();
    let odd = WhisperHost::new(t).with_launch(Launch::new(3, 7));
    let odd = odd.run(&samples, &batch).unwrap();
    assert_bits("whisper 3×7", &odd.values, &base.values);
    assert_bits("whisper 3×7 pad", &odd.pad, &base.pad);
}

/// A batch that would read past the samples, a centred Kaldi frame of an
/// empty utterance, or a dithered recipe are refused before any launch.
#[test]
fn recipe_wrappers_refuse_what_would_read_out_of_bounds() {
    let plan = KaldiPlan::new(&KaldiOptions::default(), Kind::Fbank).unwrap();
    let host = KaldiHost::new(KaldiTables::new(&plan).unwrap());
    // 1000 samples give 4 frames reading 3·160 + 400 = 880 of them.
    let batch = KaldiTables::batch(&plan, &[1_000]).unwrap();
    assert!(host.run(&[0.1; 880], &batch).is_ok());
    let short = vec![0.1f32; 879];
    assert!(matches!(host.run(&short, &batch), Err(Error::Table { .. })));

    let mut o = KaldiOptions {
        snip_edges: false,
        ..KaldiOptions::default()
    };
    let centred = KaldiPlan::new(&o, Kind::Fbank).unwrap();
    let host = KaldiHost::new(KaldiTables::new(&centred).unwrap());
    let mut batch = KaldiTables::batch(&centred, &[400]).unwrap();
    batch.utts[0].n_samples = 0;
    assert!(matches!(
        host.run(&[0.5; 400], &batch),
        Err(Error::Table { .. })
    ));

    let w = WhisperPlan::new(80).unwrap();
    let host = WhisperHost::new(WhisperTables::new(&w).unwrap());
    let batch = WhisperTables::batch(&w, &[500]).unwrap();
    assert!(matches!(
        host.run(&[0.0; 499], &batch),
        Err(Error::Table { .. })
    ));

    o.dither = 1.0;
    let dithered = KaldiPlan::new(&o, Kind::Fbank).unwrap();
    assert_eq!(
        KaldiTables::new(&dithered).unwrap_err(),
        RecipeTableError::Dither { dither: 1.0 }
    );
}
