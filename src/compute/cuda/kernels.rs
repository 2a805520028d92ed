//! The kernels for one GPU: the target NVRTC compiles for (the device's
//! architecture, or PTX for the newest one below it that NVRTC knows) and the
//! compiled image, from `nvrtc`'s caches when they hold it. Called by the
//! probe (`driver::probe` compiles once, so a refused CUBIN fails where `auto`
//! can still choose the CPU) and by the stage's start (`backend`).

use std::time::Instant;

use super::gpu::Gpu;
use std::sync::Arc;

use super::cause::Cause;
use super::{api, nvrtc};

/// The kernels for `gpu`: CUBIN for its architecture, or PTX for the newest
/// one NVRTC knows below it (`nvrtc::pick_target`); (one image per source of
/// `nvrtc::SOURCES`, seconds, whether every source came from the disk cache).
pub(crate) fn compile_kernels(gpu: &Gpu) -> Result<(Vec<nvrtc::Image>, f64, bool), Cause> {
    let n = api::nvrtc()?;
    let sm = u32::try_from(gpu.cc.0 * 10 + gpu.cc.1).unwrap_or(0);
    let target = n
        .supported_archs()
        .and_then(|a| nvrtc::pick_target(sm, &a))?;
    let t = Instant::now();
    let mut images = Vec::new();
    for (file, src) in nvrtc::SOURCES {
        images.push(
            nvrtc::compile_cached(file, src, target).map_err(|e| Cause::Kernels(Arc::new(e)))?,
        );
    }
    let compile_s = t.elapsed().as_secs_f64();
    let from_cache = images.iter().all(|i| i.from_disk_cache);
    if images.is_empty() {
        return Err(Cause::NoKernelSources);
    }
    Ok((images, compile_s, from_cache))
}
