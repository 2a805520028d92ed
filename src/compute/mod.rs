//! The compute stage: loaded WAV bytes in, log-mel rows out.
//!
//! [`cpu`]: W worker threads, each with its own
//! scratch, sharing one precomputed [`crate::dsp::Plan`]; [`cuda`]: one thread
//! driving an NVIDIA GPU (batches, CUDA graphs). [`select`] resolves
//! `compute.backend` and says why it chose what it chose.

pub mod cpu;
pub mod cuda;

use crate::config::Backend;

/// One file's result, addressed by job index.
#[derive(Debug)]
pub struct Outcome {
    pub job: usize,
    /// The row (spec.row_len() values, dB) or the rejection reason.
    pub row: Result<Vec<f32>, String>,
}

/// Why no backend could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "compute.backend = \"cuda\" was requested, but no CUDA GPU is usable: {0}; use \"cpu\" \
         or \"auto\""
    )]
    CudaUnavailable(String),
}

/// The backend actually used, with the reason for the choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub backend: Backend,
    pub reason: String,
}

/// Resolves the configured backend. `auto` and `cuda` run the CUDA probe
/// (`cuda::probe`, cached: libcuda loads, the driver is new enough, cuInit
/// succeeds, ≥ 1 device, libnvrtc and libcufft load); it never panics.
/// When `Cuda` is chosen, `cuda::probe()` returns the GPU to start on.
pub fn select(requested: Backend) -> Result<Choice, Error> {
    select_with(requested, cuda::probe)
}

/// [`select`] with the probe injected (tests).
pub fn select_with(
    requested: Backend,
    probe: impl FnOnce() -> Result<cuda::Gpu, String>,
) -> Result<Choice, Error> {
    match requested {
        Backend::Cpu => Ok(Choice {
            backend: Backend::Cpu,
            reason: "compute.backend = \"cpu\" was requested".into(),
        }),
        Backend::Auto => Ok(match probe() {
            Ok(gpu) => Choice {
                backend: Backend::Cuda,
                reason: format!("auto: found {gpu}"),
            },
            Err(why) => Choice {
                backend: Backend::Cpu,
                reason: format!("auto: {why}, so the CPU backend is used"),
            },
        }),
        Backend::Cuda => match probe() {
            Ok(gpu) => Ok(Choice {
                backend: Backend::Cuda,
                reason: format!("compute.backend = \"cuda\" was requested; found {gpu}"),
            }),
            Err(why) => Err(Error::CudaUnavailable(why)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_falls_back_to_cpu_with_a_reason_and_cuda_fails_clearly() {
        // This host (and CI) has no NVIDIA driver: the real probe says so.
        if let Err(why) = cuda::probe() {
            let c = select(Backend::Auto).unwrap();
            assert_eq!(c.backend, Backend::Cpu);
            assert!(c.reason.contains("CPU"), "{}", c.reason);
            assert!(c.reason.contains(&why), "{}", c.reason);
            let e = select(Backend::Cuda).unwrap_err().to_string();
            assert!(e.contains("no CUDA GPU is usable"), "{e}");
            assert!(e.contains(&why), "{e}");
        } else {
            eprintln!("skipped the GPU-less half: this host has a usable CUDA GPU");
        }
        // Injected probes: each reason is passed through verbatim.
        for why in [
            "libcuda.so.1 not found (no NVIDIA driver)",
            "cuInit failed: CUDA_ERROR_NO_DEVICE",
            "no CUDA device",
        ] {
            let c = select_with(Backend::Auto, || Err(why.to_string())).unwrap();
            assert_eq!(c.backend, Backend::Cpu);
            assert_eq!(c.reason, format!("auto: {why}, so the CPU backend is used"));
            let e = select_with(Backend::Cuda, || Err(why.to_string())).unwrap_err();
            assert!(e.to_string().contains("CUDA") && e.to_string().contains(why));
        }
        let gpu = cuda::Gpu {
            name: "Test GPU".into(),
            cc: (9, 0),
            devices: 1,
            driver_version: 12040,
            pci_bus_id: "0000:41:00.0".into(),
        };
        let c = select_with(Backend::Auto, || Ok(gpu.clone())).unwrap();
        assert_eq!(c.backend, Backend::Cuda);
        assert!(c.reason.contains("Test GPU (sm_90"), "{}", c.reason);
        assert_eq!(
            select_with(Backend::Cpu, || unreachable!())
                .unwrap()
                .backend,
            Backend::Cpu
        );
    }
}
