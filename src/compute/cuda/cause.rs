//! [`Cause`]: why the GPU cannot be used, or stopped being usable — one typed
//! value from the probe and the stage up to the commands that report it
//! (`compute::Error::CudaUnavailable`, `cuda::Error::{Unavailable, Run}`,
//! `compute::Reject::Device`, build's and serve's GPU errors).
//!
//! Invariant: `Display` is the sentence users read (the reason `auto` chose
//! the CPU, the reason a file was rejected); each variant's sentence is the
//! one its String carried before the type existed, so logs, reports and the
//! tests that match on text read the same. The variants name what failed
//! (driver, device, library, host resource), so a caller can tell a host
//! without a GPU from a device that failed mid-run without parsing text.
//!
//! It imports only the error types it carries (leaves of `cuda`), so
//! `compute::outcome` may name it without a loop through `cuda/mod.rs`.

use std::sync::Arc;

use super::device::DeviceError;
use super::libs::{self, LoadError};
use super::nvrtc;
use super::tables::TooLarge;

/// Why no GPU is usable, or why the one in use failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Cause {
    /// libcuda cannot be loaded.
    #[error("libcuda.so.1 not found (no NVIDIA driver)")]
    NoDriver,
    /// The driver library lacks entry points the backend calls.
    #[error("the NVIDIA driver ({loaded_as}) is too old: it lacks {}", .missing.join(", "))]
    DriverLacks {
        loaded_as: String,
        missing: Box<[&'static str]>,
    },
    /// The driver's CUDA version (e.g. 11080) is below 12.0.
    #[error(
        "the NVIDIA driver supports CUDA {}.{}, older than the 12.0 melforge needs",
        .version / 1000,
        .version % 1000 / 10
    )]
    DriverTooOld { version: i32 },
    /// The driver sees no device.
    #[error("no CUDA device")]
    NoDevice,
    /// A CUDA library (NVRTC, cuFFT) is missing; `wheel` is the pip package
    /// that provides it.
    #[error("{error}; install the CUDA toolkit or `pip install {wheel}`")]
    MissingLibrary {
        error: Box<libs::Error>,
        wheel: String,
    },
    /// A library was found but a check on it failed (entry points, versions,
    /// the copy the loader would pick).
    #[error(transparent)]
    Library(Box<LoadError>),
    /// NVRTC knows no architecture at or below the device's.
    #[error("{error}; NVRTC {}.{} is too old for {device}", .nvrtc.0, .nvrtc.1)]
    NvrtcTooOld {
        error: Box<LoadError>,
        nvrtc: (i32, i32),
        device: String,
    },
    /// A driver call failed (probe or mid-run): which call, the driver's words.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The device did not open with the compiled kernels.
    #[error("CUDA device start-up failed: {0}")]
    StartUp(DeviceError),
    /// NVRTC failed on a kernel source.
    #[error(transparent)]
    Kernels(Arc<nvrtc::Error>),
    /// The embedded kernel list is empty (a build without `kernels/`).
    #[error("no kernel sources")]
    NoKernelSources,
    /// The plan does not fit the kernels' 32-bit indices.
    #[error(transparent)]
    Tables(#[from] TooLarge),
    /// A host resource of the stage could not be made (`what`: "map the
    /// decode staging", "start the CUDA thread", "start the decode threads").
    #[error("cannot {what}: {error}")]
    Host {
        what: &'static str,
        error: Arc<std::io::Error>,
    },
    /// The stage thread reported its start-up error on the ready channel;
    /// this is what the thread itself returns (the channel's error is the
    /// one the caller sees).
    #[error("CUDA start-up failed")]
    StartUpFailed,
    /// The stage thread ended before it said whether it started.
    #[error("the CUDA thread died during start-up")]
    ThreadDied,
    /// The configured variable-length recipe cannot run on the kernels
    /// (dither, a recipe without kernels).
    #[error("features.recipe cannot run on the CUDA kernels: {0}")]
    Recipe(super::frames_exec::Unsupported),
    /// `MELFORGE_HOST_DOUBLE=1` in a build without the host double.
    #[error("{env} needs a build with the host-kernels feature")]
    NoHostDouble { env: &'static str },
}

// The heavy payloads are boxed: a `Cause` travels inside every error type
// up to the commands' (`result_large_err`), so it stays the size of a
// `DeviceError`.
const _: () = assert!(std::mem::size_of::<Cause>() <= 56);

impl From<LoadError> for Cause {
    fn from(e: LoadError) -> Cause {
        Cause::Library(Box::new(e))
    }
}

impl Cause {
    /// A host resource that could not be made (see [`Cause::Host`]).
    pub fn host(what: &'static str, error: std::io::Error) -> Cause {
        Cause::Host {
            what,
            error: Arc::new(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sentences are the ones the Strings carried (tests and logs match
    /// on them).
    #[test]
    fn sentences_are_the_ones_the_strings_carried() {
        assert_eq!(
            Cause::NoDriver.to_string(),
            "libcuda.so.1 not found (no NVIDIA driver)"
        );
        assert_eq!(
            Cause::DriverTooOld { version: 11080 }.to_string(),
            "the NVIDIA driver supports CUDA 11.8, older than the 12.0 melforge needs"
        );
        assert_eq!(
            Cause::Device(DeviceError::new("cuInit", "CUDA_ERROR_NO_DEVICE")).to_string(),
            "cuInit failed: CUDA_ERROR_NO_DEVICE"
        );
        assert_eq!(
            Cause::host("start the CUDA thread", std::io::Error::other("no room")).to_string(),
            "cannot start the CUDA thread: no room"
        );
        assert_eq!(
            Cause::DriverLacks {
                loaded_as: "libcuda.so.1".into(),
                missing: Box::new(["cuGraphLaunch", "cuGraphDestroy"]),
            }
            .to_string(),
            "the NVIDIA driver (libcuda.so.1) is too old: it lacks cuGraphLaunch, cuGraphDestroy"
        );
    }
}
