//! The decode pool in front of the CUDA stage, on the host double with the
//! host kernels: FLAC, resampled and `channels = "first"` files go through
//! the decode threads and a staged clip to the device path, device WAVs
//! through on-device decoding, and every row equals the CPU backend's bit
//! for bit; malformed files and reader errors get the CPU backend's
//! rejection; the stage ends cleanly whoever stops first.

use std::path::Path;
use std::sync::Arc;

use super::double::Progress;
use super::host_stage::start_host_double_workers_with;
use crate::compute::cpu::HostRow;
use crate::compute::cuda::backend::CudaOptions;
use crate::compute::{Outcome, Reject, Wiring};
use crate::decode::policy::{Channels, Policy, Resample};
use crate::dsp::{Plan, Spec};
use crate::reader::{FileBytes, Loaded};
use crate::runtime::telemetry::Local;

fn fixture(rel: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every file goes through `opts`' stage over the double; outcomes by job.
fn run_stage(
    plan: &Arc<Plan>,
    policy: Policy,
    opts: CudaOptions,
    files: Vec<Result<Vec<u8>, crate::reader::Error>>,
    progress: Progress,
) -> (
    Vec<Result<Vec<f32>, Reject>>,
    crate::compute::cuda::CudaReport,
) {
    let (mut wiring, input, output) = Wiring::standalone(8);
    wiring.policy = policy;
    let workers =
        start_host_double_workers_with(opts, wiring.librosa(&Arc::clone(plan)), progress).unwrap();
    let n = files.len();
    let feeder = std::thread::spawn(move || {
        for (job, f) in files.into_iter().enumerate() {
            let bytes = f.map(FileBytes::Heap);
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
    let report = workers.join().unwrap();
    let got = got
        .into_iter()
        .enumerate()
        .map(|(job, g)| g.unwrap_or_else(|| panic!("job {job} has no outcome")))
        .collect();
    (got, report)
}

#[test]
fn flac_resampled_and_first_channel_files_go_through_the_decode_pool_and_equal_the_cpu_rows() {
    let spec = Spec {
        sample_rate: 8000,
        ..Spec::default()
    };
    let plan = Arc::new(Plan::new(&spec));
    let policy = Policy {
        resample: Resample::SoxrHq,
        channels: Channels::First,
    };
    let dir = "tests/golden/inputs/files";
    let good_flac = fixture(&format!("{dir}/8000/flac16_stereo_synth_8000.flac"));
    let mut truncated = good_flac.clone();
    truncated.truncate(good_flac.len() / 3);
    // STREAMINFO's sample rate (20 bits from byte 18) set to 0.
    let mut zero_rate = good_flac.clone();
    zero_rate[18] = 0;
    zero_rate[19] = 0;
    zero_rate[20] &= 0x0F;
    let named: Vec<(&str, Result<Vec<u8>, crate::reader::Error>)> = vec![
        (
            "device: mono PCM WAV at the rate",
            Ok(fixture(&format!("{dir}/8000/wav16_mono_synth_8000.wav"))),
        ),
        ("pool: FLAC stereo, first channel", Ok(good_flac.clone())),
        (
            "pool: FLAC 24-bit mono",
            Ok(fixture(&format!("{dir}/8000/flac24_mono_speech_8000.flac"))),
        ),
        (
            "pool: stereo WAV, first channel",
            Ok(fixture(&format!("{dir}/8000/wav16_stereo_speech_8000.wav"))),
        ),
        (
            "pool: 22050 Hz WAV resampled",
            Ok(fixture(&format!("{dir}/22050/wav16_mono_synth_22050.wav"))),
        ),
        (
            "pool: 44100 Hz FLAC resampled",
            Ok(fixture(&format!(
                "{dir}/44100/flac16_stereo_synth_44100.flac"
            ))),
        ),
        (
            "device: long 8000 Hz WAV (trimmed copy)",
            Ok(fixture(&format!(
                "{dir}/8000/long_wav16_mono_synth_8000.wav"
            ))),
        ),
        (
            "pool: FLAC of the predictor-overflow regression",
            Ok(fixture("tests/data/flac_predictor_overflow.flac")),
        ),
        ("rejected: FLAC with a zero sample rate", Ok(zero_rate)),
        ("rejected: truncated FLAC", Ok(truncated)),
        (
            "rejected: neither WAV nor FLAC",
            Ok(b"OggS and more bytes".to_vec()),
        ),
        (
            "rejected: reader error",
            Err(crate::reader::Error::NotAFile(
                crate::reader::FileKind::Directory,
            )),
        ),
    ];
    // Repeat the set so batches fill, close by count and mix both kinds.
    let files: Vec<_> = (0..3)
        .flat_map(|_| named.iter().map(|(_, f)| clone_input(f)))
        .collect();
    let opts = CudaOptions {
        batch_files: 4,
        decode_threads: 3,
        ..CudaOptions::default()
    };
    let progress = Progress::Random {
        seed: 11,
        max_steps: 3,
    };
    let (got, report) = run_stage(&plan, policy, opts, files, progress);

    // The CPU backend's answer for each file.
    let mut host = HostRow::new(
        crate::recipes::librosa_of(Arc::clone(&plan)).as_ref(),
        policy,
    );
    let mut local = Local::default();
    let mut pooled = 0;
    for (job, g) in got.iter().enumerate() {
        let (what, input) = &named[job % named.len()];
        let want = match input {
            Err(e) => Err(e.to_string()),
            Ok(bytes) => {
                let mut row = Vec::new();
                host.row(bytes, None, job as u64, &mut row, &mut local)
                    .map(|()| row)
                    .map_err(|e| e.to_string())
            }
        };
        match (g, want) {
            (Ok(row), Ok(want)) => {
                assert!(
                    what.starts_with("pool") || what.starts_with("device"),
                    "{what}"
                );
                pooled += usize::from(what.starts_with("pool"));
                let same = row
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                let worst = row
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(
                    same,
                    "{what}: the row differs from the CPU backend's (max |Δ| = {worst} dB)"
                );
            }
            (Err(r), Err(want)) => {
                assert!(what.starts_with("rejected"), "{what}: rejected: {r}");
                assert_eq!(r.to_string(), want, "{what}");
            }
            (g, want) => panic!("{what}: stage gave {g:?}, CPU backend {want:?}"),
        }
    }
    assert_eq!(pooled, 3 * 6);
    assert_eq!(report.host_decoded_files, 3 * 6, "{report:?}");
    assert_eq!(
        report.runner.files,
        3 * 8,
        "every accepted file is computed by the device path"
    );
    assert_eq!(report.decode_threads, 3);
}

fn clone_input(f: &Result<Vec<u8>, crate::reader::Error>) -> Result<Vec<u8>, crate::reader::Error> {
    match f {
        Ok(b) => Ok(b.clone()),
        Err(_) => Err(crate::reader::Error::NotAFile(
            crate::reader::FileKind::Directory,
        )),
    }
}

/// Batches of one file and four decode threads, every file host-decoded: the
/// pool runs ahead of the device and waits for the staging slots the stage
/// thread frees after each copy; nothing deadlocks and no file is lost.
#[test]
fn a_pool_larger_than_the_batch_never_deadlocks_on_staging_and_loses_no_file() {
    let plan = Arc::new(Plan::new(&Spec::default()));
    let rate = plan.spec().sample_rate;
    let policy = Policy {
        resample: Resample::SoxrHq,
        channels: Channels::Mean,
    };
    // All resampled: every file needs a staging slot.
    let files: Vec<_> = (0..40)
        .map(|i| {
            Ok(crate::synth::encode_wav_pcm16(
                &crate::synth::clip(5, i, 0)[..2000],
                rate * 2,
            ))
        })
        .collect();
    let opts = CudaOptions {
        batch_files: 1,
        decode_threads: 4,
        flush_after: std::time::Duration::from_millis(1),
        ..CudaOptions::default()
    };
    let (got, report) = run_stage(&plan, policy, opts, files, Progress::Eager);
    assert!(got.iter().all(Result::is_ok));
    assert_eq!(report.host_decoded_files, 40);
    assert_eq!(report.runner.files, 40);
}

/// The consumer goes away mid-run (the output ring is closed): the stage
/// thread stops, closes the fed ring and the staging, and every decode
/// thread ends, including those waiting for a slot or pushing a file.
#[test]
fn the_pool_stops_when_the_stage_thread_ends_first() {
    let plan = Arc::new(Plan::new(&Spec::default()));
    let rate = plan.spec().sample_rate;
    let policy = Policy {
        resample: Resample::SoxrHq,
        channels: Channels::Mean,
    };
    let (mut wiring, input, output) = Wiring::standalone(4);
    wiring.policy = policy;
    let opts = CudaOptions {
        batch_files: 2,
        decode_threads: 3,
        ..CudaOptions::default()
    };
    let workers =
        start_host_double_workers_with(opts, wiring.librosa(&plan), Progress::Eager).unwrap();
    let file = crate::synth::encode_wav_pcm16(&crate::synth::clip(5, 1, 0), rate * 2);
    let feeder_input = Arc::clone(&input);
    let feeder = std::thread::spawn(move || {
        let input = feeder_input;
        let mut sent = 0;
        for job in 0..200 {
            let bytes = Ok(FileBytes::Heap(file.clone()));
            if input
                .push(Loaded {
                    job,
                    bytes,
                    segment: None,
                })
                .is_err()
            {
                break;
            }
            sent += 1;
            if job == 100 {
                input.close();
            }
        }
        sent
    });
    assert!(output.pop().is_some());
    // The pipeline's teardown: the consumer leaves, the input is closed.
    output.close();
    input.close();
    let sent = feeder.join().unwrap();
    assert!(sent > 0);
    // Returns (no thread hangs); the rows not taken are simply dropped.
    let report = workers.join().unwrap();
    assert!(report.runner.files <= 101);
}

/// The decode staging is registered for DMA (`cuMemHostRegister`) when the
/// first host-decoded clip reaches the stage, once, and never for a corpus
/// the device decodes alone: a WAV build used to pin (and touch every page
/// of) a staging it never used, at start-up.
#[test]
fn the_staging_is_registered_only_once_a_clip_needs_it() {
    use super::double::{Call, HostDouble, Log};
    use super::double_kernels::MelHostKernels;

    let spec = Spec {
        sample_rate: 8000,
        ..Spec::default()
    };
    let plan = Arc::new(Plan::new(&spec));
    let dir = "tests/golden/inputs/files/8000";
    let wav = fixture(&format!("{dir}/wav16_mono_synth_8000.wav"));
    let flac = fixture(&format!("{dir}/flac16_stereo_synth_8000.flac"));
    let registrations = |files: Vec<Vec<u8>>| {
        let log = Log::default();
        let device_log = Arc::clone(&log);
        let (mut wiring, input, output) = Wiring::standalone(8);
        wiring.policy = Policy {
            resample: Resample::Off,
            channels: Channels::First,
        };
        let wiring = wiring.librosa(&plan);
        let workers = crate::compute::cuda::backend::start_workers_with(
            move || {
                Ok(HostDouble::new(device_log, Progress::Eager)
                    .with_kernels(Box::new(MelHostKernels)))
            },
            CudaOptions {
                batch_files: 4,
                decode_threads: 2,
                ..CudaOptions::default()
            },
            wiring,
            crate::compute::cuda::CudaReport::default(),
        )
        .unwrap();
        let n = files.len();
        for (job, f) in files.into_iter().enumerate() {
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
        let mut ok = 0;
        while let Some(o) = output.pop() {
            assert!(o.row.is_ok(), "job {}: {:?}", o.job, o.row.err());
            ok += 1;
        }
        assert_eq!(ok, n);
        workers.join().unwrap();
        super::tests::calls(&log)
            .into_iter()
            .filter_map(|c| match c {
                Call::RegisterHost { len } => Some(len),
                _ => None,
            })
            .collect::<Vec<usize>>()
    };
    let wav_only = registrations(vec![wav.clone(); 6]);
    assert!(
        wav_only.is_empty(),
        "registered for WAVs alone: {wav_only:?}"
    );
    let mixed = registrations(vec![wav.clone(), flac.clone(), wav, flac.clone(), flac]);
    assert_eq!(mixed.len(), 1, "registrations: {mixed:?}");
    assert!(mixed[0] > 0);
}
