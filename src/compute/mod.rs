//! The compute stage: loaded WAV bytes in, log-mel rows out.
//!
//! [`cpu`] is the only backend so far: W worker threads, each with its own
//! scratch, sharing one precomputed [`crate::mel::Plan`]. [`select`] resolves
//! `compute.backend` and says why it chose what it chose.

pub mod cpu;

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
        "compute.backend = \"cuda\" was requested, but this build of melforge has no CUDA \
         backend; use \"cpu\" or \"auto\""
    )]
    CudaUnavailable,
}

/// The backend actually used, with the reason for the choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub backend: Backend,
    pub reason: String,
}

/// Resolves the configured backend.
pub fn select(requested: Backend) -> Result<Choice, Error> {
    match requested {
        Backend::Cpu => Ok(Choice {
            backend: Backend::Cpu,
            reason: "compute.backend = \"cpu\" was requested".into(),
        }),
        Backend::Auto => Ok(Choice {
            backend: Backend::Cpu,
            reason: "auto: this build has no CUDA backend, so the CPU backend is used".into(),
        }),
        Backend::Cuda => Err(Error::CudaUnavailable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_falls_back_to_cpu_with_a_reason_and_cuda_fails_clearly() {
        let c = select(Backend::Auto).unwrap();
        assert_eq!(c.backend, Backend::Cpu);
        assert!(c.reason.contains("CPU"));
        assert!(
            select(Backend::Cuda)
                .unwrap_err()
                .to_string()
                .contains("no CUDA")
        );
    }
}
