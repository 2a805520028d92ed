//! The CUDA backend: batches of files decoded and turned into log-mel rows on
//! an NVIDIA GPU, proven as far as possible on hosts without one.
//!
//! * [`driver`] — the probe: libcuda via explicit `dlopen`, driver symbols,
//!   `cuInit`, device count, libnvrtc/libcufft ([`libs`] finds and preloads
//!   them). Nothing calls into cudarc before the probe said yes: with dynamic
//!   loading cudarc panics on a missing library.
//! * [`gpu`] — [`Gpu`], the device the probe found; [`kernels`] — the target
//!   and the compiled image for it (what the probe and the stage's start
//!   compile).
//! * [`nvrtc`] — compiles the embedded `kernels/*.cu` for the device (CUBIN for
//!   `sm_XY`), cached in memory and under `~/.cache/melforge`.
//! * [`device`] — the [`device::Device`] trait: the operations of a batch;
//!   [`real`] implements it on the driver API, `double` on host memory with
//!   an operation log and late-completing streams (test harness, below).
//! * [`orchestrate`] — [`orchestrate::BatchRunner`], for every recipe: copy
//!   stream, events, double-buffered slots, one CUDA graph per (slot, shape)
//!   for librosa's fixed clips and a direct issue for the recipes whose rows
//!   vary, extent release only after the copy completed; `batch` is what it
//!   takes (the `Recipe` trait); [`recipe`] is librosa's kernel sequence,
//!   [`frames_exec`] Kaldi's and Whisper's.
//! * `stage` — the one batching loop of every stage thread over the runner;
//!   `workers` — the stage threads' lifecycle and report.
//! * [`feed`] — the decode pool in front of the stage thread: CPU threads
//!   that route each file (device WAV → its header; FLAC, resampled,
//!   `channels = "first"` → decoded into a pinned staging clip,
//!   `compute::cuda::staging`) and reject what the CPU backend rejects.
//! * [`backend`] — [`backend::start_cuda_workers`]: the decode pool and the
//!   stage thread on the same `compute::Wiring` as the CPU workers (librosa;
//!   [`frames_stage`] starts the Kaldi and Whisper recipes' pool).
//! * [`cause`] — [`Cause`], why the GPU is not usable or failed: one typed
//!   value from the probe and the stage up to the commands.
//! * [`tables`] — the tables the kernels read, built on the host and
//!   uploaded once per plan (kernels/README.md); [`recipe_tables`] — the
//!   same for the Kaldi and Whisper kernels (`kernels/frames.cu`) and their
//!   per-batch utterance table; `auto` picks the CPU for them
//!   on hosts with enough cores (`compute::cpu_outruns_gpu_from`).
//!
//! Everything above runs in production. The test harness lives apart, in
//! `testing/`, behind the cargo feature `host-kernels` (on for every
//! `cargo test`/`bench`/`clippy --all-targets` through the self dev-dependency
//! in Cargo.toml; off in `cargo build`, so users need no C++ compiler): the
//! host build of the kernels, the host double of the device, the stage over
//! both, and the backend's unit tests (`testing/mod.rs` lists them).
//!
//! docs/GPU.md says what is verified on the host and what only
//! `scripts/gpu-check` on a GPU host can prove.

pub mod tables;

pub mod api;

pub mod backend;
mod batch;
pub mod cause;
pub mod device;
pub mod driver;
pub mod feed;
pub mod frames_exec;
pub mod frames_stage;
pub mod gpu;
mod host_copy;
pub mod kernels;
pub mod libs;
pub mod nvrtc;
pub mod orchestrate;
pub mod real;
pub mod recipe;
pub mod recipe_tables;
mod stage;
pub mod staging;
pub mod workers;

#[cfg(feature = "host-kernels")]
pub mod testing;

pub use backend::start_cuda_workers;
pub use cause::Cause;
pub use driver::{Unavailable, driver_present, probe};
pub use gpu::Gpu;
#[cfg(feature = "host-kernels")]
pub use testing::start_host_double_workers;
pub use workers::{CudaOptions, CudaReport, CudaWorkers, decode_threads, default_decode_threads};

/// Why the CUDA backend cannot start or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Unavailable(#[from] Cause),
    #[error(transparent)]
    Nvrtc(#[from] nvrtc::Error),
    #[error("CUDA: {0}")]
    Device(#[from] device::DeviceError),
    /// The device failed mid-run; the files it held were rejected.
    #[error("CUDA backend failed: {0}")]
    Run(Cause),
    /// Releasing device resources failed at the end of a run: each failed
    /// release as the device recorded it (`Device::attach_error_sink`).
    #[error("CUDA teardown failed: {}", .failures.join("; "))]
    Teardown { failures: Vec<String> },
    #[error("the CUDA compute thread panicked")]
    Panicked,
}
