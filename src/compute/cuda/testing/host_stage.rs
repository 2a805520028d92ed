//! The CUDA compute stage over the host double with the host-built kernels
//! (feature `host-kernels`): the same decode pool, stage thread, batching,
//! [`BatchRunner`] and [`MelRecipe`] as on a GPU — only the [`Device`] is a
//! [`HostDouble`] running `kernels/mel.cu` compiled for the host
//! ([`MelHostKernels`]) and realfft in f64 in place of cuFFT.
//!
//! What a run through here proves is what `tests.rs` proves on it (header
//! rejections with the CPU backend's text, rows equal to the CPU rows within
//! 1e-3 dB, ordering and lifetime rules of the runner); what it cannot prove
//! is anything about the driver, cuFFT or speed (docs/GPU.md). It is meant
//! for tests and for a test mode of the program on hosts without a GPU,
//! never for producing datasets: it is far slower than the CPU backend.
//!
//! The double made here keeps no operation log ([`HostDouble::unlogged`]), so
//! a long run (`serve`) does not grow one.
//!
//! [`BatchRunner`]: crate::compute::cuda::orchestrate::BatchRunner
//! [`MelRecipe`]: crate::compute::cuda::recipe::MelRecipe
//! [`Device`]: crate::compute::cuda::device::Device

use super::double::{HostDouble, Progress};
use super::double_kernels::MelHostKernels;
use crate::compute::Wiring as CudaWiring;
use crate::compute::cuda::Error;
use crate::compute::cuda::backend::{CudaOptions, CudaReport, CudaWorkers, start_workers_with};

/// What [`CudaReport::device`] says for a stage started here.
pub const DEVICE_NAME: &str = "host double (no GPU; kernels built for the host)";

/// Starts the CUDA stage for the wiring's recipe over a [`HostDouble`] that runs every
/// queued operation as soon as it is runnable ([`Progress::Eager`]), wired and
/// joined like [`crate::compute::cuda::start_cuda_workers`]'s stage.
pub fn start_host_double_workers(
    opts: CudaOptions,
    wiring: CudaWiring,
) -> Result<CudaWorkers, Error> {
    start_host_double_workers_with(opts, wiring, Progress::Eager)
}

/// [`start_host_double_workers`] with a chosen [`Progress`]:
/// `Progress::Random` makes copies and events complete late, in a seeded
/// interleaving, as the orchestration tests do.
pub fn start_host_double_workers_with(
    opts: CudaOptions,
    wiring: CudaWiring,
    progress: Progress,
) -> Result<CudaWorkers, Error> {
    let report = CudaReport {
        device: DEVICE_NAME.to_string(),
        batch_files: opts.batch_files,
        ..CudaReport::default()
    };
    // A test of a GPU failing mid-run names the file whose creation breaks it.
    let fail_once = std::env::var_os(crate::compute::HOST_DOUBLE_FAIL_ENV).map(Into::into);
    start_workers_with(
        move || {
            let d = HostDouble::unlogged(progress).with_kernels(Box::new(MelHostKernels));
            Ok(match fail_once.clone() {
                Some(trigger) => d.failing_once(trigger),
                None => d,
            })
        },
        opts,
        wiring,
        report,
    )
}

#[cfg(test)]
mod tests {
    /// Regression (serve on the GPU): a partial batch used to be computed only
    /// after `flush_after` *without new input*, so a steady trickle of files
    /// (one every few ms, as serve sees them) waited for a full batch. Now the
    /// first file of a batch waits at most `flush_after`.
    #[test]
    fn a_trickle_of_files_is_computed_within_the_batch_delay_not_at_a_full_batch() {
        use super::*;
        use crate::compute::Wiring;
        use crate::dsp::Plan;
        use crate::reader::{FileBytes, Loaded};

        let plan = std::sync::Arc::new(Plan::new(&crate::config::Config::default().spec));
        let rate = plan.spec().sample_rate;
        let wav = crate::synth::encode_wav_pcm16(&crate::synth::clip(3, 1, 0), rate);
        let (wiring, input, output) = Wiring::standalone(256);
        let opts = CudaOptions {
            batch_files: 512,
            flush_after: std::time::Duration::from_millis(40),
            ..CudaOptions::default()
        };
        let workers = start_host_double_workers(opts, wiring.librosa(&plan)).unwrap();
        // Up to 500 files, one every 20 ms (10 s): fewer than a batch, and
        // never 40 ms without new input. Under the old rule nothing comes out
        // before the input closes; now the first batch is computed ~40 ms
        // after its first file, plus the first capture's cost (about 1 s for
        // the host double in a release build; the 10 s leave room for a
        // loaded machine, and the loop ends at the first row).
        let mut sent = 0;
        let mut early = 0;
        while sent < 500 && early == 0 {
            input
                .push(Loaded {
                    job: sent,
                    bytes: Ok(FileBytes::Heap(wav.clone())),
                    segment: None,
                })
                .unwrap();
            sent += 1;
            std::thread::sleep(std::time::Duration::from_millis(20));
            while let Some(o) = output.try_pop() {
                assert!(o.row.is_ok());
                early += 1;
            }
        }
        eprintln!("first rows came out after {sent} file(s) had been sent");
        assert!(
            early > 0,
            "no file came out while the trickle lasted: partial batches wait for a full batch"
        );
        input.close();
        let mut rest = 0;
        while output.pop().is_some() {
            rest += 1;
        }
        assert_eq!(early + rest, sent);
        workers.join().unwrap();
    }

    /// Regression (serve on a failing GPU): a batch flushed for its delay,
    /// with no file after it, that failed on the device left its files in
    /// the runner until the next file came. serve, with nothing more to
    /// send, waited for them forever. Now they come back as device
    /// rejections at once, while the input stays open.
    #[test]
    fn files_of_a_delay_flushed_batch_that_fails_come_back_without_new_input() {
        use super::*;
        use crate::compute::{Reject, Wiring};
        use crate::dsp::Plan;
        use crate::reader::{FileBytes, Loaded};
        use std::time::{Duration, Instant};

        let dir = tempfile::tempdir().unwrap();
        let trigger = dir.path().join("fail");
        let plan = std::sync::Arc::new(Plan::new(&crate::config::Config::default().spec));
        let rate = plan.spec().sample_rate;
        let wav = crate::synth::encode_wav_pcm16(&crate::synth::clip(3, 1, 0), rate);
        let (wiring, input, output) = Wiring::standalone(64);
        let wiring = wiring.librosa(&plan);
        let opts = CudaOptions {
            batch_files: 64,
            flush_after: Duration::from_millis(20),
            ..CudaOptions::default()
        };
        let t = trigger.clone();
        let report = CudaReport::default();
        let workers = start_workers_with(
            move || {
                Ok(HostDouble::unlogged(Progress::Eager)
                    .with_kernels(Box::new(MelHostKernels))
                    .failing_once(t))
            },
            opts,
            wiring,
            report,
        )
        .unwrap();
        let send = |job: usize| {
            input
                .push(Loaded {
                    job,
                    bytes: Ok(FileBytes::Heap(wav.clone())),
                    segment: None,
                })
                .unwrap();
        };
        let collect = |n: usize| {
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut got = Vec::new();
            while got.len() < n {
                assert!(
                    Instant::now() < deadline,
                    "only {} of {n} files came back",
                    got.len()
                );
                match output.try_pop() {
                    Some(o) => got.push(o),
                    None => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            got
        };
        for job in 0..3 {
            send(job);
        }
        assert!(collect(3).iter().all(|o| o.row.is_ok()));
        std::fs::write(&trigger, b"").unwrap();
        for job in 3..6 {
            send(job);
        }
        // The input stays open: nothing else will flush this batch.
        let failed = collect(3);
        for o in &failed {
            assert!(
                matches!(&o.row, Err(Reject::Device(why)) if why.to_string().contains("CUDA_ERROR_LAUNCH_FAILED")),
                "job {}: {:?}",
                o.job,
                o.row.as_ref().map(|_| "a row")
            );
        }
        input.close();
        while output.pop().is_some() {}
        assert!(workers.join().is_err());
    }
}
