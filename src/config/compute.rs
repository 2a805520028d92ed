//! The `[compute]` section: the compute stage (backend, workers, batching,
//! the queue to the writer, placement) → validated [`ComputeConfig`];
//! defaults in [`defaults::compute`].
//!
//! `workers = 0` (the default) is resolved here to one worker per available
//! core, so the validated `workers` is always ≥ 1.

use serde::Deserialize;

use super::{Ctx, Error, defaults, io};
use crate::runtime::pin::PinPolicy;

/// `[compute]` as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCompute {
    /// "auto" | "cpu" | "cuda"; default [`defaults::compute::BACKEND`].
    pub backend: Option<String>,
    /// CPU worker threads; 0 = one per available core; default
    /// [`defaults::compute::WORKERS`].
    pub workers: Option<usize>,
    /// Files per batch (CUDA backend); default
    /// [`defaults::compute::BATCH_FILES`].
    pub batch_files: Option<usize>,
    /// Feature rows in flight between compute and the writer; default
    /// [`defaults::compute::QUEUE_DEPTH`].
    pub queue_depth: Option<usize>,
    /// Worker thread placement: "auto" | "off" | CPU list like "1,3"; default
    /// [`defaults::compute::PIN`].
    pub pin: Option<String>,
}

/// Compute backend selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Auto,
    Cpu,
    Cuda,
}

/// Validated compute settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ComputeConfig {
    pub backend: Backend,
    /// Resolved worker count (≥ 1).
    pub workers: usize,
    pub batch_files: usize,
    pub queue_depth: usize,
    pub pin: PinPolicy,
}

impl ComputeConfig {
    /// Applies the defaults, resolves `workers` and validates.
    pub(super) fn from_raw(c: &RawCompute, cx: &Ctx) -> Result<ComputeConfig, Error> {
        let workers = match c.workers.unwrap_or(defaults::compute::WORKERS) {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        Ok(ComputeConfig {
            backend: cx.choice(
                "compute.backend",
                c.backend.as_deref(),
                defaults::compute::BACKEND,
                &[
                    ("auto", Backend::Auto),
                    ("cpu", Backend::Cpu),
                    ("cuda", Backend::Cuda),
                ],
            )?,
            workers,
            batch_files: cx.positive(
                "compute.batch_files",
                c.batch_files,
                defaults::compute::BATCH_FILES,
            )?,
            queue_depth: cx.positive(
                "compute.queue_depth",
                c.queue_depth,
                defaults::compute::QUEUE_DEPTH,
            )?,
            pin: io::pin(cx, "compute.pin", c.pin.as_deref(), defaults::compute::PIN)?,
        })
    }
}
