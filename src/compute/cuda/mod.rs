//! The CUDA backend: batches of files decoded and turned into log-mel rows on
//! an NVIDIA GPU, proven as far as possible on hosts without one.
//!
//! * [`driver`] — the probe: libcuda via explicit `dlopen`, driver symbols,
//!   `cuInit`, device count, libnvrtc/libcufft ([`libs`] finds and preloads
//!   them). Nothing calls into cudarc before the probe said yes: with dynamic
//!   loading cudarc panics on a missing library.
//! * [`nvrtc`] — compiles the embedded `kernels/*.cu` for the device (CUBIN for
//!   `sm_XY`), cached in memory and under `~/.cache/melforge`.
//! * [`device`] — the [`device::Device`] trait: the operations of a batch;
//!   [`real`] implements it on the driver API, [`double`] on host memory with
//!   an operation log and late-completing streams (tests).
//! * [`orchestrate`] — [`orchestrate::BatchRunner`]: copy stream, events,
//!   double-buffered slots, one CUDA graph per (slot, shape), extent release
//!   only after the copy completed; [`recipe`] is the kernel sequence.
//! * [`backend`] — [`backend::start_cuda_workers`], the stage thread on the
//!   same `compute::Wiring` as the CPU workers.
//! * [`host`], [`tables`] — the kernels built for the host and the tables they
//!   read (kernels/README.md).
//!
//! docs/GPU.md says what is verified on the host and what only
//! `scripts/gpu-check` on a GPU host can prove.

pub mod host;
pub mod tables;

pub mod backend;
pub mod device;
pub mod double;
pub mod double_kernels;
pub mod driver;
pub mod libs;
pub mod nvrtc;
pub mod orchestrate;
pub mod real;
pub mod recipe;
#[cfg(test)]
mod tests;

pub use backend::{CudaOptions, CudaReport, CudaWorkers, start_cuda_workers};
pub use driver::{Gpu, Unavailable, probe};

/// Why the CUDA backend cannot start or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Nvrtc(#[from] nvrtc::Error),
    #[error("CUDA: {0}")]
    Device(#[from] device::DeviceError),
    /// The device failed mid-run; the files it held were rejected.
    #[error("CUDA backend failed: {0}")]
    Run(std::sync::Arc<str>),
    /// Releasing device resources failed at the end of a run.
    #[error("CUDA teardown failed: {0}")]
    Teardown(String),
    #[error("the CUDA compute thread panicked")]
    Panicked,
}
