//! Regression tests for defects found by reviewing the CUDA backend against
//! the driver and cuFFT rules, each on the host double: teardown errors that
//! leaked into the next run, files lost by a failed submit, padding of
//! batches closed by input bytes, and the uncaptured cuFFT warm-up.

use std::sync::Arc;

use super::double::{Call, HostDouble, Log, Progress, Work};
use super::double_kernels::MelHostKernels;
use super::tests::{FILE, Gather, GatherKernel, Runner, TestBytes, calls, expected_row, info};
use crate::compute::Wiring;
use crate::compute::cuda::backend::{CudaOptions, CudaReport, start_workers_with};
use crate::compute::cuda::orchestrate::{BatchRunner, RunnerConfig, Staged};
use crate::dsp::Plan;

fn plan() -> Arc<Plan> {
    Arc::new(Plan::new(&crate::config::Config::default().spec))
}

/// Runs the stage over `dev` with no input; what `join` says.
fn empty_run(dev: HostDouble) -> Result<CudaReport, crate::compute::cuda::Error> {
    let (wiring, input, _output) = Wiring::standalone(16);
    let workers = start_workers_with(
        move || Ok(dev),
        CudaOptions::default(),
        wiring.librosa(&plan()),
        CudaReport::default(),
    )
    .unwrap();
    input.close();
    workers.join()
}

/// Regression: the runner copied the device's teardown errors before the
/// device was dropped (so a run's own release failures were never reported)
/// into a process-wide list that was never cleared (so the next run in the
/// same process, a serve rebuild, failed with the old errors).
#[test]
fn teardown_errors_belong_to_their_own_run_and_never_poison_the_next() {
    let failing = HostDouble::unlogged(Progress::Eager)
        .with_kernels(Box::new(MelHostKernels))
        .refusing("cuMemFree", "CUDA_ERROR_ILLEGAL_ADDRESS");
    match empty_run(failing) {
        Err(crate::compute::cuda::Error::Teardown { failures }) => {
            let e = failures.join("; ");
            assert!(e.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{e}")
        }
        other => panic!("the run's own teardown failure was lost: {other:?}"),
    }
    let clean = HostDouble::unlogged(Progress::Eager).with_kernels(Box::new(MelHostKernels));
    let r = empty_run(clean);
    assert!(
        r.is_ok(),
        "a clean run failed with an earlier run's errors: {r:?}"
    );
}

/// `n` adjacent files (one coalesced copy run), no holes.
fn contiguous(n: usize) -> (Vec<u8>, Vec<(usize, usize)>) {
    let (mut mem, mut spans) = (Vec::new(), Vec::new());
    for i in 0..n {
        let start = mem.len();
        mem.extend(std::iter::repeat_n(0u8, super::tests::HEADER));
        mem.extend((0..32).map(|k| (i * 7 + k) as u8));
        spans.push((start, FILE));
    }
    (mem, spans)
}

fn staged(id: usize, mem: &mut [u8], span: (usize, usize), log: &Log) -> Staged<usize, TestBytes> {
    Staged {
        tag: id,
        bytes: TestBytes {
            id,
            ptr: mem[span.0..].as_mut_ptr(),
            len: span.1,
            log: Arc::clone(log),
        },
        info: info(),
    }
}

fn runner_on(dev: HostDouble, b: usize, input_bytes: usize) -> Runner<HostDouble> {
    let cfg = RunnerConfig::new(b, input_bytes);
    BatchRunner::new(dev, Gather, cfg).unwrap()
}

/// Regression: `submit` took the open batch before capturing the graph and
/// issuing the copies; when either failed, the batch's files were dropped
/// with it, so they got no rejection and the writer ended `Incomplete`.
#[test]
fn a_failed_submit_keeps_every_file_of_its_batch_for_rejection() {
    for op in [
        "cuStreamBeginCapture",
        "cuGraphInstantiate",
        "cuMemcpyHtoDAsync",
    ] {
        let log: Log = Arc::default();
        let (mut mem, spans) = contiguous(3);
        let dev = HostDouble::new(Arc::clone(&log), Progress::Eager)
            .with_kernels(Box::new(GatherKernel))
            .refusing(op, "CUDA_ERROR_UNKNOWN");
        let mut r = runner_on(dev, 4, 4096);
        for (id, &span) in spans.iter().enumerate() {
            assert!(r.add(staged(id, &mut mem, span, &log)).is_ok());
        }
        let mut sink = |_: usize, _: &[f32]| panic!("no row can come out");
        let e = r.flush(&mut sink).unwrap_err();
        assert_eq!(e.op, op);
        let mut tags: Vec<usize> = r.take_open().into_iter().map(|s| s.tag).collect();
        tags.extend(r.take_in_flight());
        tags.sort_unstable();
        assert_eq!(tags, [0, 1, 2], "{op}: files of the failed batch were lost");
    }
}

/// Regression: a batch closed because the device input was full was padded
/// to the next power of two like a partial batch: 130 files computed as 256.
#[test]
fn a_batch_closed_by_input_bytes_is_not_padded_to_a_power_of_two() {
    let log: Log = Arc::default();
    let (mut mem, spans) = contiguous(300);
    let dev =
        HostDouble::new(Arc::clone(&log), Progress::Eager).with_kernels(Box::new(GatherKernel));
    // Room for exactly 130 files (one coalesced copy); B = 256.
    let mut r = runner_on(dev, 256, 130 * FILE);
    let rows = std::cell::RefCell::new(vec![None; spans.len()]);
    let mut sink = |id: usize, vals: &[f32]| {
        rows.borrow_mut()[id] = Some(
            vals.iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect::<Vec<u8>>(),
        );
    };
    let mut sizes = Vec::new();
    for (id, &span) in spans.iter().enumerate() {
        if let Err(back) = r.add(staged(id, &mut mem, span, &log)) {
            sizes.push(r.open_len());
            r.flush(&mut sink).unwrap();
            assert!(r.add(back).is_ok());
        }
    }
    r.finish(&mut sink).unwrap();
    assert_eq!(sizes, [130, 130], "two batches closed by input bytes");
    for (i, row) in rows.into_inner().iter().enumerate() {
        assert_eq!(row.as_deref(), Some(&expected_row(i)[..16]), "file {i}");
    }
    let st = r.stats();
    // 130 + 130 closed by bytes, 40 left (a partial batch: power of two, 64).
    let byte_closed_padding = st.padded_files - 24;
    assert!(
        byte_closed_padding < 2 * 16,
        "batches closed by input bytes were padded by {byte_closed_padding} files"
    );
}

/// Suspect 5: with lazy module loading, a cuFFT plan's first execution loads
/// its kernels; inside a capture that load is not allowed. Each new plan runs
/// once on the compute stream, uncaptured, before its first capture.
#[test]
fn each_fft_plan_runs_once_uncaptured_before_its_first_capture() {
    let log: Log = Arc::default();
    let plan = plan();
    let tables = crate::compute::cuda::tables::Tables::new(&plan).unwrap();
    let dev =
        HostDouble::new(Arc::clone(&log), Progress::Eager).with_kernels(Box::new(MelHostKernels));
    let cfg = RunnerConfig::new(4, 1 << 20);
    let mut r: BatchRunner<HostDouble, crate::compute::cuda::recipe::MelRecipe, usize, TestBytes> =
        BatchRunner::new(
            dev,
            crate::compute::cuda::recipe::MelRecipe::new(tables),
            cfg,
        )
        .unwrap();
    let rate = plan.spec().sample_rate;
    let wav = crate::synth::encode_wav_pcm16(&crate::synth::clip(3, 1, 0), rate);
    let info = crate::decode::wav::parse(&wav).unwrap();
    let mut mem = wav.clone();
    let mut sink = |_: usize, _: &[f32]| {};
    for n in [1usize, 3] {
        for id in 0..n {
            let item = Staged {
                tag: id,
                bytes: TestBytes {
                    id,
                    ptr: mem.as_mut_ptr(),
                    len: mem.len(),
                    log: Arc::clone(&log),
                },
                info,
            };
            assert!(r.add(item).is_ok());
        }
        r.flush(&mut sink).unwrap();
    }
    r.finish(&mut sink).unwrap();
    std::mem::forget(mem.split_off(0)); // bytes poisoned by TestBytes drops are not re-read
    let c = calls(&log);
    let captures: Vec<usize> = c
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c, Call::BeginCapture(_)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(captures.len(), 2, "shapes 1 and 4");
    for &at in &captures {
        let before = &c[..at];
        let plan_at = before
            .iter()
            .rposition(|c| matches!(c, Call::FftPlan(_)))
            .expect("a plan before the capture");
        let warm = before[plan_at..].iter().any(|c| {
            matches!(
                c,
                Call::Issue {
                    work: Work::Fft { .. },
                    captured: false,
                    ..
                }
            )
        });
        assert!(warm, "no uncaptured FFT between the plan and its capture");
    }
}

/// Suspect 8: under confidential computing, some vGPU and WSL set-ups
/// `cuMemHostRegister` is refused; that used to abort start-up although the
/// pageable copy path works. Now the stage starts, warns and computes.
#[test]
fn a_refused_arena_registration_falls_back_to_pageable_copies() {
    let plan = plan();
    let rate = plan.spec().sample_rate;
    let wav = crate::synth::encode_wav_pcm16(&crate::synth::clip(3, 1, 0), rate);
    let (mut wiring, input, output) = Wiring::standalone(16);
    wiring.arena = Some(crate::reader::arena::Arena::new(1 << 20, 1).unwrap());
    let dev = HostDouble::unlogged(Progress::Eager)
        .with_kernels(Box::new(MelHostKernels))
        .refusing("cuMemHostRegister", "CUDA_ERROR_NOT_SUPPORTED");
    let workers = start_workers_with(
        move || Ok(dev),
        CudaOptions::default(),
        wiring.librosa(&plan),
        CudaReport::default(),
    )
    .expect("start-up survives a refused registration");
    input
        .push(crate::reader::Loaded {
            job: 0,
            bytes: Ok(crate::reader::FileBytes::Heap(wav)),
            segment: None,
        })
        .unwrap();
    input.close();
    let o = output.pop().expect("one outcome");
    assert!(o.row.is_ok(), "{:?}", o.row.err());
    let report = workers.join().unwrap();
    assert!(report.pageable_copies);
    assert_eq!(report.runner.files, 1);
}

/// Rows of `n` synthetic clips through the MelRecipe on the double (host
/// kernels), with f32 or binary16 rows leaving the "device".
fn mel_rows(f16_rows: bool, n: usize) -> Vec<Vec<f32>> {
    let log: Log = Arc::default();
    let plan = plan();
    let tables = crate::compute::cuda::tables::Tables::new(&plan).unwrap();
    let dev = HostDouble::unlogged(Progress::Eager).with_kernels(Box::new(MelHostKernels));
    let cfg = RunnerConfig::new(4, 1 << 20);
    let recipe = crate::compute::cuda::recipe::MelRecipe::new(tables).with_f16_rows(f16_rows);
    let mut r: BatchRunner<HostDouble, crate::compute::cuda::recipe::MelRecipe, usize, TestBytes> =
        BatchRunner::new(dev, recipe, cfg).unwrap();
    let rate = plan.spec().sample_rate;
    let mut wavs: Vec<Vec<u8>> = (0..n)
        .map(|i| crate::synth::encode_wav_pcm16(&crate::synth::clip(i as u64 + 5, 1, 0), rate))
        .collect();
    let rows = std::cell::RefCell::new(vec![Vec::new(); n]);
    let mut sink = |id: usize, v: &[f32]| rows.borrow_mut()[id] = v.to_vec();
    for (id, w) in wavs.iter_mut().enumerate() {
        let info = crate::decode::wav::parse(w).unwrap();
        let item = Staged {
            tag: id,
            bytes: TestBytes {
                id,
                ptr: w.as_mut_ptr(),
                len: w.len(),
                log: Arc::clone(&log),
            },
            info,
        };
        if let Err(back) = r.add(item) {
            r.flush(&mut sink).unwrap();
            assert!(r.add(back).is_ok());
        }
    }
    r.finish(&mut sink).unwrap();
    drop(r);
    rows.into_inner()
}

/// float16 output: `mf_to_f16` runs inside the graph and the rows leave the
/// device as binary16; what the writer then stores is bit for bit what it
/// stores when the f32 rows come back and it converts them itself.
#[test]
fn float16_rows_made_in_the_graph_equal_the_writers_conversion_bit_for_bit() {
    let f32_rows = mel_rows(false, 6);
    let f16_rows = mel_rows(true, 6);
    let mut checked = 0;
    for (a, b) in f32_rows.iter().zip(&f16_rows) {
        assert_eq!(a.len(), b.len());
        assert!(!a.is_empty());
        for (x, y) in a.iter().zip(b) {
            let want = half::f16::from_f32(*x).to_bits();
            assert_eq!(half::f16::from_f32(*y).to_bits(), want, "{x} vs {y}");
            assert_eq!(half::f16::from_bits(want).to_f32().to_bits(), y.to_bits());
            checked += 1;
        }
    }
    assert!(checked > 1000);
}

/// Gathered batches (the host-decoded samples of the variable-length
/// recipes): each file's bytes go into the slot's pinned input on the host
/// and leave in one copy, so the file is released at its submit, before
/// the device ran anything; the release poisons its bytes, and the rows
/// are still the files' own. No copy ever reads a file's own memory.
#[test]
fn gathered_files_are_released_at_submit_and_copied_once_from_pinned_memory() {
    for b in [1, 3, 4] {
        let log: crate::compute::cuda::testing::double::Log = Arc::default();
        let (mut mem, spans) = super::tests::arena(10);
        let progress = Progress::Random {
            seed: 7,
            max_steps: 0,
        };
        let dev = HostDouble::new(Arc::clone(&log), progress).with_kernels(Box::new(GatherKernel));
        let cfg = RunnerConfig {
            gather: true,
            ..RunnerConfig::new(b, 4096)
        };
        let mut r: Runner<HostDouble> = BatchRunner::new(dev, Gather, cfg).unwrap();
        let rows = super::tests::feed(&mut r, &mut mem, &spans, &log).unwrap();
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(
                row.as_deref(),
                Some(&expected_row(i)[..]),
                "B {b}, file {i}"
            );
        }
        let st = r.stats();
        drop(r);
        assert_eq!(st.h2d_copies, st.batches, "B {b}: one input copy a batch");
        let c = calls(&log);
        let htod = c.iter().filter(|c| {
            matches!(
                c,
                Call::Issue {
                    work: Work::HtoD { .. },
                    ..
                }
            )
        });
        assert_eq!(htod.count(), 0, "B {b}: a copy read a file's own bytes");
        // Nothing runs before the first wait: the first batch's files are
        // all released before the device executed anything.
        let entries = log.lock().unwrap().clone();
        let first_exec = (entries.iter())
            .position(|e| matches!(e, super::double::Entry::Exec { .. }))
            .unwrap();
        let released_before = entries[..first_exec]
            .iter()
            .filter(|e| matches!(e, super::double::Entry::Note(n) if n.starts_with("release")))
            .count();
        assert!(
            released_before >= b,
            "B {b}: {released_before} released before the device ran"
        );
    }
}
