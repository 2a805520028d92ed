//! The Kaldi and Whisper plans behind the row protocol: through a CPU
//! worker's path (natural-length decode, the recipe's worker); the Whisper
//! rows through the writer are in `writer::tests_frames`.

use super::*;
use crate::compute::cpu::HostRow;
use crate::decode::clip::Policy;
use crate::runtime::telemetry::Local;

/// A 16-bit mono WAV at 16 kHz.
pub(crate) fn wav16(s: &[i16]) -> Vec<u8> {
    let data: Vec<u8> = s.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut b = b"RIFF".to_vec();
    b.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt \x10\0\0\0\x01\0\x01\0");
    b.extend_from_slice(&16_000u32.to_le_bytes());
    b.extend_from_slice(&32_000u32.to_le_bytes());
    b.extend_from_slice(b"\x02\0\x10\0data");
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(&data);
    b
}

/// `n` samples of a gliding tone with some noise-like harmonics.
pub(crate) fn signal(n: usize, seed: usize) -> Vec<i16> {
    (0..n)
        .map(|i| {
            let t = i as f64 / 16_000.0;
            let f = 150.0 + 40.0 * (t * 0.7 + seed as f64).sin();
            let v = (2.0 * std::f64::consts::PI * f * t).sin()
                + 0.3 * (2.0 * std::f64::consts::PI * 3.1 * f * t + (i * seed % 7) as f64).sin();
            (v * 8000.0) as i16
        })
        .collect()
}

pub(crate) fn decoded(s: &[i16]) -> Vec<f32> {
    s.iter().map(|v| f32::from(*v) / 32768.0).collect()
}

#[test]
fn kaldi_rows_equal_the_plan_on_the_whole_file_and_short_files_are_rejected() {
    let opts = KaldiOptions {
        num_mel_bins: 80,
        ..KaldiOptions::default()
    };
    let recipe = kaldi(&opts, Kind::Fbank).unwrap();
    let l = recipe.layout().frame_layout();
    assert_eq!(
        (l.recipe.as_str(), l.bins, l.sample_rate),
        ("kaldi-fbank", 80, 16_000)
    );
    assert!((l.frame_step_seconds - 0.01).abs() < 1e-12);
    assert!(
        l.params
            .iter()
            .any(|(k, v)| k == "features.num_mel_bins" && *v == Param::Int(80))
    );
    let mut host = HostRow::new(recipe.as_ref(), Policy::default());
    let mut local = Local::default();
    let s = signal(24_321, 1);
    let mut row = Vec::new();
    host.row(&wav16(&s), None, 7, &mut row, &mut local).unwrap();
    let plan = KaldiPlan::new(&opts, Kind::Fbank).unwrap();
    let mut want = Vec::new();
    let frames = plan.compute(&decoded(&s), &mut plan.scratch(), &mut want);
    assert_eq!(frames, plan.num_frames(24_321));
    assert_eq!(l.frames_of(row.len()), Some(frames));
    assert_eq!(row, want);
    // One frame at a time: the per-frame path's rows.
    let per_frame = kaldi_per_frame(&opts, Kind::Fbank).unwrap();
    assert_eq!(per_frame.layout().frame_layout(), l);
    let mut host_per_frame = HostRow::new(per_frame.as_ref(), Policy::default());
    let mut row_per_frame = Vec::new();
    host_per_frame
        .row(&wav16(&s), None, 7, &mut row_per_frame, &mut local)
        .unwrap();
    plan.compute_per_frame(&decoded(&s), &mut plan.scratch(), &mut want);
    assert_eq!(row_per_frame, want);
    let e = host
        .row(&wav16(&signal(300, 2)), None, 8, &mut row, &mut local)
        .unwrap_err();
    assert_eq!(e.kind(), crate::compute::RejectKind::TooShort);
    assert!(
        e.to_string()
            .contains("300 samples is shorter than one frame"),
        "{e}"
    );
}

#[test]
fn whisper_rows_are_the_plan_in_either_precision_with_the_pad_value_last() {
    let s = signal(40_123, 3);
    let plan = WhisperPlan::new(80).unwrap();
    let mut local = Local::default();
    let mut rows = Vec::new();
    for (recipe, f64) in [(whisper(80), false), (whisper_f64(80), true)] {
        let recipe = recipe.unwrap();
        assert_eq!(recipe.layout().recipe(), "whisper");
        let mut host = HostRow::new(recipe.as_ref(), Policy::default());
        let mut row = Vec::new();
        host.row(&wav16(&s), None, 1, &mut row, &mut local).unwrap();
        let mut want = Vec::new();
        let r = if f64 {
            plan.compute_f64(&decoded(&s), &mut plan.scratch(), &mut want)
        } else {
            plan.compute(&decoded(&s), &mut plan.scratch(), &mut want)
        };
        want.push(r.pad_value);
        assert_eq!(row, want, "f64 = {f64}");
        assert_eq!(
            recipe.layout().frame_layout().frames_of(row.len()),
            Some(r.frames)
        );
        rows.push(row);
    }
    // The two precisions differ, within docs/FORMAT.md's 1e-4.
    let worst = rows[0]
        .iter()
        .zip(&rows[1])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst > 0.0 && worst <= 1e-4, "{worst}");
}
