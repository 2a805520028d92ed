//! The commands: each wires the stages for one job and owns its user-facing
//! behaviour (progress, reports, files beside the output).
//!
//! * [`build`]: a sorted walk through the stage graph into one HDF5 file per
//!   split (`melforge build`).
//! * [`serve`]: the drop-directory service (`melforge serve`): inotify source,
//!   SWMR append sink, journal, rebuild.
//! * [`merge`]: `melforge merge`, joining the files of a sharded build
//!   (`build --shard K/N`) into one dataset per split.
//! * [`control`]: the control socket, signals and `melforge ctl`.
//! * [`metrics`]: the Prometheus exposition and its `/metrics` endpoint.
//! * [`bench_io`]: `melforge bench io`; [`bench_mel`]: `melforge bench mel`;
//!   [`bench_write`]: `melforge bench write`.
//! * `melforge synth` writes [`crate::synth`]'s corpus (it lives at the
//!   bottom of the crate, where the stages' own tests use it too).
//! * [`inspect`]: `melforge inspect`, what a split file holds (recipe,
//!   frames per row, values, rejections) and a picture of one row.
//! * [`synth_speech`]: `melforge synth --kind speech` (2–20 s speech-like
//!   utterances; the machine sounds are [`crate::synth`]).
//!   [`bench_write`]: `melforge bench write`; [`bench_decode`]: `melforge
//!   bench decode`.
//! * [`decode`]: `melforge decode`, one file's decoded samples as float32.
//! * [`interrupt`]: Ctrl-C / SIGTERM for `build` and `merge` (stop, delete
//!   partial output, exit 130); [`progress`]: a build's progress bar or JSON
//!   progress events.

pub mod bench_decode;
pub mod bench_io;
pub mod bench_mel;
pub mod bench_write;
pub mod build;
pub mod control;
pub mod decode;
pub mod inspect;
pub mod interrupt;
pub mod merge;
pub mod metrics;
pub mod progress;
pub mod serve;
pub mod synth_speech;
