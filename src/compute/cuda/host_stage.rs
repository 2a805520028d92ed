//! The CUDA compute stage over the host double with the host-built kernels
//! (feature `host-kernels`): the same stage thread, batching, [`BatchRunner`]
//! and [`MelRecipe`] as on a GPU — only the [`Device`] is a
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
//! [`BatchRunner`]: super::orchestrate::BatchRunner
//! [`MelRecipe`]: super::recipe::MelRecipe
//! [`Device`]: super::device::Device

use std::sync::Arc;

use super::Error;
use super::backend::{CudaOptions, CudaReport, CudaWiring, CudaWorkers, start_workers_with};
use super::double::{HostDouble, Progress};
use super::double_kernels::MelHostKernels;
use crate::dsp::Plan;

/// What [`CudaReport::device`] says for a stage started here.
pub const DEVICE_NAME: &str = "host double (no GPU; kernels built for the host)";

/// Starts the CUDA stage for `plan` over a [`HostDouble`] that runs every
/// queued operation as soon as it is runnable ([`Progress::Eager`]), wired and
/// joined like [`super::start_cuda_workers`]'s stage.
pub fn start_host_double_workers(
    plan: Arc<Plan>,
    opts: CudaOptions,
    wiring: CudaWiring,
) -> Result<CudaWorkers, Error> {
    start_host_double_workers_with(plan, opts, wiring, Progress::Eager)
}

/// [`start_host_double_workers`] with a chosen [`Progress`]:
/// `Progress::Random` makes copies and events complete late, in a seeded
/// interleaving, as the orchestration tests do.
pub fn start_host_double_workers_with(
    plan: Arc<Plan>,
    opts: CudaOptions,
    wiring: CudaWiring,
    progress: Progress,
) -> Result<CudaWorkers, Error> {
    let report = CudaReport {
        device: DEVICE_NAME.to_string(),
        batch_files: opts.batch_files,
        ..CudaReport::default()
    };
    start_workers_with(
        plan,
        move || Ok(HostDouble::unlogged(progress).with_kernels(Box::new(MelHostKernels))),
        opts,
        wiring,
        report,
    )
}
