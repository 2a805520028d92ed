//! The CUDA stage of the variable-length recipes (`frames_stage`,
//! `frames_exec`) on the host double with the host build of
//! `kernels/frames.cu`: every file gets the CPU workers' outcome, rows bit for
//! bit (realfft stands in for cuFFT; the CPU recipes in the precisions the
//! kernels compute: Kaldi one frame at a time, Whisper in float64) and
//! rejections with the same reason, whatever the batch size, the order in
//! which the double completes work, or the lengths (shorter than a frame,
//! empty, longer than 30 s, longer than a device batch); a device failure
//! rejects every file and is returned by `join`.

use std::sync::Arc;

use super::double::{HostDouble, Progress};
use super::double_kernels::MelHostKernels;
use super::host_stage::start_host_double_workers_with;
use crate::compute::cpu::HostRow;
use crate::compute::cuda::backend::{CudaOptions, CudaReport, start_workers_with};
use crate::compute::{Outcome, Reject, Wiring};
use crate::decode::policy::{Channels, Policy, Resample};
use crate::dsp::kaldi::{KaldiOptions, Kind};
use crate::frames::FrameRecipe;
use crate::reader::{FileBytes, Loaded};
use crate::runtime::telemetry::Local;

type Outcomes = Vec<Result<Vec<f32>, Reject>>;

fn fixture(rel: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Speech-like and synthetic files of many lengths at 16 kHz, real speech
/// at 44.1 and 48 kHz (resampled), and two that are not audio.
fn corpus() -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    let lengths = [
        16_000, 400, 399, 1, 0, 240, 160, 80_000, 123_457, 3_000, 48_000, 16_001,
    ];
    for (i, &n) in lengths.iter().enumerate() {
        let mut x = crate::synth::clip_at(7, i as u64, i % 4, 16_000);
        x.resize(n, 0);
        files.push(crate::synth::encode_wav_pcm16(&x, 16_000));
    }
    // 35 s (Whisper reads the first 30 s) of clips back to back.
    let long: Vec<i16> = (0..4)
        .flat_map(|i| crate::synth::clip_at(9, i, 1, 16_000))
        .take(560_000)
        .collect();
    files.push(crate::synth::encode_wav_pcm16(&long, 16_000));
    // Digital silence, and full-scale clipping.
    files.push(crate::synth::encode_wav_pcm16(&[0; 20_000], 16_000));
    let clipped: Vec<i16> = (0..20_000)
        .map(|k| if k % 50 < 25 { 32767 } else { -32768 })
        .collect();
    files.push(crate::synth::encode_wav_pcm16(&clipped, 16_000));
    let dir = "tests/golden/inputs/files";
    files.push(fixture(&format!(
        "{dir}/44100/wav16_stereo_speech_44100.wav"
    )));
    files.push(fixture(&format!(
        "{dir}/48000/flac24_mono_speech_48000.flac"
    )));
    files.push(b"RIFF\x04\x00\x00\x00WAVE".to_vec());
    files.push(b"not audio at all".to_vec());
    files
}

fn policy() -> Policy {
    Policy {
        resample: Resample::SoxrHq,
        channels: Channels::Mean,
    }
}

/// What the CPU workers make of every file.
fn cpu_outcomes(recipe: &Arc<dyn FrameRecipe>, files: &[Vec<u8>]) -> Outcomes {
    let mut host = HostRow::new(recipe.as_ref(), policy());
    let mut local = Local::default();
    files
        .iter()
        .enumerate()
        .map(|(job, bytes)| {
            let mut row = Vec::new();
            host.row(bytes, None, job as u64, &mut row, &mut local)
                .map(|()| row)
        })
        .collect()
}

fn wiring(
    recipe: &Arc<dyn FrameRecipe>,
) -> (
    Wiring,
    Arc<crate::runtime::ring::Ring<Loaded>>,
    Arc<crate::runtime::ring::Ring<Outcome>>,
) {
    let (mut wiring, input, output) = Wiring::standalone(8);
    wiring.policy = policy();
    wiring.recipe = Arc::clone(recipe);
    (wiring, input, output)
}

/// Feeds `files` to a started stage and collects one outcome per file.
fn collect(
    input: Arc<crate::runtime::ring::Ring<Loaded>>,
    output: &crate::runtime::ring::Ring<Outcome>,
    files: &[Vec<u8>],
) -> Outcomes {
    let n = files.len();
    let owned = files.to_vec();
    let feeder = std::thread::spawn(move || {
        for (job, f) in owned.into_iter().enumerate() {
            let bytes = Ok(FileBytes::Heap(f));
            input
                .push(Loaded {
                    job,
                    bytes,
                    segment: None,
                })
                .unwrap();
        }
        input.close();
    });
    let mut got: Vec<Option<Result<Vec<f32>, Reject>>> = (0..n).map(|_| None).collect();
    while let Some(Outcome { job, row, .. }) = output.pop() {
        assert!(got[job].is_none(), "job {job} twice");
        got[job] = Some(row);
    }
    feeder.join().unwrap();
    got.into_iter()
        .enumerate()
        .map(|(job, g)| g.unwrap_or_else(|| panic!("job {job} has no outcome")))
        .collect()
}

fn run_double(
    recipe: &Arc<dyn FrameRecipe>,
    files: &[Vec<u8>],
    opts: CudaOptions,
    progress: Progress,
) -> (Outcomes, CudaReport) {
    let (wiring, input, output) = wiring(recipe);
    let workers = start_host_double_workers_with(opts, wiring, progress).unwrap();
    let got = collect(input, &output, files);
    (got, workers.join().unwrap())
}

fn assert_same(recipe: &str, cpu: &Outcomes, gpu: &Outcomes) {
    for (job, (c, g)) in cpu.iter().zip(gpu).enumerate() {
        match (c, g) {
            (Ok(c), Ok(g)) => {
                assert_eq!(c.len(), g.len(), "{recipe} job {job}: row lengths");
                let same = c.iter().zip(g).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{recipe} job {job}: rows differ");
            }
            (Err(c), Err(g)) => assert_eq!(c.to_string(), g.to_string(), "{recipe} job {job}"),
            _ => panic!("{recipe} job {job}: cpu {c:?} vs gpu {g:?}"),
        }
    }
}

fn recipes() -> Vec<Arc<dyn FrameRecipe>> {
    let centred = KaldiOptions {
        snip_edges: false,
        use_energy: true,
        num_mel_bins: 40,
        window_type: crate::dsp::kaldi::KaldiWindow::Hamming,
        sample_scale: 32768.0,
        ..KaldiOptions::default()
    };
    let mfcc = KaldiOptions {
        use_energy: true,
        raw_energy: false,
        energy_floor: 1.0,
        ..KaldiOptions::default()
    };
    vec![
        crate::recipes::kaldi_per_frame(&KaldiOptions::default(), Kind::Fbank).unwrap(),
        crate::recipes::kaldi_per_frame(&centred, Kind::Fbank).unwrap(),
        crate::recipes::kaldi_per_frame(&mfcc, Kind::Mfcc).unwrap(),
        crate::recipes::whisper_f64(80).unwrap(),
        crate::recipes::whisper_f64(128).unwrap(),
    ]
}

#[test]
fn every_recipe_on_the_double_equals_the_cpu_workers_bit_for_bit_at_any_batch_size() {
    let files = corpus();
    for recipe in recipes() {
        let name = recipe.layout().recipe().to_string();
        let cpu = cpu_outcomes(&recipe, &files);
        let ok = cpu.iter().filter(|r| r.is_ok()).count();
        assert!(
            (12..files.len()).contains(&ok),
            "{name}: {ok} rows of {}",
            files.len()
        );
        for (batch, seed) in [(1, 3), (4, 11), (256, 5)] {
            let opts = CudaOptions {
                batch_files: batch,
                decode_threads: 2,
                ..CudaOptions::default()
            };
            let progress = Progress::Random { seed, max_steps: 3 };
            let (gpu, report) = run_double(&recipe, &files, opts, progress);
            assert_same(&format!("{name} batch {batch}"), &cpu, &gpu);
            let ok = cpu.iter().filter(|r| r.is_ok()).count() as u64;
            assert_eq!(
                report.runner.files + report.host_computed_files,
                ok,
                "{report:?}"
            );
            assert_eq!(
                report.runner.captures, 0,
                "no graphs for variable-length batches"
            );
        }
    }
}

#[test]
fn an_utterance_longer_than_a_device_batch_is_computed_on_the_host_with_the_same_numbers() {
    // One file per batch holds 4,096 rows (the smallest capacity); 60 s at
    // a 10 ms shift is 6,000 rows.
    let long: Vec<i16> = (0..6)
        .flat_map(|i| crate::synth::clip_at(3, i, 2, 16_000))
        .collect();
    let files = vec![
        crate::synth::encode_wav_pcm16(&long, 16_000),
        crate::synth::encode_wav_pcm16(&long[..32_000], 16_000),
    ];
    let recipe = crate::recipes::kaldi_per_frame(&KaldiOptions::default(), Kind::Fbank).unwrap();
    let cpu = cpu_outcomes(&recipe, &files);
    let opts = CudaOptions {
        batch_files: 1,
        decode_threads: 1,
        ..CudaOptions::default()
    };
    let (gpu, report) = run_double(&recipe, &files, opts, Progress::Eager);
    assert_same("kaldi-fbank", &cpu, &gpu);
    assert_eq!(report.host_computed_files, 1, "{report:?}");
    assert_eq!(report.runner.files, 1, "{report:?}");
}

#[test]
fn a_device_failure_rejects_every_file_with_its_cause_and_join_returns_it() {
    let files = corpus();
    for (recipe, op) in [
        (
            crate::recipes::kaldi(&KaldiOptions::default(), Kind::Fbank).unwrap(),
            "cufftExecR2C",
        ),
        (crate::recipes::whisper(80).unwrap(), "cufftExecD2Z"),
    ] {
        let (wiring, input, output) = wiring(&recipe);
        let opts = CudaOptions {
            batch_files: 4,
            decode_threads: 2,
            ..CudaOptions::default()
        };
        let make = move || {
            Ok(HostDouble::unlogged(Progress::Eager)
                .with_kernels(Box::new(MelHostKernels))
                .refusing(op, "CUFFT_EXEC_FAILED"))
        };
        let workers = start_workers_with(make, opts, wiring, CudaReport::default()).unwrap();
        let got = collect(input, &output, &files);
        let cpu = cpu_outcomes(&recipe, &files);
        for (job, (g, c)) in got.iter().zip(&cpu).enumerate() {
            match (g, c) {
                (Err(Reject::Device(cause)), Ok(_)) => {
                    assert!(cause.to_string().contains(op), "job {job}: {cause}");
                }
                (Err(g), Err(c)) => assert_eq!(g.to_string(), c.to_string(), "job {job}"),
                _ => panic!("job {job}: {g:?} (cpu {c:?})"),
            }
        }
        let e = workers.join().unwrap_err().to_string();
        assert!(e.contains(op), "{e}");
    }
}

#[test]
fn a_dithered_kaldi_recipe_does_not_start_on_the_device() {
    let opts = KaldiOptions {
        dither: 0.5,
        ..KaldiOptions::default()
    };
    let recipe = crate::recipes::kaldi(&opts, Kind::Fbank).unwrap();
    let (wiring, _input, _output) = wiring(&recipe);
    let e = start_host_double_workers_with(CudaOptions::default(), wiring, Progress::Eager)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("dither = 0.5"), "{e}");
}
