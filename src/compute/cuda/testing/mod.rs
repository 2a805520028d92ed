//! The CUDA backend's test harness: nothing here runs in production. Built
//! only with the cargo feature `host-kernels` (on for every `cargo test`,
//! `cargo bench` and `cargo clippy --all-targets` through the self
//! dev-dependency in Cargo.toml; off in `cargo build`, so users need no C++
//! compiler).
//!
//! * [`host`] — `kernels/mel.cu` compiled for the host by a C++ shim
//!   (build.rs), with safe launch wrappers; its tests (`host_tests.rs`)
//!   compare every kernel with the CPU backend;
//! * [`host_recipes`] — `kernels/frames.cu` (Kaldi fbank/MFCC, Whisper) on
//!   the host the same way; its tests compare a batch of variable-length
//!   utterances with the CPU recipes (`dsp::kaldi`, `dsp::whisper`);
//! * [`double`] — `HostDouble`, the `device::Device` made of host memory, with
//!   an operation log and streams that complete late on purpose, and
//!   [`double_kernels`], which lets it launch the host-built kernels;
//! * [`host_stage`] — starts the whole CUDA stage over the double with the
//!   host kernels ([`start_host_double_workers`]); `serve` and `build` use it
//!   when `MELFORGE_CUDA_HOST_DOUBLE=1` (the serve test matrix, and
//!   `scripts/gpu-check`'s dry run);
//! * `tests`, `tests_pool`, `tests_regress`, `tests_frames` — the backend's
//!   unit tests (orchestration on the double, the decode pool, regressions by
//!   name, the variable-length recipes' stage).

pub mod double;
pub mod double_kernels;
pub mod host;
pub mod host_recipes;
pub mod host_stage;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_frames;
#[cfg(test)]
mod tests_pool;
#[cfg(test)]
mod tests_regress;

pub use host_stage::start_host_double_workers;
